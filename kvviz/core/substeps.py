# SPDX-License-Identifier: Apache-2.0
"""Inside one operation: its sub-steps, each with kvcore's own state at that moment.

A step of the timeline is a whole op; its sub-steps are the things that happened inside
it, one per event the backend reports while watched (:meth:`kvcore.TriePagedAttentionCache.watch`):
each step of acquire's walk down the trie, the clock's tick, each reference taken, each move
of the heap (the pop of a victim, every swap of a sift), each eviction, node created, page
taken or freed. They come in the code's order, so the pseudo-code lines they light run
forward except where a loop goes round again; a dedup's PagesFreed is no sub-step of its
own (:func:`_folded`).

**The states are kvcore's, not the view's.** The sub-steps of frame *i*'s op come from
running that op again on a backend brought to frame *i-1*'s state (restored from its
snapshot, or replayed from frame 0 for a backend that cannot restore) while watching it;
the state after sub-step *k* is the snapshot the cache itself gives when event *k* is
reported. Building the list is one run with no snapshots; states are built when asked for,
a window at a time, by running the op again and stopping after the window (the copy is
thrown away), so an op with hundreds of sub-steps opens at once
(``benchmarks/bench_ui.py`` prints the cost per sub-step).

Each event's kind, sentence and focus are its design's (:attr:`kvviz.core.designs.EventWords.substep`,
one row per event class in :mod:`kvviz.core.designs.trie`, ``.base``, ``.hash``); this
module runs the op and keeps the states. A backend that reports its calls rather than
kvcore's events (``substeps == "calls"``) gives one sub-step per call its reader can observe
between, lit in the pseudo-code the backend brings (:attr:`kvviz.backends.Backend.pseudocode`);
:attr:`OpSubSteps.note` says so, for the UI to show.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kvcore import KVCacheError, Snapshot
from kvcore import events as ev

from kvviz.backends import Call
from kvviz.core.designs import TRIE, Focus, OpContext, design_of
from kvviz.core.words import Labeler, default_labeler

__all__ = ["STATES_KEPT", "STATE_WINDOW", "SUBSTEP_KINDS", "Focus", "OpSubSteps", "SubStep", "build"]

SUBSTEP_KINDS: dict[str, str] = {
    "start": "the op begins (kvcore checked it fits: it will change the cache)",
    "tick": "the logical clock ticks: this op's time, the last_access it stamps",
    "walk": "acquire's walk finds the next page cached as a child: matched",
    "stop": "acquire's walk finds no child for the next page: matching stops",
    "match": "the match as a whole: how many tokens are cached",
    "unheap": "a matched or adopted candidate leaves the heap (its slot refilled)",
    "uncandidate": "the node is no longer an eviction candidate",
    "ref": "a reference is taken on a node: it cannot be evicted while held",
    "touch": "nodes are touched: their last_access becomes this tick",
    "take": "pages leave the free list's front for the allocation",
    "pop": "the heap's top, the smallest key, is taken: the victim",
    "swap": "one swap of a sift: a key moves past its parent or child",
    "evict": "the victim leaves the trie; its page goes to the allocation",
    "candidate": "a node becomes an eviction candidate (childless, ref 0)",
    "push": "a new candidate goes to the heap's end",
    "create": "publish creates a node holding one of the allocation's pages",
    "dedup": "publish finds the block already cached: adopt that page",
    "free": "pages go back to the free list",
    "unref": "a reference is dropped",
    "release": "the allocation ends: it holds nothing",
    "fail": "the op does not fit: kvcore checked before changing anything",
    "refused": "the op was refused before anything changed (a misuse)",
    "call": "one call into the foreign cache, observed between calls",
    "dequeue": "hash: a matched page leaves the free queue (it is referenced now)",
    "drop": "hash: a page among those taken from the queue's head still caches a block: the block leaves the cache "
            "(lazy eviction)",
    "cache": "hash: publish caches a full block under its chained key, on the allocation's page",
    "queue": "hash: released pages join the free queue (caching nothing: its head; ref 0: its tail, last block first)",
}
"""Every sub-step kind, with what it means (the help screen and the JSON docs list these)."""

def _folded(event) -> bool:
    """An event that is no sub-step of its own: a dedup's PagesFreed. kvcore returns the own
    copy in the dedup's move (its sub-step shows it freed and lights that line) and reports
    the PagesFreed after the ref, for the event log; as a sub-step it would change nothing
    and light the give line after the ref's, against the code's order."""
    return type(event) is ev.PagesFreed and event.reason == "dedup"


#: States built per run of the op: the one asked for and its neighbours, so stepping on
#: (or back) needs no second run.
STATE_WINDOW = 16
#: States kept per op.
STATES_KEPT = 256


@dataclass(frozen=True, slots=True)
class SubStep:
    """One thing that happened inside an op: its ``kind`` (:data:`SUBSTEP_KINDS`), the
    sentence that says it, the pseudo-code ``algorithm`` and ``lines`` (1-based) that did it,
    what to highlight, the event it came from (a kvcore event, or a
    :class:`kvviz.backends.Call`), and the backend's own pseudo-code ``code`` when it brought
    one (None: the design's, :attr:`kvviz.core.designs.Design.code`)."""

    index: int
    kind: str
    sentence: str
    algorithm: str
    lines: tuple[int, ...]
    focus: Focus
    event: object
    code: object = field(default=None, compare=False, repr=False)


class _Stop(BaseException):
    """Ends a state run early (a BaseException: no backend's error handling catches it)."""


#: How sub-steps get their pseudo-code lines: (op kind, sub-step kind, cache kind, context,
#: code) -> (algorithm, lines). kvviz.core.pseudocode provides the real one.
LinesFor = Callable[..., tuple[str, tuple[int, ...]]]


def _no_lines(op_kind: str, kind: str, *, cache_kind: str = TRIE, context=None,
              code=None) -> tuple[str, tuple[int, ...]]:
    return op_kind, ()


class OpSubSteps(Sequence):
    """The sub-steps of one op (``len``, indexing), and :meth:`state` after any of them.

    ``before`` and ``after`` are the frames' snapshots around the op; ``source`` is
    ``"events"`` (kvcore's, every move) or ``"calls"`` (a foreign cache's calls);
    ``note`` says what the sub-steps can and cannot show, for the UI.
    """

    def __init__(self, frame_index: int, op, before: Snapshot, after: Snapshot, steps: tuple[SubStep, ...],
                 source: str, note: str, start: Callable[[], object], states: dict[int, Snapshot] | None = None):
        self.frame_index = frame_index
        self.op = op
        self.before = before
        self.after = after
        self.steps = steps
        self.source = source
        self.note = note
        self._start = start
        self._states: OrderedDict[int, Snapshot] = OrderedDict(states or {})

    def __len__(self) -> int:
        return len(self.steps)

    def __getitem__(self, k):
        return self.steps[k]

    def state(self, k: int) -> Snapshot:
        """The cache's state right after sub-step ``k`` (-1: before the first), as kvcore held it."""
        n = len(self.steps)
        if k < 0:
            return self.before
        if k >= n:
            raise IndexError(f"sub-step {k} does not exist (the op has {n})")
        hit = self._states.get(k)
        if hit is not None:
            self._states.move_to_end(k)
            return hit
        if k - 1 in self._states:  # stepping forward: the window runs on from here
            first = k
        elif k + 1 in self._states:  # stepping back: the window ends here
            first = max(0, k - STATE_WINDOW + 1)
        else:
            first = max(0, k - STATE_WINDOW // 2)
        last = min(n - 1, first + STATE_WINDOW - 1)
        self._capture(first, last)
        return self._states[k]

    def prefetch(self, k: int) -> bool:
        """Build the states the next few moves from sub-step ``k`` will ask for, if some are
        missing: the next window (half a window ahead is missing), else the one before (half
        a window back is). The UI calls this when idle after drawing sub-step ``k``, so a
        step into a new window does not pay for its run of the op. True when it built some."""
        n, states = len(self.steps), self._states
        ahead = [i for i in range(k + 1, min(n, k + 1 + STATE_WINDOW // 2)) if i not in states]
        if ahead:
            self._capture(ahead[0], min(n - 1, ahead[0] + STATE_WINDOW - 1))
            return True
        behind = [i for i in range(max(0, k - STATE_WINDOW // 2), k) if i not in states]
        if behind:
            self._capture(max(0, behind[-1] - STATE_WINDOW + 1), behind[-1])
            return True
        return False

    def _capture(self, first: int, last: int) -> None:
        """Run the op again on a fresh copy and keep the states after sub-steps first..last."""
        backend = self._start()
        seen = [0]
        states = self._states

        def on_event(event) -> None:
            if _folded(event):
                return
            i = seen[0]
            seen[0] = i + 1
            if i >= first:
                states[i] = backend.snapshot()
                states.move_to_end(i)
                if i >= last:
                    raise _Stop
        backend.watch(on_event)
        try:
            backend.apply(self.op)
        except (_Stop, KVCacheError):
            pass
        finally:
            backend.watch(None)
        while len(states) > STATES_KEPT:
            states.popitem(last=False)
        if last not in states:  # pragma: no cover - the run reported fewer events than the first
            raise RuntimeError(f"the op's second run stopped after {seen[0]} of {len(self.steps)} sub-steps")


def build(frame_index: int, op, before: Snapshot, after: Snapshot, start: Callable[[], object], *,
          label: Labeler = default_labeler, lines_for: LinesFor = _no_lines,
          error: str | None = None, states_at_once: int = STATE_WINDOW) -> OpSubSteps:
    """The sub-steps of ``op``, which led from ``before`` to ``after`` (frame ``frame_index``).

    ``start()`` must return a fresh backend in ``before``'s state each time it is called (it
    is run once here, and again per window of states); ``error`` is the op's error message
    if it failed; ``states_at_once`` is how many of the first states this run keeps (a UI
    stepping in shows only the first, and builds the rest of the window once it is drawn;
    a writer of every state wants the whole window). Raises RuntimeError if the run does
    not end in ``after`` (a backend that is not deterministic).
    """
    backend = start()
    source = backend.substeps
    # The states of the first window are taken in this run (a step into an op shows its first
    # sub-step): a second run of the op for them would restore the cache again.
    code = backend.pseudocode  # a backend's own (its calls), or None: the design's
    cache_kind = before.kind
    events: list = []
    states: dict[int, Snapshot] = {}

    def on_event(event) -> None:
        if _folded(event):
            return
        if source == "calls" or len(events) < states_at_once:  # calls: few and costly to reach again
            states[len(events)] = backend.snapshot()
        events.append(event)
    backend.watch(on_event)
    try:
        backend.apply(op)
    except KVCacheError:
        pass
    finally:
        backend.watch(None)
    end = backend.snapshot()
    if source == "calls" and events and states[len(events) - 1] != end:
        # The backend's own bookkeeping after its last call (the handle it keeps, say):
        # a sub-step of its own, so that the last sub-step ends where the frame does.
        states[len(events)] = end
        events.append(Call("record", f"kvviz's {backend.name} adapter records the result: "
                                     "the allocation's handle and block table"))
    if end != after:
        raise RuntimeError(f"step {frame_index}: running the op again did not give the frame's state")
    names = {a.id: (a.name if a.name is not None else f"#{a.id}") for a in before.allocations + after.allocations}
    words = _Words(op, before, names, label, backend.name)
    steps = []
    for event in events:
        kind, sentence, focus, context = words.say(event)
        algorithm, lines = lines_for(op.kind, kind, cache_kind=cache_kind, context=context, code=code)
        steps.append(SubStep(len(steps), kind, sentence, algorithm, lines, focus, event, code))
    if not steps:
        # Refused before anything happened (a name that is not live, tokens that are not
        # ints): one sub-step, so every op can be stepped into.
        reason = error or "nothing happened"
        algorithm, lines = lines_for(op.kind, "refused", cache_kind=cache_kind, context=None, code=code)
        steps.append(SubStep(0, "refused", f"refused before anything changed: {reason}", algorithm, lines,
                             Focus(allocation=op.name), None, code))
        states[0] = before
    if source == "calls":
        note = (f"{backend.name} is observed between its calls "
                "(lookup, allocate, publish, release): these sub-steps are its calls, not the moves inside them")
    else:
        note = "every move kvcore made, with its state after each"
    return OpSubSteps(frame_index, op, before, after, tuple(steps), source, note, start, states)


class _Words:
    """The kind, sentence, focus and pseudo-code context of each event of one op: the row of
    the event's class in the cache's design (:attr:`kvviz.core.designs.EventWords.substep`),
    or a foreign backend's call."""

    def __init__(self, op, before: Snapshot, names: dict[int, str], label: Labeler, backend: str):
        self.design = design_of(before)
        self.context = OpContext(op, before, names, label)
        self.backend = backend

    def say(self, e) -> tuple[str, str, Focus, dict]:
        """(kind, sentence, focus, context) for event ``e``."""
        if isinstance(e, Call):
            return "call", f"{self.backend}'s {e.method}" + (f" ({e.what})" if e.what else ""), Focus(
                allocation=self.context.op.name), {"call": e.method}
        if not self.design.has_words(e):  # pragma: no cover - a new event class
            return "start", repr(e), Focus(), {}
        words = self.design.words(e)
        if words.substep is None:  # pragma: no cover - a design whose ops are not stepped into
            return words.kind_for(e), repr(e), Focus(), {}
        return (words.kind_for(e), *words.substep(self.context, e))
