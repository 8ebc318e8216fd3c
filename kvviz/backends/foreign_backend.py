# SPDX-License-Identifier: Apache-2.0
"""What the backends that drive a foreign cache (shortfin, vLLM, SGLang) do alike: keep their
allocations by name, call into the engine (a crash of the real cache becomes the backend's
error), refuse misuse with kvcore's messages before the engine is called, read the events two
states show, and refuse configs the engine cannot run.

Imports kvcore and :mod:`kvviz.backends` only, never an engine: each backend brings its own.
"""

from __future__ import annotations

from bisect import bisect_left
from operator import attrgetter

from kvcore import BasePagedAttentionCache, InvalidOperation, KVCacheError, Snapshot
from kvcore import events as ev
from kvcore.base import _describe_tokens, int_tokens

from kvviz.backends import (BackendError, Call, ConfigLike, OpLike, UnknownAllocation, already_live, extended_tokens,
                            unknown_op)

__all__ = ["OP_EVENTS", "EngineCalls", "RowsById", "acquisition", "check_config", "extension", "op_events",
           "publish_tokens"]

# kvcore's extra-slot check, so every backend refuses the same values with the same message
# (a copy once drifted: it accepted extra=True, which kvcore refuses).
_check_extra = BasePagedAttentionCache._check_extra


class EngineCalls:
    """The part of a foreign backend that keeps its allocations and calls its engine.

    A subclass sets ``engine`` (how messages name it, e.g. ``"vLLM"``), ``version``,
    ``error`` (the :class:`~kvcore.KVCacheError` a crash becomes) and ``passes`` (what the
    engine raises that is no crash: re-raised as it is, after the watcher hears of it), and
    calls :meth:`_start` before its first call."""

    engine: str
    version: str
    error: type[KVCacheError]
    passes: tuple[type[BaseException], ...] = ()

    def _start(self) -> None:
        """A fresh backend's bookkeeping: no allocations, stats at 0, no events, no watcher."""
        self._handles: dict = {}
        self._next_allocation_id = 0
        self._stats = dict(lookups=0, lookup_tokens=0, hit_tokens=0, evictions=0, dedups=0)
        self._events: list = []
        self._watch = None  # watch(): a callback told of each engine call as it returns

    def watch(self, callback) -> None:
        """Tell ``callback`` of each call into the engine as it returns (a
        :class:`~kvviz.backends.Call`); while it runs, ``snapshot()`` reads the engine's state
        right then. The reader sees only between calls, so these are the finest sub-steps."""
        self._watch = callback

    def live_names(self) -> list[str]:
        """Names of live allocations, in creation order."""
        return [h.name for h in sorted(self._handles.values(), key=lambda h: h.id)]

    def handle(self, name: str):
        """The live allocation called ``name``; UnknownAllocation if there is none."""
        handle = self._handles.get(name)
        if handle is None:
            raise UnknownAllocation.named(name, self.live_names())
        return handle

    def take_events(self) -> tuple:
        """Events since the last call, read off the states before and after each op."""
        events, self._events = tuple(self._events), []
        return events

    def _op(self, op: OpLike):
        """What runs ``op``: the backend's ``_acquire``, ``_publish`` or ``_extend`` of it, or
        its ``_release`` of its name; kvcore's refusal for any other kind."""
        ops = {"acquire": lambda: self._acquire(op), "publish": lambda: self._publish(op),
               "extend": lambda: self._extend(op), "release": lambda: self._release(op.name)}
        if op.kind not in ops:
            raise unknown_op(op.kind)
        return ops[op.kind]

    def _call(self, what: str, method, *args, **kwargs):
        """Call an engine method; anything it raises but ``passes`` is a crash of the real cache."""
        try:
            result = method(*args, **kwargs)
        except self.passes as exc:
            if self._watch is not None:
                passed = next(cls for cls in self.passes if isinstance(exc, cls))
                self._watch(Call(method.__name__, f"{what}: it raised {passed.__name__}"))
            raise
        except Exception as exc:
            raise self.error(f"{what}: {self.engine} {self.version}'s {method.__name__} raised "
                             f"{type(exc).__name__}: {exc}") from exc
        if self._watch is not None:
            self._watch(Call(method.__name__, what))
        return result


def acquisition(op: OpLike, live) -> tuple:
    """kvcore's rules for an acquire ``op`` while ``live`` names are allocated: integer
    tokens, a valid ``extra``, a name not live. Its tokens."""
    tokens = int_tokens(() if op.tokens is None else op.tokens, f"acquire {op.name}")
    _check_extra(op.extra, "acquire")
    if op.name in live:
        raise already_live(op.name)
    return tokens


def publish_tokens(name: str, own: tuple, tokens, pages: int, tokens_per_page: int) -> tuple:
    """kvcore's rules for a publish's ``tokens`` on an allocation holding ``own`` in ``pages``
    pages: integers; agree with ``own`` on their common length; longer must fit. The tokens."""
    tokens = int_tokens(tokens, f"publish {name}")
    common = min(len(tokens), len(own))
    if tokens[:common] != own[:common]:
        first = next(i for i in range(common) if tokens[i] != own[i])
        raise InvalidOperation(f"publish {name}: tokens disagree with the allocation's at position {first} "
                               f"(allocation has {own[first]}, publish has {tokens[first]})")
    capacity = pages * tokens_per_page
    if len(tokens) > len(own) and len(tokens) > capacity:
        raise InvalidOperation(f"publish {name}: {len(tokens)} tokens do not fit in its {pages} "
                               f"pages ({capacity} slots); extend it first")
    return tokens


def extension(own: tuple, op: OpLike) -> tuple:
    """kvcore's rules for an extend ``op`` of an allocation holding ``own``: integer tokens, a
    valid ``extra``, and tokens that start with ``own``. The tokens it asks for."""
    new_tokens = extended_tokens(own, op)
    _check_extra(op.extra, "extend")
    if len(new_tokens) < len(own) or new_tokens[:len(own)] != own:
        raise InvalidOperation(
            f"extend {op.name}: the new tokens must start with the allocation's {len(own)} tokens "
            f"{_describe_tokens(own)}, got {len(new_tokens)} tokens {_describe_tokens(new_tokens)}")
    return new_tokens


OP_EVENTS = frozenset(cls.__name__ for cls in (ev.OpStarted, ev.PagesTaken, ev.Released))
"""What :func:`op_events` reports: all an engine that emits no per-move events shows."""


def op_events(kind: str, name: str, before: Snapshot, after: Snapshot) -> list:
    """The kvcore events two states show: the op, the pages it took, its release (for an
    engine that reports no per-move events)."""
    alloc = after.allocation_named(name) or before.allocation_named(name)
    alloc_id = alloc.id if alloc is not None else -1
    out: list = [ev.OpStarted(kind, alloc_id, after.clock)]
    old, new = before.allocation_named(name), after.allocation_named(name)
    if new is not None:
        taken = tuple(p for p in new.pages if old is None or p not in old.pages)
        if taken:
            out.append(ev.PagesTaken(alloc_id, taken))
    if kind == "release" and old is not None and new is None:
        out.append(ev.Released(alloc_id))
    return out


def check_config(backend: str, config: ConfigLike, snapshot: Snapshot | None, *, kind: str, wrong_kind: str,
                 wrong_policy: str, least_pages: int = 1) -> None:
    """Refuse, with a one-line :class:`~kvviz.backends.BackendError`, what ``backend``'s engine
    cannot run: a snapshot to restore, a cache design other than ``kind``, a policy other than
    LRU, sizes that are not integers of at least ``least_pages`` pages and 1 token a page.
    ``wrong_kind`` and ``wrong_policy`` say what to use instead; ``{kind!r}`` and ``{policy!r}``
    in them stand for the config's."""
    if snapshot is not None:
        raise BackendError(f"the {backend} backend cannot restore a snapshot; replay from frame 0")
    if config.kind != kind:
        raise BackendError(wrong_kind.format(kind=config.kind))
    if config.policy != "lru":
        raise BackendError(wrong_policy.format(policy=config.policy))
    for what, value, least in (("pages", config.pages, least_pages), ("tokens_per_page", config.tokens_per_page, 1)):
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise BackendError(f"the {backend} backend needs {what} to be an integer >= {least}, got {value!r}")


_id_of = attrgetter("id")


class RowsById:
    """Rows that carry an ``id`` (a snapshot's nodes or blocks), kept in a list sorted by it,
    for the backends that update a snapshot's rows from what an op changed: a row is found,
    replaced, added or dropped in O(log n) plus a move of pointers in C, and the snapshot's
    tuple of them is one copy in C (``tuple(rows.rows)``)."""

    __slots__ = ("rows",)

    def __init__(self, rows) -> None:
        self.rows = list(rows)  # sorted by id

    def _place(self, row_id: int) -> int:
        return bisect_left(self.rows, row_id, key=_id_of)

    def get(self, row_id: int):
        """The row with this id, or None."""
        rows, i = self.rows, self._place(row_id)
        return rows[i] if i < len(rows) and rows[i].id == row_id else None

    def put(self, row) -> None:
        """Add ``row``, or replace the row with its id."""
        rows, i = self.rows, self._place(row.id)
        if i < len(rows) and rows[i].id == row.id:
            rows[i] = row
        else:
            rows.insert(i, row)

    def drop(self, row_id: int) -> None:
        """Drop the row with this id (KeyError if there is none)."""
        rows, i = self.rows, self._place(row_id)
        if i == len(rows) or rows[i].id != row_id:
            raise KeyError(row_id)
        del rows[i]
