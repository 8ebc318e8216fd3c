# SPDX-License-Identifier: Apache-2.0
"""Replay speed on a real trace: the whole Mooncake conversation trace, sequential, at
3,000,000 tokens of capacity (5,859 pages of 512 tokens, so eviction is active), on the trie
cache and on the base cache. Prints wall time and requests/s; the target is under 3 s for
the trie cache.

    python benchmarks/bench_trace.py [TRACE] [--capacity-tokens N] [--repeat K] [--profile]

Each figure is the best of K runs (default 3) of ``kvviz.trace.replay.replay``, excluding
reading the file. ``--profile`` prints the top functions of one trie run under cProfile.

Then the memory a capacity costs: the first 200 requests at 3M, 1e12 and 1e15 tokens, each
in a fresh interpreter, peak RSS (``getrusage`` of the child). A capacity costs memory only
for the pages the trace uses, so the three agree; before, 1e12 was OOM-killed at 24 GB
(the pool was ``list(range(pages))``) and 1e15 raised MemoryError.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvviz.core.mooncake import read_trace  # noqa: E402
from kvviz.trace.replay import ReplayConfig, replay  # noqa: E402

DEFAULT_TRACE = ROOT / "kvviz" / "samples" / "mooncake" / "conversation_trace.jsonl.gz"  # the shipped sample `conversation`
TARGET_SECONDS = 3.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--capacity-tokens", type=int, default=3_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()

    requests = read_trace(args.trace).requests
    print(f"{args.trace.name}: {len(requests):,} requests, sequential, "
          f"capacity {args.capacity_tokens:,} tokens ({args.capacity_tokens // 512:,} pages of 512)")
    trie_seconds = None
    for kind in ("trie", "base"):
        config = ReplayConfig(capacity_tokens=args.capacity_tokens, cache=kind)
        runs = [replay(requests, config) for _ in range(max(1, args.repeat))]
        best = min(runs, key=lambda r: r.wall_seconds)
        if kind == "trie":
            trie_seconds = best.wall_seconds
        print(f"  {kind:<4}  {best.wall_seconds:6.3f} s  {best.requests_per_second:9,.0f} requests/s  "
              f"hit rate {best.token_hit_rate:6.1%}  evicted {best.pages_evicted:,} pages  "
              f"failed to fit {best.failed_to_fit:,}")
    verdict = "meets" if trie_seconds < TARGET_SECONDS else "MISSES"
    print(f"  trie replay {verdict} the {TARGET_SECONDS:g} s target")
    print_capacity_memory(args.trace)
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        replay(requests, ReplayConfig(capacity_tokens=args.capacity_tokens))
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(12)
    return 0 if trie_seconds < TARGET_SECONDS else 1


_REPLAY_200 = """
import resource, sys
from kvviz.core.mooncake import read_trace
from kvviz.trace.replay import ReplayConfig, replay
result = replay(read_trace(sys.argv[1], first=200).requests, ReplayConfig(capacity_tokens=int(sys.argv[2])))
print(result.page_count, result.token_hit_rate, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def print_capacity_memory(trace: Path) -> None:
    """Peak RSS of a replay of 200 requests at growing capacities, one fresh child each."""
    print("  memory of a capacity (first 200 requests, peak RSS of a fresh interpreter):")
    for capacity in (3_000_000, 10**12, 10**15):
        out = subprocess.run([sys.executable, "-c", _REPLAY_200, str(trace), str(capacity)], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
        pages, rate, peak_kib = int(out[0]), float(out[1]), int(out[2])  # ru_maxrss is KiB on Linux
        print(f"    {capacity:>22,} tokens  {pages:>19,} pages  hit rate {rate:6.1%}  peak {peak_kib / 1024:5.1f} MiB")


if __name__ == "__main__":
    sys.exit(main())
