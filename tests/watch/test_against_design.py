# SPDX-License-Identifier: Apache-2.0
"""``kvviz watch --against-trace`` compares a recording with the design that made it: SGLang's
radix cache (``--design trie``) or vLLM's hash blocks (``--design hash``), chosen from the stream
when not given, and the report says which and why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("msgspec", reason="the watch extra is not installed")

from kvviz.watch.recording import read_recording  # noqa: E402
from kvviz.cli import cli  # noqa: E402
from kvviz.watch.radix import RadixModel, looks_like_sglang  # noqa: E402
from kvviz.watch.to_kvs import BlockContents  # noqa: E402

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
VLLM = DATA / "kv-events" / "vllm-0.33.0-conversation-400.jsonl"
SGLANG = DATA / "kv-events" / "sglang-0.5.23-conversation-400.jsonl"
TRACE = DATA / "mooncake" / "conversation_trace.jsonl"


def run(*args: str):
    return CliRunner().invoke(cli, ["watch", *args], catch_exceptions=False)


def test_the_sglang_recording_is_compared_with_a_radix_cache_and_agrees_event_for_event():
    result = run("--replay-file", str(SGLANG), "--against-trace", str(TRACE), "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert (report["design"], report["agrees"], report["batches_agreeing"]) == ("trie", True, 400)
    assert "signed 64-bit" in report["design_reason"]
    assert report["hit_tokens"] == {"kvcore": 7_520, "recording": 7_520}  # the README's figure
    assert report["removes"]["only_by_recording"] == report["removes"]["only_by_kvcore"] == 0


def test_the_hash_design_on_the_sglang_recording_says_it_was_asked_for():
    result = run("--replay-file", str(SGLANG), "--against-trace", str(TRACE))
    assert result.exit_code == 0 and "design: trie (chosen from the stream" in result.output
    result = run("--replay-file", str(SGLANG), "--against-trace", str(TRACE), "--design", "hash")
    assert result.exit_code == 1
    assert "beside kvcore's hash cache (vLLM's design)" in result.output
    assert "design: hash (--design hash)" in result.output


def test_the_vllm_recording_is_compared_with_the_hash_design_and_says_why():
    assert looks_like_sglang(read_recording(VLLM)) is None
    result = run("--replay-file", str(VLLM), "--against-trace", str(TRACE))
    assert result.exit_code == 0
    assert "design: hash (chosen from the stream: no signed block hashes" in result.output
    assert "batches agreeing event for event: 400 of 400" in result.output


def test_design_needs_against_trace():
    result = run("--replay-file", str(VLLM), "--design", "trie", "--json")
    assert result.exit_code == 2 and "--design chooses the cache --against-trace" in result.output


def test_the_radix_model_evicts_the_least_recently_used_leaf_whole_and_never_the_matched_path():
    contents = BlockContents()
    model = RadixModel(page_tokens=2, capacity_tokens=8, contents=contents)
    model.request([1, 2, 3, 4])        # a: 2 pages
    model.request([5, 6, 7, 8])        # b: 2 pages (8 tokens: full)
    model.take_events()
    assert model.request([1, 2, 3, 4, 9, 9]) == 4  # a again, one page more: b (older) is evicted whole
    events = model.take_events()
    assert [kind for kind, _ in events] == ["removed", "removed", "stored"]
    removed = {contents.tokens(c) for kind, c in events if kind == "removed"}
    assert removed == {(5, 6), (7, 8)}


# -- the radix model as a cache: properties --------------------------------------------------------

from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

PAGE = 2
CAPACITY = 12
prompts = st.lists(st.lists(st.integers(0, 3), min_size=0, max_size=CAPACITY), min_size=1, max_size=25)


@given(prompts)
def test_the_radix_model_matches_what_it_cached_and_its_events_say_what_it_holds(requests):
    contents = BlockContents()
    model = RadixModel(page_tokens=PAGE, capacity_tokens=CAPACITY, contents=contents)
    cached: dict[int, int] = {}  # content -> copies, from the events alone
    model.take_events()
    for tokens in requests:
        pages, parent = [], None
        for start in range(0, len(tokens) // PAGE * PAGE, PAGE):
            parent = contents.block(parent, tuple(tokens[start:start + PAGE]))
            pages.append(parent)
        expected = 0
        while expected < len(pages) and cached.get(pages[expected]):
            expected += 1
        assert model.request(tokens) == expected * PAGE  # the longest cached prefix, by content
        for kind, content in model.take_events():
            cached[content] = cached.get(content, 0) + (1 if kind == "stored" else -1)
            assert cached[content] in (0, 1)  # stored once, removed once: never a copy
        assert model.size == sum(cached.values()) * PAGE <= CAPACITY  # every prompt fits: size stays bounded
        assert all(cached.get(page) for page in pages)  # the request's whole prompt is cached after it
