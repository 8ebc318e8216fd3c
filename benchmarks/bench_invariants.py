# SPDX-License-Identifier: Apache-2.0
"""Seconds to check DESIGN's invariants on large caches.

Run:  python benchmarks/bench_invariants.py             (10k, 100k and 1M pages)
      python benchmarks/bench_invariants.py --pages 10000 100000

The issue's case: ``cache trie pages=N tokens_per_page=1`` / ``acquire a 0..N-1``, one
allocation holding every page (owned: an unpublished tail), and the same allocation
published (a chain of N trie nodes, every page cached). For each it prints:

* ``check_invariants``: the live cache's check (a snapshot, then :func:`check_snapshot`,
  then the checks of the live heap and counters), the snapshot's rows already built once
  (the UI's case from the second frame on);
* ``check_snapshot``: the checker alone on that snapshot;
* ``first snapshot``: building the rows the first time, for context.

Best of ``--repeats`` runs, garbage collector off while timing (as ``timeit`` does). The
checker was quadratic (``pages.count(p)`` per page): 100,000 pages took 76 s, 1,000,000
did not finish in 600 s; it must grow linearly now (the ratio column: time / time at the
smallest size, against the pages' ratio).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

import kvcore  # noqa: E402
from kvcore import check_snapshot  # noqa: E402


def best_seconds(run, repeats: int) -> float:
    """Best wall time of ``run()`` over ``repeats`` runs, collector off while timing."""
    best = float("inf")
    for _ in range(repeats):
        gc.collect()
        gc.disable()
        try:
            start = time.perf_counter()
            result = run()
            best = min(best, time.perf_counter() - start)
        finally:
            gc.enable()
        assert result == [], result[:3]
    return best


def one_allocation(pages: int, publish: bool):
    """A trie of ``pages`` pages, one token each, all held by one allocation."""
    cache = kvcore.make_cache("trie", pages, 1)
    allocation = cache.acquire_pages_for_tokens(range(pages), name="a")
    if publish:
        allocation.publish_pages_for_tokens()
    return cache


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, nargs="+", default=[10_000, 100_000, 1_000_000],
                        help="pool sizes (default 10000 100000 1000000)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per figure, best kept (default 3)")
    args = parser.parse_args(argv)
    if args.repeats <= 0 or any(p <= 0 for p in args.pages):
        parser.error("--pages and --repeats must be positive")
    print("Invariant checks, one allocation holding every page (tokens_per_page=1); "
          f"best of {args.repeats}, gc off, wall time")
    print(f"  {'pages':>10}  {'state':<10} {'first snapshot':>15} {'check_invariants':>17} "
          f"{'check_snapshot':>15}  {'ratio':>6}")
    for publish in (False, True):
        first = None
        for pages in args.pages:
            cache = one_allocation(pages, publish)
            start = time.perf_counter()
            snap = cache.snapshot()
            build = time.perf_counter() - start
            live = best_seconds(cache.check_invariants, args.repeats)
            alone = best_seconds(lambda: check_snapshot(snap), args.repeats)
            if first is None:
                first = (pages, live)
            ratio = f"{live / first[1]:.1f}x" if pages != first[0] else "1.0x"
            print(f"  {pages:>10,}  {'published' if publish else 'owned':<10} {build:>13.3f} s "
                  f"{live:>15.3f} s {alone:>13.3f} s  {ratio:>6}  (pages {pages / first[0]:.0f}x)")
            del cache, snap
    return 0


if __name__ == "__main__":
    sys.exit(main())
