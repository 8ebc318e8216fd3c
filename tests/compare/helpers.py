# SPDX-License-Identifier: Apache-2.0
"""What the shrink and fuzz tests share: shortfin's presence, a planted kvcore bug, padding."""

from __future__ import annotations

import importlib.util
import random
from dataclasses import replace

import pytest

from kvcore import TriePagedAttentionCache
from kvviz.compare.failure import first_failure
from kvviz.core.scenario import Op, Scenario, ScenarioError, Step, format_op, format_scenario, parse_scenario
from kvviz.compare.shrink import well_formed


def require_shortfin() -> None:
    """Skip the calling module when shortfin is not installed (``pip install -e ".[shortfin]"``);
    an installed shortfin that does not import fails loudly (the backend says why)."""
    if importlib.util.find_spec("shortfin_apps") is None:
        pytest.skip('shortfin is not installed (pip install -e ".[shortfin]")', allow_module_level=True)
    import kvviz.backends.shortfin_backend  # noqa: F401 - an import error is a failure, not a skip


def plant_tail_leak(monkeypatch) -> None:
    """BUGS.md B6 (shortfin 3.1.0) planted in kvcore's trie for this test: release never gives
    an allocation's unpublished pages back to the pool (they are neither free nor cached)."""
    original = TriePagedAttentionCache._release

    def leaky_release(self, allocation):
        if self.allocations.get(allocation.id) is allocation:  # a live one: forget its unpublished tail
            del allocation._pages[len(allocation._nodes):]
        original(self, allocation)

    monkeypatch.setattr(TriePagedAttentionCache, "_release", leaky_release)


def padded(scenario: Scenario, seed: int, before: int = 6, between: int = 0, after: int = 12) -> Scenario:
    """``scenario`` with random unrelated ops around it: ``before`` whole lifetimes of fresh
    allocations (acquire, maybe an appending extend, release; tokens no demo uses, nothing
    published, so no cache state is left behind), ``between`` acquire/release pairs of zero
    tokens slipped between its ops, and ``after`` random ops at the end.

    ``between`` is 0 by default: on shortfin a zero-token allocation is B10 itself (its release
    drops someone else's reference), so it is not unrelated there."""
    rng = random.Random(f"padding/{seed}")
    tpp, pages = scenario.config.tokens_per_page, scenario.config.pages
    ops: list[Op] = []
    fresh = 50_000
    for k in range(before):
        name = f"pad{k}"
        length = rng.randint(1, max(1, pages * tpp // 2))
        ops.append(Op("acquire", name, tuple(range(fresh, fresh + length))))
        fresh += length + 10
        if rng.random() < 0.5:
            ops.append(Op("extend", name, (fresh,), 0, True))
            fresh += 10
        ops.append(Op("release", name, None))
    steps = [Step(replace(op, text=format_op(op))) for op in ops]
    middle = list(scenario.steps)
    for k in range(between):
        at = rng.randint(0, len(middle))
        pair = [Op("acquire", f"gap{k}", ()), Op("release", f"gap{k}", None)]
        middle[at:at] = [Step(replace(op, text=format_op(op))) for op in pair]
    steps += middle
    tail_names = [f"tail{k}" for k in range(3)]
    live: list[str] = []
    for _ in range(after):
        if live and rng.random() < 0.4:
            name = live.pop(rng.randrange(len(live)))
            op = Op("release", name, None)
        elif live and rng.random() < 0.5:
            op = Op("publish", rng.choice(live), None)
        else:
            free = [n for n in tail_names if n not in live]
            if not free:
                continue
            name = free[0]
            live.append(name)
            op = Op("acquire", name, tuple(range(fresh, fresh + rng.randint(0, 2 * tpp))))
            fresh += 3 * tpp + 10
        steps.append(Step(replace(op, text=format_op(op))))
    result = replace(scenario, steps=tuple(steps), path=None, title=f"{scenario.title} (padded)")
    assert well_formed(result.steps)
    return parse_scenario(format_scenario(result))  # real line numbers, as a file would have


def removals(text: str):
    """Each scenario with one op (and its expect lines) of ``text`` removed, or None when the
    removal does not parse (an op on a name no longer live): not a failing scenario either."""
    scenario = parse_scenario(text)
    for i in range(len(scenario.steps)):
        smaller = replace(scenario, steps=scenario.steps[:i] + scenario.steps[i + 1:])
        try:
            yield i, parse_scenario(format_scenario(smaller))
        except ScenarioError:  # the parser refuses it
            yield i, None


def assert_one_minimal(text: str, mode: str, identity, sources=None) -> None:
    """Removing any single op makes the failure go away or change."""
    for i, smaller in removals(text):
        if smaller is None or not smaller.steps:
            continue
        verdict = first_failure(smaller, mode, sources=sources)
        assert verdict.failure is None or verdict.failure.identity != identity, (
            f"removing op {i + 1} still fails as {identity}:\n{text}")
