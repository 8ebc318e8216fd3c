# SPDX-License-Identifier: Apache-2.0
"""How much one step allocates at its peak: the op, the snapshot and the incremental check,
counted in bytes (tracemalloc), never in seconds."""

from __future__ import annotations

import tracemalloc


def largest_checked_step(cache, checker, steps) -> int:
    """Run each of ``steps`` (callables) on ``cache``, then take its events, snapshot it and
    check the snapshot with ``checker`` (which must find nothing): the most bytes one step
    allocated at its peak. The first step is left out (it makes the pool's first chunk of
    page numbers, ``kvcore.pool._CHUNK``, once)."""
    largest = 0
    tracemalloc.start()
    try:
        for number, step in enumerate(steps):
            tracemalloc.reset_peak()
            before, _ = tracemalloc.get_traced_memory()
            step()
            cache.take_events()
            violations = checker.check(cache.snapshot())
            _, peak = tracemalloc.get_traced_memory()
            assert violations == []
            if number:
                largest = max(largest, peak - before)
    finally:
        tracemalloc.stop()
    return largest
