# SPDX-License-Identifier: Apache-2.0
"""Trace slices become scenarios that replay exactly like the trace replay did."""

from pathlib import Path

import pytest

from kvviz.core.scenario import parse_scenario
from kvviz.core.session import Session
from kvviz.core.mooncake import TraceRequest, read_trace
from kvviz.trace.replay import ReplayConfig
from kvviz.trace.to_kvs import trace_to_scenario

DATA = Path(__file__).parents[2].parent / "shared" / "data" / "mooncake"
CONVERSATION = DATA / "conversation_trace.jsonl"

needs_data = pytest.mark.skipif(not CONVERSATION.exists(), reason=f"Mooncake traces not found in {DATA}")


def request(index, hash_ids, input_length, output_length=0, timestamp=0):
    return TraceRequest(index, index + 1, timestamp, input_length, output_length, tuple(hash_ids))


SMALL = [
    request(0, [10, 11, 12, 13], 2000, output_length=100, timestamp=0),
    request(1, [10, 11, 20], 1100, output_length=10, timestamp=1500),
    request(2, [30, 31, 32, 33, 34, 35, 36], 3500, timestamp=2000),
]


def test_a_small_slice_becomes_exactly_this_scenario():
    converted = trace_to_scenario(SMALL, ReplayConfig(capacity_tokens=4 * 512), source="tiny.jsonl")
    assert converted.text == """\
# Excerpt of tiny.jsonl (requests 1..3), converted by `kvviz trace --to-kvs`.
# One token = one 512-token block of a prompt. Tokens are the trace's hash ids,
# chained prefix hashes: requests share pages exactly as far as their prompts share a prefix.
# `expect hit` counts matched blocks (tokens of this cache), as the replay measured them.
title: tiny.jsonl: 1 page = 1 block of 512 tokens, requests 1-3
description: 3 requests of a Mooncake trace, replayed one at a time on a trie cache with
description: 2,048 tokens = 4 pages of 512 tokens: token hit rate 15.5%, 1 page evicted,
description: 1 failed to fit.
cache trie pages=4 tokens_per_page=1

> q0001 arrives at 0.000 s (trace line 1): 2,000 prompt tokens in 4 blocks, 100 output
> tokens; no prefix seen before.
acquire q0001 10..13
expect hit q0001 0
publish q0001
release q0001

> q0002 arrives at 1.500 s (trace line 2): 1,100 prompt tokens in 3 blocks, 10 output
> tokens; its first 2 blocks were first seen in q0001. From the cache: 2 of 3 blocks,
> 1,024 of its 1,100 prompt tokens.
acquire q0002 10 11 20
expect hit q0002 2
expect evictions 1
publish q0002
release q0002

> q0003 arrives at 2.000 s (trace line 3): 3,500 prompt tokens in 7 blocks, 0 output
> tokens; no prefix seen before. It needs up to 7 pages and does not fit: the acquire
> fails and changes nothing.
acquire q0003 30..36
expect fail alloc
"""
    assert (converted.result.hit_tokens, converted.result.failed_to_fit, converted.ops) == (1024, 1, 7)


def test_the_scenario_parses_back_to_the_same_steps():
    converted = trace_to_scenario(SMALL, ReplayConfig(capacity_tokens=5 * 512, with_output=True))
    parsed = parse_scenario(converted.text)
    assert parsed.steps == converted.scenario.steps
    assert parsed.config == converted.scenario.config
    assert parsed.steps[0].op.extra == 1  # 2000 + 100 tokens need one block beyond the prompt's 4


def test_concurrent_slices_narrate_prefill_and_decode_and_explain_a_miss():
    config = ReplayConfig(concurrency=True, prefill_ms_per_token=1, decode_ms_per_token=10)
    converted = trace_to_scenario(SMALL, config)
    steps = [(step.op.kind, step.op.name, step.narration) for step in parse_scenario(converted.text).steps]
    # q0001 publishes at 2.000 s (2000 tokens x 1 ms), after q0002 arrived at 1.500 s: the
    # prefix they share is not in the cache yet. q0003 arrives at 2.000 s, after the publish.
    assert [(kind, name) for kind, name, _ in steps] == [
        ("acquire", "q0001"), ("acquire", "q0002"), ("publish", "q0001"), ("acquire", "q0003"),
        ("publish", "q0002"), ("release", "q0002"), ("release", "q0001"), ("publish", "q0003"),
        ("release", "q0003"),
    ]
    assert steps[1][2].endswith("its first 2 blocks were first seen in q0001. The cache matches 0 of them "
                                "(the others were evicted or are not published yet).")
    assert steps[2][2] == "q0001 finishes prefill at 2.000 s: its pages become shared."
    assert steps[6][2] == "q0001 finishes decoding at 3.000 s: its pages are released."
    assert "# Timing model: prefill 1 ms per uncached prompt token, decode 10 ms per output token." in converted.text


def test_a_huge_capacity_is_written_as_the_pages_the_slice_can_use():
    converted = trace_to_scenario(SMALL, ReplayConfig(capacity_tokens=10**9))
    assert converted.scenario.config.pages == 4 + 3 + 7
    assert "behaves exactly like 1,953,125" in converted.text


@needs_data
@pytest.mark.parametrize("concurrency", [False, True], ids=["sequential", "concurrent"])
def test_a_real_slice_replays_in_a_session_with_every_expect_holding(concurrency):
    requests = read_trace(CONVERSATION, first=40).requests
    config = ReplayConfig(capacity_tokens=50_000, concurrency=concurrency, with_output=True)
    converted = trace_to_scenario(requests, config, source=CONVERSATION.name)
    assert converted.result.pages_evicted > 0
    session = Session.from_scenario(parse_scenario(converted.text))
    frames = [session.frame(i) for i in range(1, len(session))]
    assert [r.message for f in frames for r in f.expect_failures] == []
    assert [v for f in frames for v in f.violations] == []
    assert sum(f.failed for f in frames) == converted.result.failed_to_fit


def test_the_scenario_is_its_own_text_parsed_back_so_every_op_and_expect_has_its_text():
    converted = trace_to_scenario(SMALL, ReplayConfig(capacity_tokens=4 * 512))
    steps = converted.scenario.steps
    assert [s.op.text for s in steps[:4]] == ["acquire q0001 10..13", "publish q0001", "release q0001",
                                             "acquire q0002 10 11 20"]
    assert [e.text for e in steps[3].expects] == ["expect hit q0002 2", "expect evictions 1"]
    assert converted.scenario == parse_scenario(converted.text)
    assert converted.units.block_tokens == 512


def test_an_excerpt_the_language_would_refuse_is_refused_by_the_converter():
    # 1.5 million output blocks: the acquire fails to fit, but its extra= is beyond what a
    # scenario may say, so `kvviz check` would refuse the file.
    huge = [request(0, [1, 2], 1000, output_length=1_500_000 * 512)]
    with pytest.raises(ValueError, match=r"the scenario would not read back \(line \d+: .*extra"):
        trace_to_scenario(huge, ReplayConfig(capacity_tokens=10 * 512, with_output=True))


def test_a_one_page_cache_is_described_in_the_singular():
    converted = trace_to_scenario(SMALL[:1], ReplayConfig(capacity_tokens=512))
    assert "with 512 tokens = 1 page of 512 tokens" in converted.scenario.description


def test_a_scenario_too_large_for_kvviz_is_refused_in_the_traces_terms(monkeypatch):
    import importlib

    to_kvs = importlib.import_module("kvviz.trace.to_kvs")
    size = len(trace_to_scenario(SMALL).text.encode())
    monkeypatch.setattr(to_kvs, "MAX_SOURCE_BYTES", size)
    assert trace_to_scenario(SMALL).text  # at the limit: written
    monkeypatch.setattr(to_kvs, "MAX_SOURCE_BYTES", size - 1)
    with pytest.raises(ValueError, match=rf"the scenario for 3 requests would be {size:,} bytes; kvviz reads "
                                         rf"scenarios of at most {size - 1:,}: take fewer requests"):
        trace_to_scenario(SMALL)
