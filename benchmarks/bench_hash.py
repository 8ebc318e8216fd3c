# SPDX-License-Identifier: Apache-2.0
"""Throughput of kvcore's hash-block cache (vLLM's design) beside the trie, on bench_core's workload.

Run:  python benchmarks/bench_hash.py            (10,000 requests, best of 5: about a minute)
      python benchmarks/bench_hash.py --quick    (smoke run, a few seconds)

The workload, the timing and the floor are bench_core's (imported, not copied): 256-token
requests sharing 32 system prompts and 8 branches each, 16 tokens per page, acquire ->
publish -> release per request, tokens handed over as lists, gc off while timing, best of
interleaved rounds on fresh caches. Printed, as req/s and as a ratio to both floors of the
same round (bench_core's raw floor, and its checking floor, which does kvcore's exact token
check first: the target, >= 0.20x, is against that one): the hash cache and the trie (lru) with 200,000 pages (never evicts) and 20,000 pages
(evicts once full), with hit rates and evictions; then a hash cache with events recorded
(what the UI pays) and the cost of its keys alone (one sha256 per block of every request).
"""

from __future__ import annotations

import argparse
import platform
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_core, beside this file

import bench_core  # noqa: E402
from bench_core import (best_interleaved, floor_run_checked, floor_run_lists, kvcore_lifecycle,  # noqa: E402
                        make_workload)

from kvcore import HashBlockPagedAttentionCache, PagePool, TriePagedAttentionCache  # noqa: E402
from kvcore.blockkey import chain_keys  # noqa: E402

TOKENS_PER_PAGE = bench_core.TOKENS_PER_PAGE
TARGET = 0.20  # hash lifecycle req/s / checking floor req/s, both pools


def keys_only(sequences) -> None:
    """The chained keys of every full block of every request, nothing else, computed as the
    cache computes them (one sha256 per block, the tokens packed once per request): the
    hash design's floor in CPython (vLLM computes them once per request too)."""
    tpp = TOKENS_PER_PAGE
    for seq in sequences:
        chain_keys(None, seq, 0, len(seq) // tpp, tpp)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=None, help="requests (default 10000; 2000 with --quick)")
    parser.add_argument("--repeats", type=int, default=None, help="interleaved rounds, best kept (default 5; 2 quick)")
    parser.add_argument("--seed", type=int, default=0, help="workload seed (default 0)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 2,000 requests, 2 rounds, 4,000-page pool")
    parser.add_argument("--timer", choices=("wall", "cpu"), default="wall",
                        help="wall: time.perf_counter (default); cpu: time.process_time, steadier on a busy machine")
    args = parser.parse_args(argv)
    n = args.requests or (2_000 if args.quick else 10_000)
    repeats = args.repeats or (2 if args.quick else 5)
    if n <= 0 or repeats <= 0:
        parser.error("--requests and --repeats must be positive")
    bench_core.clock = bench_core.time.process_time if args.timer == "cpu" else bench_core.time.perf_counter
    large, small = 200_000, (4_000 if args.quick else 20_000)
    sequences = [list(s) for s in make_workload(n, args.seed)]

    def lifecycle(cache) -> None:
        kvcore_lifecycle(cache, sequences)

    def recorded(cache) -> None:
        cache.record_events(True)
        for seq in sequences:
            a = cache.acquire_pages_for_tokens(seq)
            a.publish_pages_for_tokens()
            a.release_pages()
            cache.take_events()

    def fresh(cls, pages):
        return lambda: cls(PagePool(pages), TOKENS_PER_PAGE)

    best, last = best_interleaved(repeats, {
        "raw floor": (lambda: None, lambda _: floor_run_lists(sequences)),
        "floor": (lambda: None, lambda _: floor_run_checked(sequences)),
        "keys": (lambda: None, lambda _: keys_only(sequences)),
        "hash large": (fresh(HashBlockPagedAttentionCache, large), lifecycle),
        "trie large": (fresh(TriePagedAttentionCache, large), lifecycle),
        "hash small": (fresh(HashBlockPagedAttentionCache, small), lifecycle),
        "trie small": (fresh(TriePagedAttentionCache, small), lifecycle),
        "hash events": (fresh(HashBlockPagedAttentionCache, small), recorded),
    }, keep_gc=False)
    floor_rps = n / best["floor"]
    raw_rps = n / best["raw floor"]
    print(f"kvcore hash-block cache: {n:,} requests x {bench_core.SEQUENCE_TOKENS} tokens (bench_core's workload, "
          f"seed {args.seed}), {TOKENS_PER_PAGE} tokens/page, tokens as lists")
    print(f"Python {platform.python_version()} ({platform.python_implementation()}) on {platform.machine()}; "
          f"best of {repeats} interleaved rounds, fresh caches, gc off while timing, "
          f"{'CPU time (process_time)' if args.timer == 'cpu' else 'wall time (perf_counter)'}")
    print()

    def row(label: str, name: str) -> float:
        """Print req/s and the ratio to both floors; the ratio to the checking floor."""
        rps = n / best[name]
        note = ""
        cache = last.get(name)
        if cache is not None:
            stats = cache.snapshot().stats
            note = f"{stats.evictions:,} pages evicted, {stats.hit_tokens / stats.lookup_tokens:.0%} of tokens hit"
        print(f"  {label:<48} {rps:>9,.0f} req/s  {rps / raw_rps:>5.2f}x raw floor  "
              f"{rps / floor_rps:>5.2f}x checking floor  {note}".rstrip())
        return rps / floor_rps

    print("Lifecycle throughput (acquire -> publish -> release per request)")
    row("CPython raw floor (dict-of-dicts walk+insert)", "raw floor")
    row("checking floor (token check, then the walk)", "floor")
    ratios = [row(f"kvcore hash, {large:,} pages", "hash large")]
    row(f"kvcore trie (lru), {large:,} pages", "trie large")
    ratios.append(row(f"kvcore hash, {small:,} pages", "hash small"))
    row(f"kvcore trie (lru), {small:,} pages", "trie small")
    row(f"kvcore hash, {small:,} pages, events recorded", "hash events")
    row("the hash design's keys alone (sha256 per block)", "keys")
    hashed = last["hash small"]
    violations = hashed.check_invariants()
    if violations:
        print(f"  !! {len(violations)} invariant violations after the evicting run, e.g. {violations[0]}")
        return 1
    worst = min(ratios)
    print(f"Target{' (--quick is a smoke run)' if args.quick else ''}: {'PASS' if worst >= TARGET else 'MISS'}  "
          f"hash lifecycle, both pools, {worst:.2f}x the checking floor >= {TARGET:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
