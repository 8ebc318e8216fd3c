# SPDX-License-Identifier: Apache-2.0
"""Replay speed on a real trace: the whole Mooncake conversation trace, sequential, at
3,000,000 tokens of capacity (5,859 pages of 512 tokens, so eviction is active), on the trie
cache and on the base cache. Prints wall time and requests/s; the target is under 3 s for
the trie cache.

    python benchmarks/bench_trace.py [TRACE] [--capacity-tokens N] [--repeat K] [--profile]

Each figure is the best of K runs (default 3) of ``kvviz.trace.replay.replay``, excluding
reading the file. ``--profile`` prints the top functions of one trie run under cProfile.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvviz.trace.mooncake import read_trace  # noqa: E402
from kvviz.trace.replay import ReplayConfig, replay  # noqa: E402

DEFAULT_TRACE = ROOT.parent / "shared" / "data" / "mooncake" / "conversation_trace.jsonl"
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
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        replay(requests, ReplayConfig(capacity_tokens=args.capacity_tokens))
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(12)
    return 0 if trie_seconds < TARGET_SECONDS else 1


if __name__ == "__main__":
    sys.exit(main())
