# SPDX-License-Identifier: Apache-2.0
"""The kvcore backend: scenario ops by allocation name onto kvcore's caches (trie, base or hash)."""

from __future__ import annotations

import kvcore
from kvcore import Snapshot, Violation, check_snapshot
from kvcore.incremental import IncrementalChecker

from kvviz.backends import (ALL_EVENTS, HASH, TRIE, BackendError, ConfigLike, OpLike, UnknownAllocation, already_live,
                            extended_tokens, unknown_op)

KINDS = kvcore.snapshot.KINDS
"""The cache kinds kvcore runs (hash: vLLM's design, :class:`kvcore.HashBlockPagedAttentionCache`)."""

POLICIES = kvcore.POLICIES
"""The eviction policies kvcore's trie runs (a base cache never evicts: any policy runs it)."""


class KvcoreBackend:
    """Drives one kvcore cache; allocations are addressed by their scenario names.

    Implements :class:`kvviz.backends.Backend`; :func:`kvcore_backend` is its factory.
    """

    name = "kvcore"
    version = kvcore.__version__
    can_restore = True
    observes = ALL_EVENTS
    substeps = "events"
    pseudocode = None  # its sub-steps are the design's events, lit in the design's code
    known_issues: dict = {}  # kvcore is the reference: it departs from nothing

    def __init__(self, cache):
        self.cache = cache
        cache.record_events(True)
        self._checker = IncrementalChecker()

    @classmethod
    def fresh(cls, kind: str, pages: int, tokens_per_page: int, policy: str = "lru", *,
              recompute_last_token: bool = False) -> "KvcoreBackend":
        """A new empty cache; ``policy`` orders a trie's evictions (a base cache has none; a
        hash cache's free queue is its order, so the factory lets only 'lru' through);
        ``recompute_last_token`` is a hash cache's vLLM rule (kvcore.make_cache)."""
        return cls(kvcore.make_cache(kind, pages, tokens_per_page, policy if kind == TRIE else "lru",
                                     recompute_last_token=recompute_last_token))

    @classmethod
    def from_snapshot(cls, snapshot: Snapshot, *, verify: bool = True,
                      recompute_last_token: bool = False) -> "KvcoreBackend":
        """A live cache restored from ``snapshot`` (allocation names come back with it).

        ``verify=False`` skips the invariant check, for snapshots kvcore itself made. A
        snapshot holds state, not rules: ``recompute_last_token`` comes from the config."""
        return cls(kvcore.restore(snapshot, verify=verify, recompute_last_token=recompute_last_token))

    @property
    def cache_name(self) -> str:
        """The class of the cache driven (``TriePagedAttentionCache``, ...), for reports."""
        return type(self.cache).__name__

    def live_names(self) -> list[str]:
        """Names of live allocations, in creation order."""
        return [a.label for a in sorted(self.cache.allocations.values(), key=lambda a: a.id)]

    def allocation(self, name: str):
        """The live allocation called ``name``; UnknownAllocation if there is none."""
        for a in self.cache.allocations.values():
            if a.label == name:
                return a
        raise UnknownAllocation.named(name, self.live_names())

    def apply(self, op: OpLike) -> None:
        """Run one op; raises a KVCacheError (and changes nothing) if it fails."""
        kind, name, tokens = op.kind, op.name, op.tokens
        if kind == "acquire":
            if any(a.label == name for a in self.cache.allocations.values()):
                raise already_live(name)
            self.cache.acquire_pages_for_tokens(() if tokens is None else tokens, op.extra, name=name,
                                                priority=op.priority)
        elif kind == "publish":
            self.allocation(name).publish_pages_for_tokens(tokens)
        elif kind == "extend":
            allocation = self.allocation(name)
            allocation.extend_allocation(extended_tokens(allocation.tokens, op), op.extra)
        elif kind == "release":
            self.allocation(name).release_pages()
        else:
            raise unknown_op(kind)

    def watch(self, callback) -> None:
        """Report every event, kvcore's fine ones included, to ``callback`` as it happens
        (:meth:`kvcore.TriePagedAttentionCache.watch`); inside it, :meth:`snapshot` is the
        cache's state right then. ``None`` goes back to recording events."""
        if callback is None:
            self.cache.record_events(True)
        else:
            self.cache.watch(callback)

    def take_events(self) -> tuple:
        """Events of the ops since the last call."""
        return self.cache.take_events()

    def snapshot(self) -> Snapshot:
        """The cache's state."""
        return self.cache.snapshot()

    def check(self, snapshot: Snapshot) -> list[Violation]:
        """kvcore's invariant checker on ``snapshot``: what changed since the snapshot checked
        before it, when that one was healthy and from this cache (consecutive frames), else
        the whole snapshot (:class:`kvcore.incremental.IncrementalChecker`; same verdict)."""
        return self._checker.check(snapshot)

    def checked_healthy(self, snapshot: Snapshot) -> None:
        """``snapshot`` (this cache's state now) was found healthy by an earlier check of the
        same timeline: the next :meth:`check` re-checks only what changed since it."""
        self._checker.trust(snapshot)

    def discard(self) -> None:
        """This backend will not be used again (a session's rebuilt frame, left behind by a
        jump elsewhere): its cache is disposed of (``dispose``), so that reference counting frees
        its ~30,000 objects now. Otherwise the cyclic collector found and freed them during
        a later jump, a 50-100 ms pause per backend left behind (benchmarks/bench_trace_ui.py)."""
        self.cache.dispose()

    def check_full(self, snapshot: Snapshot) -> list[Violation]:
        """kvcore's invariant checker on the whole of ``snapshot`` (``kvviz check --full``)."""
        return check_snapshot(snapshot)

    def take_findings(self) -> tuple:
        """kvcore is the reference: it never departs from itself."""
        return ()


def kvcore_backend(config: ConfigLike | None, snapshot: Snapshot | None) -> KvcoreBackend:
    """The default backend factory: a fresh kvcore cache for ``config``, or one restored from
    ``snapshot``. Raises :class:`~kvviz.backends.BackendError` for a config kvcore cannot run."""
    # A hash cache's vLLM rule rides on the config (snapshots hold state, not rules).
    recompute = bool(getattr(config, "recompute_last_token", False)) and getattr(config, "kind", None) == HASH
    if snapshot is not None:  # the session's own keyframes: made by kvcore, already checked
        return KvcoreBackend.from_snapshot(snapshot, verify=False,
                                           recompute_last_token=recompute and snapshot.kind == HASH)
    if config.kind not in KINDS:
        raise BackendError(f"the kvcore backend runs a trie, a base or a hash cache, not {config.kind!r}")
    if config.policy not in POLICIES:
        raise BackendError(f"the kvcore backend evicts by {', '.join(POLICIES[:-1])} or {POLICIES[-1]}, "
                           f"not {config.policy!r}")
    if config.kind == HASH and config.policy != "lru":
        raise BackendError(f"a hash cache evicts in its free queue's order, which is LRU: policy must be lru, "
                           f"not {config.policy!r}")
    try:
        return KvcoreBackend.fresh(config.kind, config.pages, config.tokens_per_page, config.policy,
                                   recompute_last_token=recompute)
    except (kvcore.KVCacheError, ValueError) as exc:  # a page count or page size kvcore refuses
        raise BackendError(f"the kvcore backend cannot build this cache: {exc}") from None
