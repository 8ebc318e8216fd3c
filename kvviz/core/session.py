# SPDX-License-Identifier: Apache-2.0
"""Session and timeline: ops applied to a cache, one frame per op, any frame by index.

A session owns a backend (a live cache) and records, for every op, a :class:`Frame`: the op,
its events, the snapshot after it, the diff against the previous frame, narration, invariant
violations, the error of a failed op (a failed op is a frame too; the state is unchanged)
and the results of the script's ``expect`` lines.

Memory stays bounded on long timelines: full frames are kept only for the most recently
used ones; every ``keyframe_every`` frames a snapshot is kept (consecutive kvcore snapshots
share their unchanged rows, so a keyframe costs little more than its two row arrays), and any
other frame is rebuilt by restoring the nearest keyframe and replaying the ops after it (that
is what ``restore`` is for). Replays are exact because the caches are deterministic.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from kvcore import KVCacheError, Snapshot, Violation
from kvcore import events as ev

from kvviz.backends import Backend, BackendFactory, UnknownAllocation
from kvviz.backends.kvcore_backend import kvcore_backend
from kvviz.core.designs import eviction_events
from kvviz.core.snapshot_diff import Diff, diff_snapshots
from kvviz.core.expect import ExpectResult, evaluate
from kvviz.core.narrate import TOKENS, Units, narrate
from kvviz.core.scenario import CacheConfig, Expect, Op, Scenario, Step
from kvviz.core.pseudocode import lines_for
from kvviz.core.substeps import STATE_WINDOW, OpSubSteps
from kvviz.core.substeps import build as build_substeps
from kvviz.core.vocab import Vocabulary


EVICTION_EVENTS = eviction_events()  # every design's rows that evict: one table (designs/)
"""The events that mean a cached page was evicted, on every cache kind."""

JUMP_CHECKS_AT_MOST = 16
"""A jump restoring a keyframe not checked yet checks it (and those before it) first, to
trust it, when at most this many are left up to it; else the jumped-to frame is checked whole."""

_EVICTION_CLASSES = frozenset(EVICTION_EVENTS)
_NODE_CREATED, _NODE_EVICTED, _BLOCK_EVICTED, _OP_STARTED = ev.NodeCreated, ev.Evicted, ev.BlockEvicted, ev.OpStarted


@dataclass(frozen=True, slots=True)
class OpError:
    """Why an op failed: the error class name and its message."""

    kind: str
    message: str


@dataclass(frozen=True)
class Frame:
    """Everything about one step of the timeline. Frame 0 is the initial state (op None)."""

    index: int
    op: Op | None
    events: tuple
    snapshot: Snapshot
    diff: Diff
    story: str
    explanation: str
    violations: tuple[Violation, ...]
    error: OpError | None
    expects: tuple[ExpectResult, ...] = ()
    # The state before the op (frame ``index - 1``'s snapshot), kept by the run that built
    # this frame: the views' ghost rows and a step-in need it, and rebuilding frame
    # ``index - 1`` for it after a jump restored a keyframe a second time.
    before: Snapshot | None = field(default=None, compare=False, repr=False)

    @property
    def narration(self) -> str:
        """The script's narration if it has one, else the generated explanation."""
        return self.story or self.explanation

    @property
    def failed(self) -> bool:
        """True when the op raised (and so changed nothing)."""
        return self.error is not None

    @property
    def evictions(self) -> tuple:
        """The evictions of this step: the trie's Evicted events, the hash cache's BlockEvicted."""
        return tuple(e for e in self.events if isinstance(e, EVICTION_EVENTS))

    @property
    def expect_failures(self) -> tuple[ExpectResult, ...]:
        """Expect lines of this step that did not hold."""
        return tuple(r for r in self.expects if not r.ok)


@dataclass(frozen=True, slots=True)
class IdleProgress:
    """What one call of :meth:`Session.idle_work` did: ``left``, the keyframes still to
    check; ``marked``, the frames whose summary it changed (new markers for the timeline)."""

    left: int
    marked: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class FrameSummary:
    """The few facts the timeline bar needs for every frame, kept for all frames."""

    index: int
    op_text: str
    failed: bool
    evictions: int
    violations: int
    expect_failures: int

    @property
    def interesting(self) -> bool:
        """Worth a marker: an eviction, a failure, a violation or a failed expect."""
        return bool(self.failed or self.evictions or self.violations or self.expect_failures)


@dataclass
class WhyIndex:
    """Facts gathered while applying ops, so why-queries need not replay the whole timeline."""

    created: dict[tuple[int, tuple], list[tuple[int, int]]] = field(default_factory=dict)  # (parent, tokens) -> [(node, step)]
    node_created_at: dict[int, int] = field(default_factory=dict)
    node_evicted_at: dict[int, int] = field(default_factory=dict)
    page_evicted_at: dict[int, list[int]] = field(default_factory=dict)
    acquired_at: dict[int, int] = field(default_factory=dict)  # allocation id -> step

    def record(self, step: int, events: tuple) -> int:
        """Note the facts of ``step``'s events; returns how many of them evicted (the
        timeline's marker), counted in the same pass."""
        # By exact class (kvcore's event classes are final), not an isinstance chain: 30
        # events an op on a trace, ~40 ms of opening 3,000 steps before.
        created, node_created_at = self.created, self.node_created_at
        evictions = 0
        for e in events:
            kind = type(e)
            if kind is _NODE_CREATED:
                key = (e.parent, e.tokens)
                made = created.get(key)
                if made is None:
                    created[key] = [(e.node, step)]
                else:
                    made.append((e.node, step))
                node_created_at[e.node] = step
            elif kind is _OP_STARTED:
                if e.op == "acquire":
                    self.acquired_at[e.allocation] = step
            elif kind in _EVICTION_CLASSES:
                evictions += 1
                if kind is _NODE_EVICTED:
                    self.node_evicted_at[e.node] = step
                if kind is _NODE_EVICTED or kind is _BLOCK_EVICTED:  # the hash cache: a block, lazily, on its page
                    self.page_evicted_at.setdefault(e.page, []).append(step)
        return evictions

    def until(self, last_step: int) -> "WhyIndex":
        """The facts of steps up to ``last_step`` only (after a branch)."""
        created = {k: [x for x in v if x[1] <= last_step] for k, v in self.created.items()}
        return WhyIndex(
            {k: v for k, v in created.items() if v},
            {k: s for k, s in self.node_created_at.items() if s <= last_step},
            {k: s for k, s in self.node_evicted_at.items() if s <= last_step},
            {k: [s for s in v if s <= last_step] for k, v in self.page_evicted_at.items()},
            {k: s for k, s in self.acquired_at.items() if s <= last_step},
        )


def _apply_quietly(backend: Backend, op: Op) -> bool:
    """Apply ``op`` and drop its events; True when it failed (and so changed nothing)."""
    try:
        backend.apply(op)
    except KVCacheError:
        return True
    finally:
        backend.take_events()
    return False


class ScopedScript:
    """Which of a script's narration and expect lines a run on one cache kind shows and checks.

    A line tagged with kinds (``[base] expect fail alloc``) applies to those kinds. An untagged
    line was written for the kind in the script's ``cache`` header: on that kind it applies;
    on another kind (``kvviz demo lru --base``) it is left out, because "the trie matches the
    whole page" is not true of the base cache, and the description says so, with how many
    expect lines were not checked.
    """

    def __init__(self, scenario: Scenario, run_kind: str):
        self.run_kind = run_kind
        self.written_for = scenario.config.kind
        self.foreign = run_kind != self.written_for
        self.unchecked_expects = sum(1 for step in scenario.steps for x in step.expects
                                     if self.foreign and x.kinds is None)
        self.description = scenario.description
        if self.foreign:
            notice = (f"This script was written for the {self.written_for} cache and runs here on the "
                      f"{run_kind} cache: its untagged narration is left out (what is shown comes from "
                      f"the {run_kind} cache's own events)")
            if self.unchecked_expects:
                notice += (f", and its {self.unchecked_expects} untagged expect "
                           f"line{'s are' if self.unchecked_expects != 1 else ' is'} not checked")
            self.description = notice + "." + (f"\n\n{scenario.description}" if scenario.description else "")

    def narration(self, step: Step) -> str:
        """The narration shown with ``step`` on this run's kind."""
        if not self.foreign:
            return step.narration_for(self.run_kind)
        return "\n".join(p.text for p in step.paragraphs if p.kinds is not None and p.applies_to(self.run_kind))

    def expects(self, step: Step) -> tuple[Expect, ...]:
        """The expect lines checked after ``step`` on this run's kind."""
        if not self.foreign:
            return step.expects_for(self.run_kind)
        return tuple(x for x in step.expects if x.kinds is not None and x.applies_to(self.run_kind))


class Session:
    """Applies ops to one cache and keeps the timeline of frames.

    ``len(session)`` is the number of frames (ops + 1); ``session.frame(i)`` returns any of
    them. ``check`` runs the invariant checker after every op (on by default).

    The cache comes from ``backend_factory`` (a :class:`~kvviz.backends.BackendFactory`,
    kvcore's by default); a config that backend cannot run raises
    :class:`~kvviz.backends.BackendError` from the constructor and from
    :meth:`from_scenario`, before any op runs.
    """

    def __init__(self, config: CacheConfig, *, title: str = "", description: str = "",
                 vocab: Vocabulary | None = None, backend_factory: BackendFactory = kvcore_backend,
                 keyframe_every: int = 32, cached_frames: int = 256, check: bool = True,
                 full_check: bool = False, units: Units = TOKENS):
        """``keyframe_every``: a snapshot every K frames (rebuild cost vs memory);
        ``cached_frames``: how many materialised frames to keep; ``check``: run the invariant
        checker on every frame (the backend's, which may re-check only what changed since the
        frame before); ``full_check``: check every frame whole (a backend's ``check_full``,
        when it has one); ``units``: what one token stands for in the narration (a trace's
        block of 512 tokens, say)."""
        self.config = config
        self.units = units
        self.title = title
        self.written_for = config.kind  # the kind the script's untagged lines were written for
        self.unchecked_expects = 0  # untagged expects left out because the run is on another kind
        self.description = description
        self.vocab = vocab if vocab is not None else Vocabulary()
        self._factory = backend_factory
        self._keyframe_every = max(1, keyframe_every)
        self._cache_size = max(2, cached_frames)
        self._check = check
        self._full_check = full_check
        self.backend: Backend = backend_factory(config, None)
        self.steps: list[Step] = []
        self.summaries: list[FrameSummary] = []
        self._keyframes: dict[int, Snapshot] = {}
        # Keyframes a check of this timeline found healthy: a jump restoring one tells the
        # restored backend (when it can take it), whose check of the jumped-to frame then
        # costs what the replayed ops changed, not a full check of ~10,000 nodes.
        self._healthy_keyframes: set[int] = set()
        # Keyframes appended lazily and not checked yet, in order: the first paint does not
        # wait for them. :meth:`idle_work` checks them a few at a time, and a jump checks
        # the ones up to the keyframe it restores first; either way in order, on the session's
        # backend, from the keyframe checked before (so each costs what its ops changed).
        self._unchecked_keyframes: deque[int] = deque()
        self._frames: OrderedDict[int, Frame] = OrderedDict()
        self._cursor: tuple[int, Backend] | None = None  # (frame index, backend in that state)
        self._substeps: OrderedDict[int, OpSubSteps] = OrderedDict()  # the last few ops stepped into
        self.why_index = WhyIndex()
        snapshot = self.backend.snapshot()
        first = Frame(0, None, (), snapshot, diff_snapshots(None, snapshot), description,
                      narrate("", None, None, (), None, snapshot, None, self.label_tokens, units=self.units),
                      tuple(self._violations(snapshot)), None)
        self._keyframes[0] = snapshot
        self._initial_violations = first.violations  # frame 0 rebuilt: the same state, the same verdict
        if self._check and not first.violations:
            self._healthy_keyframes.add(0)
        self._remember(first)
        self.summaries.append(FrameSummary(0, "start", False, 0, len(first.violations), 0))
        self._last = first

    @classmethod
    def from_scenario(cls, scenario: Scenario, *, kind: str | None = None, lazy: bool = False,
                      units: Units = TOKENS, on_frame: Callable[[Frame], None] | None = None,
                      on_start: Callable[["Session"], None] | None = None, **kwargs) -> "Session":
        """A session with every step of ``scenario`` applied (``kind`` overrides the cache kind).

        ``lazy`` builds frames only when they are looked at (see :meth:`append`): for long
        scripts such as trace slices, opening is then as fast as running the cache.
        ``on_frame`` is called with each frame as it is applied (not with ``lazy``): what
        ``kvviz check`` reads, so it never rebuilds a frame the run already built (reading
        them back afterwards replayed every frame evicted from the frame cache: the whole
        run, twice). ``on_start`` is called with the session once its frame 0 (the initial
        state) exists, before the first op: ``run --print`` prints it then. Raises
        :class:`~kvviz.backends.BackendError` when the backend cannot run the config.
        """
        config = scenario.config
        if kind is not None and kind != config.kind:
            config = CacheConfig(kind, config.pages, config.tokens_per_page, config.policy)
        plan = ScopedScript(scenario, config.kind)
        session = cls(config, title=scenario.title, description=plan.description,
                      vocab=scenario.vocab, units=units, **kwargs)
        session.written_for = scenario.config.kind
        session.unchecked_expects = plan.unchecked_expects
        if on_start is not None:
            on_start(session)
        if lazy:
            if on_frame is not None:
                raise ValueError("on_frame needs frames as they are applied: not with lazy=True")
            for step in scenario.steps:
                session.append(step.op, plan.narration(step), plan.expects(step))
            return session
        for step in scenario.steps:
            frame = session.apply(step.op, plan.narration(step), plan.expects(step))
            if on_frame is not None:
                on_frame(frame)
        return session

    # -- the timeline --------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.summaries)

    @property
    def last(self) -> Frame:
        """The newest frame (the live state)."""
        if self._last is None:
            self._last = self.frame(-1)
        return self._last

    def frame(self, index: int) -> Frame:
        """Frame ``index`` (negative counts from the end). Rebuilt from a keyframe if evicted."""
        index = self._index(index, 0, "does not exist (the timeline has frames 0..{last})")
        frame = self._frames.get(index)
        if frame is not None:
            self._frames.move_to_end(index)
            return frame
        frame = self._rebuild(index)
        self._remember(frame)
        summary = self.summaries[index]
        if (summary.violations, summary.expect_failures) != (len(frame.violations), len(frame.expect_failures)):
            # A lazily appended frame learns its checks' results when first built.
            self.summaries[index] = FrameSummary(index, summary.op_text, summary.failed, summary.evictions,
                                                 len(frame.violations), len(frame.expect_failures))
        return frame

    def snapshot_before(self, index: int) -> Snapshot:
        """The state before frame ``index``'s op (frame ``index - 1``'s snapshot), from the
        run that built frame ``index`` when it kept it: no second rebuild after a jump."""
        frame = self.frame(index)
        if frame.index == 0:
            raise IndexError("frame 0 is the initial state: no op led to it, nothing came before")
        if frame.before is not None:
            return frame.before
        return self.frame(frame.index - 1).snapshot

    def snapshots(self) -> Iterator[Snapshot]:
        """Every frame's snapshot, in order, from one quiet replay on a backend of its own:
        no narration, diffs, checks or frame cache, and the session's cursor is untouched.

        What exports and ``kvviz open`` need to list or verify a digest per step; building
        every frame instead costs several times more per step."""
        yield self._keyframes[0]
        backend = self._factory(self.config, None)
        for step in list(self.steps):
            _apply_quietly(backend, step.op)
            yield backend.snapshot()

    def live_names(self) -> list[str]:
        """Names of the allocations live at the end of the timeline."""
        return self.backend.live_names()

    def label_tokens(self, tokens: Iterable[int]) -> str:
        """Tokens as words where the scenario used words, else integers."""
        return self.vocab.label_tokens(tuple(tokens))

    # -- applying ops ----------------------------------------------------------------------

    def apply(self, op: Op, narration: str = "", expects: tuple[Expect, ...] = ()) -> Frame:
        """Apply ``op`` at the end of the timeline and record its frame (also when it fails)."""
        index = len(self.summaries)
        step = Step(op, narration, tuple(expects))
        # The backend's checker is about to see the new state: first the keyframes it has not
        # checked yet, in order, so that its check of this frame starts from the last of them.
        self._check_keyframes(index)
        frame = self._run(self.backend, self.last.snapshot, step, index, record=True)
        self.steps.append(step)
        if index % self._keyframe_every == 0 and self.backend.can_restore:
            # A backend that cannot restore a snapshot (a foreign cache) replays from frame 0.
            self._keyframes[index] = frame.snapshot
            if self._check and not frame.violations:
                self._healthy_keyframes.add(index)
        self.summaries.append(FrameSummary(index, op.text, frame.failed, len(frame.evictions),
                                           len(frame.violations), len(frame.expect_failures)))
        self._remember(frame)
        self._last = frame
        return frame

    def append(self, op: Op, narration: str = "", expects: tuple[Expect, ...] = ()) -> None:
        """Apply ``op`` like :meth:`apply` but build its frame only when someone asks for it.

        Only the op's outcome and evictions are recorded now (for the timeline's markers);
        snapshot, diff, narration, invariant checks and expects come with :meth:`frame`.
        Every ``keyframe_every`` ops a keyframe snapshot is kept; on a backend that can trust
        a checked keyframe (``checked_healthy``), its invariant check waits for
        :meth:`idle_work` or the first jump that restores it, and its marker on the timeline
        comes with that check.
        """
        index = len(self.summaries)
        step = Step(op, narration, tuple(expects))
        failed = False
        try:
            self.backend.apply(op)
        except KVCacheError:
            failed = True
        events = self.backend.take_events()
        evictions = self.why_index.record(index, events)
        self.steps.append(step)
        if index % self._keyframe_every == 0 and self.backend.can_restore:
            self._keyframes[index] = self.backend.snapshot()
            if self._check and hasattr(self.backend, "checked_healthy"):
                # Checked later, from the keyframe before (kvcore's check costs the rows the
                # K ops changed: ~0.1 s over 3,000 trace steps), so that a jump can trust it.
                self._unchecked_keyframes.append(index)
        self.summaries.append(FrameSummary(index, op.text, failed, evictions, 0, 0))
        self._last = None

    @property
    def deferred_checks(self) -> int:
        """Keyframes appended lazily whose invariant check has not run yet (see :meth:`idle_work`)."""
        return len(self._unchecked_keyframes)

    def idle_work(self, keyframes: int = 8) -> "IdleProgress":
        """Check up to ``keyframes`` of the lazily appended keyframes not checked yet (oldest
        first): what the UI calls when it has nothing else to do, until ``left`` is 0.

        The verdicts do not depend on when (or whether) this runs: a jump checks the
        keyframes up to the one it restores itself, in the same order, and a frame's own
        violations always come from checking that frame. ``marked`` lists the keyframes whose
        summary changed (violations found): the timeline has new markers to draw."""
        pending = self._unchecked_keyframes
        marked = self._check_keyframes(pending[min(keyframes, len(pending)) - 1]) if pending and keyframes > 0 else ()
        return IdleProgress(len(pending), marked)

    def finish_deferred_checks(self) -> tuple[int, ...]:
        """Every deferred keyframe check, now (what a question about the whole timeline needs:
        the first violation, the next interesting step); returns the keyframes whose summary
        changed, as :meth:`idle_work` does. Nothing to do once idle work has finished."""
        pending = self._unchecked_keyframes
        return self._check_keyframes(pending[-1]) if pending else ()

    def _check_keyframes(self, through: int) -> tuple[int, ...]:
        """Check the unchecked keyframes up to frame ``through``, in order, on the session's
        backend (its checker re-checks what changed since the keyframe before); returns the
        keyframes whose summary changed."""
        pending = self._unchecked_keyframes
        marked = []
        while pending and pending[0] <= through:
            index = pending.popleft()
            found = self._violations(self._keyframes[index])
            if not found:
                self._healthy_keyframes.add(index)
                continue
            summary = self.summaries[index]
            if summary.violations != len(found):
                self.summaries[index] = FrameSummary(index, summary.op_text, summary.failed, summary.evictions,
                                                     len(found), summary.expect_failures)
                marked.append(index)
        return tuple(marked)

    def truncate(self, keep: int) -> None:
        """Drop every frame after ``keep`` (branching from an earlier step); the live cache
        becomes the state of frame ``keep``."""
        if not 0 <= keep < len(self.summaries):
            raise IndexError(f"cannot truncate to frame {keep}: the timeline has frames 0..{len(self.summaries) - 1}")
        frame = self.frame(keep)
        self._check_keyframes(keep)  # on this backend's checker, before it is replaced
        self._unchecked_keyframes.clear()  # the rest are dropped with their frames
        del self.steps[keep:]
        del self.summaries[keep + 1:]
        self._keyframes = {i: b for i, b in self._keyframes.items() if i <= keep}
        self._healthy_keyframes = {i for i in self._healthy_keyframes if i <= keep}
        for i in [i for i in self._frames if i > keep]:
            del self._frames[i]
        if self._cursor is not None:
            self._discard(self._cursor[1])
        self._cursor = None
        self._substeps.clear()
        if self.backend.can_restore:
            self.backend = self._factory(self.config, frame.snapshot)
        else:
            self.backend = self._replayed_backend(keep)
        self._last = frame
        self.why_index = self.why_index.until(keep)

    def substeps(self, index: int, *, states_at_once: int = STATE_WINDOW) -> OpSubSteps:
        """The sub-steps of frame ``index``'s op (the op from frame ``index - 1`` to it), each
        with kvcore's own state after it (:mod:`kvviz.core.substeps`). Built on first asking
        and kept for the last few ops asked; states are built lazily, a window at a time, the
        first ``states_at_once`` of them while the sub-steps are listed (only on first asking)."""
        index = self._index(index, 1, "has no op (ops are frames 1..{last})")
        cached = self._substeps.get(index)
        if cached is not None:
            self._substeps.move_to_end(index)
            return cached
        frame = self.frame(index)
        before = self.snapshot_before(index)
        step = self.steps[index - 1]
        if self.backend.can_restore:
            def start():
                return self._factory(self.config, before)
        else:
            def start():
                return self._replayed_backend(index - 1)
        result = build_substeps(index, step.op, before, frame.snapshot, start, label=self.label_tokens,
                                lines_for=lines_for, error=frame.error.message if frame.error else None,
                                states_at_once=states_at_once)
        self._substeps[index] = result
        while len(self._substeps) > 4:
            self._substeps.popitem(last=False)
        return result

    # -- internals -------------------------------------------------------------------------

    def _index(self, index: int, first: int, problem: str) -> int:
        """``index`` as a frame number from ``first`` on (negative counts from the end), or
        IndexError saying ``problem`` (``{last}`` is the last frame)."""
        n = len(self.summaries)
        if index < 0:
            index += n
        if not first <= index < n:
            raise IndexError(f"frame {index} {problem.format(last=n - 1)}")
        return index

    def _violations(self, snapshot: Snapshot, backend: Backend | None = None) -> list[Violation]:
        """The invariant checker's verdict on ``snapshot``, by ``backend`` (the one that made it:
        the session's own by default), so each backend sees its frames in order."""
        if not self._check:
            return []
        backend = backend if backend is not None else self.backend
        # The backend checks in its own terms (a foreign cache may keep one reference per
        # allocation, on its deepest node, not one on every node of the path). Frames are checked in
        # order on one backend, so kvcore's re-checks only what each op changed.
        if self._full_check:
            return list(getattr(backend, "check_full", backend.check)(snapshot))
        return list(backend.check(snapshot))

    def _run(self, backend, before: Snapshot, step: Step, index: int, record: bool) -> Frame:
        op = step.op
        error = None
        try:
            backend.apply(op)
        except KVCacheError as exc:
            error = OpError("InvalidOperation" if isinstance(exc, UnknownAllocation) else type(exc).__name__, str(exc))
        events = backend.take_events()
        after = backend.snapshot()
        violations = self._violations(after, backend)
        if error is not None and after != before:
            violations.append(Violation(6, f"the failed op {op.text!r} changed the cache's state"))
        if record:
            self.why_index.record(index, events)
        explanation = narrate(op.text, op.kind, op.name, events, before, after,
                              (error.kind, error.message) if error else None, self.label_tokens,
                              units=self.units)
        frame = Frame(index, op, events, after, diff_snapshots(before, after), step.narration, explanation,
                      tuple(violations), error, before=before)
        if step.expects:
            results = tuple(evaluate(x, frame) for x in step.expects)
            frame = Frame(index, op, events, after, frame.diff, step.narration, explanation,
                          tuple(violations), error, results, before=before)
        return frame

    def _rebuild(self, index: int) -> Frame:
        if index == 0:
            snapshot = self._keyframes[0]
            return Frame(0, None, (), snapshot, diff_snapshots(None, snapshot), self.description,
                         narrate("", None, None, (), None, snapshot, None, self.label_tokens),
                         self._initial_violations, None)
        cursor = self._cursor
        if cursor is not None and cursor[0] < index <= cursor[0] + self._keyframe_every:
            # Stepping forward: continue the backend left by the last rebuild, no restore.
            start, backend = cursor
        else:
            if cursor is not None:
                self._discard(cursor[1])  # the jump leaves it behind
            start = max(i for i in self._keyframes if i < index)
            snapshot = self._keyframes[start]
            backend = self._factory(self.config, snapshot if start > 0 else None)
            trust = getattr(backend, "checked_healthy", None)  # kvcore's: a foreign check starts afresh
            if trust is not None and start > 0 and not self._full_check and \
                    bisect_right(self._unchecked_keyframes, start) <= JUMP_CHECKS_AT_MOST:
                # A jump before idle_work got this far checks the few keyframes left up to
                # its own, to trust it; past more, the frame's own full check costs less
                # (~30 ms at 10,000 nodes, against ~1.5 ms a keyframe) and they wait for idle.
                self._check_keyframes(start)
            if trust is not None and start > 0 and start in self._healthy_keyframes and not self._full_check:
                trust(snapshot)
        self._cursor = None  # the backend is about to move; re-armed below
        self._replay(backend, start + 1, index - 1)
        cached = self._frames.get(index - 1)
        before = cached.snapshot if cached is not None else backend.snapshot()
        frame = self._run(backend, before, self.steps[index - 1], index, record=False)
        self._cursor = (index, backend)
        return frame

    @staticmethod
    def _discard(backend: Backend) -> None:
        """Let go of a rebuild's backend: one that can (kvcore's ``discard``) breaks its
        reference cycles, so that it is freed now and not by the collector during a later jump."""
        discard = getattr(backend, "discard", None)
        if discard is not None:
            discard()

    def _replayed_backend(self, upto: int):
        """A fresh backend with the ops of frames 1..upto applied (for backends without restore)."""
        return self._replay(self._factory(self.config, None), 1, upto)

    def _replay(self, backend, first: int, last: int):
        """Apply the ops of frames ``first..last`` to ``backend``, quietly; returns it."""
        for step in self.steps[first - 1:last]:
            _apply_quietly(backend, step.op)
        return backend

    def _remember(self, frame: Frame) -> None:
        frames = self._frames
        frames[frame.index] = frame
        frames.move_to_end(frame.index)
        while len(frames) > self._cache_size:
            frames.popitem(last=False)
