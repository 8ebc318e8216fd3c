# SPDX-License-Identifier: Apache-2.0
"""An independent reading of KV-event recordings, the oracle of test_wire and test_forest.

Written from the wire format in ../shared/data/kv-events/README.md alone, sharing no code with
kvviz: a plain recursive msgpack reader (no msgspec), the events read as maps or legacy arrays,
and the cache kept as a dict of copies by (key, medium). Deliberately simple and slow: its job is
to be obviously right, so a figure kvviz computes and this computes agree only if both read the
stream the same way on their own.
"""

from __future__ import annotations

import base64
import json
import struct
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECORDINGS = ROOT.parent / "shared" / "data" / "kv-events"
VLLM = RECORDINGS / "vllm-0.33.0-conversation-400.jsonl"
SGLANG = RECORDINGS / "sglang-0.5.23-conversation-400.jsonl"

# The README's fields per event type, in declaration order (a legacy array's order).
FIELDS = {
    "BlockStored": ["block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium",
                    "lora_name"],
    "BlockRemoved": ["block_hashes", "medium"],
    "AllBlocksCleared": ["medium"],
}


class NotMsgpack(ValueError):
    pass


def unpack(data: bytes):
    """The one msgpack value in ``data``."""
    value, end, _count = _read(data, 0)
    if end != len(data):
        raise NotMsgpack("trailing bytes")
    return value


def count_values(data: bytes) -> int:
    """How many msgpack values ``data`` holds, containers and their contents included."""
    return _read(data, 0)[2]


def _read(data: bytes, at: int):
    """(value, next position, values read) for the value at ``at``."""
    b = data[at]
    at += 1
    if b <= 0x7F:
        return b, at, 1
    if b >= 0xE0:
        return b - 0x100, at, 1
    if 0x80 <= b <= 0x8F:
        return _map(data, at, b & 0x0F)
    if 0x90 <= b <= 0x9F:
        return _array(data, at, b & 0x0F)
    if 0xA0 <= b <= 0xBF:
        n = b & 0x1F
        return data[at:at + n].decode("utf-8"), at + n, 1
    if b == 0xC0:
        return None, at, 1
    if b in (0xC2, 0xC3):
        return b == 0xC3, at, 1
    fixed = {0xCA: ">f", 0xCB: ">d", 0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q",
             0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q"}
    if b in fixed:
        size = struct.calcsize(fixed[b])
        return struct.unpack(fixed[b], data[at:at + size])[0], at + size, 1
    lengths = {0xD9: 1, 0xDA: 2, 0xDB: 4, 0xC4: 1, 0xC5: 2, 0xC6: 4}
    if b in lengths:
        width = lengths[b]
        n = int.from_bytes(data[at:at + width], "big")
        at += width
        raw = data[at:at + n]
        return (raw.decode("utf-8") if b >= 0xD9 else bytes(raw)), at + n, 1
    if b in (0xDC, 0xDD):
        width = 2 if b == 0xDC else 4
        return _array(data, at + width, int.from_bytes(data[at:at + width], "big"))
    if b in (0xDE, 0xDF):
        width = 2 if b == 0xDE else 4
        return _map(data, at + width, int.from_bytes(data[at:at + width], "big"))
    raise NotMsgpack(f"unsupported byte 0x{b:02x}")


def _array(data, at, n):
    items, count = [], 1
    for _ in range(n):
        value, at, c = _read(data, at)
        items.append(value)
        count += c
    return items, at, count


def _map(data, at, n):
    result, count = {}, 1
    for _ in range(n):
        key, at, c1 = _read(data, at)
        value, at, c2 = _read(data, at)
        result[key] = value
        count += c1 + c2
    return result, at, count


def read_lines(path: Path) -> list[dict]:
    """The recording's JSON objects, payloads as bytes."""
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            record["payload"] = base64.b64decode(record["payload"])
            records.append(record)
    return records


def events_of(payload: bytes) -> list[tuple[str, dict, list[str]]]:
    """(type, known fields, unknown field names) for each event of one payload."""
    batch = unpack(payload)
    out = []
    for raw in batch[1]:
        if isinstance(raw, dict):
            kind = raw.get("type")
            names = FIELDS.get(kind, [])
            known = {k: v for k, v in raw.items() if k in names}
            unknown = [k for k in raw if k != "type" and k not in names] if kind in FIELDS else []
        else:
            kind = raw[0]
            names = FIELDS.get(kind, [])
            known = dict(zip(names, raw[1:]))
            unknown = []
        out.append((kind, known, unknown))
    return out


@dataclass
class Figures:
    """What a recording says, counted the obvious way."""

    messages: int = 0
    events_by_type: Counter = field(default_factory=Counter)
    blocks_stored: int = 0
    blocks_removed: int = 0
    removed_unknown: int = 0
    duplicates: int = 0
    distinct_keys: int = 0
    unknown_fields: Counter = field(default_factory=Counter)
    final_blocks: int = 0
    peak_blocks: int = 0
    cached_after: list = field(default_factory=list)
    final: dict = field(default_factory=dict)  # (key, medium) -> (parent, tokens, copies)
    orphans: int = 0


def figures(path: Path) -> Figures:
    """Every figure of a recording, with the cache replayed as copies by (key, medium)."""
    result = Figures()
    keys = set()
    cache: dict = {}  # (key, medium) -> [parent, tokens, copies]
    for record in read_lines(path):
        result.messages += 1
        for kind, known, unknown in events_of(record["payload"]):
            result.events_by_type[kind] += 1
            for name in unknown:
                result.unknown_fields[(kind, name)] += 1
            medium = known.get("medium")
            if kind == "BlockStored":
                size = known["block_size"]
                tokens = known["token_ids"]
                parent = known.get("parent_block_hash")
                for i, key in enumerate(known["block_hashes"]):
                    keys.add(key)
                    result.blocks_stored += 1
                    entry = cache.get((key, medium))
                    if entry is None:
                        cache[(key, medium)] = [parent, tuple(tokens[i * size:(i + 1) * size]), 1]
                    else:
                        entry[2] += 1
                        result.duplicates += 1
                    parent = key
            elif kind == "BlockRemoved":
                for key in known["block_hashes"]:
                    keys.add(key)
                    entry = cache.get((key, medium))
                    if entry is None:
                        result.removed_unknown += 1
                        continue
                    result.blocks_removed += 1
                    entry[2] -= 1
                    if entry[2] == 0:
                        del cache[(key, medium)]
            elif kind == "AllBlocksCleared":
                cache.clear()
        result.cached_after.append(len(cache))
        result.peak_blocks = max(result.peak_blocks, len(cache))
    result.final_blocks = len(cache)
    result.distinct_keys = len(keys)
    result.final = {k: (v[0], v[1], v[2]) for k, v in cache.items()}
    present = {key for key, _ in cache}
    result.orphans = sum(1 for parent, _t, _c in cache.values() if parent is not None and parent not in present)
    return result
