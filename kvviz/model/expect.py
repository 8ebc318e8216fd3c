"""Evaluation of ``expect`` lines: every demo is also a test."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .scenario import Expect

if TYPE_CHECKING:  # pragma: no cover - a type only: the session imports this module
    from .session import Frame


@dataclass(frozen=True, slots=True)
class ExpectResult:
    """An ``expect`` line and whether it held at its step."""

    expect: Expect
    ok: bool
    message: str

ERROR_KINDS = {"alloc": "CacheAllocationFailure", "invalid": "InvalidOperation"}


def evaluate(expect: Expect, frame: "Frame") -> ExpectResult:
    """Check one expect line against the frame of the step it follows."""
    try:
        actual = _actual(expect, frame)
    except LookupError as exc:
        return ExpectResult(expect, False, str(exc))
    wanted = _wanted(expect)
    ok = actual == wanted
    message = "ok" if ok else f"expected {_show(expect, wanted)}, got {_show(expect, actual)}"
    return ExpectResult(expect, ok, message)


def _wanted(x: Expect):
    if x.kind == "ok":
        return None
    if x.kind == "fail":
        return ERROR_KINDS.get(x.detail or "", "any failure")
    if x.kind in ("pages", "evicted"):
        return tuple(x.values) if x.kind == "pages" else tuple(sorted(x.values))
    if x.kind == "live":
        return tuple(sorted(_names(x)))
    return x.values[-1]


def _names(x: Expect) -> list[str]:
    return list(x.names)


def _allocation(frame: "Frame", name: str):
    a = frame.snapshot.allocation_named(name)
    if a is None:
        live = ", ".join(a.label for a in frame.snapshot.allocations) or "none"
        raise LookupError(f"expected allocation {name!r} to be live, but it is not (live: {live})")
    return a


def _actual(x: Expect, frame: "Frame"):
    snap = frame.snapshot
    kind = x.kind
    if kind == "ok":
        return None if frame.error is None else frame.error.kind
    if kind == "fail":
        if frame.error is None:
            return "success"
        if x.detail in ERROR_KINDS:
            return frame.error.kind
        return "any failure"
    if kind == "free":
        return snap.free_count
    if kind == "cached":
        return snap.cached_count
    if kind == "evictable":
        return snap.evictable_count
    if kind == "owned":
        return snap.owned_count
    if kind == "candidates":
        return len(snap.heap)
    if kind == "victim":
        return snap.node(snap.heap[0]).page if snap.heap else None
    if kind == "hit":
        return _allocation(frame, x.name).hit_tokens
    if kind == "pages":
        return _allocation(frame, x.name).pages
    if kind == "published":
        return _allocation(frame, x.name).published
    if kind == "evicted":
        return tuple(sorted(frame.diff.pages_evicted))
    if kind == "evictions":
        return len(frame.diff.nodes_evicted)
    if kind == "ref":
        node = snap.node_for_page(x.values[0])
        if node is None:
            raise LookupError(f"expected page {x.values[0]} to be cached in a trie node, but it is "
                              f"{snap.pages[x.values[0]].state if 0 <= x.values[0] < len(snap.pages) else 'not a page'}")
        return node.ref
    if kind == "live":
        return tuple(sorted(a.label for a in snap.allocations))
    if kind == "violations":
        return len(frame.violations)
    raise LookupError(f"unknown expect kind {kind!r}")


def _show(x: Expect, value) -> str:
    if x.kind == "ok":
        return "success" if value is None else f"failure {value}"
    if x.kind == "fail":
        return value
    if isinstance(value, tuple):
        return f"{x.kind} [{' '.join(map(str, value))}]"
    return f"{x.kind} {value}"
