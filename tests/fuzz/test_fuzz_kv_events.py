# SPDX-License-Identifier: Apache-2.0
"""Fuzzing the KV-event decoder (``kvviz watch``) with random bytes, random msgpack values and
mutations of real payloads.

The promise: whatever a payload holds, :func:`decode_payload` returns a :class:`Batch` or raises
:class:`DecodeError` with one line, never another exception, never more memory than a cap or
more time than an alarm; a decoded batch always feeds the forest without an error. A header
claiming billions of items is refused before anything is allocated (tracemalloc's peak stays
under 64 KB).

The seeds are payloads shaped like vLLM's and SGLang's (maps with unknown fields, legacy arrays,
signed, unsigned and bytes hashes), built here so the test runs without the shared data, plus
the first payloads of both shared recordings when they are present. ``KVVIZ_FUZZ_SCALE``
(default 1) multiplies the number of examples: ``KVVIZ_FUZZ_SCALE=100`` is the soak run.
"""

from __future__ import annotations

import base64
import json
import tracemalloc
from pathlib import Path

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvviz.watch.forest import Forest
from kvviz.watch.wire import Batch, DecodeError, decode_payload

from .bounds import alarm, fuzz_scale, memory_cap

SCALE = fuzz_scale()
MEMORY_HEADROOM = 512 * 1024 * 1024
SECONDS_PER_EXAMPLE = 10
RECORDINGS = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "kv-events"

encode = msgspec.msgpack.encode
SEEDS = [
    encode([1.5, [{"type": "BlockStored", "block_hashes": [2**64 - 1, 7], "parent_block_hash": None,
                   "token_ids": list(range(32)), "block_size": 16, "lora_id": None, "medium": "GPU",
                   "lora_name": None, "extra_keys": [None, None], "group_idx": 0,
                   "kv_cache_spec_kind": "full_attention"},
                  {"type": "BlockRemoved", "block_hashes": [7, 2**64 - 1], "medium": "GPU", "group_idx": 0}], 0]),
    encode([0.0, [{"type": "AllBlocksCleared"},
                  {"type": "BlockStored", "block_hashes": [-5, -(2**63)], "parent_block_hash": 3,
                   "token_ids": [1, 2, 3, 4], "block_size": 2, "lora_id": None, "medium": None}], None]),
    encode([2.0, [["BlockStored", [b"\x01" * 32], None, [9, 9], 2, 3, "CPU_PINNED"], ["BlockRemoved", [b"\x01" * 32]],
                  ["AllBlocksCleared"], ["BlockTransferred", 1, 2]]]),
]
for _name in ("vllm-0.33.0-conversation-400.jsonl", "sglang-0.5.23-conversation-400.jsonl"):
    if (RECORDINGS / _name).is_file():
        with open(RECORDINGS / _name, encoding="utf-8") as _lines:
            SEEDS += [base64.b64decode(json.loads(next(_lines))["payload"]) for _ in range(3)]


def decodes_or_refuses(payload: bytes) -> None:
    """The promise, for one payload."""
    with memory_cap(MEMORY_HEADROOM), alarm(SECONDS_PER_EXAMPLE):
        try:
            batch = decode_payload(payload, seq=1, topic="kv")
        except DecodeError as refused:
            assert str(refused) and "\n" not in str(refused)
            return
        assert isinstance(batch, Batch)
        Forest().apply(batch, 1)  # whatever decodes, the forest takes


@st.composite
def mutant(draw) -> bytes:
    data = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(1, 6))):
        where = draw(st.integers(0, len(data)))
        action = draw(st.sampled_from(["replace", "insert", "delete", "repeat", "inflate"]))
        if action == "replace" and where < len(data):
            data[where] = draw(st.integers(0, 255))
        elif action == "insert":
            data[where:where] = draw(st.binary(min_size=1, max_size=8))
        elif action == "delete":
            del data[where:where + draw(st.integers(1, 16))]
        elif action == "repeat":
            piece = bytes(data[where:where + draw(st.integers(1, 32))])
            data[where:where] = piece * draw(st.integers(1, 64))
        else:  # a 32-bit length header claiming far more than the payload holds
            header = draw(st.sampled_from([b"\xdd", b"\xdf", b"\xdb", b"\xc6", b"\xc9"]))
            data[where:where] = header + draw(st.sampled_from([b"\xff\xff\xff\xff", b"\x00\x10\x00\x00",
                                                              b"\x7f\xff\xff\xff"]))
    return bytes(data)


MSGPACK_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | st.text(max_size=12)
    | st.binary(max_size=33) | st.sampled_from(["BlockStored", "BlockRemoved", "AllBlocksCleared", "type",
                                                "block_hashes", "token_ids", "block_size", "medium"]),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(
        st.sampled_from(["type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
                         "lora_name", "medium", "group_idx"]) | st.text(max_size=4), inner, max_size=5),
    max_leaves=30,
)


@st.composite
def batch_shaped(draw) -> bytes:
    """A payload shaped like a batch, with random events: exercises the validation, not the parser."""
    events = draw(st.lists(
        st.one_of(
            st.fixed_dictionaries({"type": st.sampled_from(["BlockStored", "BlockRemoved", "AllBlocksCleared"])},
                                  optional={"block_hashes": MSGPACK_VALUES, "parent_block_hash": MSGPACK_VALUES,
                                            "token_ids": MSGPACK_VALUES, "block_size": MSGPACK_VALUES,
                                            "medium": MSGPACK_VALUES, "lora_id": MSGPACK_VALUES,
                                            "lora_name": MSGPACK_VALUES}),
            st.lists(MSGPACK_VALUES, max_size=8).map(lambda items: ["BlockStored", *items]),
            MSGPACK_VALUES),
        max_size=6))
    return encode([draw(MSGPACK_VALUES), events, draw(MSGPACK_VALUES)])


FUZZ = settings(max_examples=150 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.binary(max_size=300))
def test_random_bytes_decode_or_are_refused_in_one_line(payload):
    decodes_or_refuses(payload)


@FUZZ
@given(mutant())
def test_mutated_real_payloads_decode_or_are_refused_in_one_line(payload):
    decodes_or_refuses(payload)


@FUZZ
@given(MSGPACK_VALUES.map(encode))
def test_any_msgpack_value_decodes_or_is_refused_in_one_line(payload):
    decodes_or_refuses(payload)


@FUZZ
@given(batch_shaped())
def test_batches_of_random_events_decode_or_are_refused_in_one_line(payload):
    decodes_or_refuses(payload)


@settings(max_examples=60 * SCALE, deadline=None)
@given(prefix=st.sampled_from([b"", b"\x93\xcb" + b"\x00" * 8, b"\x92\xc0\x91\x81\xa4type"]),
       header=st.sampled_from([b"\xdd", b"\xdf", b"\xdb", b"\xc6", b"\xc9", b"\xdc", b"\xde", b"\xda", b"\xc5"]),
       length=st.integers(2**16, 2**32 - 1), tail=st.binary(max_size=64))
def test_a_header_claiming_a_huge_length_is_refused_before_allocating(prefix, header, length, tail):
    width = 2 if header in (b"\xdc", b"\xde", b"\xda", b"\xc5") else 4
    payload = prefix + header + (length % 2 ** (8 * width)).to_bytes(width, "big") + tail
    tracemalloc.start()
    try:
        try:
            decode_payload(payload, seq=0)
        except DecodeError:
            pass
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024
