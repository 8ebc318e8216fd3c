# SPDX-License-Identifier: Apache-2.0
"""What happened inside one operation, in order.

Caches append these only while recording (``cache.record_events(True)``); when nobody
listens the hot path skips building them entirely. Every event is a frozen dataclass of
ints, strings and tuples, JSON-able through :func:`event_to_dict`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields


@dataclass(frozen=True, slots=True)
class OpStarted:
    """An operation began at logical time ``tick``."""

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


Event = (
    OpStarted | Matched | RefTaken | RefDropped | Touched | CandidateAdded | CandidateRemoved
    | PagesTaken | Evicted | NodeCreated | Deduplicated | PagesFreed | Released
)

EVENT_TYPES: dict[str, type] = {
    cls.__name__: cls
    for cls in (OpStarted, Matched, RefTaken, RefDropped, Touched, CandidateAdded, CandidateRemoved,
                PagesTaken, Evicted, NodeCreated, Deduplicated, PagesFreed, Released)
}


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
