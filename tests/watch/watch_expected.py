# SPDX-License-Identifier: Apache-2.0
"""An independent reading of a KV-event recording, for the watch tests' expected figures.

Written from the wire format in ../shared/data/kv-events/README.md alone: a plain msgpack
reader (no msgspec) and a dict of block copies (no kvviz import), so a figure that
``kvviz watch --json`` prints and this module computes agree only if both read the stream
the same way on their own.
"""

from __future__ import annotations

import base64
import json
import struct
from collections import Counter


class NotMsgpack(ValueError):
    pass


def unpack(data: bytes):
    """The one msgpack value in ``data`` (trailing bytes are an error)."""
    value, end = _read(data, 0)
    if end != len(data):
        raise NotMsgpack(f"{len(data) - end} trailing bytes")
    return value


def _take(data: bytes, at: int, n: int) -> tuple[bytes, int]:
    if at + n > len(data):
        raise NotMsgpack("truncated")
    return data[at:at + n], at + n


def _read(data: bytes, at: int):
    if at >= len(data):
        raise NotMsgpack("truncated")
    b = data[at]
    at += 1
    if b <= 0x7F:
        return b, at
    if b >= 0xE0:
        return b - 0x100, at
    if 0x80 <= b <= 0x8F:
        return _map(data, at, b & 0x0F)
    if 0x90 <= b <= 0x9F:
        return _array(data, at, b & 0x0F)
    if 0xA0 <= b <= 0xBF:
        raw, at = _take(data, at, b & 0x1F)
        return raw.decode("utf-8"), at
    fixed = {0xC0: None, 0xC2: False, 0xC3: True}
    if b in fixed:
        return fixed[b], at
    if b in (0xC4, 0xC5, 0xC6):
        size_len = {0xC4: 1, 0xC5: 2, 0xC6: 4}[b]
        raw, at = _take(data, at, size_len)
        return _take(data, at, int.from_bytes(raw, "big"))
    if b == 0xCA:
        raw, at = _take(data, at, 4)
        return struct.unpack(">f", raw)[0], at
    if b == 0xCB:
        raw, at = _take(data, at, 8)
        return struct.unpack(">d", raw)[0], at
    if 0xCC <= b <= 0xCF:
        n = 1 << (b - 0xCC)
        raw, at = _take(data, at, n)
        return int.from_bytes(raw, "big"), at
    if 0xD0 <= b <= 0xD3:
        n = 1 << (b - 0xD0)
        raw, at = _take(data, at, n)
        return int.from_bytes(raw, "big", signed=True), at
    if b in (0xD9, 0xDA, 0xDB):
        size_len = {0xD9: 1, 0xDA: 2, 0xDB: 4}[b]
        raw, at = _take(data, at, size_len)
        raw, at = _take(data, at, int.from_bytes(raw, "big"))
        return raw.decode("utf-8"), at
    if b in (0xDC, 0xDD):
        raw, at = _take(data, at, 2 if b == 0xDC else 4)
        return _array(data, at, int.from_bytes(raw, "big"))
    if b in (0xDE, 0xDF):
        raw, at = _take(data, at, 2 if b == 0xDE else 4)
        return _map(data, at, int.from_bytes(raw, "big"))
    raise NotMsgpack(f"type byte {b:#x} not handled")


def _array(data: bytes, at: int, n: int):
    items = []
    for _ in range(n):
        item, at = _read(data, at)
        items.append(item)
    return items, at


def _map(data: bytes, at: int, n: int):
    out = {}
    for _ in range(n):
        key, at = _read(data, at)
        value, at = _read(data, at)
        out[key] = value
    return out, at


STORED_FIELDS = ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium")
KNOWN_FIELDS = {
    "BlockStored": {"type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
                    "medium", "lora_name"},
    "BlockRemoved": {"type", "block_hashes", "medium"},
    "AllBlocksCleared": {"type", "medium"},
}


def event_fields(event) -> tuple[str, dict]:
    """An event (map or legacy array) as its type and a dict of fields."""
    if isinstance(event, dict):
        return event["type"], event
    kind, *values = event
    names = {"BlockStored": STORED_FIELDS, "BlockRemoved": ("block_hashes", "medium"),
             "AllBlocksCleared": ("medium",)}.get(kind, ())
    return kind, dict(zip(names, values))


def key_of(value):
    return value


def expected_figures(path) -> dict:
    """The figures ``kvviz watch --json`` reports for the recording at ``path``, computed
    here from the raw bytes."""
    copies: dict[tuple, int] = {}
    events_by_type: Counter = Counter()
    unknown_fields: Counter = Counter()
    stored = removed = removed_unknown = duplicates = peak = 0
    messages = undecodable = 0
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if not line.strip():
                continue
            record = json.loads(line)
            messages += 1
            try:
                ts, events, _rank = unpack(base64.b64decode(record["payload"]))[:3]
            except (NotMsgpack, ValueError, TypeError):
                undecodable += 1
                continue
            for event in events:
                kind, fields = event_fields(event)
                events_by_type[kind] += 1
                for name in sorted(set(fields) - KNOWN_FIELDS.get(kind, set(fields))):
                    unknown_fields[f"{kind}.{name}"] += 1
                medium = fields.get("medium")
                if kind == "BlockStored":
                    for key in fields["block_hashes"]:
                        stored += 1
                        if copies.get((key, medium), 0):
                            duplicates += 1
                        copies[(key, medium)] = copies.get((key, medium), 0) + 1
                elif kind == "BlockRemoved":
                    for key in fields["block_hashes"]:
                        removed += 1
                        if copies.get((key, medium), 0):
                            copies[(key, medium)] -= 1
                            if not copies[(key, medium)]:
                                del copies[(key, medium)]
                        else:
                            removed_unknown += 1
                elif kind == "AllBlocksCleared":
                    copies.clear()
            peak = max(peak, len(copies))
    per_medium: Counter = Counter("(none)" if medium is None else medium for _key, medium in copies)
    return {"messages": messages, "undecodable": undecodable, "events_by_type": dict(sorted(events_by_type.items())),
            "blocks_stored": stored, "blocks_removed": removed, "removed_unknown": removed_unknown,
            "duplicates": duplicates, "cached_blocks": len(copies), "peak_blocks": peak,
            "per_medium": dict(sorted(per_medium.items())), "unknown_fields": dict(sorted(unknown_fields.items()))}
