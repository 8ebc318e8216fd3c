# SPDX-License-Identifier: Apache-2.0
"""A failing scenario cut to a minimal one that still fails the same way (``kvviz shrink``).

"The same way" is :class:`~kvviz.core.failure.FailureIdentity`: the first failure's source,
detail and cause (invariant 2 after shortfin's B4b; a divergence first on free pages after
SF1). A candidate that fails differently, or passes, is not progress. The passes, repeated
until a whole round changes nothing:

1. cut every step after the failing one (nothing after the first failure changes it); drop
   narration, the description and every expect line but the failing one;
2. drop whole allocation lifetimes (acquire to release), then single ops: delta debugging
   (Zeller's ddmin: remove halves, then quarters, ... then single ops);
3. drop tokens from each allocation's tokens, whole pages first (ddmin over positions, so an
   extend or a publish that spells a prefix stays consistent with its acquire), then
   renumber the tokens 1, 2, 3, ... in order of first appearance;
4. lower ``extra=`` and ``priority=``, the pool's page count and the page size, and try the
   default policy;
5. lower the pool by *k* pages together with *k* consecutive ops removed (adaptive deletion,
   as Hypothesis's shrinker does): ops that only fill the pool go with the pages they fill,
   where neither alone keeps the failure;
6. rename the allocations ``a``, ``b``, ``c``, ... in order of first appearance.

The result is 1-minimal, for the configuration too, when the budget did not run out: removing
any one op (with its expect lines), lowering the pool or the page size by one, or the pool by
one with any one op removed, gives a scenario that does not parse, passes or fails
differently. It is written by the canonical formatter, so the same input gives the same text.

Deterministic: every pass walks the scenario in order, results are memoised by value; the
only clock is the caller's (the CLI's ``--max-seconds``), and a result that stopped on it or on
``max_runs`` says so. A time budget covers everything: the first run is stopped at it (the
scenario is then :class:`TooBigToShrink`), every candidate run is stopped mid-way at it, and
the search ends early enough to leave the runs after it (the result's check, a bundle) the time
the first run took each. That clock is asked between ops; one op, or one diff run, can outlast
it, so ``kvviz shrink`` also runs this in a worker process it kills at the deadline
(:mod:`kvviz.compare.bounded`), reporting the :class:`Best` scenario the worker sent last.
"""

from __future__ import annotations

import math
from pathlib import Path
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from kvviz.compare.failure import DIFF, RunStopped, first_failure, mode_label
from kvviz.core.designs import TRIE
from kvviz.core.failure import Failure, FailureIdentity
from kvviz.core.scenario import Op, Scenario, Step, format_expect, format_op, format_scenario, parse_scenario
from kvviz.core.scenario.values import DEFAULT_CACHE_CONFIG
from kvviz.core.vocab import Vocabulary

__all__ = ["DIFF", "Best", "NotFailing", "ScenarioSize", "ShrinkBudget", "ShrinkResult", "TooBigToShrink", "ddmin",
           "placed", "rename_allocations", "report_lines", "result_from_payload", "scenario_size", "shrink",
           "well_formed"]

NAMES = "abcdefghijklmnopqrstuvwxyz"


class NotFailing(ValueError):
    """The scenario does not fail in the mode asked: there is nothing to shrink."""


class TooBigToShrink(ValueError):
    """The time budget does not fit the first run of the scenario and the runs after the
    search (the result's check, a bundle): said, with what fitted, instead of a result."""


@dataclass(frozen=True)
class ShrinkBudget:
    """How much work a shrink may do: at most ``max_runs`` runs of a candidate, and it stops
    when ``out_of_time()`` says so (None: never), or when ``seconds`` have passed on ``clock``
    (the caller's, e.g. ``time.monotonic``; a test's counts ops). ``seconds`` covers the whole
    shrink: the first run and ``runs_after`` runs as long as it after the search (the check of
    the result; the CLI adds one for a bundle)."""

    max_runs: int = 20_000
    out_of_time: Callable[[], bool] | None = None
    seconds: float | None = None
    clock: Callable[[], float] | None = None
    runs_after: int = 1
    started: float | None = None
    """The clock's reading when the budget began (None: when :func:`shrink` starts); the CLI's
    is its own start, so reading the scenario counts too."""
    margin: float = 0.0
    """Seconds of ``seconds`` kept back at the end for the caller (the CLI's parent process,
    which reports and writes files after the work): the work aims to end that much earlier,
    while messages still say ``seconds``."""


@dataclass(frozen=True, slots=True)
class ScenarioSize:
    """What ``shrink`` counts before and after: ops, tokens written in ops, token pages
    written (each op's tokens in whole pages, rounded up), the pool and the page size."""

    ops: int
    tokens: int
    token_pages: int
    pool_pages: int
    tokens_per_page: int

    def text(self) -> str:
        """``12 ops, 40 tokens (11 pages of tokens), pool of 4 pages x 4 tokens``."""
        return (f"{self.ops} op{'s' if self.ops != 1 else ''}, {self.tokens} token{'s' if self.tokens != 1 else ''} "
                f"({self.token_pages} page{'s' if self.token_pages != 1 else ''} of tokens), pool of "
                f"{self.pool_pages} page{'s' if self.pool_pages != 1 else ''} x {self.tokens_per_page} "
                f"token{'s' if self.tokens_per_page != 1 else ''}")

    def to_dict(self) -> dict:
        """JSON-able form."""
        return {name: getattr(self, name) for name in self.__slots__}


def scenario_size(scenario: Scenario) -> ScenarioSize:
    """The :class:`ScenarioSize` of ``scenario``."""
    tpp = scenario.config.tokens_per_page
    lengths = [len(s.op.tokens) for s in scenario.steps if s.op.tokens]
    return ScenarioSize(len(scenario.steps), sum(lengths), sum(math.ceil(n / tpp) for n in lengths),
                        scenario.config.pages, tpp)


@dataclass(frozen=True)
class ShrinkResult:
    """A finished shrink: the ``minimal`` scenario (parsed back from its canonical ``text``),
    its ``failure`` (same identity as the original's), the sizes, the runs it took and why it
    stopped early, if it did (``stopped``: "" or a sentence). A result received from a worker
    process (:func:`result_from_payload`) has the text only: ``original`` and ``minimal`` are
    None there."""

    original: Scenario | None
    minimal: Scenario | None
    text: str
    failure: Failure
    mode: str
    before: ScenarioSize
    after: ScenarioSize
    runs: int
    stopped: str = ""

    @property
    def identity(self) -> FailureIdentity:
        """The failure kept while shrinking."""
        return self.failure.identity

    def payload(self) -> dict:
        """JSON-able form (what a worker process sends): see :func:`result_from_payload`."""
        return _payload(self.text, self.failure, self.runs, self.stopped, self.before, self.after)


@dataclass(frozen=True)
class Best:
    """The smallest failing scenario a shrink has found so far, as its search holds it: the
    ``scenario`` it would hand over (titled, its steps still carrying the original's line
    numbers), its ``failure`` there, the candidate runs made until then and the original's
    size."""

    scenario: Scenario
    failure: Failure
    runs: int
    before: ScenarioSize

    def payload(self) -> dict:
        """JSON-able form (what a worker process sends): its canonical text, and its failure
        at the line that text gives it (found without parsing the text: a killed worker's
        best is printed as sent, with no work left to do)."""
        return _payload(format_scenario(self.scenario), placed(self.scenario, self.failure), self.runs, "",
                        self.before, scenario_size(self.scenario))


def _payload(text: str, failure: Failure, runs: int, stopped: str, before: ScenarioSize,
             after: ScenarioSize) -> dict:
    identity = failure.identity
    return {"text": text, "runs": runs, "stopped": stopped, "before": before.to_dict(), "after": after.to_dict(),
            "failure": {"source": identity.source, "detail": identity.detail, "cause": identity.cause,
                        "step": failure.step, "line": failure.line, "text": failure.text,
                        "message": failure.message}}


def placed(scenario: Scenario, failure: Failure) -> Failure:
    """``failure`` of ``scenario`` at the line and text the canonical text of ``scenario``
    (:func:`format_scenario`) gives its step's op, or its expect line: what parsing that text
    would say, found by formatting the steps before it and the step alone."""
    step = scenario.steps[failure.step - 1]
    index = next((j for j, x in enumerate(step.expects) if (x.line, x.text) == (failure.line, failure.text)), None)
    before = format_scenario(replace(scenario, steps=scenario.steps[:failure.step - 1])).count("\n")
    alone = format_scenario(Scenario(config=scenario.config, steps=(step,), vocab=scenario.vocab)).split("\n")
    own = alone[alone.index("") + 1:-1]  # the step's lines: narration, op, expect lines
    narration = len(own) - 1 - len(step.expects)
    op_line = before + (1 if narration and failure.step > 1 else 0) + narration + 1
    if index is None:
        return replace(failure, line=op_line, text=own[narration])
    return replace(failure, line=op_line + 1 + index, text=own[narration + 1 + index])


def result_from_payload(mode: str, payload: dict, stopped: str | None = None) -> ShrinkResult:
    """The :class:`ShrinkResult` a worker's payload describes (its text, without the parsed
    scenarios); ``stopped`` replaces the payload's."""
    found = payload["failure"]
    failure = Failure(FailureIdentity(found["source"], found["detail"], found["cause"]), found["step"],
                      found["line"], found["text"], found["message"])
    return ShrinkResult(None, None, payload["text"], failure, mode, ScenarioSize(**payload["before"]),
                        ScenarioSize(**payload["after"]), payload["runs"],
                        payload["stopped"] if stopped is None else stopped)


class _OutOfBudget(Exception):
    pass


def ddmin(items: Sequence, test: Callable[[list], bool], granularity: int = 2, allow_empty: bool = False) -> list:
    """The smallest sublist of ``items`` (order kept) that ``test`` still accepts, by delta
    debugging: remove one of ``n`` chunks while any removal passes, else split finer, down to
    single items. ``test(items)`` is assumed true. The result is 1-minimal: removing any one
    item fails ``test`` (``allow_empty``: the empty list is tried too)."""
    items = list(items)
    n = max(2, granularity)
    while len(items) >= 2:
        chunk = math.ceil(len(items) / n)
        reduced = False
        for start in range(0, len(items), chunk):
            rest = items[:start] + items[start + chunk:]
            if test(rest):
                items = rest
                n = max(n - 1, 2)
                reduced = True
                break
        if not reduced:
            if chunk == 1:
                break
            n = min(len(items), 2 * n)
    if allow_empty and len(items) == 1 and test([]):
        return []
    return items


def well_formed(steps: Sequence[Step], kind: str = TRIE) -> bool:
    """Whether the parser accepts these steps' allocation names: an acquire names no live
    allocation, every other op a live one; an op with an ``expect fail`` on every kind leaves
    liveness as it was (the parser's rule)."""
    live: set[str] = set()
    for step in steps:
        op = step.op
        if op.kind == "acquire":
            if op.name in live:
                return False
        elif op.name not in live:
            return False
        if any(x.kind == "fail" and x.kinds is None for x in step.expects):
            continue
        if op.kind == "acquire":
            live.add(op.name)
        elif op.kind == "release":
            live.discard(op.name)
    return True


def _with_text(op: Op, **changes) -> Op:
    """``op`` with ``changes``, its canonical text rewritten to match."""
    new = replace(op, **changes)
    return replace(new, text=format_op(new))


def rename_allocations(steps: Sequence[Step]) -> tuple[Step, ...]:
    """The steps with allocations renamed ``a``, ``b``, ... in order of first appearance
    (``a1`` ... after ``z``), in ops and in expect lines."""
    names: dict[str, str] = {}
    for step in steps:
        if step.op.name not in names:
            i = len(names)
            names[step.op.name] = NAMES[i] if i < len(NAMES) else f"{NAMES[i % 26]}{i // 26}"

    def rename(name):
        return names.get(name, name) if name is not None else None

    out = []
    for step in steps:
        expects = tuple(replace(x, name=rename(x.name), names=tuple(rename(n) for n in x.names)) for x in step.expects)
        expects = tuple(replace(x, text=_expect_text(x)) for x in expects)
        out.append(Step(_with_text(step.op, name=names[step.op.name]), step.narration, expects, step.paragraphs))
    return tuple(out)


def _expect_text(expect) -> str:
    return format_expect(expect)


# -- allocation lifetimes and their tokens -----------------------------------------------------


def _lifetimes(steps: Sequence[Step]) -> list[list[int]]:
    """The step indices of each allocation's lifetime (its acquire to its release, or to the
    end), in order of acquire."""
    open_: dict[str, list[int]] = {}
    out: list[list[int]] = []
    for i, step in enumerate(steps):
        op = step.op
        if op.kind == "acquire" or op.name not in open_:
            open_[op.name] = [i]
            out.append(open_[op.name])
        else:
            open_[op.name].append(i)
        if op.kind == "release":
            open_.pop(op.name, None)
    return out


def _token_spans(steps: Sequence[Step], indices: Sequence[int]):
    """One lifetime's token sequence and, per op, the positions its tokens spell: ``(seq,
    {step: (start, end)})``; None when an op's tokens do not follow from the ones before (a
    publish that disagrees, an extend that does not start with the old tokens)."""
    seq: list[int] = []
    spans: dict[int, tuple[int, int]] = {}
    for i in indices:
        op = steps[i].op
        tokens = list(op.tokens) if op.tokens is not None else None
        if op.kind == "acquire":
            seq = tokens or []
            spans[i] = (0, len(seq))
        elif op.kind == "extend" and op.append:
            spans[i] = (len(seq), len(seq) + len(tokens or ()))
            seq = seq + (tokens or [])
        elif op.kind == "extend":
            if tokens is None or tokens[:len(seq)] != seq:
                return None
            seq = tokens
            spans[i] = (0, len(seq))
        elif op.kind == "publish" and tokens is not None:
            if tokens != seq[:len(tokens)]:
                return None
            spans[i] = (0, len(tokens))
    return seq, spans


def _drop_positions(steps: tuple[Step, ...], spans: dict[int, tuple[int, int]], seq: list[int],
                    keep: Sequence[int]) -> tuple[Step, ...]:
    """The steps with the lifetime's tokens cut to the positions ``keep``."""
    kept = sorted(keep)
    out = list(steps)
    for i, (start, end) in spans.items():
        tokens = tuple(seq[p] for p in kept if start <= p < end)
        out[i] = Step(_with_text(steps[i].op, tokens=tokens), steps[i].narration, steps[i].expects, steps[i].paragraphs)
    return tuple(out)


def _renumbered(steps: Sequence[Step]) -> tuple[Step, ...]:
    """The steps with token values replaced by 1, 2, 3, ... in order of first appearance:
    the caches compare tokens only for equality, so behaviour is kept and ranges appear."""
    numbers: dict[int, int] = {}
    for step in steps:
        for t in step.op.tokens or ():
            numbers.setdefault(t, len(numbers) + 1)
    out = []
    for step in steps:
        op = step.op
        if op.tokens:
            op = _with_text(op, tokens=tuple(numbers[t] for t in op.tokens))
        out.append(Step(op, step.narration, step.expects, step.paragraphs))
    return tuple(out)


# -- the shrinker ------------------------------------------------------------------------------


@dataclass
class _Shrinker:
    scenario: Scenario
    mode: str
    target: FailureIdentity
    budget: ShrinkBudget
    backend_factory: Callable | None = None
    sources: tuple[str, ...] | None = None
    on_progress: Callable[[int, int], None] | None = None
    runs: int = 0
    memo: dict = field(default_factory=dict)
    strict_names: bool = True
    search_over: Callable[[], bool] | None = None  # the time budget's end for candidates, asked per op
    on_better: Callable[[object, tuple[Step, ...], Failure], None] | None = None
    """Told ``(config, steps, failure)`` of every candidate that fails as the target: each
    pass keeps such a candidate, so the last one told is the smallest found so far."""

    def fails(self, config, steps: tuple[Step, ...]) -> bool:
        """Whether the candidate fails with the target identity (memoised by value: the
        failure, or None)."""
        if not steps or (self.strict_names and not well_formed(steps)):
            return False
        key = (config, steps)
        if key in self.memo:
            return self._kept(config, steps, self.memo[key])
        if self.runs >= self.budget.max_runs:
            raise _OutOfBudget(f"the budget of {self.budget.max_runs:,} runs ran out")
        if self.search_over is not None and self.search_over():
            raise _OutOfBudget("the time budget ran out")
        self.runs += 1
        candidate = replace(self.scenario, config=config, steps=steps)
        if not self.strict_names and not _parses(candidate):  # the parser's rule, where ours is too simple
            self.memo[key] = None
            return False
        try:
            verdict = first_failure(candidate, self.mode, backend_factory=self.backend_factory,
                                    sources=self.sources, out_of_time=self.search_over)
        except RunStopped:
            raise _OutOfBudget("the time budget ran out") from None
        except ValueError:  # a config the backend refuses (BackendError, DiffError): not this failure
            verdict = None
        same = verdict is not None and verdict.failure is not None and verdict.failure.identity == self.target
        self.memo[key] = verdict.failure if same else None
        if self.on_progress is not None:
            self.on_progress(self.runs, len(steps))
        return self._kept(config, steps, self.memo[key])

    def _kept(self, config, steps, failure: Failure | None) -> bool:
        if failure is not None and self.on_better is not None:
            self.on_better(config, steps, failure)
        return failure is not None

    # Each pass takes and returns (config, steps): the best so far, always failing as the target.

    def ops(self, config, steps):
        lifetimes = _lifetimes(steps)
        kept = ddmin(lifetimes, lambda ls: self.fails(config, tuple(steps[i] for i in sorted(j for l in ls for j in l))))
        steps = tuple(steps[i] for i in sorted(j for l in kept for j in l))
        kept = ddmin(range(len(steps)), lambda idx: self.fails(config, tuple(steps[i] for i in idx)))
        return config, tuple(steps[i] for i in kept)

    def tokens(self, config, steps):
        for lifetime in _lifetimes(steps):
            found = _token_spans(steps, lifetime)
            if found is None or not found[0]:
                continue
            seq, spans = found
            tpp = config.tokens_per_page
            base = steps
            kept = ddmin(range(len(seq)), lambda keep: self.fails(config, _drop_positions(base, spans, seq, keep)),
                         granularity=math.ceil(len(seq) / tpp), allow_empty=True)
            steps = _drop_positions(base, spans, seq, kept)
        renumbered = _renumbered(steps)
        if renumbered != steps and self.fails(config, renumbered):
            steps = renumbered
        return config, steps

    def numbers(self, config, steps):
        for i in range(len(steps)):
            op = steps[i].op
            if op.kind == "publish" and op.tokens is not None:  # "publish a" reads simpler than its tokens
                trial = steps[:i] + (Step(_with_text(op, tokens=None), "", steps[i].expects),) + steps[i + 1:]
                if self.fails(config, trial):
                    steps, op = trial, trial[i].op
            for option in ("extra", "priority"):
                value = getattr(op, option)
                for lower in _lower_values(value):
                    trial = steps[:i] + (Step(_with_text(op, **{option: lower}), steps[i].narration,
                                              steps[i].expects, steps[i].paragraphs),) + steps[i + 1:]
                    if self.fails(config, trial):
                        steps, op = trial, trial[i].op
                        break
        for option in ("pages", "tokens_per_page"):
            for lower in _lower_values(getattr(config, option), floor=1):
                trial = replace(config, **{option: lower})
                if self.fails(trial, steps):
                    config = trial
                    break
        if config.policy != DEFAULT_CACHE_CONFIG.policy:
            trial = replace(config, policy=DEFAULT_CACHE_CONFIG.policy)
            if self.fails(trial, steps):
                config = trial
        return config, steps

    def pool_and_ops(self, config, steps):
        """The pool lowered by ``k`` pages with ``k`` consecutive ops removed, smallest ``k``
        first, again from each success: fillers leave with the pages they fill."""
        k = 1
        while k < config.pages and k < len(steps):
            lower = replace(config, pages=config.pages - k)
            for start in range(len(steps) - k + 1):
                trial = steps[:start] + steps[start + k:]
                if self.fails(lower, trial):
                    config, steps, k = lower, trial, 0
                    break
            k += 1
        return config, steps

    def names(self, config, steps):
        renamed = rename_allocations(steps)
        if renamed != steps and self.fails(config, renamed):
            return config, renamed
        return config, steps


def _parses(scenario: Scenario) -> bool:
    """Whether the canonical text of ``scenario`` parses (names live where used, as the parser
    decides it, scope tags included)."""
    from kvviz.core.scenario import ScenarioError

    try:
        parse_scenario(format_scenario(scenario))
    except ScenarioError:
        return False
    return True


def _lower_values(value: int, floor: int = 0) -> list[int]:
    """Smaller values to try for ``value``, smallest first: every one below 16, else halvings."""
    if value <= floor:
        return []
    if value - floor <= 16:
        return list(range(floor, value))
    out, v = [value - 1], value  # one less always: the 1-minimal claim covers the configuration
    while v > floor:
        v = floor + (v - floor) // 2
        out.append(v)
    return sorted(set(out))


def _stripped(steps: Sequence[Step], failure: Failure) -> tuple[Step, ...]:
    """The steps without narration, and without expect lines other than the failing one."""
    out = []
    for index, step in enumerate(steps, 1):
        keep = ()
        if failure.identity.source == "expect" and index == failure.step:
            keep = tuple(x for x in step.expects if x.line == failure.line and x.text == failure.text)[:1]
        out.append(Step(step.op, "", keep))
    return tuple(out)


def shrink(scenario: Scenario, mode: str = "kvcore", *, budget: ShrinkBudget = ShrinkBudget(),
           backend_factory: Callable | None = None, sources: tuple[str, ...] | None = None,
           on_progress: Callable[[int, int], None] | None = None,
           on_better: Callable[[Best], None] | None = None) -> ShrinkResult:
    """The smallest scenario found that fails as ``scenario`` first fails in ``mode`` (a
    backend's name, or ``diff``). Raises :class:`NotFailing` when it does not fail, and the
    backends' errors when ``mode`` cannot run it (shortfin not installed, a base cache to diff).
    ``on_progress(runs, ops)`` is told after every run; ``backend_factory`` replaces the mode's
    (a planted kvcore in a test); ``sources`` keeps the first failure of those sources only
    (:func:`~kvviz.compare.failure.first_failure`). ``on_better`` is told the :class:`Best`
    scenario found so far, the original first, then each smaller one the search keeps (what a
    caller that may be stopped reports). Raises :class:`TooBigToShrink` when the budget's
    ``seconds`` do not fit the first run and the runs after the search."""
    clock, started = _clock_of(budget)
    try:
        verdict = first_failure(scenario, mode, backend_factory=backend_factory, sources=sources,
                                out_of_time=_deadline(budget, clock, started, 0.0, callers=False))
    except RunStopped as exc:
        raise TooBigToShrink(f"{_named(scenario)}: too big to shrink in {budget.seconds:g} s: its first run alone "
                             f"was {exc} when the time ran out (give --max-seconds more)") from None
    first_run = clock() - started if clock is not None else 0.0  # reading the scenario included
    if budget.seconds is not None and first_run * (1 + budget.runs_after) > budget.seconds - budget.margin:
        raise TooBigToShrink(f"{_named(scenario)}: too big to shrink in {budget.seconds:g} s: its first run took "
                             f"{first_run:.3g} s, and checking a result takes as long again "
                             f"(give --max-seconds more)")
    if verdict.failure is None:
        raise NotFailing(f"{scenario.path or scenario.title or 'the scenario'}: does not fail {mode_label(mode)}: "
                         f"nothing to shrink")
    original = verdict.failure
    worker = _Shrinker(scenario, mode, original.identity, budget, backend_factory, sources, on_progress)
    original_size = scenario_size(scenario)
    if on_better is not None:
        def better(config, steps, failure):
            on_better(Best(_minimal(scenario, mode, config, steps, worker.target), failure, worker.runs, original_size))
        worker.on_better = better
        better(scenario.config, tuple(scenario.steps), original)
    worker.strict_names = well_formed(scenario.steps)
    worker.search_over = _deadline(budget, clock, started, first_run * budget.runs_after)
    config, steps = scenario.config, tuple(scenario.steps[:original.step])
    worker.memo[(scenario.config, tuple(scenario.steps))] = original
    stopped = ""
    try:
        if not worker.fails(config, steps):  # cannot happen for one backend; a diff could disagree
            steps = tuple(scenario.steps)
        stripped = _stripped(steps, original)
        if worker.fails(config, stripped):
            steps = stripped
        else:  # an expect fail is needed (a misuse it names): drop the other expect lines one by one
            items = [(i, j) for i, s in enumerate(steps) for j in range(len(s.expects))]
            bare = tuple(Step(s.op, "", s.expects) for s in steps)
            if worker.fails(config, bare):
                steps = bare

                def with_expects(keep, steps=bare):
                    chosen = set(keep)
                    return tuple(Step(s.op, "", tuple(x for j, x in enumerate(s.expects) if (i, j) in chosen))
                                 for i, s in enumerate(steps))
                steps = with_expects(ddmin(items, lambda keep: worker.fails(config, with_expects(keep)),
                                           allow_empty=True))
        while True:
            before = (config, steps)
            for step_pass in (worker.ops, worker.tokens, worker.numbers, worker.pool_and_ops, worker.ops,
                              worker.names):
                config, steps = step_pass(config, steps)
            if (config, steps) == before:
                break
    except _OutOfBudget as exc:
        stopped = f"stopped early: {exc}; this is the smallest failing scenario found so far"
    return _finish(scenario, mode, config, steps, original, worker, stopped)


def _named(scenario: Scenario) -> str:
    return scenario.path or scenario.title or "the scenario"


def _clock_of(budget: ShrinkBudget) -> tuple[Callable[[], float] | None, float]:
    """The budget's clock and its reading now (None, 0 without a time budget)."""
    if budget.seconds is None or budget.clock is None:
        return None, 0.0
    return budget.clock, budget.clock() if budget.started is None else budget.started


def _deadline(budget: ShrinkBudget, clock, started: float, reserve: float,
              callers: bool = True) -> Callable[[], bool] | None:
    """``out_of_time()`` for a run: the budget's own (``callers``: a fuzz session's end stops
    the search, never the first run), or ``seconds`` less ``reserve`` passed since ``started``
    on ``clock``; None when there is neither."""
    checks = []
    if callers and budget.out_of_time is not None:
        checks.append(budget.out_of_time)
    if clock is not None:
        end = started + budget.seconds - budget.margin - reserve
        checks.append(lambda: clock() >= end)
    if not checks:
        return None
    return checks[0] if len(checks) == 1 else (lambda: any(check() for check in checks))


def _minimal(scenario: Scenario, mode: str, config, steps, target: FailureIdentity) -> Scenario:
    """The scenario a shrink hands over: ``steps`` on ``config``, titled by the failure kept
    and described by where it came from."""
    source = Path(scenario.path).name if scenario.path else (scenario.title or "a scenario")
    return Scenario(title=f"Minimal scenario: {target.describe()}",
                    description=(f"Shrunk by kvviz shrink ({mode_label(mode)}) from {source}: "
                                 f"{len(scenario.steps)} ops to {len(steps)}."),
                    config=config, steps=tuple(steps), vocab=Vocabulary())


def _finish(scenario, mode, config, steps, original: Failure, worker: _Shrinker, stopped: str) -> ShrinkResult:
    """The result, written canonically and parsed back (real line numbers), its failure
    re-derived from the text: what the user pastes is what was checked."""
    before, after_size = scenario_size(scenario), None
    text = format_scenario(_minimal(scenario, mode, config, steps, worker.target))
    parsed = parse_scenario(text)
    verdict = first_failure(parsed, mode, backend_factory=worker.backend_factory, sources=worker.sources)
    if verdict.failure is None or verdict.failure.identity != original.identity:
        # Cannot happen (format and parse round-trip): refuse to hand over something that lies.
        raise AssertionError(f"the shrunk scenario does not fail as the original did:\n{text}")
    after_size = scenario_size(parsed)
    return ShrinkResult(scenario, parsed, text, verdict.failure, mode, before, after_size, worker.runs, stopped)


def report_lines(result: ShrinkResult) -> list[str]:
    """What ``kvviz shrink`` prints after the scenario: what fails and where, and the sizes."""
    f = result.failure
    where = f"step {f.step} (line {f.line}) `{f.text}`"
    lines = [f"fails {mode_label(result.mode)}: {result.identity.describe()}",
             f"  at {where}: {f.message}",
             f"before: {result.before.text()}",
             f"after:  {result.after.text()}",
             f"{result.runs:,} candidate runs"]
    if result.stopped:
        lines.append(result.stopped)
    return lines

