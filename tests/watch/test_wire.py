# SPDX-License-Identifier: Apache-2.0
"""The KV-event decoder: both shared recordings read exactly as an independent reader reads
them, every oddity of unknown publishers survived, every bad or oversized payload refused in
one line before it costs memory."""

from __future__ import annotations

import tracemalloc
from collections import Counter

import msgspec
import pytest

from kvviz.core import limits
from kvviz.watch.wire import (AllBlocksCleared, Batch, BlockRemoved, BlockStored, DecodeError,
                                           UnknownEvent, decode_payload, key_label, key_order, block_hash_text,
                                           medium_label, scan_msgpack)

from .wire_reference import SGLANG, VLLM, count_values, events_of, figures, read_lines

encode = msgspec.msgpack.encode
RECORDINGS = [pytest.param(VLLM, id="vllm"), pytest.param(SGLANG, id="sglang")]


def batch_of(*events, ts=1.5, rank=0) -> bytes:
    return encode([ts, list(events), rank])


def stored_map(**fields) -> dict:
    return {"type": "BlockStored", **fields}


# -- the shared recordings, against the independent reader ---------------------------------------


@pytest.mark.parametrize("path", RECORDINGS)
def test_every_figure_of_a_recording_matches_the_independent_reader(path):
    expected = figures(path)
    batches = [decode_payload(r["payload"], seq=r["seq"], topic=r["topic"]) for r in read_lines(path)]
    events = [e for b in batches for e in b.events]
    assert len(batches) == expected.messages == 400
    assert Counter(type(e).__name__ for e in events) == expected.events_by_type
    assert sum(len(e.hashes) for e in events if isinstance(e, BlockStored)) == expected.blocks_stored
    removed = sum(len(e.hashes) for e in events if isinstance(e, BlockRemoved))
    assert removed == expected.blocks_removed + expected.removed_unknown
    keys = {k for e in events if isinstance(e, (BlockStored, BlockRemoved)) for k in e.hashes}
    assert len(keys) == expected.distinct_keys
    assert Counter(f for b in batches for f in b.unknown_fields) == expected.unknown_fields
    assert [b.seq for b in batches] == list(range(400))


@pytest.mark.parametrize("path", RECORDINGS)
def test_every_event_of_a_recording_decodes_field_for_field(path):
    for record in read_lines(path):
        batch = decode_payload(record["payload"], seq=record["seq"], topic=record["topic"])
        assert batch.topic == record["topic"] and batch.lints == ()
        for event, (kind, known, _unknown) in zip(batch.events, events_of(record["payload"]), strict=True):
            assert type(event).__name__ == kind
            if kind == "BlockStored":
                assert event.hashes == tuple(known["block_hashes"])
                assert event.parent == known["parent_block_hash"]
                assert event.token_ids == tuple(known["token_ids"])
                assert event.block_size == known["block_size"]
                assert event.medium == known["medium"]
            elif kind == "BlockRemoved":
                assert event.hashes == tuple(known["block_hashes"]) and event.medium == known["medium"]


@pytest.mark.parametrize("path", RECORDINGS)
def test_the_header_scan_counts_every_value_the_independent_reader_counts(path):
    for record in read_lines(path)[:60]:
        assert scan_msgpack(record["payload"]) == count_values(record["payload"])


def test_the_recordings_hashes_are_kept_as_sent_unsigned_for_vllm_and_signed_for_sglang():
    def hashes(path):
        return [k for r in read_lines(path)
                for e in decode_payload(r["payload"], seq=0).events if isinstance(e, BlockStored) for k in e.hashes]
    assert max(hashes(VLLM)) >= 2**63  # vLLM's unsigned 64-bit fold
    assert min(hashes(SGLANG)) < 0  # SGLang's signed int64


# -- what unknown publishers send ----------------------------------------------------------------


def test_a_legacy_array_event_reads_like_its_map():
    fields = [[11, 12], 10, [1, 2, 3, 4], 2, 7, "GPU"]
    as_array = decode_payload(batch_of(["BlockStored", *fields]), seq=3)
    as_map = decode_payload(batch_of(stored_map(**dict(zip(
        ["block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium"], fields)))), seq=3)
    assert as_array == as_map
    assert as_array.events == (BlockStored((11, 12), 10, (1, 2, 3, 4), 2, "GPU", 7),)


def test_legacy_arrays_of_each_kind_may_be_cut_short_and_may_carry_extra_items():
    payload = batch_of(["BlockStored", [5], None, [9, 9]], ["BlockRemoved", [5]], ["AllBlocksCleared"],
                       ["BlockRemoved", [6], "CPU", 0, "x"])
    batch = decode_payload(payload, seq=0)
    assert batch.events[0] == BlockStored((5,), None, (9, 9), 2, None, None)
    assert batch.events[1:] == (BlockRemoved((5,), None), AllBlocksCleared(), BlockRemoved((6,), "CPU"))
    assert batch.unknown_fields == (("BlockRemoved", "[3..4]"),)
    assert any("no block_size" in lint for lint in batch.lints)


def test_missing_map_fields_take_their_defaults():
    batch = decode_payload(batch_of({"type": "BlockRemoved"}, stored_map(block_hashes=[1], block_size=0)), seq=0)
    assert batch.events == (BlockRemoved((), None), BlockStored((1,), None, (), 0, None, None))
    assert batch.lints == ()  # a block_size 0 placeholder with no tokens is not odd


def test_unknown_fields_are_ignored_and_listed_once_per_occurrence():
    payload = batch_of(stored_map(block_hashes=[1], token_ids=[0], block_size=1, group_idx=0, extra_keys=[None]),
                       {"type": "BlockRemoved", "block_hashes": [1], "group_idx": 0},
                       {"type": "BlockRemoved", "block_hashes": [1], "group_idx": 1})
    batch = decode_payload(payload, seq=0)
    assert batch.unknown_fields == (("BlockStored", "group_idx"), ("BlockStored", "extra_keys"),
                                    ("BlockRemoved", "group_idx"), ("BlockRemoved", "group_idx"))
    assert len(batch.events) == 3


def test_an_event_with_thousands_of_odd_fields_names_64_and_counts_the_rest():
    event = {"type": "BlockRemoved", "block_hashes": [1], **{f"f{i}": i for i in range(1000)}}
    batch = decode_payload(batch_of(event), seq=0)
    assert len(batch.unknown_fields) == 65 and batch.unknown_fields[-1] == ("BlockRemoved", "… 936 more")


def test_unknown_event_types_are_kept_and_counted_not_fatal():
    payload = batch_of({"type": "BlockTransferred", "block_hashes": [1]}, ["Heartbeat", 1], {"no": "type"},
                       {"type": "AllBlocksCleared"})
    batch = decode_payload(payload, seq=0)
    assert batch.events == (UnknownEvent("BlockTransferred"), UnknownEvent("Heartbeat"),
                            UnknownEvent("(no type)"), AllBlocksCleared())


@pytest.mark.parametrize("key", [0, 1, 2**63, 2**64 - 1, -1, -(2**63), b"\x00" * 32, b"\xab"])
def test_hashes_of_every_kind_are_kept_exactly_as_sent(key):
    batch = decode_payload(batch_of(stored_map(block_hashes=[key], parent_block_hash=key, block_size=0),
                                    {"type": "BlockRemoved", "block_hashes": [key]}), seq=0)
    assert batch.events[0].hashes == (key,) and batch.events[0].parent == key
    assert type(batch.events[1].hashes[0]) is type(key)


def test_a_signed_and_an_unsigned_fold_of_one_hash_show_the_same_label():
    assert key_label(-1, width=16) == key_label(2**64 - 1, width=16) == "ffffffffffffffff"
    assert key_label(-(2**63), width=16) == key_label(2**63, width=16)
    assert key_label(0x7F3A000000000001) == "7f3a0000000…"
    assert key_label(b"\x01\xff") == "01ff"
    assert block_hash_text(-5) == "-5" and block_hash_text(b"\x01") == "0x01"
    assert sorted([b"a", 3, -2], key=key_order) == [-2, 3, b"a"]


def test_token_ids_outside_any_vocabulary_are_kept():
    tokens = [-5, 2**63 - 1, 2**64 - 1, -(2**63), 0]
    batch = decode_payload(batch_of(stored_map(block_hashes=[1], token_ids=tokens, block_size=5)), seq=0)
    assert batch.events[0].token_ids == tuple(tokens) and batch.lints == ()


def test_a_block_stored_whose_tokens_do_not_fill_its_blocks_is_kept_and_linted():
    batch = decode_payload(batch_of(stored_map(block_hashes=[1, 2], token_ids=[1, 2, 3], block_size=2)), seq=4)
    event = batch.events[0]
    assert event.token_ids == (1, 2, 3) and event.block_tokens(0) == (1, 2) and event.block_tokens(1) == (3,)
    assert batch.lints == ("event 0 (BlockStored): 3 token ids for 2 blocks of 2 (4 expected); kept as sent",)


def test_any_medium_is_kept_as_sent_and_normalised_only_for_display():
    mediums = [None, "GPU", "cpu", "CPU_PINNED", "CPU_TIER2", "FS", "OBJ", " disk ", ""]
    batch = decode_payload(batch_of(*({"type": "BlockRemoved", "block_hashes": [1], "medium": m} for m in mediums)),
                           seq=0)
    assert [e.medium for e in batch.events] == mediums
    assert [medium_label(m) for m in mediums] == ["(none)", "GPU", "CPU", "CPU_PINNED", "CPU_TIER2", "FS", "OBJ",
                                                 "DISK", "(none)"]
    assert medium_label("x" * 100) == "X" * 23 + "…"


def test_the_lora_is_its_name_when_given_else_its_id():
    batch = decode_payload(batch_of(stored_map(block_hashes=[], lora_id=3, lora_name="adapter-a"),
                                    stored_map(block_hashes=[], lora_id=3, lora_name=None),
                                    stored_map(block_hashes=[], lora_name="b")), seq=0)
    assert [e.lora for e in batch.events] == ["adapter-a", 3, "b"]


def test_batches_without_a_rank_as_a_map_or_with_extra_items_are_read():
    assert decode_payload(encode([2, []]), seq=0) == Batch(0, "", None, 2.0, (), ())
    assert decode_payload(encode([None, [], None]), seq=1).ts is None
    as_map = decode_payload(encode({"ts": 1.0, "events": [], "data_parallel_rank": 2, "extra": 1}), seq=2)
    assert as_map.rank == 2 and as_map.unknown_fields == (("Batch", "extra"),)
    assert decode_payload(encode([1.0, [], 0, "x", "y"]), seq=3).unknown_fields == (("Batch", "[3..4]"),)
    nan = decode_payload(encode([float("nan"), [], 0]), seq=4)
    assert nan.ts is None and nan.lints == ("the timestamp is nan; read as none",)


# -- refusals --------------------------------------------------------------------------------------


@pytest.mark.parametrize("payload, says", [
    (b"", "empty"),
    (b"\xc1", "not a msgpack value"),
    (b"\x92\x91\x01", "ends early: a value is missing at byte 3"),
    (b"\x93\x01", "claims 3 values; 1 byte remains"),
    (b"\x90\x90", "after its one value"),
    (b"\xcb\x00", "runs 7 bytes past the end"),
    (encode("a string"), "expected the array"),
    (encode([1.0]), "array of 1 items"),
    (encode([1.0, {"a": 1}]), "events are a map"),
    (encode([1.0, [7]]), "event 0 is an int"),
    (encode([1.0, [{"type": "BlockStored", "block_hashes": "abc"}]]), "block_hashes is a string"),
    (encode([1.0, [{"type": "BlockStored", "block_hashes": [1.5]}]]), "block_hashes[0] is a float"),
    (encode([1.0, [{"type": "BlockStored", "token_ids": [1, True]}]]), "token_ids[1] is a bool"),
    (encode([1.0, [{"type": "BlockStored", "block_size": -1}]]), "block_size is an int"),
    (encode([1.0, [{"type": "BlockStored", "parent_block_hash": [1]}]]), "parent_block_hash is an array"),
    (b"\x92\xcb" + b"\x00" * 8 + b"\xd7\xff" + b"\xff" * 8, "not valid msgpack: Invalid MessagePack timestamp"),
])
def test_a_bad_payload_is_refused_in_one_line(payload, says):
    with pytest.raises(DecodeError) as refused:
        decode_payload(payload, seq=0)
    assert says in str(refused.value) and "\n" not in str(refused.value)


def test_a_payload_that_is_not_bytes_is_refused_as_a_decode_error():
    with pytest.raises(DecodeError, match="not bytes"):
        decode_payload("text", seq=0)  # type: ignore[arg-type]


HUGE_HEADERS = [
    pytest.param(b"\xdd\xff\xff\xff\xff", id="array32"),
    pytest.param(b"\xdf\xff\xff\xff\xff", id="map32"),
    pytest.param(b"\xdb\xff\xff\xff\xff", id="str32"),
    pytest.param(b"\xc6\xff\xff\xff\xff", id="bin32"),
    pytest.param(b"\xc9\xff\xff\xff\xff\x01", id="ext32"),
    pytest.param(b"\x93\xcb" + b"\x00" * 8 + b"\xdd\xff\xff\xff\xff" + b"\x80" * 64, id="nested-array32"),
    pytest.param(encode([1.0, [{"type": "BlockStored", "pad": None}]])[:-1] + b"\xdf\xff\xff\xff\xff",
                 id="map-in-event"),
]


@pytest.mark.parametrize("payload", HUGE_HEADERS)
def test_a_header_claiming_four_billion_items_is_refused_before_anything_is_allocated(payload):
    tracemalloc.start()
    try:
        with pytest.raises(DecodeError, match="claims"):
            decode_payload(payload, seq=0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024


def test_a_megabyte_of_empty_maps_is_refused_by_the_container_limit_before_decoding():
    payload = b"\xdd" + (limits.MAX_EVENT_CONTAINERS + 1).to_bytes(4, "big") + b"\x80" * (limits.MAX_EVENT_CONTAINERS + 1)
    tracemalloc.start()
    try:
        with pytest.raises(DecodeError, match="arrays and maps"):
            decode_payload(payload, seq=0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1024 * 1024  # decoded, these maps would take about 40 MB


def unknown_field_of(count: int, item: bytes) -> bytes:
    """A one-event batch whose event carries ``count`` copies of ``item`` in an unknown field."""
    head = encode([1.0, [{"type": "AllBlocksCleared", "pad": None}]])
    assert head.endswith(b"\xc0")
    return head[:-1] + b"\xdd" + count.to_bytes(4, "big") + item * count


def test_the_value_limit_holds_at_its_edge():
    # batch + ts + events + event + 2 keys + "type" value + the pad array = 8 values, then the items
    fixed = 8
    assert scan_msgpack(unknown_field_of(limits.MAX_EVENT_ITEMS - fixed, b"\x01")) == limits.MAX_EVENT_ITEMS
    with pytest.raises(DecodeError, match="more than 1,000,000 values"):
        decode_payload(unknown_field_of(limits.MAX_EVENT_ITEMS - fixed + 1, b"\x01"), seq=0)


def test_the_container_limit_holds_at_its_edge():
    fixed = 4  # batch, events, event, pad
    decode_payload(unknown_field_of(limits.MAX_EVENT_CONTAINERS - fixed, b"\x90"), seq=0)
    with pytest.raises(DecodeError, match="more than 200,000 arrays and maps"):
        decode_payload(unknown_field_of(limits.MAX_EVENT_CONTAINERS - fixed + 1, b"\x90"), seq=0)


def test_the_nesting_limit_holds_at_its_edge():
    def nested(depth: int) -> bytes:
        return b"\x91" * depth + b"\xc0"
    assert scan_msgpack(nested(limits.MAX_EVENT_NESTING)) == limits.MAX_EVENT_NESTING + 1
    with pytest.raises(DecodeError, match="deeper than 32"):
        scan_msgpack(nested(limits.MAX_EVENT_NESTING + 1))
    with pytest.raises(DecodeError, match="deeper than 32"):
        decode_payload(b"\x92\xc0" + nested(200_000), seq=0)  # msgspec would raise RecursionError


def test_the_payload_size_limit_holds_at_its_edge():
    head = encode([1.0, [{"type": "AllBlocksCleared", "pad": b""}]])
    room = limits.MAX_EVENT_PAYLOAD_BYTES - (len(head) - 2 + 5)  # bin8 (2 bytes) becomes bin32 (5)
    fits = head[:-2] + b"\xc6" + room.to_bytes(4, "big") + b"\x00" * room
    assert len(fits) == limits.MAX_EVENT_PAYLOAD_BYTES
    assert decode_payload(fits, seq=0).unknown_fields == (("AllBlocksCleared", "pad"),)
    with pytest.raises(DecodeError, match="the limit is 16,777,216"):
        decode_payload(fits + b"\x00", seq=0)


def test_the_scan_refuses_runs_that_pass_their_container():
    # Eight uint16s claimed, seven present, then the outer array's next value: a run must stop
    # at its container's count, or it would swallow the sibling and miss the short container.
    inner = b"\x98" + b"\xcd\x00\x01" * 7
    assert scan_msgpack(b"\x92" + b"\x97" + b"\xcd\x00\x01" * 7 + b"\xcd\x00\x02") == 10
    with pytest.raises(DecodeError):
        scan_msgpack(b"\x91" + inner)


def test_a_payload_too_short_to_pass_the_item_limits_skips_the_scan_and_still_keeps_the_nesting_limit():
    # Under MAX_EVENT_CONTAINERS bytes no payload can exceed the value or container limits, so
    # decode_payload checks only the nesting, on the decoded values: it must refuse exactly
    # what the header scan refuses, for arrays, maps (keys and values) and empty containers.
    def verdict(check, payload):
        try:
            check(payload)
        except DecodeError as refused:
            return "too deep" if "deeper than 32" in str(refused) else "other"
        return "read"

    head = encode([1.0, [{"type": "AllBlocksCleared", "pad": None}]])[:-1]
    for depth in range(limits.MAX_EVENT_NESTING - 4, limits.MAX_EVENT_NESTING + 4):
        for payload in (b"\x92\xc0" + b"\x91" * depth + b"\xc0", head + b"\x91" * depth + b"\x90",
                        b"\x92\xc0" + b"\x81\xa1k" * depth + b"\xc0", head + b"\x81\x91" * depth + b"\xc0\xc0"):
            assert len(payload) < limits.MAX_EVENT_CONTAINERS
            scanned = verdict(scan_msgpack, payload)
            assert verdict(lambda p: decode_payload(p, seq=0), payload) == scanned or scanned == "read"
            assert (scanned == "too deep") == (verdict(lambda p: decode_payload(p, seq=0), payload) == "too deep")


def test_a_stored_event_with_tokens_but_no_hashes_is_a_lint_not_a_crash():
    """Found by the decoder fuzzer: token ids, a block size and an empty hash list divided by
    zero while sharing the tokens out among the hashes."""
    import msgspec

    from kvviz.watch.wire import decode_payload

    event = {"type": "BlockStored", "block_hashes": [], "parent_block_hash": None, "token_ids": list(range(16)),
             "block_size": 16, "lora_id": None, "medium": "GPU"}
    batch = decode_payload(msgspec.msgpack.encode([1.5, [event], 0]), seq=3)
    (stored,) = batch.events
    assert stored.hashes == () and len(stored.token_ids) == 16
    assert any("16 token ids for 0 blocks" in lint for lint in batch.lints)
