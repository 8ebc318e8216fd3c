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

A backend that reports its calls rather than kvcore's events (shortfin: ``substeps ==
"calls"``) gives one sub-step per call its reader can observe between (lookup, allocate,
publish, release); :attr:`OpSubSteps.note` says so, for the UI to show.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kvcore import KVCacheError, Snapshot
from kvcore import events as ev

from ..backends import Call
from .free_queue import place_text
from .narrate import Labeler, count, default_labeler

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

_KIND_OF_EVENT: dict[type, str] = {
    ev.OpStarted: "start", ev.Matched: "match", ev.HeapRemoved: "unheap", ev.CandidateRemoved: "uncandidate",
    ev.RefTaken: "ref", ev.Touched: "touch", ev.PagesTaken: "take", ev.HeapPopped: "pop",
    ev.HeapSwapped: "swap", ev.Evicted: "evict", ev.CandidateAdded: "candidate", ev.HeapPushed: "push",
    ev.NodeCreated: "create", ev.Deduplicated: "dedup", ev.PagesFreed: "free", ev.RefDropped: "unref",
    ev.Released: "release", ev.Failed: "fail", ev.Ticked: "tick",
    ev.PageUnqueued: "dequeue", ev.BlockEvicted: "drop", ev.BlockCached: "cache", ev.PagesQueued: "queue",
}

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
class Focus:
    """What moves in a sub-step, for the views to highlight: trie nodes, physical pages,
    heap slots (array indices), and the allocation (by name)."""

    nodes: tuple[int, ...] = ()
    pages: tuple[int, ...] = ()
    slots: tuple[int, ...] = ()
    allocation: str | None = None


@dataclass(frozen=True, slots=True)
class SubStep:
    """One thing that happened inside an op: its ``kind`` (:data:`SUBSTEP_KINDS`), the
    sentence that says it, the pseudo-code ``algorithm`` and ``lines`` (1-based) that did it,
    what to highlight, and the event it came from (a kvcore event, or a
    :class:`kvviz.backends.Call`)."""

    index: int
    kind: str
    sentence: str
    algorithm: str
    lines: tuple[int, ...]
    focus: Focus
    event: object


class _Stop(BaseException):
    """Ends a state run early (a BaseException: no backend's error handling catches it)."""


#: How sub-steps get their pseudo-code lines: (op kind, sub-step kind, cache kind, context)
#: -> (algorithm, lines). kvviz.model.pseudocode provides the real one.
LinesFor = Callable[..., tuple[str, tuple[int, ...]]]


def _no_lines(op_kind: str, kind: str, *, cache_kind: str = "trie", context=None) -> tuple[str, tuple[int, ...]]:
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
          error: str | None = None) -> OpSubSteps:
    """The sub-steps of ``op``, which led from ``before`` to ``after`` (frame ``frame_index``).

    ``start()`` must return a fresh backend in ``before``'s state each time it is called (it
    is run once here, and again per window of states); ``error`` is the op's error message
    if it failed. Raises RuntimeError if the run does not end in ``after`` (a backend that
    is not deterministic).
    """
    backend = start()
    source = backend.substeps
    cache_kind = "shortfin" if source == "calls" else before.kind
    events: list = []
    states: dict[int, Snapshot] = {}

    def on_event(event) -> None:
        if _folded(event):
            return
        if source == "calls":  # few and costly to reach again: keep every state now
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
    words = _Words(op, before, names, label)
    steps = []
    for event in events:
        kind, sentence, focus, context = words.say(event)
        algorithm, lines = lines_for(op.kind, kind, cache_kind=cache_kind, context=context)
        steps.append(SubStep(len(steps), kind, sentence, algorithm, lines, focus, event))
    if not steps:
        # Refused before anything happened (a name that is not live, tokens that are not
        # ints): one sub-step, so every op can be stepped into.
        reason = error or "nothing happened"
        algorithm, lines = lines_for(op.kind, "refused", cache_kind=cache_kind, context=None)
        steps.append(SubStep(0, "refused", f"refused before anything changed: {reason}", algorithm, lines,
                             Focus(allocation=op.name), None))
        states[0] = before
    if source == "calls":
        note = (f"{backend.name} is observed between its calls "
                "(lookup, allocate, publish, release): these sub-steps are its calls, not the moves inside them")
    else:
        note = "every move kvcore made, with its state after each"
    return OpSubSteps(frame_index, op, before, after, tuple(steps), source, note, start, states)


def _keytext(key) -> str:
    return "(" + ",".join(map(str, key)) + ")" if key is not None else "none"


class _Words:
    """The sentence, the focus and the pseudo-code context of each event of one op."""

    def __init__(self, op, before: Snapshot, names: dict[int, str], label: Labeler):
        self.op = op
        self.names = names
        self.label = label
        self.tpp = before.tokens_per_page
        self.hash = before.kind == "hash"  # blocks on pages and a free queue, no nodes or heap
        self.pages_of = {n.id: n.page for n in before.nodes}
        self.parent_of = {n.id: n.parent for n in before.nodes}
        self.heap_move = ""  # the heap move a sift follows (unheap, push, pop): which lines swap
        self.matched = 0
        self.queue = before.free  # the hash cache's free queue, head first, before the op
        self.unqueued: set[int] = set()  # pages the op took out of it so far (matched)

    def name(self, allocation: int | None) -> str:
        if allocation is None:
            return self.op.name
        return self.names.get(allocation, self.op.name)

    def node(self, node: int) -> str:
        page = self.pages_of.get(node)
        return f"node {node}" + (f" (page {page})" if page is not None else "")

    def say(self, e) -> tuple[str, str, Focus, dict]:
        """(kind, sentence, focus, context) for event ``e``."""
        if isinstance(e, Call):
            return "call", f"shortfin's {e.method}" + (f" ({e.what})" if e.what else ""), Focus(
                allocation=self.op.name), {"call": e.method}
        kind = _KIND_OF_EVENT.get(type(e))
        if kind is None and isinstance(e, ev.Walked):
            kind = "walk" if e.node is not None else "stop"
        if kind is None:  # pragma: no cover - a new event class
            return "start", repr(e), Focus(), {}
        return kind, *getattr(self, "_" + kind)(e)

    # One method per kind: (sentence, focus, context).

    def _start(self, e: ev.OpStarted):
        return f"{e.op} {self.name(e.allocation)} begins", Focus(allocation=self.name(e.allocation)), {}

    def _tick(self, e: ev.Ticked):
        also = {"acquire": "; the lookup is counted and the allocation numbered",
                "extend": "; the allocation's tokens are the new ones"}.get(e.op, "")
        return f"the clock ticks to {e.tick}{also}", Focus(allocation=self.name(e.allocation)), {}

    def _walk(self, e: ev.Walked):
        where = "the root" if not e.parent else f"node {e.parent}"
        self.pages_of.setdefault(e.node, None)
        return (f"walk: block {e.depth} [{self.label(e.tokens)}] is a child of {where}: "
                f"matched {self.node(e.node)}", Focus(nodes=(e.node,)), {"depth": e.depth})

    def _stop(self, e: ev.Walked):
        where = "the root" if not e.parent else f"node {e.parent}"
        return (f"walk: block {e.depth} [{self.label(e.tokens)}] is not a child of {where}: "
                f"matching stops after {count(e.depth, 'block')}",
                Focus(nodes=(e.parent,) if e.parent else ()), {"depth": e.depth})

    def _match(self, e: ev.Matched):
        self.matched = len(e.nodes)
        return (f"matched {count(len(e.nodes), 'page')}: {e.matched_tokens:,} of {count(e.total_tokens, 'token')} "
                f"are cached and will not be computed again", Focus(nodes=e.nodes, pages=e.pages), {})

    def _unheap(self, e: ev.HeapRemoved):
        self.heap_move = "unheap"
        moved = f"; node {e.moved} moves from the array's end into slot [{e.slot}]" if e.moved is not None else ""
        return (f"node {e.node} leaves the heap from slot [{e.slot}]{moved}",
                Focus(nodes=(e.node,), slots=(e.slot,)), {})

    def _uncandidate(self, e: ev.CandidateRemoved):
        return (f"{self.node(e.node)} is no longer an eviction candidate: {e.reason}",
                Focus(nodes=(e.node,), pages=(e.page,)), {})

    def _ref(self, e: ev.RefTaken):
        if self.hash:
            return (f"ref +1 on page {e.page} (block {e.node}): ref {e.ref}; it cannot be taken while referenced",
                    Focus(pages=(e.page,), allocation=self.name(e.allocation)), {})
        return (f"ref +1 on node {e.node} (page {e.page}): ref {e.ref}; it cannot be evicted while referenced",
                Focus(nodes=(e.node,), pages=(e.page,), allocation=self.name(e.allocation)), {})

    def _touch(self, e: ev.Touched):
        nodes = ", ".join(map(str, e.nodes))
        return (f"touch node{'s' if len(e.nodes) != 1 else ''} {nodes}: last_access = {e.tick}",
                Focus(nodes=e.nodes), {})

    def _take(self, e: ev.PagesTaken):
        pages = ", ".join(map(str, e.pages))
        where = "the free queue's head" if self.hash else "the free list's front"
        return (f"take page{'s' if len(e.pages) != 1 else ''} {pages} from {where} "
                f"for {self.name(e.allocation)}", Focus(pages=e.pages, allocation=self.name(e.allocation)), {})

    def _pop(self, e: ev.HeapPopped):
        self.heap_move = "pop"
        cascade = e.moved is not None and self.parent_of.get(e.node) == e.moved
        if e.moved is None:
            rest = "; the heap is empty now"
        elif cascade:
            rest = (f"; its parent node {e.moved} takes slot [0] at once (it becomes a leaf when "
                    f"{e.node} goes), then sifts down")
        else:
            rest = f"; the last entry, node {e.moved}, moves to slot [0] and sifts down"
        return (f"pop the heap's top: node {e.node}, key {_keytext(e.key)}, the smallest, is the victim{rest}",
                Focus(nodes=(e.node,), slots=(0,)), {"cascade": cascade})

    def _swap(self, e: ev.HeapSwapped):
        if e.direction == "down":
            why = f"is larger than its child {_keytext(e.other_key)} at [{e.other_slot}]"
        else:
            why = f"is smaller than its parent {_keytext(e.other_key)} at [{e.other_slot}]"
        return (f"sift {e.direction}: {_keytext(e.key)} at [{e.slot}] {why}: swap",
                Focus(nodes=(e.node, e.other), slots=(e.slot, e.other_slot)),
                {"direction": e.direction, "after": self.heap_move})

    def _evict(self, e: ev.Evicted):
        self.pages_of[e.node] = e.page
        return (f"evict node {e.node} [{self.label(e.tokens)}], key {_keytext(e.key)}: out of the trie; "
                f"page {e.page} goes to {self.name(e.allocation)}",
                Focus(nodes=(e.node,), pages=(e.page,), allocation=self.name(e.allocation)), {})

    def _candidate(self, e: ev.CandidateAdded):
        return (f"{self.node(e.node)} has ref 0 and no children now: an eviction candidate, key {_keytext(e.key)}",
                Focus(nodes=(e.node,), pages=(e.page,)), {})

    def _push(self, e: ev.HeapPushed):
        self.heap_move = "push"
        return (f"node {e.node}, key {_keytext(e.key)}, joins the heap at slot [{e.slot}], the array's end",
                Focus(nodes=(e.node,), slots=(e.slot,)), {})

    def _create(self, e: ev.NodeCreated):
        self.pages_of[e.node] = e.page
        self.parent_of[e.node] = e.parent
        where = "the root" if not e.parent else f"node {e.parent}"
        return (f"new node {e.node} under {where} holds page {e.page}: [{self.label(e.tokens)}] is shared from now on",
                Focus(nodes=(e.node,), pages=(e.page,), allocation=self.name(e.allocation)), {})

    def _dedup(self, e: ev.Deduplicated):
        return (f"block {e.index} is already cached as node {e.node} (page {e.page}): adopt it; "
                f"the own copy, page {e.own_page}, goes back to the free list", Focus(nodes=(e.node,), pages=(e.page, e.own_page),
                                                                          allocation=self.name(e.allocation)), {})

    def _free(self, e: ev.PagesFreed):
        pages = ", ".join(map(str, e.pages))
        return (f"page{'s' if len(e.pages) != 1 else ''} {pages} back to the free list ({e.reason})",
                Focus(pages=e.pages, allocation=self.name(e.allocation)), {"reason": e.reason})

    def _unref(self, e: ev.RefDropped):
        if self.hash:
            after = "; it will join the free queue, still caching its block" if e.ref == 0 else ""
            return (f"ref -1 on page {e.page} (block {e.node}): ref {e.ref}{after}",
                    Focus(pages=(e.page,), allocation=self.name(e.allocation)), {})
        after = "; nothing references it now: evictable once it is a leaf" if e.ref == 0 else ""
        return (f"ref -1 on node {e.node} (page {e.page}): ref {e.ref}{after}",
                Focus(nodes=(e.node,), pages=(e.page,), allocation=self.name(e.allocation)), {})

    def _release(self, e: ev.Released):
        return (f"{self.name(e.allocation)} released: it holds nothing now", Focus(allocation=self.name(e.allocation)),
                {})

    def _fail(self, e: ev.Failed):
        protected = (f" ({e.protected} of them only because this request matched them)" if e.protected else "")
        return (f"does not fit: needs {count(e.needed, 'page')}, {e.free} free + {e.evictable} evictable{protected}; "
                "nothing changed (kvcore checks before it changes anything, so there is nothing to roll back)",
                Focus(allocation=self.op.name), {})

    # The hash-block cache's own events.

    def _dequeue(self, e: ev.PageUnqueued):
        self.unqueued.add(e.page)
        return (f"page {e.page} (block {e.block}) leaves the free queue: it is matched, so nothing may take it",
                Focus(pages=(e.page,), allocation=self.name(e.allocation)), {})

    def _queue_place(self, page: int) -> str:
        """``page``'s place in the free queue as it stands now (the op's matched pages out;
        pages whose blocks were dropped stay until taken), in the pool's numbering. The
        page is among those about to be taken from the head, so the walk stops early."""
        place = 0
        for p in self.queue:
            if p in self.unqueued:
                continue
            if p == page:
                return place_text(place, len(self.queue) - len(self.unqueued))
            place += 1
        return "not queued"  # pragma: no cover - kvcore drops blocks of queued pages only

    def _drop(self, e: ev.BlockEvicted):
        still = "; another page still caches its key" if e.still_cached else ""
        return (f"page {e.page}, {self._queue_place(e.page)} in the free queue, is among the pages taken from its "
                f"head and still caches block {e.block} [{self.label(e.tokens)}]: "
                f"the block leaves the cache now, as the page is taken (lazy eviction){still}",
                Focus(pages=(e.page,), allocation=self.name(e.allocation)), {})

    def _cache(self, e: ev.BlockCached):
        dup = (f"; page {e.duplicate_of} caches the same key already: vLLM keeps both"
               if e.duplicate_of is not None else "")
        return (f"cache block {e.block} [{self.label(e.tokens)}] under its chained key on page {e.page}{dup}",
                Focus(pages=(e.page,), allocation=self.name(e.allocation)), {})

    def _queue(self, e: ev.PagesQueued):
        parts = []
        if e.head:
            parts.append(f"page{'s' if len(e.head) != 1 else ''} {', '.join(map(str, e.head))} (caching nothing) "
                         "to the free queue's head")
        if e.tail:
            parts.append(f"page{'s' if len(e.tail) != 1 else ''} {', '.join(map(str, e.tail))} to its tail, "
                         "last block first, still caching their blocks")
        return ("; ".join(parts) or "no page joins the free queue",
                Focus(pages=e.head + e.tail, allocation=self.name(e.allocation)), {})
