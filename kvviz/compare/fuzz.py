# SPDX-License-Identifier: Apache-2.0
"""Random scenarios until something fails, each new failure class shrunk (``kvviz fuzz``).

The generator is the shortfin differential test's strategy (tests/backends/
test_shortfin_random_ops.py) as a user tool: a small pool (1 to 7 pages of 1 to 4 tokens), four
allocation names, tokens that are a prefix of one of two stems plus a short tail over a tiny
alphabet, so full pages collide, prefixes are shared, pages run out and eviction is frequent;
acquires (some with ``extra=``), publishes of everything or of a prefix, appending extends and
releases. Every op is valid for the script (names are live when used), so what fails is the
cache, not the script.

Each run ``r`` of seed ``s`` draws from its own ``random.Random(f"kvviz-fuzz/{s}/{r}")``: run 17
of seed 3 is the same scenario whatever ran before it, and a report names it. A failure's class
is :attr:`~kvviz.core.failure.FailureIdentity.failure_class`; the first scenario of a class
not seen before is shrunk (:func:`~kvviz.compare.shrink.shrink`), later ones are counted.
"""

from __future__ import annotations

import random

import kvcore
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from kvviz.compare.failure import diffed_backend, first_failure
from kvviz.core.designs import TRIE
from kvviz.core.failure import Failure
from kvviz.core.scenario import CacheConfig, Expect, Op, Scenario, Step, format_op
from kvviz.compare.shrink import ShrinkBudget, ShrinkResult, shrink

__all__ = ["TOKENS_REQUIRED", "FuzzClass", "FuzzReport", "fuzz", "random_scenario", "stopped_after"]

# The differential test's vocabulary: four names (so allocations overlap), a tiny alphabet and
# two stems every request starts with a prefix of (so full pages collide), acquires drawn twice
# as often as each other op (so the pool fills).
NAMES = ("a", "b", "c", "d")
ALPHABET = (1, 2, 3, 5)
STEMS = ((1, 2, 3, 5) * 3, (1, 2, 1, 2) * 3)
KINDS = ("acquire", "acquire", "publish", "extend", "release")


TOKENS_REQUIRED = ("vllm",)
"""Backends whose acquire needs a token (a vLLM request has at least one prompt token; its
backend refuses an empty acquire as an op it cannot express): run alone or diffed, their
scenarios acquire at least one token (token 1 where the draw gave none)."""


def random_scenario(rng: random.Random, ops: int, *, kind: str = TRIE, policy: str = "lru",
                    title: str = "random ops", tokens_required: bool = False) -> Scenario:
    """``ops`` random ops on a small cache (see the module docstring), drawn from ``rng``;
    with ``tokens_required``, no acquire is empty (the draws are the same).

    The script is written while driving a kvcore cache of the same config, so it is valid for
    the state each op meets: an op that does not fit there is followed by ``expect fail alloc``
    (its name is free again), and the names used are the live ones. On kvcore it fails nothing;
    another cache that fits what kvcore refused, or refuses what kvcore fits, fails it."""
    tpp = rng.randint(1, 4)
    pages = rng.randint(1, 7)
    config = CacheConfig(kind, pages, tpp, policy)
    cache = kvcore.make_cache(kind, pages, tpp, policy=policy)

    def word() -> tuple[int, ...]:
        stem = rng.choice(STEMS)[:rng.randint(0, 3 * tpp)]
        return stem + tuple(rng.choice(ALPHABET) for _ in range(rng.randint(0, tpp)))

    live: dict[str, object] = {}  # name -> the live kvcore allocation
    steps = []
    while len(steps) < ops:
        what = rng.choice(KINDS)
        failed = False
        if what == "acquire" or not live:
            free = [n for n in NAMES if n not in live]
            if not free:
                what = "release"
            else:
                what = "acquire"
                name = rng.choice(free)
                tokens = word()
                op = Op("acquire", name, tokens or ((1,) if tokens_required else ()), rng.choice((0, 0, 1, tpp)))
                try:
                    live[name] = cache.acquire_pages_for_tokens(op.tokens, op.extra, name=name)
                except kvcore.CacheAllocationFailure:
                    failed = True
        if what != "acquire":
            name = rng.choice(sorted(live))
            allocation = live[name]
            if what == "publish":
                held = tuple(allocation.tokens)
                cut = None if rng.random() < 0.5 else rng.randint(0, len(held))
                op = Op("publish", name, None if cut is None else held[:cut])
                allocation.publish_pages_for_tokens(None if cut is None else list(op.tokens))
            elif what == "extend":
                more = tuple(rng.choice(ALPHABET) for _ in range(rng.randint(0, 2 * tpp)))
                op = Op("extend", name, more, rng.choice((0, 0, 1)), True)
                try:
                    allocation.extend_allocation(tuple(allocation.tokens) + more, op.extra)
                except kvcore.CacheAllocationFailure:
                    failed = True
            else:
                op = Op("release", name, None)
                live.pop(name).release_pages()
        op = replace(op, text=format_op(op))
        steps.append(Step(op, expects=(Expect("fail", detail="alloc", text="expect fail alloc"),) if failed else ()))
    return Scenario(title=title, config=config, steps=tuple(steps))


def run_rng(seed: int, run: int) -> random.Random:
    """The random source of run ``run`` of seed ``seed``."""
    return random.Random(f"kvviz-fuzz/{seed}/{run}")


@dataclass
class FuzzClass:
    """One failure class found: how many runs failed with it, the first (its run number and
    failure) and its shrunk scenario (None until shrunk, or if shrinking was not asked)."""

    name: str
    count: int
    first_run: int
    failure: Failure
    shrunk: ShrinkResult | None = None
    scenario: Scenario | None = None
    """The scenario of its first run: what is kept when its shrink was interrupted."""


@dataclass
class FuzzReport:
    """A fuzz session: the mode, seed, runs made and the classes found, in order found."""

    mode: str
    seed: int
    ops: int
    runs: int = 0
    passed: int = 0
    classes: dict[str, FuzzClass] = field(default_factory=dict)
    stopped: str = ""
    interrupted: bool = False
    """Ctrl-C stopped the session: the report holds what was found until then."""


def fuzz(mode: str, *, seed: int = 0, runs: int = 200, ops: int = 40, shrink_new: bool = True,
         shrink_budget: ShrinkBudget = ShrinkBudget(max_runs=3_000), backend_factory: Callable | None = None,
         out_of_time: Callable[[], bool] | None = None, on_class: Callable[[FuzzClass], None] | None = None,
         on_run: Callable[[int], None] | None = None, policy: str = "lru", kind: str = TRIE,
         on_found: Callable[[FuzzClass], None] | None = None, report: FuzzReport | None = None) -> FuzzReport:
    """Run ``runs`` random scenarios of ``ops`` ops on a ``kind`` cache evicting by ``policy``
    in ``mode`` (a backend's name or a diff mode);
    shrink the first of each new failure class (``shrink_new``) and tell ``on_class`` about it
    (``on_found`` hears of it before its shrink; ``on_run(run)`` after each run is counted,
    ``report``, when given, being the report it fills).
    ``out_of_time`` (the caller's clock) ends the session early, and so does Ctrl-C
    (``interrupted``; a class whose shrink it cut keeps its first scenario); the report says so."""
    report = report if report is not None else FuzzReport(mode, seed, ops)
    try:
        _fuzz_runs(report, mode, seed, runs, ops, shrink_new, shrink_budget, backend_factory, out_of_time,
                   on_class, on_run, policy, kind, on_found)
    except KeyboardInterrupt:
        report.interrupted = True
        report.stopped = f"interrupted (Ctrl-C) after {report.runs:,} of {runs:,} runs: what was found until then"
    return report


def _fuzz_runs(report: FuzzReport, mode, seed, runs, ops, shrink_new, shrink_budget, backend_factory, out_of_time,
               on_class, on_run, policy, kind, on_found) -> None:
    """:func:`fuzz`'s runs, adding to ``report`` as they go: an interrupt leaves what was found."""
    for run in range(runs):
        if out_of_time is not None and out_of_time():
            report.stopped = stopped_after(run, runs)
            break
        scenario = random_scenario(run_rng(seed, run), ops, kind=kind, policy=policy,
                                   title=f"kvviz fuzz --seed {seed}, run {run}",
                                   tokens_required=(diffed_backend(mode) or mode) in TOKENS_REQUIRED)
        verdict = first_failure(scenario, mode, backend_factory=backend_factory)
        report.runs += 1
        if verdict.failure is None:
            report.passed += 1
        else:
            name = verdict.failure.identity.failure_class
            found = report.classes.get(name)
            if found is not None:
                found.count += 1
            else:
                found = report.classes[name] = FuzzClass(name, 1, run, verdict.failure, scenario=scenario)
                if on_found is not None:
                    on_found(found)
                if shrink_new:
                    budget = replace(shrink_budget, out_of_time=out_of_time)
                    found.shrunk = shrink(scenario, mode, budget=budget, backend_factory=backend_factory)
                if on_class is not None:
                    on_class(found)
        if on_run is not None:
            on_run(run)


def stopped_after(run: int, runs: int) -> str:
    """What a session the time budget stopped says: how many of its runs were made."""
    return f"stopped early: the time budget ran out after {run:,} of {runs:,} runs"
