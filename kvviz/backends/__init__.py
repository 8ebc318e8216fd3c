# SPDX-License-Identifier: Apache-2.0
"""Backends: the caches a session can drive. One declared seam, many caches.

A backend applies scenario ops to one live cache, addressing allocations by their scenario
*name*, and reports state as kvcore snapshots, so every view, diff, export and the invariant
checker work unchanged whatever cache runs underneath. Today: kvcore's caches
(:mod:`.kvcore_backend`), shortfin 3.9.0's trie (:mod:`.shortfin_backend`), vLLM 0.33.0's
``KVCacheManager`` (:mod:`.vllm_backend`) and SGLang 0.5.23's ``RadixCache``
(:mod:`.sglang_backend`), the last two read after each op at the cost of what it changed
(:mod:`.vllm_reader`, :mod:`.sglang_reader`); the registry (:mod:`.registry`) finds a
backend's factory by the name ``--backend`` and bundles use.

**Writing a backend.** Read :class:`Backend` (what a session calls) and
:class:`BackendFactory` (how a session gets one): that is the whole contract. A backend
does not need to inherit from either (they are ``typing.Protocol`` s, checked structurally,
as harlequin's adapters declare theirs); the session never asks ``getattr`` what a backend
can do, it reads the capability properties. The rules a backend keeps:

* **A failed op changes nothing** and raises a :class:`kvcore.KVCacheError`: kvcore's
  ``CacheAllocationFailure`` or ``InvalidOperation`` (:class:`UnknownAllocation` for a name
  that is not live), or an error class of the backend's own that subclasses ``KVCacheError``
  (its name is shown as the frame's error kind). A foreign cache that cannot promise
  "nothing changes" says so through :meth:`Backend.check` or findings; the session flags a
  failed op that changed the snapshot as a violation.
* **Deterministic.** The same ops from the same start give equal snapshots: the session
  rebuilds frames by replaying ops, and bundles are verified by digest.
* **A config the backend cannot run** (a cache kind, policy or size it does not have) is
  refused by the factory with :class:`BackendError`, a one-line message saying what to use
  instead; callers (the CLI, ``kvviz open``) catch only that.

Backends import kvcore and the standard library (and their foreign cache), never click, the
UI or :mod:`kvviz.core.session` (the session drives backends, not the reverse); ops and
configs are declared here structurally (:class:`OpLike`, :class:`ConfigLike`) so a backend
needs nothing from :mod:`kvviz.model`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from kvcore import InvalidOperation, Snapshot, Violation
from kvcore.base import int_tokens
from kvcore.events import EVENT_TYPES
from kvcore.snapshot import KINDS

__all__ = [
    "ALL_EVENTS", "BASE", "HASH", "OPS", "TRIE", "Backend", "BackendError", "BackendFactory", "BackendUnavailable",
    "Call", "ConfigLike", "OpLike", "UnknownAllocation", "already_live", "extended_tokens", "unknown_op",
]

OPS = ("acquire", "publish", "extend", "release")
"""The op kinds every backend applies."""

ALL_EVENTS: frozenset[str] = frozenset(EVENT_TYPES)
"""Every kvcore event kind (class names of :mod:`kvcore.events`): what kvcore observes."""

TRIE, BASE, HASH = KINDS
"""kvcore's cache kinds by name, from its one list (:data:`kvcore.snapshot.KINDS`), for a backend
that branches on one (the layers above name them through :mod:`kvviz.core.designs`, which a
backend may not import)."""


# -- errors -----------------------------------------------------------------------------------


class BackendError(ValueError):
    """A backend that does not exist, is not installed, or cannot run this cache config.

    The message is one line for people: what was asked, why not, what to do instead."""


class BackendUnavailable(BackendError):
    """The backend's package is not installed; the message says how to install it."""


class UnknownAllocation(InvalidOperation):
    """An op named an allocation that is not live (never acquired, or released).

    Shown as ``InvalidOperation`` in frames: to a user it is one more misuse of the cache."""

    @classmethod
    def named(cls, name: str, live: list[str]) -> "UnknownAllocation":
        """The error for ``name`` when ``live`` are the names of the live allocations."""
        return cls(f"no live allocation named {name!r} (live allocations: {', '.join(live) or 'none'})")


def already_live(name: str) -> InvalidOperation:
    """The error for an acquire whose name is already a live allocation's (one message for
    every backend, so both sides of a diff fail alike)."""
    return InvalidOperation(f"acquire {name}: an allocation named {name!r} is already live; "
                            f"release it first or pick another name")


def unknown_op(kind: str) -> InvalidOperation:
    """The error for an op kind that is not one of :data:`OPS`."""
    return InvalidOperation(f"unknown op {kind!r} (expected {', '.join(OPS[:-1])} or {OPS[-1]})")


def extended_tokens(own: tuple[int, ...], op: "OpLike") -> tuple[int, ...]:
    """The tokens an extend ``op`` asks an allocation holding ``own`` to hold: the op's, or
    ``own`` followed by the op's with ``append``. Tokens that are not integers are kvcore's
    InvalidOperation (``kvcore.base.int_tokens``), numbered as the op spells them."""
    tokens = int_tokens(() if op.tokens is None else op.tokens, f"extend {op.name}")
    return own + tokens if op.append else tokens


@dataclass(frozen=True, slots=True)
class Call:
    """What a backend whose ``substeps`` is ``"calls"`` reports to :meth:`Backend.watch`: one
    call into its foreign cache, by method name, and what the backend was doing (``what``)."""

    method: str
    what: str = ""


# -- what a backend is given ------------------------------------------------------------------


class OpLike(Protocol):
    """One op, as :class:`kvviz.core.scenario.Op` carries it (declared here so backends need
    nothing from the model).

    ``kind`` is one of :data:`OPS`; ``tokens`` is None for a release and for a publish
    without tokens; ``extra`` is the extra token slots of an acquire or extend; with
    ``append`` (extend only) the tokens are added to the allocation's instead of replacing
    them; ``priority`` (acquire only, 0 by default) is what kvcore's ``priority`` policy
    evicts by."""

    @property
    def kind(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def tokens(self) -> tuple[int, ...] | None: ...
    @property
    def extra(self) -> int: ...
    @property
    def append(self) -> bool: ...
    @property
    def priority(self) -> int: ...


class ConfigLike(Protocol):
    """A cache config, as :class:`kvviz.core.scenario.CacheConfig` carries it."""

    @property
    def kind(self) -> str: ...
    @property
    def pages(self) -> int: ...
    @property
    def tokens_per_page(self) -> int: ...
    @property
    def policy(self) -> str: ...


# -- the seam ---------------------------------------------------------------------------------


@runtime_checkable
class Backend(Protocol):
    """One live cache driven by scenario ops: everything a session calls.

    Capabilities (read-only; a class attribute is enough):

    ``name``, ``version``, ``cache_name``
        What the backend is, for reports and bundles (``"kvcore"``, ``"0.1.0"``), and the
        class of the cache it drives, as reports name it (``"TriePagedAttentionCache"``).
    ``can_restore``
        True when the factory can build this backend from a snapshot. The session then keeps
        a snapshot every K frames and rebuilds any frame from the nearest; when False it
        keeps frame 0 only and replays from there (correct, slower on long timelines).
    ``observes``
        The kvcore event kinds (names in :data:`ALL_EVENTS`) that :meth:`take_events`
        reports. Narration, why-queries and sub-steps are built from events, one sub-step
        per event: a view of a backend without, say, ``CandidateAdded`` says it cannot know
        when nodes entered the heap instead of showing nothing.

    ``substeps``
        What :meth:`watch` reports inside an op: ``"events"`` (kvcore: every move, fine
        events included, with the cache's real state at each) or ``"calls"`` (a foreign
        cache observed between its calls: one :class:`Call` per call).
    ``pseudocode``
        The code the sub-step pane lights for this backend's sub-steps: a
        :class:`kvviz.backends.code.Code` (its calls, one line each, and the op ->
        algorithm map), or None when its sub-steps are the cache design's own events (kvcore:
        the design's code, :attr:`kvviz.core.designs.Design.code`).
    ``known_issues``
        ``{code: issue}``: the known departures from kvcore :meth:`take_findings` may report
        (each with its ``code``, ``kind``, ``title`` and ``source``), for reports to list; ``{}``
        for kvcore.

    Complexity: :meth:`apply` is the cache's own cost; :meth:`snapshot` is called once per
    op and should be O(changed rows) (kvcore shares unchanged rows between snapshots).
    """

    @property
    def name(self) -> str: ...
    @property
    def version(self) -> str: ...
    @property
    def cache_name(self) -> str: ...
    @property
    def can_restore(self) -> bool: ...
    @property
    def observes(self) -> frozenset[str]: ...

    def apply(self, op: OpLike) -> None:
        """Run ``op``; on failure raise a :class:`kvcore.KVCacheError` (see the module's rules)."""

    @property
    def substeps(self) -> str: ...
    @property
    def pseudocode(self): ...
    @property
    def known_issues(self) -> Mapping: ...

    def watch(self, callback) -> None:
        """Pass what happens inside the next ops to ``callback(event)`` as it happens; while
        the callback runs, :meth:`snapshot` is the state right then. ``None`` stops watching.
        The sub-steps of :mod:`kvviz.core.substeps` are made of this; a callback may raise
        to abandon the op half-done, on a backend that is then thrown away."""

    def take_events(self) -> tuple:
        """The kvcore events of the ops since the last call (then forgets them)."""

    def snapshot(self) -> Snapshot:
        """The cache's state now, in kvcore's snapshot format."""

    def live_names(self) -> list[str]:
        """Names of the live allocations, in creation order."""

    def check(self, snapshot: Snapshot) -> list[Violation]:
        """the invariant violations (docs/invariants.md) of ``snapshot`` (a state this backend produced), in
        the backend's own terms ([] when healthy). kvcore: :func:`kvcore.check_snapshot`;
        shortfin counts one reference per allocation, on its deepest node."""

    def take_findings(self) -> tuple:
        """Known departures from kvcore seen since the last call (a foreign cache's known
        defects, listed in :attr:`known_issues`); () for kvcore."""


@runtime_checkable
class BackendFactory(Protocol):
    """How a session gets backends: ``factory(config, None)`` is a fresh, empty cache for
    ``config``; ``factory(config, snapshot)`` is one restored from ``snapshot`` (a state one
    of its backends produced; asked only when the backend says ``can_restore``).

    Raises :class:`BackendError` for a config the backend cannot run, on every call, before
    anything is built. A plain function with this signature is a factory.
    """

    def __call__(self, config: ConfigLike, snapshot: Snapshot | None) -> Backend: ...

