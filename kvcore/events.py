# SPDX-License-Identifier: Apache-2.0
"""What happened inside one operation, in order.

Caches append these only while recording (``cache.record_events(True)``); when nobody
listens the hot path skips building them entirely. Every event is a frozen dataclass of
ints, strings and tuples, JSON-able through :func:`event_to_dict`.

While a cache is *watched* (``cache.watch(callback)``) it also reports the fine events
(:data:`FINE_EVENTS`): each step of acquire's walk down the trie, every move of the heap
(push, pop, remove, and each swap of a sift), the clock's tick, and a request that does not fit. Each event,
fine or not, reaches the callback at the moment it happens, when ``cache.snapshot()`` shows
kvcore's real state right then: what the sub-step views of kvviz are made of.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields


@dataclass(frozen=True, slots=True)
class OpStarted:
    """An operation began; it runs at logical time ``tick``. Reported once the op is known
    to succeed and before the clock ticks (a watched cache then reports :class:`Ticked`)."""

    op: str  # acquire | publish | extend | release
    allocation: int
    tick: int


@dataclass(frozen=True, slots=True)
class Matched:
    """Result of the prefix match of an acquire: the nodes matched and why matching stopped."""

    allocation: int
    nodes: tuple[int, ...]
    pages: tuple[int, ...]
    matched_tokens: int
    total_tokens: int
    reason: str


@dataclass(frozen=True, slots=True)
class RefTaken:
    """An allocation took a reference on a node; ``ref`` is the count after."""

    allocation: int
    node: int
    page: int
    ref: int


@dataclass(frozen=True, slots=True)
class RefDropped:
    """An allocation dropped its reference on a node; ``ref`` is the count after."""

    allocation: int
    node: int
    page: int
    ref: int


@dataclass(frozen=True, slots=True)
class Touched:
    """Nodes whose ``last_access`` became ``tick``."""

    nodes: tuple[int, ...]
    tick: int


@dataclass(frozen=True, slots=True)
class CandidateAdded:
    """A node became an eviction candidate (childless, ref 0) with ``key``: the cache policy's
    key tuple (``(last_access, seq)`` under lru; fields named by ``kvcore.KEY_FIELDS``)."""

    node: int
    page: int
    key: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class CandidateRemoved:
    """A candidate left the heap because it was referenced again."""

    node: int
    page: int
    reason: str


@dataclass(frozen=True, slots=True)
class PagesTaken:
    """Pages taken from the front of the free list for an allocation."""

    allocation: int
    pages: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Evicted:
    """A candidate evicted for ``allocation``: its page went to that allocation.

    ``key`` is the victim's key under the cache's policy; ``next_node``/``next_key`` is the
    heap's top after this eviction (None if empty);
    ``parent_became_candidate`` is the parent node if the eviction made it a leaf.
    """

    allocation: int
    node: int
    page: int
    tokens: tuple[int, ...]
    key: tuple[int, ...]
    next_node: int | None
    next_key: tuple[int, ...] | None
    parent_became_candidate: int | None


@dataclass(frozen=True, slots=True)
class NodeCreated:
    """Publish created a node holding one of the allocation's pages."""

    allocation: int
    node: int
    parent: int
    page: int
    tokens: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Deduplicated:
    """Publish found the block already cached: the allocation adopted ``page`` of ``node``
    and its own copy ``own_page`` went back to the free list."""

    allocation: int
    node: int
    page: int
    own_page: int
    index: int


@dataclass(frozen=True, slots=True)
class PagesFreed:
    """Pages appended to the free list (``reason``: release, dedup)."""

    allocation: int
    pages: tuple[int, ...]
    reason: str


@dataclass(frozen=True, slots=True)
class Released:
    """An allocation ended; it holds nothing afterwards."""

    allocation: int



# -- fine events: only while watched (see the module docstring) ----------------------------


@dataclass(frozen=True, slots=True)
class Walked:
    """Acquire's match looked for the child of node ``parent`` (0 is the root) holding the
    ``depth``-th page of tokens, ``tokens``; ``node`` is that child, or None when there is
    none and matching stops."""

    allocation: int
    depth: int
    parent: int
    node: int | None
    tokens: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class HeapPushed:
    """A new candidate was appended at ``slot``, the end of the heap's array (a sift up follows)."""

    node: int
    slot: int
    key: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class HeapPopped:
    """The heap's top ``node`` (key ``key``) left it; ``moved`` is the node now in slot 0 (the
    array's last entry, or the victim's parent replacing it in one sift), None if the heap is
    empty. A sift down follows."""

    node: int
    key: tuple[int, ...]
    moved: int | None


@dataclass(frozen=True, slots=True)
class HeapRemoved:
    """A candidate left the heap from ``slot``; ``moved`` is the array's last entry, moved into
    the hole (None when the removed one was last). A sift up or down follows."""

    node: int
    slot: int
    moved: int | None


@dataclass(frozen=True, slots=True)
class HeapSwapped:
    """One swap of a sift (``direction`` "up" or "down"): ``node`` (key ``key``) went from
    ``slot`` to ``other_slot`` and ``other`` (key ``other_key``) the other way."""

    direction: str
    node: int
    key: tuple[int, ...]
    slot: int
    other: int
    other_key: tuple[int, ...]
    other_slot: int


@dataclass(frozen=True, slots=True)
class Ticked:
    """The logical clock of ``op`` (allocation ``allocation``) advanced to ``tick``: where the
    code ticks, after an acquire's walk and fit check (its lookup is counted and its
    allocation numbered with it), after an extend's fit check (its tokens stored with it)."""

    op: str
    allocation: int
    tick: int


@dataclass(frozen=True, slots=True)
class Failed:
    """``op`` does not fit: ``needed`` pages, ``free`` free, ``evictable`` evictable
    (``protected`` ref-0 pages the request itself matched). kvcore checks before it changes
    anything, so nothing changed and nothing is rolled back; the op raises next."""

    op: str
    allocation: int | None
    needed: int
    free: int
    evictable: int
    protected: int


# -- the hash-block cache's events (kvcore.hashblock: vLLM's BlockStored, BlockRemoved and its
# free-queue moves).


@dataclass(frozen=True, slots=True)
class BlockCached:
    """Publish cached a full block of ``allocation`` on its own ``page`` under ``key`` (hex;
    ``parent`` the parent block's key, None for a first block; vLLM's ``BlockStored``).
    ``duplicate_of`` is the page that already cached the key, which lookups keep returning
    (vLLM does not deduplicate), or None."""

    allocation: int
    block: int
    page: int
    key: str
    parent: str | None
    tokens: tuple[int, ...]
    duplicate_of: int | None


@dataclass(frozen=True, slots=True)
class BlockEvicted:
    """A page about to be taken from the free queue's head for ``allocation`` still held a
    cached block: the block left the cache (lazy eviction; vLLM's ``BlockRemoved``).
    ``still_cached``: another page caches the same key."""

    allocation: int
    block: int
    page: int
    key: str
    tokens: tuple[int, ...]
    still_cached: bool


@dataclass(frozen=True, slots=True)
class PageUnqueued:
    """An acquire matched the cached block on ``page`` while the page had ref 0: the page
    left the free queue (vLLM's ``BlockPool.touch``)."""

    allocation: int
    block: int
    page: int


@dataclass(frozen=True, slots=True)
class PagesQueued:
    """A release's pages that reached ref 0 joined the free queue: ``head`` (holding no
    cached block; ``head[0]`` is the queue's head now) and ``tail`` (holding one; ``tail[-1]``
    is its tail now), both in reverse block order (vLLM's ``prepend_n`` and ``append_n``)."""

    allocation: int
    head: tuple[int, ...]
    tail: tuple[int, ...]


HASH_EVENTS: tuple[type, ...] = (BlockCached, BlockEvicted, PageUnqueued, PagesQueued)
"""The event classes only the hash-block cache reports."""


FINE_EVENTS: tuple[type, ...] = (Walked, HeapPushed, HeapPopped, HeapRemoved, HeapSwapped, Failed, Ticked)
"""The event classes a cache reports only while watched."""

Event = (
    OpStarted | Matched | RefTaken | RefDropped | Touched | CandidateAdded | CandidateRemoved
    | PagesTaken | Evicted | NodeCreated | Deduplicated | PagesFreed | Released
    | Walked | HeapPushed | HeapPopped | HeapRemoved | HeapSwapped | Failed | Ticked
    | BlockCached | BlockEvicted | PageUnqueued | PagesQueued
)
"""Any event a kvcore cache reports: every class of :data:`EVENT_TYPES`."""

EVENT_TYPES: dict[str, type] = {
    cls.__name__: cls
    for cls in (OpStarted, Matched, RefTaken, RefDropped, Touched, CandidateAdded, CandidateRemoved,
                PagesTaken, Evicted, NodeCreated, Deduplicated, PagesFreed, Released) + FINE_EVENTS + HASH_EVENTS
}
"""Every event class by name (what :func:`event_from_dict` reads back)."""


def event_to_dict(event: Event) -> dict:
    """A JSON-able dict with a ``type`` field naming the event class."""
    d = asdict(event)
    d["type"] = type(event).__name__
    return d


def event_from_dict(d: dict) -> Event:
    """Inverse of :func:`event_to_dict`; lists become tuples."""
    cls = EVENT_TYPES[d["type"]]
    kwargs = {}
    for f in fields(cls):
        v = d[f.name]
        kwargs[f.name] = tuple(v) if isinstance(v, list) else v
    return cls(**kwargs)


class Tap(list):
    """The event list of a watched cache: every append also goes to ``callback`` at once."""

    __slots__ = ("callback",)

    def __init__(self, callback) -> None:
        super().__init__()
        self.callback = callback

    def append(self, event) -> None:
        list.append(self, event)
        self.callback(event)
