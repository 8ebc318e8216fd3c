# SPDX-License-Identifier: Apache-2.0
"""What the backends of foreign caches (shortfin, vLLM, SGLang) share: a known issue, a finding
of one, and the logical clock that replaces a cache module's ``time`` during an op.

Imports only the standard library, so an engine's catalogue reads without the engine.
"""

from __future__ import annotations

import threading
import time as _real_time
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

__all__ = ["Finding", "KnownIssue", "LogicalClock", "logical_time"]


@dataclass(frozen=True, slots=True)
class KnownIssue:
    """A known way a foreign cache departs from kvcore: a ``defect`` or a difference by ``design``."""

    code: str
    kind: str  # "defect" | "design"
    title: str
    source: str  # where it is documented


@dataclass(frozen=True, slots=True)
class Finding:
    """One known issue seen while applying an op: its code, what happened, and the catalogue
    (the backend's ``known_issues``) its code is read in."""

    code: str
    message: str
    catalogue: Mapping = field(default_factory=dict, compare=False, repr=False)

    @property
    def issue(self) -> KnownIssue:
        """The :class:`KnownIssue` this finding is an instance of."""
        return self.catalogue[self.code]


class LogicalClock:
    """A stand-in for the ``time`` module whose ``monotonic()`` returns 1, 2, 3, ...: distinct
    ticks, so a cache's LRU order never falls back to object identity and replays are equal.
    Every other attribute is the real ``time`` module's."""

    def __init__(self, now: int = 0):
        self.now = now

    def monotonic(self) -> int:
        """The next tick."""
        self.now += 1
        return self.now

    def __getattr__(self, name: str):
        return getattr(_real_time, name)


_PATCH_LOCK = threading.RLock()  # two sessions must not swap a module's clock under each other


@contextmanager
def logical_time(module, clock: LogicalClock):
    """Give ``module`` (a foreign cache's module) ``clock`` as its ``time`` for the block."""
    with _PATCH_LOCK:
        saved = module.time
        module.time = clock
        try:
            yield clock
        finally:
            module.time = saved
