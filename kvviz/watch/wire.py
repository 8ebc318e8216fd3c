# SPDX-License-Identifier: Apache-2.0
"""The KV-event wire format of vLLM, SGLang and their kin, decoded by kvviz itself.

A payload is the msgpack array ``[ts, events, data_parallel_rank]`` (older publishers send
``[ts, events]``). Each event is a map with ``"type"`` (current vLLM and SGLang) or a legacy
array whose first item is the kind and whose other items are the fields in declaration order
(msgspec's ``array_like`` tagged structs, which older vLLM sent). :func:`decode_payload` turns
one payload into a frozen :class:`Batch` and refuses anything else with :class:`DecodeError`,
one line, never another exception.

What the reader survives, because publishers it has never seen differ in these details:

- fields missing from a map (or cut from the end of an array) take their defaults;
- unknown fields are ignored and listed once per occurrence in :attr:`Batch.unknown_fields`;
- unknown event types become :class:`UnknownEvent` (kept and counted, never fatal);
- block hashes are opaque :data:`Key` values, unsigned or signed ints or bytes, kept as sent;
- token ids may be any int (generated positions hold values outside any vocabulary);
- ``block_size = 0`` with no token ids is a placeholder;
- ``medium`` is None or any string, kept as sent (:func:`medium_label` normalises for display);
- the LoRA is ``lora_name`` when given, else ``lora_id``;
- a label of the wrong type (``ts``, ``data_parallel_rank``, ``medium``, ``lora_id``,
  ``lora_name``) is a lint and reads as none (an int medium as its text), never the loss of
  the batch's other events; a legacy array's item 7 that is not a name (SGLang's
  ``{"cache_salt"}`` metadata, where vLLM has ``lora_name``) is an unknown item;
- a map batch's rank may be named ``data_parallel_rank``, ``dp_rank`` or ``attn_dp_rank``;
- ``token_ids`` as (token, next token) pairs (vLLM with EAGLE) read as the first of each pair.

A ``BlockStored`` whose token ids do not fill its blocks exactly
(``len(token_ids) != len(block_hashes) * block_size``) is kept as sent, not refused: block *i*
holds whatever ``token_ids[i*block_size:(i+1)*block_size]`` has, except when the ids share
out exactly (``len(token_ids)`` a multiple of the hash count): then each block holds its equal
share, and ``block_size`` is that share (ROCm ATOM under decode context parallelism sends the
page size while each hash covers page size x ranks tokens). The mismatch is a lint, one
sentence in :attr:`Batch.lints`, so the view can show it without losing the rest of the batch.

Sizes are bounded before msgspec allocates anything. msgspec itself refuses a header that claims
more items than bytes remain, but one byte on the wire can cost 200 bytes decoded (an empty
map), and its decoder recurses. So :func:`scan_msgpack` walks the headers first (iteratively,
its only memory a stack of at most :data:`~kvviz.core.limits.MAX_EVENT_NESTING` counts), refusing a
payload over :data:`~kvviz.core.limits.MAX_EVENT_PAYLOAD_BYTES`, over
:data:`~kvviz.core.limits.MAX_EVENT_ITEMS` values or :data:`~kvviz.core.limits.MAX_EVENT_CONTAINERS`
arrays and maps, nested deeper than the limit, or with any length that runs past its end.

msgspec is imported on first decode, so this module (and ``kvviz.cli``) imports without the
``watch`` extra.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from kvviz.core.limits import MAX_EVENT_CONTAINERS, MAX_EVENT_ITEMS, MAX_EVENT_NESTING, MAX_EVENT_PAYLOAD_BYTES
from kvviz.extras import needs_extra
from kvviz.printable import printable

Key = int | bytes
"""A block hash exactly as sent: opaque, never computed with."""

WATCH_EXTRA_MISSING = needs_extra("kvviz watch", "watch")
"""The one line to show when msgspec (or pyzmq) is not installed."""

_MASK64 = (1 << 64) - 1
_UNKNOWN_FIELDS_NAMED = 64
"""Unknown fields of one event named one by one in :attr:`Batch.unknown_fields`; the rest are
one ``… N more`` entry (a map of 500,000 odd keys would otherwise cost 60 MB of tuples)."""
_NAME_CHARS = 80
"""Characters of an unknown event type or field name kept: a name is a label, and a publisher
sending a 1 MB type name should not make every later line 1 MB long."""


# -- display --------------------------------------------------------------------------------


def key_label(key: Key, width: int = 12) -> str:
    """A block hash for people: an int as the 16 hex digits of its 64-bit two's complement (so
    vLLM's unsigned and a consumer's signed fold of the same hash read the same), bytes as hex;
    cut to ``width`` characters with ``…`` at the end, or at the start when the cut-off head is
    all 0s or all fs (a small key: its tail is what tells it apart)."""
    text = format(key & _MASK64, "016x") if isinstance(key, int) else bytes(key).hex()
    if width > 0 and len(text) > width:
        kept = max(width - 1, 0)
        if isinstance(key, int) and text[: len(text) - kept] in ("0" * (len(text) - kept), "f" * (len(text) - kept)):
            # A small key (a counter, a consumer's signed fold of one): its head is all 0s (or
            # fs), and cutting the tail would show 1, 2 and 3 as the same 00000000000….
            return "…" + text[-kept:] if kept else "…"
        return text[:kept] + "…"
    return text


def block_hash_text(key: Key) -> str:
    """A block hash as canonical text (exports, digests): an int in decimal with its sign, as
    sent; bytes as ``0x`` and hex. The two never collide (an int is never written with 0x)."""
    return str(key) if isinstance(key, int) else "0x" + bytes(key).hex()


def key_order(key: Key) -> tuple[int, int | bytes]:
    """The sort key of block hashes: ints (by value) before bytes (by content)."""
    return (0, key) if isinstance(key, int) else (1, bytes(key))


NO_MEDIUM = "(none)"
"""How :func:`medium_label` shows an event that names no medium."""


def medium_label(medium: str | None) -> str:
    """A medium for display: trimmed, upper-case (``cpu`` and ``CPU`` are one tier), at most 24
    characters; :data:`NO_MEDIUM` for None or an empty name. The events keep the original."""
    if medium is None or not medium.strip():
        return NO_MEDIUM
    label = printable(medium.strip().upper())  # the publisher's string, shown in a terminal
    return label if len(label) <= 24 else label[:23] + "…"


# -- the events -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BlockStored:
    """A chain of full blocks was cached: block *i* is ``hashes[i]``, holds
    ``token_ids[i*block_size:(i+1)*block_size]`` and has block *i−1* as its parent; the first
    block's parent is ``parent`` (None: a root)."""

    hashes: tuple[Key, ...]
    parent: Key | None
    token_ids: tuple[int, ...]
    block_size: int
    medium: str | None
    lora: int | str | None

    def block_tokens(self, index: int) -> tuple[int, ...]:
        """The tokens of block ``index`` (empty for a ``block_size = 0`` placeholder)."""
        if self.block_size <= 0:
            return ()
        return self.token_ids[index * self.block_size:(index + 1) * self.block_size]


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    """Those blocks left the cache (vLLM: lazily, when a freed block is reused)."""

    hashes: tuple[Key, ...]
    medium: str | None


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    """The cache was reset (only ``medium``'s blocks when one is named)."""

    medium: str | None = None


@dataclass(frozen=True, slots=True)
class UnknownEvent:
    """An event type this reader does not know: kept and counted, never applied."""

    type: str


StreamEvent = BlockStored | BlockRemoved | AllBlocksCleared | UnknownEvent


@dataclass(frozen=True, slots=True)
class Batch:
    """One decoded payload: what one message of the stream said."""

    seq: int
    topic: str
    rank: int | None
    """The payload's ``data_parallel_rank`` (None when not sent)."""
    ts: float | None
    """The publisher's timestamp (seconds); None when absent or not finite."""
    events: tuple[StreamEvent, ...]
    unknown_fields: tuple[tuple[str, str], ...]
    """(event type, field name) for every unknown field, once per occurrence; a legacy array's
    extra items are one entry named by their indices (``[7]``, ``[7..9]``); the batch's own extra
    items are ``Batch``'s; past 64 in one event, one ``… N more`` entry."""
    lints: tuple[str, ...] = ()
    """Odd but decodable things, one sentence each (a BlockStored whose tokens do not fill its
    blocks, a missing block_size, a timestamp that is not finite)."""


LINT_KINDS: dict[str, tuple[str, str]] = {
    # kind: (how the lint's sentence starts after its "event N (Type): ", a regular
    # expression; what it means)
    "timestamp": (r"the timestamp is ", "a ts that is not a finite number (read as none)"),
    "rank": (r"data_parallel_rank is ", "a rank that is not an int (read as none)"),
    "medium": (r"medium is ", "a medium that is not text (an int read as its text, else none)"),
    "token_pairs": (r"token_ids are \(token, next token\) pairs", "EAGLE's (token, next token) pairs (the first read)"),
    "block_size_missing": (r"no block_size", "no block_size (read from the tokens, else 0)"),
    "lora": (r"lora_(id|name) is ", "a lora_id or lora_name of the wrong type (read as none)"),
    "token_count": (r"\d+ token ids for \d+ blocks", "token ids that do not fill the blocks as block_size says"),
    "placeholder_tokens": (r"block_size 0 with ", "a block_size 0 placeholder that carries token ids"),
}
"""Every kind of :attr:`Batch.lints` sentence, by how the sentence starts (after its ``event N
(Type):`` place, if any), with what it means: the summary counts lints by these kinds."""


def lint_kind(lint: str) -> str:
    """The :data:`LINT_KINDS` kind of one :attr:`Batch.lints` sentence (``"other"`` for a
    sentence of no known kind, which no decoder here writes)."""
    head, sep, rest = lint.partition("): ")
    said = rest if sep and head.startswith("event ") else lint
    for kind, (start, _meaning) in LINT_KINDS.items():
        if re.match(start, said):
            return kind
    return "other"


class DecodeError(ValueError):
    """A payload that is not valid msgpack, not the right shape, or over a bound; one line."""


# -- the header scan --------------------------------------------------------------------------


def _scalar_sizes() -> tuple[int, ...]:
    """For each first byte: how many bytes follow for a fixed-size value; -1 for a container
    or a value whose length follows; -2 for the one invalid byte (0xc1)."""
    sizes = [-1] * 256
    for byte in range(0x00, 0x80):  # positive fixint
        sizes[byte] = 0
    for byte in range(0xE0, 0x100):  # negative fixint
        sizes[byte] = 0
    for byte in range(0xA0, 0xC0):  # fixstr
        sizes[byte] = byte & 0x1F
    sizes[0xC0] = sizes[0xC2] = sizes[0xC3] = 0  # nil, false, true
    sizes[0xC1] = -2
    sizes[0xCA], sizes[0xCB] = 4, 8  # float32, float64
    for byte, size in zip(range(0xCC, 0xD4), (1, 2, 4, 8, 1, 2, 4, 8)):  # uint8..int64
        sizes[byte] = size
    for byte, size in zip(range(0xD4, 0xD9), (1, 2, 4, 8, 16)):  # fixext: type byte + data
        sizes[byte] = 1 + size
    return tuple(sizes)


_SCALAR_SIZES = _scalar_sizes()


def _scalar_runs() -> tuple[Any, ...]:
    """For each first byte of a fixed-size value: a pattern matching a run of values of the same
    total width (token ids and hashes come in long runs of one width), so the scan skips a run
    in C instead of one Python step per value; None for other bytes."""
    by_width: dict[int, list[int]] = {}
    for first, size in enumerate(_SCALAR_SIZES):
        if size >= 0 and not 0xA0 <= first <= 0xBF:  # fixstrs of one length are rarely a run
            by_width.setdefault(1 + size, []).append(first)
    runs: list[Any] = [None] * 256
    for width, firsts in by_width.items():
        byte_class = b"".join(re.escape(bytes([first])) for first in firsts)
        pattern = re.compile(b"(?:[" + byte_class + b"]" + (b".{%d}" % (width - 1) if width > 1 else b"") + b")+",
                             re.DOTALL)
        for first in firsts:
            runs[first] = (pattern, width)
    return tuple(runs)


_SCALAR_RUNS = _scalar_runs()
# Variable-length strings, binaries and extensions: first byte -> (width of the length, bytes
# between the length and the data: an extension's type byte).
_LENGTH_PREFIXED = {0xC4: (1, 0), 0xC5: (2, 0), 0xC6: (4, 0), 0xC7: (1, 1), 0xC8: (2, 1),
                    0xC9: (4, 1), 0xD9: (1, 0), 0xDA: (2, 0), 0xDB: (4, 0)}
# Arrays and maps with a length field: first byte -> (width of the length, values per entry).
_CONTAINERS = {0xDC: (2, 1), 0xDD: (4, 1), 0xDE: (2, 2), 0xDF: (4, 2)}


def scan_msgpack(payload: bytes, *, max_items: int = MAX_EVENT_ITEMS,
                 max_containers: int = MAX_EVENT_CONTAINERS, max_nesting: int = MAX_EVENT_NESTING) -> int:
    """Walk the msgpack headers of ``payload`` without decoding a value; return how many values
    it holds. Raises :class:`DecodeError` when the payload is not exactly one msgpack value,
    when a container claims more values than bytes remain (each value takes at least one), when
    it holds more than ``max_items`` values or ``max_containers`` arrays and maps, or nests
    deeper than ``max_nesting``. Iterative:
    its only memory is a stack of at most ``max_nesting`` counts."""
    end = len(payload)
    sizes, runs = _SCALAR_SIZES, _SCALAR_RUNS
    position = 0
    items = containers = 0
    open_counts = [1]  # values still to read in each open container; the bottom is the top level
    while open_counts:
        if open_counts[-1] == 0:
            open_counts.pop()
            continue
        open_counts[-1] -= 1
        if position >= end:
            raise DecodeError(f"the payload ends early: a value is missing at byte {position}")
        items += 1
        if items > max_items:
            raise DecodeError(f"the payload holds more than {max_items:,} values (the limit)")
        first = payload[position]
        size = sizes[first]
        if size >= 0:
            remaining = open_counts[-1]
            if remaining:  # more values follow in this container: skip the run they start with
                pattern, width = runs[first] or (None, 0)
                if pattern is not None:
                    run = pattern.match(payload, position, min(end, position + width * (remaining + 1)))
                    if run is not None:
                        more = (run.end() - position) // width - 1
                        items += more
                        if items > max_items:
                            raise DecodeError(f"the payload holds more than {max_items:,} values (the limit)")
                        open_counts[-1] -= more
                        position = run.end()
                        continue
            position += 1 + size
            continue
        start = position
        position += 1
        if 0x90 <= first <= 0x9F:
            count = first & 0x0F
        elif 0x80 <= first <= 0x8F:
            count = 2 * (first & 0x0F)
        elif first in _CONTAINERS:
            width, per_entry = _CONTAINERS[first]
            count = per_entry * int.from_bytes(payload[position:position + width], "big")
            position += width
        elif first in _LENGTH_PREFIXED:
            width, gap = _LENGTH_PREFIXED[first]
            length = int.from_bytes(payload[position:position + width], "big")
            position += width + gap
            if position > end or length > end - position:
                raise DecodeError(f"a string or binary at byte {start} claims {length:,} bytes; "
                                  f"{_remain(end - position)}")
            position += length
            continue
        else:  # 0xc1, never used by msgpack
            raise DecodeError(f"byte {start} (0x{first:02x}) is not a msgpack value")
        containers += 1
        if containers > max_containers:
            raise DecodeError(f"the payload holds more than {max_containers:,} arrays and maps (the limit)")
        if position > end or count > end - position:
            raise DecodeError(f"a container at byte {start} claims {count:,} values; {_remain(end - position)}")
        if count:
            if len(open_counts) > max_nesting:
                raise DecodeError(f"the payload nests deeper than {max_nesting} containers (the limit)")
            open_counts.append(count)
    if position > end:
        raise DecodeError(f"the payload ends early: its last value runs {position - end:,} bytes past the end")
    if position < end:
        raise DecodeError(f"the payload has {end - position:,} bytes after its one value")
    return items


def _remain(left: int) -> str:
    left = max(left, 0)
    return "1 byte remains" if left == 1 else f"{left:,} bytes remain"


# -- decoding ---------------------------------------------------------------------------------

_DECODER: Any = None


def _msgspec_decode(payload: bytes) -> Any:
    global _DECODER
    if _DECODER is None:
        try:
            import msgspec
        except ImportError:
            raise ImportError(WATCH_EXTRA_MISSING) from None
        _DECODER = msgspec.msgpack.Decoder()
    try:
        return _DECODER.decode(payload)
    except Exception as error:  # msgspec.DecodeError, RecursionError, a bad timestamp ext, ...
        raise DecodeError(f"not valid msgpack: {_one_line(str(error))}") from None


def decode_payload(payload: bytes, *, seq: int, topic: str = "") -> Batch:
    """Decode one message's payload into a :class:`Batch`; raise :class:`DecodeError` (one line)
    for anything that is not a KV-event batch, never another exception."""
    if not isinstance(payload, (bytes, bytearray, memoryview)):
        raise DecodeError(f"the payload is a {type(payload).__name__}, not bytes")
    if len(payload) > MAX_EVENT_PAYLOAD_BYTES:
        raise DecodeError(f"the payload has {len(payload):,} bytes; the limit is {MAX_EVENT_PAYLOAD_BYTES:,}")
    payload = bytes(payload)
    if not payload:
        raise DecodeError("the payload is empty")
    if len(payload) > _SCAN_FROM_BYTES:
        scan_msgpack(payload)
        value = _msgspec_decode(payload)
    else:
        # Every msgpack value takes at least one byte, so this payload holds at most
        # len(payload) values and containers: within both limits without counting. msgspec
        # refuses a length that runs past the end before allocating for it, and its recursion
        # is bounded (RecursionError); only the nesting limit is left to check, on the values.
        try:
            value = _msgspec_decode(payload)
        except DecodeError:
            scan_msgpack(payload)  # says exactly what is wrong, where it can
            raise
        _check_nesting(value)
    return _batch(value, seq=seq, topic=topic)


_SCAN_FROM_BYTES = min(MAX_EVENT_ITEMS, MAX_EVENT_CONTAINERS)
"""Payloads longer than this are header-scanned before decoding (they could hold more values
or containers than the limits); shorter ones cannot, and skip the scan (the most of decoding's
cost it was: vLLM's batches are a few kilobytes)."""

_CONTAINER_TYPES = frozenset({list, dict, tuple})  # tuple: msgspec's reading of an array map key


def _check_nesting(value: Any, limit: int = MAX_EVENT_NESTING) -> None:
    """Refuse a decoded value whose non-empty arrays and maps nest deeper than ``limit`` (as
    :func:`scan_msgpack` counts them). Iterative; a flat list costs one pass at C speed."""
    if type(value) not in _CONTAINER_TYPES:
        return
    level, depth = [value], 1
    while level:
        if depth > limit and any(level):
            raise DecodeError(f"the payload nests deeper than {limit} containers (the limit)")
        inner = []
        for container in level:
            if type(container) is dict:
                values = [*container.keys(), *container.values()]
            else:
                values = container
            if not set(map(type, values)).isdisjoint(_CONTAINER_TYPES):
                inner.extend(item for item in values if type(item) in _CONTAINER_TYPES)
        level, depth = inner, depth + 1


def _batch(value: Any, *, seq: int, topic: str) -> Batch:
    unknown: list[tuple[str, str]] = []
    lints: list[str] = []
    if isinstance(value, dict):  # a publisher encoding EventBatch as a map
        ts_value, events_value = value.get("ts"), value.get("events")
        rank_name = next((name for name in _RANK_NAMES if name in value), None)
        rank_value = value.get(rank_name) if rank_name is not None else None
        unknown.extend(("Batch", _name(k)) for k in value if k not in ("ts", "events") and k not in _RANK_NAMES)
        if "events" not in value:
            raise DecodeError("the batch (a map) has no 'events'")
    elif isinstance(value, list):
        if len(value) < 2:
            raise DecodeError(f"the batch is an array of {len(value)} items; expected [ts, events, rank]")
        ts_value, events_value = value[0], value[1]
        rank_value = value[2] if len(value) > 2 else None
        unknown.extend(_extra_items("Batch", 3, len(value)))
    else:
        raise DecodeError(f"the payload is {_kind(value)}; expected the array [ts, events, rank]")
    ts = _timestamp(ts_value, lints)
    if rank_value is not None and not _is_int(rank_value):
        # A rank is a label of the batch, not its content: losing every event for it is worse.
        lints.append(f"data_parallel_rank is {_kind(rank_value)}; read as none")
        rank_value = None
    if not isinstance(events_value, list):
        raise DecodeError(f"the events are {_kind(events_value)}; expected an array")
    events = tuple(_event(raw, index, unknown, lints) for index, raw in enumerate(events_value))
    return Batch(seq=seq, topic=topic, rank=rank_value, ts=ts, events=events,
                 unknown_fields=tuple(unknown), lints=tuple(lints))


def _timestamp(value: Any, lints: list[str]) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        lints.append(f"the timestamp is {_kind(value)}; read as none")
        return None
    ts = float(value)
    if not math.isfinite(ts):
        lints.append(f"the timestamp is {ts}; read as none")
        return None
    return ts


# One row per event type this reader knows: its fields in declaration order (the order of a
# legacy array's items after the kind, and vLLM's own order of map keys), and its builder.
_STORED_FIELDS = ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium",
                  "lora_name")
_RANK_NAMES = ("data_parallel_rank", "dp_rank", "attn_dp_rank")
"""A map batch's rank field: vLLM's name, Dynamo's alias, SGLang's (its array's third item)."""
_KNOWN_FIELDS: dict[str, tuple[str, ...]] = {
    "BlockStored": _STORED_FIELDS,
    "BlockRemoved": ("block_hashes", "medium"),
    "AllBlocksCleared": ("medium",),
}


def _event(raw: Any, index: int, unknown: list[tuple[str, str]], lints: list[str]) -> StreamEvent:
    if isinstance(raw, dict):
        kind = raw.get("type")
        kind = _type_name(kind)
        known = _KNOWN_FIELDS.get(kind)
        if known is None:
            return UnknownEvent(kind)
        fields = {}
        strangers = 0
        for name, value in raw.items():
            if name in known:
                fields[name] = value
            elif name != "type":
                strangers += 1
                if strangers <= _UNKNOWN_FIELDS_NAMED:
                    unknown.append((kind, _name(name)))
        if strangers > _UNKNOWN_FIELDS_NAMED:
            unknown.append((kind, f"… {strangers - _UNKNOWN_FIELDS_NAMED:,} more"))
    elif isinstance(raw, list):
        kind = _type_name(raw[0] if raw else None)
        known = _KNOWN_FIELDS.get(kind)
        if known is None:
            return UnknownEvent(kind)
        fields = dict(zip(known, raw[1:]))
        unknown.extend(_extra_items(kind, len(known) + 1, len(raw)))
        if kind == "BlockStored" and not isinstance(fields.get("lora_name"), (str, type(None))):
            # Item 7 is vLLM's lora_name but SGLang's {"cache_salt"} metadata map: not a name,
            # so an unknown item, not a reason to refuse the batch.
            unknown.append((kind, f"[{_STORED_FIELDS.index('lora_name') + 1}]"))
            del fields["lora_name"]
    else:
        raise DecodeError(f"event {index} is {_kind(raw)}; expected a map or an array")
    where = f"event {index} ({kind})"
    medium = fields.get("medium")
    if medium is not None and not isinstance(medium, str):
        # An enum sent by its index (a Rust publisher) still names a tier: keep it as text.
        read = str(medium) if _is_int(medium) else None
        lints.append(f"{where}: medium is {_kind(medium)}; read as {read!r}" if read is not None
                     else f"{where}: medium is {_kind(medium)}; read as none")
        medium = read
    if kind == "AllBlocksCleared":
        return AllBlocksCleared(medium)
    hashes = _keys(fields.get("block_hashes", []), f"{where}: block_hashes")
    if kind == "BlockRemoved":
        return BlockRemoved(hashes, medium)
    return _stored(fields, hashes, medium, where, lints)


def _extra_items(kind: str, first: int, length: int) -> list[tuple[str, str]]:
    """An array's items past the known ones, as one unknown field: ``[7]`` or ``[7..9]``."""
    if length <= first:
        return []
    return [(kind, f"[{first}]" if length == first + 1 else f"[{first}..{length - 1}]")]


def _stored(fields: dict, hashes: tuple[Key, ...], medium: str | None, where: str,
            lints: list[str]) -> BlockStored:
    parent = fields.get("parent_block_hash")
    if parent is not None and not _is_key(parent):
        raise DecodeError(f"{where}: parent_block_hash is {_kind(parent)}; expected an int, bytes or nil")
    token_ids = fields.get("token_ids", [])
    if not isinstance(token_ids, list):
        raise DecodeError(f"{where}: token_ids is {_kind(token_ids)}; expected an array")
    if not set(map(type, token_ids)) <= _INT:  # at C speed; the loop below only to say where
        if _is_token_pairs(token_ids):
            # vLLM with EAGLE hashes (token, next token) pairs: a position's token is the first.
            token_ids = [pair[0] for pair in token_ids]
            lints.append(f"{where}: token_ids are (token, next token) pairs (EAGLE); read as the first of each")
        else:
            position, token = next((p, t) for p, t in enumerate(token_ids) if not _is_int(t))
            raise DecodeError(f"{where}: token_ids[{position}] is {_kind(token)}; expected an int")
    block_size = fields.get("block_size")
    if block_size is None:
        # Missing: the one size that fills the blocks exactly, else a placeholder's 0.
        exact = bool(hashes) and len(token_ids) % len(hashes) == 0
        block_size = len(token_ids) // len(hashes) if exact else 0
        lints.append(f"{where}: no block_size; read as {block_size}")
    elif not _is_int(block_size) or block_size < 0:
        raise DecodeError(f"{where}: block_size is {_kind(block_size)}; expected an int ≥ 0")
    lora_id, lora_name = fields.get("lora_id"), fields.get("lora_name")
    if lora_id is not None and not _is_int(lora_id):  # a label: the blocks are still the blocks
        lints.append(f"{where}: lora_id is {_kind(lora_id)}; read as none")
        lora_id = None
    if lora_name is not None and not isinstance(lora_name, str):
        lints.append(f"{where}: lora_name is {_kind(lora_name)}; read as none")
        lora_name = None
    expected = len(hashes) * block_size
    if block_size and len(token_ids) != expected:
        if hashes and token_ids and len(token_ids) % len(hashes) == 0:  # no hashes: nothing to share out
            # Each hash covers an equal share: the publisher's block_size is not the hashing
            # unit (ROCm ATOM under decode context parallelism sends the page size while each
            # hash covers page size x ranks tokens). Slicing by block_size would misplace tokens.
            share = len(token_ids) // len(hashes)
            lints.append(f"{where}: {len(token_ids)} token ids for {len(hashes)} blocks of {block_size} "
                         f"({expected} expected); read as {share} tokens a block")
            block_size = share
        else:
            lints.append(f"{where}: {len(token_ids)} token ids for {len(hashes)} blocks of {block_size} "
                         f"({expected} expected); kept as sent")
    elif not block_size and token_ids:
        lints.append(f"{where}: block_size 0 with {len(token_ids)} token ids; the blocks hold none")
    return BlockStored(hashes=hashes, parent=parent, token_ids=tuple(token_ids), block_size=block_size,
                       medium=medium, lora=lora_name if lora_name is not None else lora_id)


def _keys(value: Any, where: str) -> tuple[Key, ...]:
    if not isinstance(value, list):
        raise DecodeError(f"{where} is {_kind(value)}; expected an array")
    if not set(map(type, value)) <= _KEY_TYPES:
        position, key = next((p, k) for p, k in enumerate(value) if not _is_key(k))
        raise DecodeError(f"{where}[{position}] is {_kind(key)}; expected an int or bytes")
    return tuple(value)


_INT = frozenset({int})
_KEY_TYPES = frozenset({int, bytes})  # exact types: msgspec decodes to no subclass, and bool is out


def _is_token_pairs(tokens: list) -> bool:
    """Whether ``tokens`` is a list of [int, int] pairs (EAGLE's bigram token ids)."""
    return bool(tokens) and all(type(pair) is list and len(pair) == 2 and type(pair[0]) is int
                                and type(pair[1]) is int for pair in tokens)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_key(value: Any) -> bool:
    return isinstance(value, bytes) or _is_int(value)


def _type_name(kind: Any) -> str:
    if isinstance(kind, bytes):
        kind = kind.decode("utf-8", "replace")
    if not isinstance(kind, str):
        return "(no type)" if kind is None else f"({_kind(kind)})"
    return _name(kind)


def _name(name: Any) -> str:
    text = printable(name if isinstance(name, str) else repr(name))
    return text if len(text) <= _NAME_CHARS else text[: _NAME_CHARS - 1] + "…"


def _kind(value: Any) -> str:
    """A value's msgpack kind in words, for messages (never the value: it may be huge)."""
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "a bool"
    if isinstance(value, int):
        return "an int"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bytes):
        return "bytes"
    if isinstance(value, list):
        return f"an array of {len(value)}"
    if isinstance(value, dict):
        return f"a map of {len(value)}"
    return f"a {type(value).__name__}"


def _one_line(text: str) -> str:
    return " ".join(text.split())
