"""The kvcore backend: scenario ops by allocation name onto kvcore's caches."""

from __future__ import annotations

import kvcore
from kvcore import InvalidOperation, Snapshot


class UnknownAllocation(InvalidOperation):
    """An op named an allocation that is not live (never acquired, or released)."""


class KvcoreBackend:
    """Drives one kvcore cache; allocations are addressed by their scenario names."""

    name = "kvcore"

    def __init__(self, cache):
        self.cache = cache
        cache.record_events(True)

    @classmethod
    def fresh(cls, kind: str, pages: int, tokens_per_page: int) -> "KvcoreBackend":
        """A new empty cache."""
        return cls(kvcore.make_cache(kind, pages, tokens_per_page))

    @classmethod
    def from_snapshot(cls, snapshot: Snapshot, *, verify: bool = True) -> "KvcoreBackend":
        """A live cache restored from ``snapshot`` (allocation names come back with it).

        ``verify=False`` skips the invariant check, for snapshots kvcore itself made."""
        return cls(kvcore.restore(snapshot, verify=verify))

    def live_names(self) -> list[str]:
        """Names of live allocations, in creation order."""
        return [a.label for a in sorted(self.cache.allocations.values(), key=lambda a: a.id)]

    def allocation(self, name: str):
        """The live allocation called ``name``; UnknownAllocation if there is none."""
        for a in self.cache.allocations.values():
            if a.label == name:
                return a
        live = ", ".join(self.live_names()) or "none"
        raise UnknownAllocation(f"no live allocation named {name!r} (live allocations: {live})")

    def apply(self, kind: str, name: str, tokens: tuple[int, ...] | None, extra: int, append: bool) -> None:
        """Run one op; raises a KVCacheError (and changes nothing) if it fails."""
        if kind == "acquire":
            if any(a.label == name for a in self.cache.allocations.values()):
                raise InvalidOperation(f"acquire {name}: an allocation named {name!r} is already live; "
                                       f"release it first or pick another name")
            self.cache.acquire_pages_for_tokens(tokens or (), extra, name=name)
        elif kind == "publish":
            self.allocation(name).publish_pages_for_tokens(tokens)
        elif kind == "extend":
            allocation = self.allocation(name)
            new = allocation.tokens + tuple(tokens or ()) if append else tuple(tokens or ())
            allocation.extend_allocation(new, extra)
        elif kind == "release":
            self.allocation(name).release_pages()
        else:
            raise InvalidOperation(f"unknown op {kind!r} (expected acquire, publish, extend or release)")

    def take_events(self) -> tuple:
        """Events of the ops since the last call."""
        return self.cache.take_events()

    def snapshot(self) -> Snapshot:
        """The cache's state."""
        return self.cache.snapshot()

    def check(self) -> list:
        """Invariant violations of the live cache."""
        return self.cache.check_invariants()
