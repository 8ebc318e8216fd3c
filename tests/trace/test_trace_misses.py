# SPDX-License-Identifier: Apache-2.0
"""The miss breakdown of ``kvviz trace``: every missed prompt token in one class, the classes
adding up to the miss rate, and no capacity miss when the cache is unlimited."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvviz.trace.command import trace
from kvviz.trace.misses import MISS_CLASSES, miss_breakdown, trace_misses
from kvviz.core.mooncake import TraceRequest, read_trace
from kvviz.trace.replay import ReplayConfig, replay

TRACE = Path(__file__).resolve().parents[3] / "shared" / "data" / "mooncake" / "conversation_trace.jsonl"


@lru_cache(maxsize=1)
def conversation() -> tuple[TraceRequest, ...]:
    return tuple(read_trace(TRACE, first=3000).requests)


def request(index: int, ids: tuple[int, ...], input_length: int, timestamp: int = 0) -> TraceRequest:
    return TraceRequest(index, index + 1, timestamp, input_length, 1, ids)


@pytest.mark.parametrize("design", ["trie", "hash"])
def test_at_unlimited_capacity_no_token_misses_for_capacity(design):
    requests = conversation()
    result = replay(requests, ReplayConfig(capacity_tokens=None, cache=design))
    misses = miss_breakdown(trace_misses(requests, 512), result.hit_tokens)
    assert misses.capacity == 0 and misses.share("capacity") == 0.0
    assert misses.compulsory > 0 and misses.diverged > 0


@pytest.mark.parametrize("design", ["trie", "hash"])
def test_a_small_cache_misses_for_capacity_and_the_shares_add_up_to_the_miss_rate(design):
    requests = conversation()
    result = replay(requests, ReplayConfig(capacity_tokens=1_000_000, cache=design))
    misses = miss_breakdown(trace_misses(requests, 512), result.hit_tokens)
    assert misses.capacity > 0
    assert sum(getattr(misses, name) for name in MISS_CLASSES) == misses.missed_tokens
    assert sum(misses.share(name) for name in MISS_CLASSES) == pytest.approx(1 - result.token_hit_rate)


def test_each_missed_token_is_classed_by_what_came_before_it():
    requests = [
        request(0, (1, 2, 3), 40),   # all new: compulsory (blocks of 16: 16 + 16 + 8)
        request(1, (1, 2, 4), 48),   # block 4 leaves the prefix 1, 2 where 3 went on: diverged (16)
        request(2, (1, 2, 4, 5), 70),  # 5 is new after a new branch: compulsory; 6 tokens beyond the blocks: tail
        request(3, (), 9),           # no full block: below the floor
    ]
    misses = trace_misses(requests, 16)
    assert (misses.compulsory, misses.diverged, misses.partial_tail, misses.below_floor) == (40 + 16, 16, 6, 9)


def test_the_sweep_prints_the_breakdown_and_its_json_adds_up(tmp_path):
    lines = TRACE.read_text(encoding="utf-8").splitlines()[:300]
    small = tmp_path / "t.jsonl"
    small.write_text("\n".join(lines) + "\n")
    result = CliRunner().invoke(trace, [str(small), "--sweep", "--no-progress", "--workers", "1"])
    assert result.exit_code == 0, result.output
    assert "Why prompt tokens missed: trie lru" in result.output
    result = CliRunner().invoke(trace, [str(small), "--sweep", "--no-progress", "--workers", "1", "--json"])
    data = json.loads(result.output)
    for row in (*data["sweep"], data["unlimited"]):
        misses = row["misses"]
        assert sum(misses[name]["share"] for name in MISS_CLASSES) == pytest.approx(1 - row["token_hit_rate"])
    assert data["unlimited"]["misses"]["capacity"]["tokens"] == 0
    result = CliRunner().invoke(trace, [str(small), "--capacity-tokens", "1e5"])
    assert "miss rate" in result.output and "compulsory" in result.output


# -- any trace: the classes add up, and nothing is a capacity miss when nothing is evicted ----------

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

prompts = st.lists(st.lists(st.integers(0, 2), min_size=0, max_size=12), min_size=1, max_size=20)


@given(prompts, st.sampled_from(["trie", "hash"]), st.sampled_from([None, 8, 24]))
def test_the_classes_add_up_to_the_misses_and_capacity_is_zero_when_unlimited(prompts, design, capacity):
    from kvviz.core.traffic import traffic_request

    interned: dict = {}
    requests = []
    for index, tokens in enumerate(prompts):
        timestamp, length, output, ids = traffic_request({"tokens": tokens}, 2, interned)
        requests.append(TraceRequest(index, index + 1, timestamp, length, output, ids))
    result = replay(requests, ReplayConfig(capacity_tokens=capacity, cache=design, page_tokens=2))
    misses = miss_breakdown(trace_misses(requests, 2), result.hit_tokens)
    assert sum(getattr(misses, name) for name in MISS_CLASSES) == misses.missed_tokens
    assert misses.capacity >= 0
    if capacity is None:
        assert misses.capacity == 0
