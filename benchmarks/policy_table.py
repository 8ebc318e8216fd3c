# SPDX-License-Identifier: Apache-2.0
"""Issue 14's table: the hit rate of every eviction policy and both designs on both Mooncake
traces, sequential replay of the whole trace at 3,000,000 tokens of capacity (5,859 pages of
512 tokens), plus the unlimited-capacity ratio. Prints it as Markdown, each run's time after.

    python benchmarks/policy_table.py [--check] [--capacity-tokens N] [--first N] [TRACE ...]

Each trie cell is ``kvviz.trace.replay.replay`` (kvcore's trie with that policy). The hash
cell is kvviz's replay of kvcore's hash-block cache when kvviz has one, else the independent
naive replay alone (``tests/trace/naive_replay.py``; the table says so). The unlimited row is
the trace's own prefix-reuse ratio, computed a third way (a set of the block chains seen),
which every policy and both designs reach with unlimited capacity.

``--check`` also runs the naive replay (no kvcore or kvviz cache code, its fast variant) on
every cell, and the unlimited replays of kvviz on every policy and design, and prints every
disagreement; exit 1 if there is one.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvcore import POLICIES  # noqa: E402
from kvviz.trace.mooncake import read_trace  # noqa: E402
from kvviz.trace.replay import ReplayConfig, check_design, replay  # noqa: E402
from tests.trace.naive_replay import chain_reuse, naive_replay  # noqa: E402

DATA = ROOT.parent / "shared" / "data" / "mooncake"
DEFAULT_TRACES = (DATA / "conversation_trace.jsonl", DATA / "synthetic_trace.jsonl")
CAPACITY_TOKENS = 3_000_000


def kvviz_config(design: str, policy: str, capacity_tokens: int | None) -> ReplayConfig | None:
    """kvviz's replay config for a design and policy; None while kvcore cannot build the design
    (``check_design``: the hash-block cache before ``kvcore.hashblock`` lands)."""
    config = ReplayConfig(capacity_tokens=capacity_tokens, cache=design, policy=policy)
    try:
        check_design(config)
    except ValueError:
        return None
    return config


def cells() -> list[tuple[str, str]]:
    """(design, policy) per row: the trie under every policy, then the hash design (one order)."""
    return [("trie", policy) for policy in POLICIES] + [("hash", "lru")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="*", type=Path, default=list(DEFAULT_TRACES))
    parser.add_argument("--capacity-tokens", type=int, default=CAPACITY_TOKENS)
    parser.add_argument("--first", type=int, default=None, help="replay only the first N requests of each trace")
    parser.add_argument("--check", action="store_true", help="check every cell against the naive replay")
    args = parser.parse_args()

    capacity = args.capacity_tokens
    traces = [read_trace(path, first=args.first) for path in args.traces]
    rates: dict[tuple[str, str, str], tuple[float, str]] = {}  # (design, policy, trace) -> (rate, source)
    timings: list[str] = []
    problems: list[str] = []
    naive_only = False
    for trace in traces:
        requests = trace.requests
        for design, policy in cells():
            config = kvviz_config(design, policy, capacity)
            naive = None
            if config is not None:
                result = replay(requests, config)
                rates[design, policy, trace.name] = (result.token_hit_rate, "kvviz")
                timings.append(f"{trace.name} {design}:{policy} kvviz replay {result.wall_seconds:.2f} s")
                measured = (result.hit_tokens, result.input_tokens, result.failed_to_fit, result.pages_evicted)
            if args.check or config is None:
                started = time.perf_counter()
                naive = naive_replay(requests, design=design, policy=policy, capacity_tokens=capacity, fast=True)
                timings.append(f"{trace.name} {design}:{policy} naive replay {time.perf_counter() - started:.2f} s")
                if config is None:
                    naive_only = True
                    rates[design, policy, trace.name] = (naive.token_hit_rate, "naive")
                else:
                    expected = (naive.hit_tokens, naive.input_tokens, naive.failed_to_fit, naive.pages_evicted)
                    if measured != expected:
                        problems.append(f"{trace.name} {design}:{policy}: kvviz (hit, input, failed, evicted) "
                                        f"{measured} but naive {expected}")
        started = time.perf_counter()
        reused, total = chain_reuse(requests, trace.block_tokens)
        rates["any", "unlimited", trace.name] = (reused / total if total else 0.0, "chains")
        timings.append(f"{trace.name} prefix-reuse ratio (chain set) {time.perf_counter() - started:.2f} s")
        if args.check:
            for design, policy in cells():
                config = kvviz_config(design, policy, None)
                if config is None:
                    result = naive_replay(requests, design=design, policy=policy, fast=True)
                    who = "naive"
                else:
                    result = replay(requests, config)
                    who = "kvviz"
                if (result.hit_tokens, result.input_tokens) != (reused, total):
                    problems.append(f"{trace.name} {design}:{policy} unlimited: {who} hits {result.hit_tokens:,} of "
                                    f"{result.input_tokens:,} tokens but the chain set reuses {reused:,} of {total:,}")

    print_table(traces, rates, capacity, naive_only)
    print()
    for line in timings:
        print(f"- {line}")
    if args.check:
        print()
        if problems:
            print(f"{len(problems)} disagreement(s) with the naive replay:")
            for line in problems:
                print(f"  {line}")
        else:
            checked = len(cells()) * len(traces)
            print(f"check: all {checked} cells agree with the naive replay (hit tokens, input tokens, failed to fit, "
                  f"pages evicted), and every design and policy at unlimited capacity reaches the prefix-reuse ratio")
    return 1 if problems else 0


def print_table(traces, rates, capacity: int, naive_only: bool) -> None:
    """The Markdown table: one row per design and policy, one column per trace."""
    pages = capacity // 512
    head = " | ".join(f"{t.name} ({len(t):,} requests)" for t in traces)
    print(f"Token hit rate, sequential replay, {capacity:,} tokens of capacity ({pages:,} pages of 512 tokens):")
    print()
    print(f"| design | policy | {head} |")
    print("|---|---|" + "---:|" * len(traces))
    for design, policy in cells() + [("any", "unlimited")]:
        shown_policy = {"hash": "free queue (vLLM)"}.get(design, policy)
        if design == "any":
            shown_policy = "unlimited capacity: the prefix-reuse ratio"
        row = []
        for trace in traces:
            rate, source = rates[design, policy, trace.name]
            row.append(f"{rate:.2%}" + (" (naive)" if source == "naive" else ""))
        print(f"| {design} | {shown_policy} | " + " | ".join(row) + " |")
    if naive_only:
        print()
        print("(naive): kvviz has no hash-block replay yet; the figure is the naive replay's alone.")


if __name__ == "__main__":
    sys.exit(main())
