# SPDX-License-Identifier: Apache-2.0
"""Synthetic recordings in the shapes real publishers send, for tests/watch/test_foreign_publishers.py.

Each publisher below is mimicked from its source (the sources are named in the report of the
helper that wrote this; the shapes are summarised here so a reader can check them):

- ``vllm_legacy``: vLLM 0.9 (msgspec ``array_like=True, omit_defaults=True, tag=True``): events
  are arrays ``["BlockStored", hashes, parent, tokens, block_size, lora_id]``, the batch is
  ``[ts, events]`` (no rank field yet); unsigned 64-bit hashes, some above 2^63.
- ``vllm_current``: vLLM main (``tag=True, omit_defaults=True``, no ``array_like``): events are
  maps with ``"type"``; ``extra_keys``/``group_idx``/``kv_cache_spec_kind`` only when set; the
  batch a map ``{"ts", "events", "data_parallel_rank"}``; raw 32-byte sha256 hashes (the default
  without ``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES``); a hybrid model's two cache groups storing
  the same hashes.
- ``sglang_array``: SGLang main (``array_like=True``, no ``omit_defaults``): every field
  present, ``medium`` last (None or ``GPU``/``CPU_PINNED``), a trailing ``{"cache_salt"}`` map on
  salted stores, the batch ``[ts, events, attn_dp_rank]``; signed int64 hashes; empty topic.
- ``dynamo_trtllm``: Dynamo's TensorRT-LLM publisher: maps without ``medium`` or ``lora_id``,
  ``block_mm_infos``, signed hashes, one event per batch, empty topic.
- ``dynamo_consolidator``: Dynamo's Rust consolidator (rmp_serde, structs as arrays): one block
  per event, ``medium`` skipped, token ids as i32.
- ``lmcache``: LMCache through vLLM's connector: one chunk per BlockStored, ``medium`` ``cpu``
  (lower case), a partial last chunk, a chunk with no token ids, never a removal; the GPU blocks
  of the same prefix in the same stream.
- ``atom``: ROCm ATOM (``array_like, omit_defaults, tag``, ``medium`` defaulting to ``GPU`` so a
  GPU event omits it), one hash per removal, ``REMOTE`` stores, a ``BlockTransferred``, the batch
  ``[ts, events]``, and one-frame messages (no seq: the subscriber numbers them).
- ``eagle``: vLLM with EAGLE speculative decoding: ``token_ids`` as (token, next token) pairs.
- ``odd``: what the issue lists: odd mediums, extra fields, unknown types, block_size 0
  placeholders, tokens outside any vocabulary, ts missing / None / NaN, AllBlocksCleared
  mid-stream, a late attach (orphans, removals of unknown blocks), multi-hash removals child
  first and parent first, duplicate stores across tiers, data_parallel_rank set.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

import msgspec

U64 = (1 << 64) - 1


def _u64(*parts: object) -> int:
    """A deterministic unsigned 64-bit hash (vLLM's low 64 bits of sha256)."""
    return int.from_bytes(hashlib.sha256(repr(parts).encode()).digest()[-8:], "big")


def _i64(*parts: object) -> int:
    """The same, folded to signed int64 (SGLang, Dynamo's TensorRT-LLM path)."""
    value = _u64(*parts)
    return value - (1 << 64) if value >= 1 << 63 else value


def _b32(*parts: object) -> bytes:
    return hashlib.sha256(repr(parts).encode()).digest()


def _tokens(start: int, count: int) -> list[int]:
    return list(range(start, start + count))


def _line(topic: str, seq: int, payload: object, rank: int = 0) -> str:
    raw = payload if isinstance(payload, bytes) else msgspec.msgpack.encode(payload)
    record = {"topic": topic, "seq": seq, "payload": base64.b64encode(raw).decode("ascii")}
    if rank:
        record["rank"] = rank
    return json.dumps(record)


def vllm_legacy() -> list[str]:
    a, b, c, d = (_u64("legacy", i) for i in range(4))
    high = (1 << 63) + 12345  # above 2^63: a signed reader would see a negative number
    events = [
        [1.0, [["BlockStored", [a, b], None, _tokens(0, 32), 16, None]]],
        [2.0, [["BlockStored", [high], b, _tokens(32, 16), 16, None]]],
        [3.0, [["BlockStored", [c, d], None, _tokens(100, 32), 16, 7]]],  # lora_id 7
        [4.0, [["BlockRemoved", [high, b]]]],  # child first
        [5.0, [["AllBlocksCleared"]]],
        [6.0, [["BlockStored", [a], None, _tokens(0, 16), 16, None]]],
    ]
    return [_line("kv", seq, batch) for seq, batch in enumerate(events)]


def vllm_current() -> list[str]:
    h = [_b32("current", i) for i in range(5)]

    def stored(hashes, parent, tokens, **extra):
        event = {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent,
                 "token_ids": tokens, "block_size": 16, "lora_id": None, "medium": "GPU", "lora_name": None}
        event.update(extra)
        return event

    batches = [
        {"ts": 10.0, "events": [stored(h[0:2], None, _tokens(0, 32), extra_keys=[None, ["cache-salt"]])],
         "data_parallel_rank": 0},
        # A hybrid model: group 1 (sliding window) stores the same hashes again.
        {"ts": 10.5, "events": [stored(h[0:2], None, _tokens(0, 32), group_idx=1,
                                       kv_cache_spec_kind="sliding_window", kv_cache_spec_sliding_window=128)],
         "data_parallel_rank": 0},
        {"ts": 11.0, "events": [stored(h[2:3], h[1], _tokens(32, 16), lora_name="sql-adapter")],
         "data_parallel_rank": 0},
        {"ts": 12.0, "events": [{"type": "BlockRemoved", "block_hashes": [h[1], h[2]], "medium": "GPU"},
                                {"type": "BlockRemoved", "block_hashes": [h[0], h[1]], "medium": "GPU",
                                 "group_idx": 1}],
         "data_parallel_rank": 0},
        {"ts": 13.0, "events": [stored(h[3:5], h[0], _tokens(200, 32), medium="CPU")], "data_parallel_rank": 0},
    ]
    return [_line("kv", seq, batch) for seq, batch in enumerate(batches)]


def sglang_array() -> list[str]:
    h = [_i64("sglang", i) for i in range(6)]
    batches = [
        [0.5, [["AllBlocksCleared"]], 0],
        [1.0, [["BlockStored", h[0:3], None, _tokens(0, 48), 16, None, None]], 0],
        [1.5, [["BlockStored", h[3:4], h[2], _tokens(48, 16), 16, None, "GPU", {"cache_salt": "tenant-a"}]], 0],
        [2.0, [["BlockStored", h[0:2], None, _tokens(0, 32), 16, None, "CPU_PINNED"]], 0],  # backed up
        [2.5, [["BlockRemoved", [h[0], h[1], h[2], h[3]], "GPU"]], 0],  # parent first
        [3.0, [["BlockStored", h[4:6], h[1], _tokens(32, 32), 16, None, "GPU"]], 0],  # off the CPU copy
    ]
    return [_line("", seq, batch) for seq, batch in enumerate(batches)]


def dynamo_trtllm() -> list[str]:
    h = [_i64("trtllm", i) for i in range(4)]
    events = [
        {"type": "BlockStored", "block_hashes": h[0:2], "parent_block_hash": None, "token_ids": _tokens(0, 64),
         "block_size": 32},
        {"type": "BlockStored", "block_hashes": h[2:3], "parent_block_hash": h[1], "token_ids": _tokens(64, 32),
         "block_size": 32, "lora_name": "chat-lora",
         "block_mm_infos": [{"mm_objects": [{"mm_hash": 99, "offsets": [[0, 5]]}]}]},
        {"type": "BlockRemoved", "block_hashes": [h[2]]},
        {"type": "AllBlocksCleared"},
        {"type": "BlockStored", "block_hashes": [h[3]], "parent_block_hash": None, "token_ids": _tokens(500, 32),
         "block_size": 32},
    ]
    return [_line("", seq, [1_700_000_000.0 + seq, [event], 0]) for seq, event in enumerate(events)]


def dynamo_consolidator() -> list[str]:
    h = [_u64("consolidated", i) for i in range(3)]
    events = [
        ["BlockStored", [h[0]], None, _tokens(0, 4), 4, None],
        ["BlockStored", [h[1]], h[0], _tokens(4, 4), 4, None],
        ["BlockStored", [h[2]], h[1], _tokens(8, 4), 4, None],
        ["BlockRemoved", [h[2]]],
        ["BlockRemoved", [h[1]]],
    ]
    return [_line("", seq, [1_700_000_100.0 + seq, [event], None]) for seq, event in enumerate(events)]


def lmcache() -> list[str]:
    gpu = [_u64("gpu", i) for i in range(4)]
    chunk = [_i64("lmcache-chunk", i) for i in range(3)]
    stored_gpu = {"type": "BlockStored", "block_hashes": gpu, "parent_block_hash": None, "token_ids": _tokens(0, 64),
                  "block_size": 16, "lora_id": None, "medium": "GPU", "lora_name": None}

    def chunk_event(i, parent, tokens, size):
        return {"type": "BlockStored", "block_hashes": [chunk[i]], "parent_block_hash": parent, "token_ids": tokens,
                "block_size": size, "lora_id": None, "medium": "cpu", "lora_name": None}

    batches = [
        [1.0, [stored_gpu], 0],
        [1.1, [chunk_event(0, None, _tokens(0, 32), 32), chunk_event(1, chunk[0], _tokens(32, 32), 32)], 0],
        [1.2, [chunk_event(2, chunk[1], _tokens(64, 7), 7)], 0],  # a partial last chunk
        [1.3, [chunk_event(0, None, [], 32)], 0],  # stored again with no tokens at hand
    ]
    return [_line("kv", seq, batch) for seq, batch in enumerate(batches)]


def atom() -> list[str]:
    h = [_u64("atom", i) for i in range(4)]
    batches = [
        [1.0, [["BlockStored", h[0:2], None, _tokens(0, 32), 16]]],  # GPU: the default, omitted
        [2.0, [["BlockStored", h[2:3], h[1], _tokens(32, 16), 16, None, "REMOTE"]]],
        [3.0, [["BlockTransferred", [h[0]], "GPU", "CPU"]]],
        [4.0, [["BlockRemoved", [h[1]]], ["BlockRemoved", [h[0]]]]],  # one hash each, GPU omitted
        [5.0, [["AllBlocksCleared", "REMOTE"]]],  # one medium cleared
        [6.0, [["BlockStored", [h[3]], None, _tokens(900, 16), 16]]],
    ]
    # ATOM with an empty topic sends the payload alone: the subscriber numbered them 0, 1, 2, ...
    return [_line("", seq, batch) for seq, batch in enumerate(batches)]


def eagle() -> list[str]:
    h = [_u64("eagle", i) for i in range(2)]
    pairs = [[t, t + 1] for t in range(0, 32)]  # (token, next token) for 2 blocks of 16
    batches = [
        [1.0, [{"type": "BlockStored", "block_hashes": h, "parent_block_hash": None, "token_ids": pairs,
                "block_size": 16, "lora_id": None, "medium": "GPU", "lora_name": None}], 0],
        [2.0, [{"type": "BlockRemoved", "block_hashes": [h[1]], "medium": "GPU"}], 0],
    ]
    return [_line("kv", seq, batch) for seq, batch in enumerate(batches)]


def odd() -> list[str]:
    k = [_u64("odd", i) for i in range(12)]
    parent_before_attach = _u64("cached before kvviz listened")
    lines = [
        # A late attach: the parent was stored before kvviz listened; seq starts at 40.
        _line("kv", 40, [None, [{"type": "BlockStored", "block_hashes": [k[0], k[1]],
                                 "parent_block_hash": parent_before_attach,
                                 "token_ids": [-1, 2**31 + 5, 2**40, 3] + _tokens(10, 12) + [-(2**40)] * 16,
                                 "block_size": 16, "medium": "cpu", "vendor_flag": True}], 3], rank=0),
        # ts missing from a map batch; an unknown type; a removal of a block never seen.
        _line("kv", 41, {"events": [{"type": "BlockTransferred", "block_hashes": [k[0]], "from_medium": "cpu",
                                     "to_medium": "GPU"},
                                    {"type": "BlockRemoved", "block_hashes": [parent_before_attach],
                                     "medium": "cpu"}],
                         "data_parallel_rank": 3}),
        # A placeholder (block_size 0, no tokens) and odd mediums.
        _line("kv", 42, [float("nan"), [{"type": "BlockStored", "block_hashes": [k[2]], "parent_block_hash": None,
                                         "token_ids": [], "block_size": 0, "medium": "CPU_TIER2"},
                                        {"type": "BlockStored", "block_hashes": [k[3]], "parent_block_hash": None,
                                         "token_ids": _tokens(300, 16), "block_size": 16, "medium": " fs "}], 3]),
        # Duplicate stores across tiers and twice on one tier.
        _line("kv", 43, [43.0, [{"type": "BlockStored", "block_hashes": [k[4], k[5], k[6]], "parent_block_hash": None,
                                 "token_ids": _tokens(400, 48), "block_size": 16, "medium": "GPU"},
                                {"type": "BlockStored", "block_hashes": [k[4], k[5], k[6]], "parent_block_hash": None,
                                 "token_ids": _tokens(400, 48), "block_size": 16, "medium": "GPU"},
                                {"type": "BlockStored", "block_hashes": [k[4], k[5]], "parent_block_hash": None,
                                 "token_ids": _tokens(400, 32), "block_size": 16, "medium": "CPU"}], 3]),
        # Multi-hash removal child first, then parent first (one copy each).
        _line("kv", 44, [44.0, [{"type": "BlockRemoved", "block_hashes": [k[6], k[5], k[4]], "medium": "GPU"},
                                {"type": "BlockRemoved", "block_hashes": [k[4], k[5], k[6]], "medium": "GPU"}], 3]),
        # AllBlocksCleared mid-stream, then a store.
        _line("kv", 45, [45.0, [{"type": "AllBlocksCleared"},
                                {"type": "BlockStored", "block_hashes": [k[7]], "parent_block_hash": None,
                                 "token_ids": _tokens(700, 16), "block_size": 16, "medium": "GPU"}], 3]),
    ]
    return lines


PUBLISHERS = {
    "vllm_legacy": vllm_legacy,
    "vllm_current": vllm_current,
    "sglang_array": sglang_array,
    "dynamo_trtllm": dynamo_trtllm,
    "dynamo_consolidator": dynamo_consolidator,
    "lmcache": lmcache,
    "atom": atom,
    "eagle": eagle,
    "odd": odd,
}
"""Each mimicked publisher: a function returning its recording's lines."""


def write_recording(directory: Path, name: str) -> Path:
    """Write publisher ``name``'s recording under ``directory``; return its path."""
    path = directory / f"{name}.jsonl"
    path.write_text("\n".join(PUBLISHERS[name]()) + "\n", encoding="utf-8")
    return path
