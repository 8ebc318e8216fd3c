# SPDX-License-Identifier: Apache-2.0
"""Bounds on one fuzz example: an address-space cap and a time alarm, so an input that makes
kvviz allocate gigabytes fails as MemoryError, and one that runs for minutes fails as
:class:`ExampleTookTooLong`, instead of swapping or stalling the machine. For every fuzzer
in this folder."""

from __future__ import annotations

import os
import resource
import signal
from collections.abc import Iterator
from contextlib import contextmanager


class ExampleTookTooLong(Exception):
    """The alarm rang: an example ran past its time."""


def address_space() -> int:
    """Bytes of address space this process has mapped now (Linux); 0 where unknown."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[0]) * resource.getpagesize()
    except OSError:
        return 0


@contextmanager
def memory_cap(headroom: int) -> Iterator[None]:
    """Cap RLIMIT_AS at what the process maps now plus ``headroom`` bytes, then restore it.
    Only the soft limit moves, so it can always be put back."""
    used = address_space()
    if not used:  # not Linux: no cheap way to know the base, so no cap
        yield
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = used + headroom if hard == resource.RLIM_INFINITY else min(used + headroom, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@contextmanager
def alarm(seconds: float) -> Iterator[None]:
    """Raise :class:`ExampleTookTooLong` in the main thread after ``seconds``."""
    def ring(signum, frame):
        raise ExampleTookTooLong(f"an example ran for more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def fuzz_scale() -> int:
    """``KVVIZ_FUZZ_SCALE`` (default 1): multiplies every fuzzer's examples; 100 is the soak run."""
    try:
        return max(1, int(os.environ.get("KVVIZ_FUZZ_SCALE", "1")))
    except ValueError:
        return 1
