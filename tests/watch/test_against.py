# SPDX-License-Identifier: Apache-2.0
"""``--against`` and ``--to-kvs``: a KV-event recording judged against kvcore's hash cache.

The shared vLLM recording was made by vLLM 0.33.0's own KVCacheManager and BlockPool from the
first 400 Mooncake conversation requests (../shared/data/kv-events/README.md); its scenario is
rebuilt here from the trace, run on kvcore and aligned block by block by content. The figures
it must reach are counted here by an independent decoder (msgspec on the raw lines), and the
README's 7,520 hit tokens is the server's own figure. Mutated recordings (a store dropped, a
removal added) must be reported at the batch that was changed.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

msgspec = pytest.importorskip("msgspec", reason="the watch extra is not installed")  # the CI installs it

from kvviz.watch.recording import Message, read_recording  # noqa: E402
from kvviz.core.scenario import format_scenario, parse_scenario  # noqa: E402
from kvviz.watch.against import against  # noqa: E402
from kvviz.watch.to_kvs import recording_to_scenario, requests_scenario, scaled_prompt  # noqa: E402
from kvviz.core.mooncake import read_trace  # noqa: E402

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
VLLM = DATA / "kv-events" / "vllm-0.33.0-conversation-400.jsonl"
TRACE = DATA / "mooncake" / "conversation_trace.jsonl"
README_HIT_TOKENS = 7_520  # "both report 7,520 hit tokens over them" (the recordings' README)

# -- an independent decoder and recordings made by hand --------------------------------------


def raw_batches(path: Path) -> list[list[dict]]:
    """Each line's events as plain msgspec maps: no kvviz code involved."""
    out = []
    for line in path.read_text().splitlines():
        payload = msgspec.msgpack.decode(base64.b64decode(json.loads(line)["payload"]))
        out.append(list(payload[1]))
    return out


def independent_figures(batches: list[list[dict]]) -> dict:
    """Blocks stored and removed, and distinct blocks by content (chains of token tuples)."""
    content: dict[int, tuple] = {}
    stored = removed = 0
    distinct = set()
    for events in batches:
        for event in events:
            if event["type"] == "BlockStored":
                size = event["block_size"]
                chain = content[event["parent_block_hash"]] if event["parent_block_hash"] is not None else ()
                for i, key in enumerate(event["block_hashes"]):
                    chain = chain + (tuple(event["token_ids"][i * size:(i + 1) * size]),)
                    content[key] = chain
                    distinct.add(chain)
                    stored += 1
            elif event["type"] == "BlockRemoved":
                removed += len(event["block_hashes"])
    return {"stored": stored, "removed": removed, "distinct": len(distinct)}


def stored(hashes, parent, tokens, size=4) -> dict:
    return {"type": "BlockStored", "block_hashes": list(hashes), "parent_block_hash": parent,
            "token_ids": list(tokens), "block_size": size, "lora_id": None, "medium": "GPU"}


def removed(hashes) -> dict:
    return {"type": "BlockRemoved", "block_hashes": list(hashes), "medium": "GPU"}


def recording(*batches: list[dict]) -> list[Message]:
    """Messages as vLLM's publisher sends them: ``[ts, events, rank]`` in msgpack, seq from 0."""
    return [Message(b"kv", seq, msgspec.msgpack.encode([float(seq), list(events), 0]))
            for seq, events in enumerate(batches)]


def mutated(messages: list[Message], index: int, change) -> list[Message]:
    """``messages`` with batch ``index``'s event list passed through ``change``."""
    out = list(messages)
    ts, events, rank = msgspec.msgpack.decode(out[index].payload)
    out[index] = Message(out[index].topic, out[index].seq, msgspec.msgpack.encode([ts, change(list(events)), rank]))
    return out


@pytest.fixture(scope="module")
def vllm_messages() -> list[Message]:
    return read_recording(VLLM)


@pytest.fixture(scope="module")
def vllm_scenario() -> str:
    """The README's recipe: 400 requests, 16-token blocks, 3,000 vLLM blocks, vLLM's rules."""
    return requests_scenario(read_trace(TRACE, first=400).requests, block_tokens=16, gpu_blocks=3000,
                             recompute_last_token=True, source="conversation_trace.jsonl")


# -- the shared vLLM recording --------------------------------------------------------------


def test_the_scenario_spells_each_request_as_the_readme_says():
    requests = read_trace(TRACE, first=400).requests
    assert len(requests) == 400
    first = requests[0]  # 6,758 tokens in 14 hash ids: round(6758 * 16 / 512) = 211 tokens
    assert scaled_prompt(first.hash_ids, first.input_length) == tuple(range(211))
    assert scaled_prompt((7,), 10_000) == tuple(range(112, 128))  # at most every block
    assert scaled_prompt((7, 9), 1) == (112,)  # at least one token
    scenario = parse_scenario(requests_scenario(requests))
    assert scenario.config.pages == 2_999  # vLLM's null block takes one of the 3,000
    assert scenario.config.tokens_per_page == 16 and scenario.config.recompute_last_token
    assert [step.op.kind for step in scenario.steps[:3]] == ["acquire", "publish", "release"]
    assert scenario.steps[0].op.tokens == tuple(range(211))


def test_the_vllm_recording_agrees_with_kvcore_event_for_event(vllm_messages, vllm_scenario):
    figures = independent_figures(raw_batches(VLLM))
    report = against(vllm_messages, vllm_scenario, source=VLLM.name)
    assert report.recording_batches == report.scenario_batches == 400
    assert report.batches_agreeing == 400 and report.differing_batches == ()
    assert report.first_divergence is None and report.agrees
    assert report.stores_agreeing == figures["stored"] == 10_488
    assert report.removes_agreeing == figures["removed"] == 7_490
    assert (report.stores_only_by_recording, report.stores_only_by_kvcore) == (0, 0)
    assert (report.removes_only_by_recording, report.removes_only_by_kvcore) == (0, 0)
    assert report.kvcore_hit_tokens == report.recording_hit_tokens == README_HIT_TOKENS
    lines = report.lines()
    assert "batches agreeing event for event: 400 of 400" in lines
    assert "first divergence: none" in lines
    assert json.loads(json.dumps(report.to_dict()))["stores"]["agreeing"] == 10_488


def test_the_hit_cap_never_binds_on_this_trace_so_the_default_rules_agree_too(vllm_messages):
    # No request of the 400 is a multiple of 16 tokens with every block cached: the cap, a rule
    # of vLLM's, is invisible here (test_the_hit_cap_is_what_makes_a_repeated_prompt_agree shows it).
    text = requests_scenario(read_trace(TRACE, first=400).requests, recompute_last_token=False)
    report = against(vllm_messages, text)
    assert report.batches_agreeing == 400 and report.kvcore_hit_tokens == README_HIT_TOKENS


def test_without_the_null_block_kvcore_has_one_page_more_and_parts_from_vllm_at_batch_112(vllm_messages):
    # 3,000 pages instead of 2,999: kvcore keeps one block vLLM had to reuse.
    text = requests_scenario(read_trace(TRACE, first=400).requests, gpu_blocks=3001)
    report = against(vllm_messages, text)
    difference = report.first_divergence
    assert difference.batch == 112 and difference.seq == 111  # batch 112 is step 112: message 112, seq 111
    assert difference.removed_only_by_recording == ("block 7 (positions 96..111): 528..543",)
    assert difference.stored_only_by_recording == difference.stored_only_by_kvcore == ()
    assert report.stores_only_by_recording == report.stores_only_by_kvcore == 0
    assert report.batches_agreeing < 400 and report.differing_batches[0] == 112
    assert any(line.startswith("first divergence: batch 112 (seq 111): the recording removed what kvcore did not")
               for line in report.lines())


def test_a_recording_with_one_store_dropped_differs_first_at_that_batch(vllm_messages, vllm_scenario):
    batch = 37
    events = raw_batches(VLLM)[batch]
    blocks = sum(len(e["block_hashes"]) for e in events if e["type"] == "BlockStored")
    assert blocks, "batch 37 stores a chain in the recording"
    messages = mutated(vllm_messages, batch, lambda evs: [e for e in evs if e["type"] != "BlockStored"])
    report = against(messages, vllm_scenario)
    difference = report.first_divergence
    assert difference.batch == batch + 1  # the step of message `batch` (0-based)
    assert difference.stored_only_by_recording == ()
    listed = [b for b in difference.stored_only_by_kvcore if not b.startswith("and ")]
    assert len(listed) == min(blocks, 8)
    assert report.differing_batches[0] == batch + 1
    assert report.batches_agreeing == 400 - len(report.differing_batches)


def test_a_recording_with_a_removal_added_differs_first_at_that_batch(vllm_messages, vllm_scenario):
    first_hash = raw_batches(VLLM)[0][0]["block_hashes"][0]  # the root block of request 0: 0..15
    messages = mutated(vllm_messages, 5, lambda evs: evs + [removed([first_hash])])
    report = against(messages, vllm_scenario)
    difference = report.first_divergence
    assert difference.batch == 6
    assert difference.removed_only_by_recording == ("block 1 (positions 0..15): 0..15",)
    assert difference.removed_only_by_kvcore == difference.stored_only_by_kvcore == ()
    assert report.removes_only_by_recording == 1


# -- to-kvs and the round trip ---------------------------------------------------------------


def test_stored_chains_become_acquires_and_publishes_in_order():
    messages = recording(
        [stored([1, 2], None, range(8))],
        [stored([3], 2, range(8, 12)), stored([4], None, range(20, 24))],
        [],
        [removed([4])],
    )
    text = recording_to_scenario(messages, source="hand-made")
    body = [line for line in text.splitlines() if line and not line.startswith(("#", ">", "title:", "description:"))]
    assert body == [
        "cache hash pages=4 tokens_per_page=4",
        "acquire b0000 0..7", "publish b0000", "release b0000",
        "acquire b0001.1 0..11", "publish b0001.1", "acquire b0001.2 20..23", "publish b0001.2",
        "release b0001.1", "release b0001.2",
        "acquire b0002", "release b0002",
        "acquire b0003", "release b0003",
    ]
    scenario = parse_scenario(text)
    assert format_scenario(scenario) == "\n".join(line for line in text.splitlines() if not line.startswith("#")) + "\n"
    report = against(messages, text)
    # Every store agrees, batch by batch; the removal is the server's, kvcore had room for all.
    assert report.differing_batches == (4,) and report.stores_agreeing == 4
    assert report.first_divergence.removed_only_by_recording == ("block 1 (positions 0..3): 20..23",)


def test_the_vllm_recording_round_trips_to_the_same_content_chains(vllm_messages):
    figures = independent_figures(raw_batches(VLLM))
    text = recording_to_scenario(vllm_messages, source=VLLM.name)
    assert parse_scenario(text).config.pages == figures["distinct"] == 9_433
    report = against(vllm_messages, text)
    # kvcore, never short of pages, stores each distinct chain once, in the batch that first
    # stored it, and nothing else; what the server stored again after reusing a block's page
    # (and the removals themselves) is the server's alone.
    assert report.stores_agreeing == figures["distinct"]
    assert report.stores_only_by_kvcore == 0 and report.removes_only_by_kvcore == 0
    assert report.stores_only_by_recording == figures["stored"] - figures["distinct"]
    assert report.recording_batches == report.scenario_batches == 400


def test_a_recording_mixing_block_sizes_takes_the_size_most_chains_have_and_says_so():
    # LMCache's chunks beside the GPU's blocks: the chains' tokens are kept, cut into pages of 4
    messages = recording([stored([1], None, range(4))], [stored([2], None, range(8), size=8)],
                         [stored([3], 1, range(4, 8))])
    text = recording_to_scenario(messages)
    assert "# The recording stores chains of blocks of several sizes or another size (2 of 4, 1 of 8 tokens): " \
           "pages of 4 tokens (the size most chains have)" in text
    scenario = parse_scenario(text)
    assert (scenario.config.tokens_per_page, scenario.config.pages) == (4, 4)  # 1 + 2 + 1 pages' ends
    assert "acquire b0001 0..7" in text and "acquire b0002 0..7" in text  # same tokens, any page size


def test_a_page_size_given_cuts_every_chain_into_it_and_counts_the_partial_pages():
    messages = recording([stored([1], None, range(4))], [stored([2], None, range(8), size=8)])
    scenario = parse_scenario(recording_to_scenario(messages, tokens_per_page=8))
    # block 1 ends inside a page (a partial page held while its batch runs); block 2 is one page
    assert (scenario.config.tokens_per_page, scenario.config.pages) == (8, 2)
    assert parse_scenario(recording_to_scenario(messages, tokens_per_page=8, pages=9)).config.pages == 9


def test_a_chain_under_a_parent_never_seen_is_left_out_and_said():
    messages = recording([stored([5], 99, range(4))])  # joined late: parent 99 never stored
    text = recording_to_scenario(messages)
    assert "1 stored chains whose parent was never stored are left out" in text
    assert "acquire b0000\n" in text
    report = against(messages, text)
    assert report.first_divergence.stored_only_by_recording == ("a block under unseen ancestors: 0..3",)


def test_an_undecodable_message_is_an_empty_batch_not_a_failure():
    messages = recording([stored([1], None, range(4))], [])
    messages[1] = Message(b"kv", 1, b"\xc1 not msgpack")
    report = against(messages, recording_to_scenario(messages))
    assert report.undecodable_batches == (2,) and report.batches_agreeing == 2
    assert not report.agrees


# -- the vLLM rule the recording cannot show ------------------------------------------------


def test_the_hit_cap_is_what_makes_a_repeated_prompt_agree():
    """vLLM 0.33 ``KVCacheManager.get_computed_blocks``: ``max_cache_hit_length =
    request.num_tokens - 1``; a prompt of exactly two full blocks, sent twice, hits one block
    the second time, recomputes the second and caches it again (a duplicate: BlockPool does
    not deduplicate), so vLLM's stream stores block 2 twice. Made here as vLLM's code would."""
    messages = recording([stored([1, 2], None, range(8))], [stored([3], 1, range(4, 8))])
    rules = "cache hash pages=8 tokens_per_page=4{}\nacquire a 0..7\npublish a\nrelease a\n" \
            "acquire b 0..7\npublish b\nrelease b\n"
    textbook = against(messages, rules.format(""))
    assert textbook.differing_batches == (2,)
    assert textbook.first_divergence.stored_only_by_recording == ("block 2 (positions 4..7): 4..7",)
    assert textbook.kvcore_hit_tokens == 8 and textbook.recording_hit_tokens == 4
    vllm = against(messages, rules.format(" recompute_last_token=yes"))
    assert vllm.agrees and vllm.batches_agreeing == 2
    assert vllm.kvcore_hit_tokens == vllm.recording_hit_tokens == 4


def test_against_refuses_a_scenario_for_another_cache_kind():
    with pytest.raises(ValueError, match="hash cache"):
        against(recording([]), "cache trie pages=8 tokens_per_page=4\nacquire a 1\n")


def test_the_batch_against_names_is_the_step_the_watch_shows_as_that_batch(vllm_messages):
    from kvviz.watch.timeline import WatchTimeline

    text = requests_scenario(read_trace(TRACE, first=400).requests, gpu_blocks=3001)
    difference = against(vllm_messages, text).first_divergence
    frame = WatchTimeline.from_messages(vllm_messages).frame(difference.batch)  # what --step N and g show
    assert frame.message.seq == difference.seq
    assert frame.narration.startswith(f"Batch {difference.batch} (seq {difference.seq})")
