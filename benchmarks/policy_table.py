# SPDX-License-Identifier: Apache-2.0
"""Table: the hit rate of every eviction policy and both designs on both Mooncake
traces, sequential replay of the whole trace at 3,000,000 tokens of capacity (5,859 pages of
512 tokens), plus the unlimited-capacity ratio. Prints it as Markdown, then each run's time.

    python benchmarks/policy_table.py [--check] [--capacity-tokens N] [--first N] [TRACE ...]

Each cell is ``kvviz.trace.replay.replay``: kvcore's trie under that policy, or kvcore's
hash-block cache (vLLM's design: ``ReplayConfig(cache="hash")``, evicting by its free queue).
The unlimited row is the trace's own prefix-reuse ratio, computed a third way (a set of the
block chains seen), which every policy and both designs reach with unlimited capacity. After
the table: each cell's exact counts and time, and how much of each trace's reuse comes back
within the capacity's worth of traffic: blocks an lru cache of that size is sure to still
hold (fewer distinct blocks than it has pages came in between), a lower bound of its hits.

``--check`` also runs the independent naive replay (``tests/trace/naive_replay.py``: no kvcore
or kvviz cache code; its fast variant) on every cell and compares hit tokens, input tokens,
requests that failed to fit and pages evicted; and replays every policy and design with
unlimited capacity in kvviz, which must reach the chain-set ratio. It prints every
disagreement and exits 1 if there is one.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvcore import POLICIES  # noqa: E402
from kvviz.core.mooncake import read_trace  # noqa: E402
from kvviz.trace.replay import ReplayConfig, replay  # noqa: E402
from tests.trace.naive_replay import chain_reuse, naive_replay  # noqa: E402

DATA = ROOT / "kvviz" / "samples" / "mooncake"  # the shipped samples
DEFAULT_TRACES = (DATA / "conversation_trace.jsonl.gz", DATA / "synthetic_trace.jsonl.gz")
CAPACITY_TOKENS = 3_000_000


def cells() -> list[tuple[str, str]]:
    """(design, policy) per row: the trie under every policy, then the hash design (one order)."""
    return [("trie", policy) for policy in POLICIES] + [("hash", "lru")]


def counts(result) -> tuple[int, int, int, int]:
    """What kvviz's and the naive replay must agree on: hit and input tokens, failed, evicted."""
    return result.hit_tokens, result.input_tokens, result.failed_to_fit, result.pages_evicted


def reuse_within(requests, pages: int) -> tuple[int, int]:
    """``(reused blocks, those whose previous use was at most ``pages`` blocks of traffic ago)``:
    how recency-driven a trace's reuse is. With unlimited capacity a request reuses its leading
    blocks seen before; "traffic" counts every block requested in between. O(total blocks x depth)."""
    last_use: dict[tuple[int, ...], int] = {}  # chain -> blocks requested before its last use
    traffic = reused = near = 0
    for request in requests:
        ids = request.hash_ids
        chains = [ids[:k] for k in range(1, len(ids) + 1)]
        for chain in chains:
            if chain not in last_use:
                break
            reused += 1
            near += traffic - last_use[chain] <= pages
        for chain in chains:
            last_use[chain] = traffic
        traffic += len(ids)
    return reused, near


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="*", type=Path, default=list(DEFAULT_TRACES))
    parser.add_argument("--capacity-tokens", type=int, default=CAPACITY_TOKENS)
    parser.add_argument("--first", type=int, default=None, help="replay only the first N requests of each trace")
    parser.add_argument("--check", action="store_true", help="check every cell against the naive replay")
    args = parser.parse_args()

    capacity = args.capacity_tokens
    traces = [read_trace(path, first=args.first) for path in args.traces]
    rates: dict[tuple[str, str, str], float] = {}  # (design, policy, trace name) -> hit rate
    lines: list[str] = []
    problems: list[str] = []
    for trace in traces:
        requests = trace.requests
        for design, policy in cells():
            result = replay(requests, ReplayConfig(capacity_tokens=capacity, cache=design, policy=policy))
            rates[design, policy, trace.name] = result.token_hit_rate
            line = (f"{trace.name} {design}:{policy}: {result.hit_tokens:,} of {result.input_tokens:,} tokens hit, "
                    f"{result.pages_evicted:,} pages evicted, {result.failed_to_fit:,} failed to fit; "
                    f"kvviz {result.wall_seconds:.2f} s")
            if args.check:
                started = time.perf_counter()
                naive = naive_replay(requests, design=design, policy=policy, capacity_tokens=capacity, fast=True)
                line += f", naive {time.perf_counter() - started:.2f} s"
                if counts(result) != counts(naive):
                    problems.append(f"{trace.name} {design}:{policy}: kvviz (hit, input, failed, evicted) "
                                    f"{counts(result)} but naive {counts(naive)}")
            lines.append(line)
        started = time.perf_counter()
        reused, total = chain_reuse(requests, trace.block_tokens)
        rates["any", "unlimited", trace.name] = reused / total if total else 0.0
        lines.append(f"{trace.name} prefix reuse (chain set): {reused:,} of {total:,} tokens; "
                     f"{time.perf_counter() - started:.2f} s")
        blocks, near = reuse_within(requests, capacity // trace.block_tokens)
        share = near / blocks if blocks else 0.0
        lines.append(f"{trace.name} reuse distance: {near:,} of the {blocks:,} blocks reused ({share:.1%}) were last "
                     f"used at most {capacity // trace.block_tokens:,} blocks of traffic before")
        if args.check:
            for design, policy in cells():
                result = replay(requests, ReplayConfig(cache=design, policy=policy))
                if (result.hit_tokens, result.input_tokens) != (reused, total):
                    problems.append(f"{trace.name} {design}:{policy} unlimited: kvviz hits {result.hit_tokens:,} of "
                                    f"{result.input_tokens:,} tokens but the chain set reuses {reused:,} of {total:,}")

    print_table(traces, rates, capacity)
    print()
    for line in lines:
        print(f"- {line}")
    if args.check:
        print()
        if problems:
            print(f"{len(problems)} disagreement(s):")
            for line in problems:
                print(f"  {line}")
        else:
            print(f"check: all {len(cells()) * len(traces)} cells agree with the naive replay (hit tokens, input "
                  "tokens, failed to fit, pages evicted), and every design and policy at unlimited capacity "
                  "reaches the chain-set prefix-reuse ratio")
    return 1 if problems else 0


def print_table(traces, rates, capacity: int) -> None:
    """The Markdown table: one row per design and policy, one column per trace."""
    head = " | ".join(f"{t.name.removesuffix('.jsonl')} ({len(t):,} requests)" for t in traces)
    print(f"Token hit rate, sequential replay, {capacity:,} tokens of capacity "
          f"({capacity // 512:,} pages of 512 tokens):")
    print()
    print(f"| design | policy | {head} |")
    print("|---|---|" + "---:|" * len(traces))
    for design, policy in cells() + [("any", "unlimited")]:
        shown = {"hash": "free queue (vLLM)", "any": "unlimited capacity = prefix-reuse ratio"}.get(design, policy)
        row = " | ".join(f"{rates[design, policy, t.name]:.2%}" for t in traces)
        print(f"| {design} | {shown} | {row} |")


if __name__ == "__main__":
    sys.exit(main())
