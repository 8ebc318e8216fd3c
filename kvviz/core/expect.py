# SPDX-License-Identifier: Apache-2.0
"""``expect`` lines, one table: for each kind, how it is written (its argument slots, usage
and meaning, which the parser, the formatter and the help read), what it checks in a frame
and how values are shown in a failure message. A new kind is one entry of
:data:`EXPECT_KINDS`.

The :class:`Expect` value lives here, with its table, and a frame is read through
:class:`Observed`: this module imports neither the scenario package nor the session (not even
for types), so the parser and the session both stand on it and no import runs in a circle.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kvcore import Snapshot

from kvviz.core.designs import HASH, design_of
from kvviz.core.snapshot_diff import Diff
from kvviz.core.free_queue import free_page_count, next_victim, unreachable_blocks

__all__ = ["ERROR_KINDS", "EXPECT_KINDS", "FAILURE_SPELLINGS", "SLOTS", "Expect", "ExpectKind", "ExpectResult",
           "Observed", "abbreviate", "abbreviate_at", "evaluate", "first_difference"]


def applies(kinds: tuple[str, ...] | None, kind: str) -> bool:
    """Whether a line scoped to ``kinds`` (None: every kind) applies to a cache of ``kind``."""
    return kinds is None or kind in kinds


@dataclass(frozen=True)
class Expect:
    """One ``expect`` line: an assertion about the state after its step's op.

    Layout by ``kind`` (see :data:`kvviz.core.expect.EXPECT_KINDS`):

    - ``ok``: nothing else. ``fail``: ``detail`` is None, 'alloc' or 'invalid'.
    - ``free``, ``cached``, ``evictable``, ``owned``, ``candidates``, ``evictions``,
      ``violations``: ``values == (N,)``. ``victim``: ``values == (P,)``.
    - ``hit``, ``published``: ``name`` and ``values == (N,)``.
    - ``pages``: ``name`` and ``values`` = the block table (maybe empty).
    - ``evicted``: ``values`` = the pages (at least one). ``ref``: ``values == (P, N)``.
    - ``live``: ``names`` = the allocation names (maybe empty).

    ``kinds`` scopes the line to cache kinds (``[trie] expect hit r2 8``: only a trie run
    checks it); None means every kind. ``line`` and ``text`` (canonical form, the scope tag
    included) do not take part in equality.
    """

    kind: str
    name: str | None = None
    values: tuple[int, ...] = ()
    detail: str | None = None
    line: int = field(default=0, compare=False)
    text: str = field(default="", compare=False)
    names: tuple[str, ...] = ()
    kinds: tuple[str, ...] | None = None

    def applies_to(self, kind: str) -> bool:
        """Whether a run on a cache of ``kind`` ('trie', 'base', 'hash') should check this line."""
        return applies(self.kinds, kind)


class Observed(Protocol):
    """What an expect line reads of a frame (:class:`kvviz.core.session.Frame` is one): the
    state after the op, what changed, the invariant violations, and the op's error if it
    failed (an object with ``kind``, the error class name, and ``message``; None on success)."""

    @property
    def snapshot(self) -> Snapshot: ...

    @property
    def diff(self) -> Diff: ...

    @property
    def violations(self) -> tuple: ...

    @property
    def error(self) -> Any: ...


SLOTS = ("name", "count", "page", "pages", "pages+", "names", "failure")
"""The argument slots an expect kind may have, in the order it lists them:

``name`` an allocation name (``Expect.name``); ``count`` / ``page`` one whole number (appended
to ``Expect.values``); ``pages`` a list of page numbers and ranges, maybe empty, ``pages+`` at
least one (``Expect.values``); ``names`` allocation names, maybe none (``Expect.names``);
``failure`` an optional failure kind (``Expect.detail``)."""

ERROR_KINDS = {"alloc": "CacheAllocationFailure", "invalid": "InvalidOperation"}
"""The failure kinds ``expect fail`` may name, and the kvcore error each stands for."""

FAILURE_SPELLINGS = {
    "alloc": "alloc", "allocation": "alloc", "cacheallocationfailure": "alloc",
    "invalid": "invalid", "invalidoperation": "invalid",
}
"""How a failure kind may be written (lower case) and the canonical detail it means."""


@dataclass(frozen=True, slots=True)
class ExpectResult:
    """An ``expect`` line and whether it held at its step."""

    expect: Expect
    ok: bool
    message: str


def abbreviate(values: Sequence[Any], head: int = 8, tail: int = 3) -> str:
    """``values`` joined by spaces; a long list shows its first ``head`` and last ``tail``
    with a count (``0 1 … 999999 (1,000,000 in all)``), so a message stays one short line."""
    if len(values) <= head + tail + 1:
        return " ".join(map(str, values))
    shown = " ".join(map(str, values[:head])) + " … " + " ".join(map(str, values[-tail:]))
    return f"{shown} ({len(values):,} in all)"


def first_difference(a: Sequence[Any], b: Sequence[Any]) -> int | None:
    """The first position where two lists differ (the shorter one's length when one is the
    other's start), or None when they are equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def abbreviate_at(values: Sequence[Any], at: int, head: int = 8, tail: int = 3, around: int = 3) -> str:
    """``values`` as :func:`abbreviate` writes them, except that a long list whose position
    ``at`` would fall in the part left out shows ``around`` values either side of it
    instead: ``0 … 17 18 19 20 21 22 23 … 39 (40 in all)``. A failed expect must show where
    the lists differ, not only their ends. A list ending in ``"…"`` (a queue cut after the
    pages an expect listed) is open: it gets no count."""
    open_ended = bool(values) and values[-1] == "…"
    listed = values[:-1] if open_ended else values
    if len(listed) <= head + tail + 1 or at < head - 1 or at >= len(listed) - tail:
        text = abbreviate(listed, head, tail)
        if open_ended:
            text = text.rsplit(" (", 1)[0]  # no "(N in all)": N is not the queue's length
    else:
        start, end = at - around, min(len(listed), at + around + 1)
        text = f"{listed[0]} … " + " ".join(map(str, listed[start:end])) + (f" … {listed[-1]}" if end < len(listed) else "")
        if not open_ended:
            text += f" ({len(listed):,} in all)"
    return text + " …" if open_ended else text


# -- the pieces entries are made of ----------------------------------------------------------


def _last_value(expect: Expect) -> Any:
    return expect.values[-1]


def _show_value(kind: str, value: Any) -> str:
    if isinstance(value, tuple):
        return f"{kind} [{abbreviate(value)}]"
    return f"{kind} {value}"


def _allocation(frame: Observed, name: str | None):
    allocation = frame.snapshot.allocation_named(name)
    if allocation is None:
        live = [a.label for a in frame.snapshot.allocations]
        listing = ", ".join(live[:10]) + (f", … ({len(live):,} in all)" if len(live) > 10 else "") if live else "none"
        raise LookupError(f"expected allocation {name!r} to be live, but it is not (live: {listing})")
    return allocation


def _ok_actual(expect: Expect, frame: Observed) -> Any:
    return None if frame.error is None else frame.error.kind


def _fail_actual(expect: Expect, frame: Observed) -> Any:
    if frame.error is None:
        return "success"
    return frame.error.kind if expect.detail in ERROR_KINDS else "any failure"


def _fail_wanted(expect: Expect) -> Any:
    return ERROR_KINDS.get(expect.detail or "", "any failure")


def _victim(expect: Expect, frame: Observed) -> Any:
    snapshot = frame.snapshot
    if design_of(snapshot).lazy:  # no heap: the free queue's first page holding a cached block
        block = next_victim(snapshot)
        return None if block is None else block.page
    return snapshot.node(snapshot.heap[0]).page if snapshot.heap else None


def _ref(expect: Expect, frame: Observed) -> Any:
    snapshot, page = frame.snapshot, expect.values[0]
    if design_of(snapshot).lazy:  # refs are the pages' own (vLLM's ref_cnt), not a node's
        if snapshot.block_for_page(page) is None:
            state = snapshot.pages[page].state if 0 <= page < len(snapshot.pages) else "not a page"
            raise LookupError(f"expected page {page} to hold a cached block, but it is {state}")
        return snapshot.pages[page].ref
    node = snapshot.node_for_page(page)
    if node is None:
        state = snapshot.pages[page].state if 0 <= page < len(snapshot.pages) else "not a page"
        raise LookupError(f"expected page {page} to be cached in a trie node, but it is {state}")
    return node.ref


def _queue(expect: Expect, frame: Observed) -> Any:
    free = frame.snapshot.free
    if len(free) > len(expect.values):  # a huge pool's queue is not listed to say it is longer
        return tuple(free[:len(expect.values) + 1]) + ("…",)
    return tuple(free)


_NO_HEAP = ("a hash cache has no heap and so no candidates: every ref-0 page waits in the free queue "
            "and is taken in its order (write expect evictable N, expect victim P or expect queue P ...)")


@dataclass(frozen=True)
class ExpectKind:
    """One kind of ``expect`` line: how it is written, what it means and how it is checked.

    ``slots`` (see :data:`SLOTS`) is the parse rule and the layout of its :class:`Expect`;
    ``actual(expect, frame)`` reads the frame (a LookupError is a failure with its message);
    ``wanted(expect)`` is what the line asks for; the line holds when the two are equal, and
    ``show(kind, value)`` writes either for a failure message. ``not_for`` maps the cache
    kinds the line means nothing on to why: the parser refuses such a line where it would be
    checked, and :func:`evaluate` fails it with that reason (a line typed in the command bar).
    """

    slots: tuple[str, ...]
    usage: str
    meaning: str
    actual: Callable[[Expect, Observed], Any]
    wanted: Callable[[Expect], Any] = _last_value
    show: Callable[[str, Any], str] = _show_value
    not_for: Mapping[str, str] = field(default_factory=dict)


def _count(usage: str, meaning: str, read: Callable[[Observed], Any], **more) -> ExpectKind:
    """A kind that compares one number ``read`` from the frame."""
    return ExpectKind(("count",), usage, meaning, lambda expect, frame: read(frame), **more)


def _of_allocation(usage: str, meaning: str, slot: str, read: Callable[[Any], Any], wanted=_last_value) -> ExpectKind:
    """A kind about one named allocation: ``read`` takes its snapshot row."""
    return ExpectKind(("name", slot), usage, meaning,
                      lambda expect, frame: read(_allocation(frame, expect.name)), wanted)


EXPECT_KINDS: dict[str, ExpectKind] = {
    "ok": ExpectKind((), "expect ok", "the op succeeded", _ok_actual, lambda expect: None,
                     lambda kind, value: "success" if value is None else f"failure {value}"),
    "fail": ExpectKind(("failure",), "expect fail [alloc|invalid]",
                       "the op failed (with this error) and changed nothing", _fail_actual, _fail_wanted,
                       lambda kind, value: value),
    "free": _count("expect free N", "N pages are free: on the free list (hash: in the free queue, holding no "
                   "cached block)", lambda frame: free_page_count(frame.snapshot)),
    "cached": _count("expect cached N", "N pages are cached, referenced or evictable: each in a trie node (hash: "
                     "each holding a cached block); the pool legend's cached N", lambda frame: frame.snapshot.cached_count),
    "evictable": _count("expect evictable N", "N cached pages have ref 0: eviction can reach them (hash: queued, "
                        "the block leaves when its page is taken)", lambda frame: frame.snapshot.evictable_count),
    "owned": _count("expect owned N", "N pages are in allocations' unpublished tails",
                    lambda frame: frame.snapshot.owned_count),
    "candidates": _count("expect candidates N", "the heap holds N eviction candidates (childless ref-0 nodes), "
                         "whatever the policy (not on a hash cache: it has no heap)",
                         lambda frame: len(frame.snapshot.heap), not_for={HASH: _NO_HEAP}),
    "victim": ExpectKind(("page",), "expect victim P", "page P is the next eviction victim: the heap's top (hash: "
                         "the first page in the free queue holding a cached block)", _victim,
                         show=lambda kind, value: "no victim (nothing is evictable)" if value is None
                         else f"victim {value}"),
    "queue": ExpectKind(("pages",), "expect queue [P ...]", "the free list, in the order pages are taken, is "
                        "exactly these pages (hash: the free queue, head first)", _queue,
                        lambda expect: tuple(expect.values)),
    "hit": _of_allocation("expect hit NAME N", "NAME's acquire matched N tokens in the cache", "count",
                          lambda allocation: allocation.hit_tokens),
    "pages": _of_allocation("expect pages NAME [P ...]", "NAME's block table is exactly these pages", "pages",
                            lambda allocation: tuple(allocation.pages), lambda expect: tuple(expect.values)),
    "published": _of_allocation("expect published NAME N", "NAME has N published pages", "count",
                                lambda allocation: allocation.published),
    "evicted": ExpectKind(("pages+",), "expect evicted P [P ...]", "these pages were evicted by this op",
                          lambda expect, frame: tuple(sorted(frame.diff.pages_evicted)),
                          lambda expect: tuple(sorted(expect.values))),
    "evictions": _count("expect evictions N", "this op evicted N pages (hash: blocks that left the cache as "
                        "their pages were taken)", lambda frame: len(frame.diff.nodes_evicted)),
    "unreachable": _count("expect unreachable N", "N cached blocks are unreachable: an earlier block of their "
                          "chain is no longer cached, so no acquire matches them (a trie has none)",
                          lambda frame: len(unreachable_blocks(frame.snapshot))),
    "ref": ExpectKind(("page", "count"), "expect ref P N", "the trie node holding page P has ref N (hash: the "
                      "page holding a cached block has ref N, vLLM's ref_cnt)", _ref),
    "live": ExpectKind(("names",), "expect live [NAME ...]", "exactly these allocations are live",
                       lambda expect, frame: tuple(sorted(a.label for a in frame.snapshot.allocations)),
                       lambda expect: tuple(sorted(expect.names))),
    "violations": _count("expect violations N", "the cache has N invariant violations",
                         lambda frame: len(frame.violations)),
}
"""Every ``expect`` kind by keyword, in the order the help lists them."""


def evaluate(expect: Expect, frame: Observed) -> ExpectResult:
    """Check one expect line against the frame of the step it follows. O(size of the values
    compared); the message quotes long lists abbreviated."""
    kind = EXPECT_KINDS.get(expect.kind)
    if kind is None:
        return ExpectResult(expect, False, f"unknown expect kind {expect.kind!r}")
    why_not = kind.not_for.get(frame.snapshot.kind)
    if why_not is not None:
        return ExpectResult(expect, False, f"expect {expect.kind} means nothing on a {frame.snapshot.kind} cache: "
                                           f"{why_not}")
    try:
        actual = kind.actual(expect, frame)
    except LookupError as exc:
        return ExpectResult(expect, False, str(exc))
    wanted = kind.wanted(expect)
    ok = actual == wanted
    if ok:
        return ExpectResult(expect, True, "ok")
    at = first_difference(wanted, actual) if isinstance(wanted, tuple) and isinstance(actual, tuple) else None
    if at is not None and max(len(wanted), len(actual)) > 12:  # long lists: show both where they differ
        message = (f"expected {expect.kind} [{abbreviate_at(wanted, at)}], got {expect.kind} "
                   f"[{abbreviate_at(actual, at)}]")
        if at >= 7:  # past the first values shown: say where to look
            message += f" (they differ at position {at}, counting from 0)"
    else:
        message = f"expected {kind.show(expect.kind, wanted)}, got {kind.show(expect.kind, actual)}"
    return ExpectResult(expect, False, message)
