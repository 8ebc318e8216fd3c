# SPDX-License-Identifier: Apache-2.0
"""Reader for Mooncake request traces (FAST'25 release, JSONL).

One JSON object per line::

    {"timestamp": 27482, "input_length": 6955, "output_length": 52,
     "hash_ids": [46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 2353, 2354]}

``timestamp`` is the arrival time in milliseconds, ``hash_ids`` holds one id per block of
``block_tokens`` (512) prompt tokens. An id covers its block *and every block before it*
(a chained prefix hash), so two requests share a KV-cache prefix exactly as far as their
``hash_ids`` agree from the start.

Every line is validated; a bad line is reported as ``file:line[:column]: what was expected``. With
``on_error="stop"`` the first bad line raises :class:`TraceFormatError`; with
``on_error="skip"`` bad lines are counted in :attr:`Trace.skipped_count`, the first
``MAX_TRACE_SKIPS_LISTED`` listed in :attr:`Trace.skipped`, and reading goes on.
Blank lines are ignored (a trailing newline is not a request). Unknown extra fields are
ignored, so a trace with more columns still reads.

``len(hash_ids)`` must equal ``ceil(input_length / block_tokens)``: both released traces
satisfy this on every line, and a mismatch means either a damaged line or a wrong block
size (``--page-tokens``), which would silently skew every hit rate, so it is an error.

Sizes are bounded before the work (see :mod:`kvviz.core.limits`): a line longer than
``MAX_TRACE_LINE_BYTES`` is not read into memory, one nested deeper than
``MAX_TRACE_NESTING`` never reaches the JSON parser (whose recursion it would exhaust),
numbers above ``MAX_NUMBER`` are bad lines (the scenario language refuses them too, so a
trace kvviz reads converts to a scenario kvviz reads), and a trace of more than
``MAX_TRACE_BLOCKS`` blocks stops with :class:`TraceTooLarge` (skipping would not help).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from kvviz.core.jsonread import JsonNumberTooLong, loads
from kvviz.core.limits import MAX_NUMBER, MAX_TRACE_BLOCKS, MAX_TRACE_LINE_BYTES, MAX_TRACE_NESTING, MAX_TRACE_SKIPS_LISTED
from kvviz.samples import open_data
from kvviz.core.traffic import TRAFFIC_FIELDS, TrafficProblem, traffic_request

__all__ = [
    "DEFAULT_BLOCK_TOKENS",
    "FIELDS",
    "LineProblem",
    "PrefixReuse",
    "Trace",
    "TraceFormatError",
    "TraceLineError",
    "TraceRequest",
    "TraceTooLarge",
    "parse_line",
    "prefix_reuse",
    "read_trace",
]

DEFAULT_BLOCK_TOKENS = 512
"""Tokens per hash block in the Mooncake release (one hash id = one 512-token block)."""

FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
"""The fields every line must carry, in the order the release writes them."""

OnError = Literal["stop", "skip"]


@dataclass(frozen=True, slots=True)
class TraceRequest:
    """One request of a trace.

    ``index`` is the 0-based position among the trace's valid requests (replay order);
    ``line`` the 1-based line of the file it came from, for messages.
    """

    index: int
    line: int
    timestamp: int
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]

    @property
    def name(self) -> str:
        """A short stable name, ``q0001`` for the first request (1-based)."""
        return f"q{self.index + 1:04d}"


@dataclass(frozen=True, slots=True)
class TraceLineError:
    """A line that is not a valid request: where it is (``column`` is 1-based, None when the
    problem is the whole line or a field's value) and what was expected."""

    path: str
    line: int
    message: str
    column: int | None = None

    def __str__(self) -> str:
        where = f"{self.line}" if self.column is None else f"{self.line}:{self.column}"
        return f"{self.path}:{where}: {self.message}"


class TraceFormatError(ValueError):
    """Raised by :func:`read_trace` with ``on_error="stop"`` at the first bad line."""

    def __init__(self, problem: TraceLineError) -> None:
        super().__init__(str(problem))
        self.problem = problem


class TraceTooLarge(TraceFormatError):
    """Raised by :func:`read_trace` (whatever ``on_error`` says) when the trace holds more
    blocks than ``MAX_TRACE_BLOCKS``; ``problem`` names the line where the limit was passed."""


class LineProblem(ValueError):
    """What :func:`parse_line` raises: the message, and the 1-based column when there is one."""

    def __init__(self, message: str, column: int | None = None) -> None:
        super().__init__(message)
        self.column = column


@dataclass(frozen=True, slots=True)
class Trace:
    """The valid requests of a trace file, in file order, and the lines that were skipped:
    ``skipped_count`` of them, the first ``MAX_TRACE_SKIPS_LISTED`` listed in ``skipped``."""

    path: str
    block_tokens: int
    requests: tuple[TraceRequest, ...]
    skipped: tuple[TraceLineError, ...] = ()
    skipped_count: int = -1
    """-1 (the default) means ``len(skipped)``."""

    def __post_init__(self) -> None:
        if self.skipped_count < 0:
            object.__setattr__(self, "skipped_count", len(self.skipped))

    @property
    def name(self) -> str:
        """The file's name without directories, for titles."""
        return os.path.basename(self.path)

    def __len__(self) -> int:
        return len(self.requests)


def _describe(value: object) -> str:
    """A short description of a JSON value for error messages."""
    if isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        text = json.dumps(value)
        return text if len(text) <= 24 else text[:20] + '..."'
    if value is None:
        return "null"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__  # pragma: no cover - json yields nothing else


def _is_count(value: object) -> bool:
    # bool is an int subclass; true/false in a trace is a damaged field, not 1/0.
    return type(value) is int and value >= 0


def _too_large(value: int) -> str:
    return (f"is {_shown_int(value)}, above {MAX_NUMBER:,} (the largest number kvviz reads, "
            "in traces as in scenarios)")


def _shown_int(value: int) -> str:
    # A 4,000-digit number is not worth printing in full in a one-line message.
    text = str(value)
    return text if len(text) <= 24 else f"{text[:10]}...({len(text):,} digits)"


# A JSON string (escapes included, possibly unterminated) or one bracket: what nesting counts.
_STRUCTURE = re.compile(r'"(?:[^"\\]++|\\.)*+"?|[\[\]{}]')


def _check_nesting(text: str) -> None:
    """Refuse a line nested deeper than ``MAX_TRACE_NESTING`` before ``json`` recurses into it."""
    if text.count("[") + text.count("{") <= MAX_TRACE_NESTING:
        return  # cannot be deeper than it has brackets: every real line takes this path
    depth = 0
    for match in _STRUCTURE.finditer(text):
        char = match.group()
        if char in "[{":
            depth += 1
            if depth > MAX_TRACE_NESTING:
                raise LineProblem(f"nested more than {MAX_TRACE_NESTING} brackets deep (a request is one "
                                  "object holding one list)", match.start() + 1)
        elif char in "]}":
            depth -= 1


def parse_line(text: str | bytes, *, block_tokens: int = DEFAULT_BLOCK_TOKENS, interned: dict | None = None,
               tokenize=None) -> tuple[int, int, int, tuple[int, ...]]:
    """Validate one JSONL line; return ``(timestamp, input_length, output_length, hash_ids)``.

    A line with ``tokens`` or ``text`` instead of ``hash_ids`` is a request of your own traffic
    (:mod:`kvviz.core.traffic`): its full blocks become hash ids interned in ``interned`` (shared
    by the lines of one file), ``text`` cut by ``tokenize``.

    Raises :class:`LineProblem` (a ``ValueError``) whose message says what was expected and
    what was found, and whose ``column`` says where when it can (the caller knows the file
    and line). O(len(text)); the caller bounds the line's length.
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as error:
            raise LineProblem("not UTF-8 text (a bad byte)", error.start + 1) from None
    text = text.rstrip("\r\n")  # so that an error at the end of the line is at its last column
    _check_nesting(text)
    try:
        record = loads(text)
    except JsonNumberTooLong as error:
        raise LineProblem(f"a number too long to read ({error})", error.colno) from None
    except json.JSONDecodeError as error:
        raise LineProblem(f"not valid JSON ({error.msg})", error.pos + 1) from None
    if not isinstance(record, dict):
        raise LineProblem(f"expected a JSON object with fields {', '.join(FIELDS)}; found {_describe(record)}")
    if "hash_ids" not in record and any(field in record for field in TRAFFIC_FIELDS):
        try:
            return traffic_request(record, block_tokens, {} if interned is None else interned, tokenize)
        except TrafficProblem as problem:
            raise LineProblem(str(problem)) from None
    missing = [field for field in FIELDS if field not in record]
    if missing:
        names = ", ".join(repr(field) for field in missing)
        plural = "s" if len(missing) > 1 else ""
        raise LineProblem(f"missing field{plural} {names} (every line needs {', '.join(FIELDS)})")
    for field in FIELDS[:3]:
        value = record[field]
        if not _is_count(value):
            raise LineProblem(f"{field!r} must be a non-negative integer; found {_describe(value)}")
        if value > MAX_NUMBER:
            raise LineProblem(f"{field!r} {_too_large(value)}")
    hash_ids = record["hash_ids"]
    if not isinstance(hash_ids, list):
        raise LineProblem(f"'hash_ids' must be a list of non-negative integers; found {_describe(hash_ids)}")
    for position, value in enumerate(hash_ids):
        if not _is_count(value):
            raise LineProblem(
                f"'hash_ids' must be a list of non-negative integers; item {position} is {_describe(value)}"
            )
        if value > MAX_NUMBER:
            raise LineProblem(f"'hash_ids' item {position} {_too_large(value)}")
    input_length = record["input_length"]
    blocks = -(-input_length // block_tokens)
    if len(hash_ids) != blocks:
        raise LineProblem(
            f"'hash_ids' has {len(hash_ids)} ids but input_length {input_length} needs "
            f"ceil({input_length}/{block_tokens}) = {blocks} blocks of {block_tokens} tokens "
            f"(is the block size, --page-tokens, right?)"
        )
    return record["timestamp"], input_length, record["output_length"], tuple(hash_ids)


def _iter_lines(path: Path) -> Iterator[tuple[int, bytes | None]]:
    """``(line number, bytes)`` per line; ``None`` for a line longer than
    ``MAX_TRACE_LINE_BYTES``, whose rest is read past in chunks and never held whole."""
    # Binary, so one line with bad UTF-8 is a bad line rather than a crash of the whole read.
    limit = MAX_TRACE_LINE_BYTES
    with open_data(path) as file:  # gzip or plain
        number = 0
        while raw := file.readline(limit + 1):
            number += 1
            if len(raw) > limit and not raw.endswith(b"\n"):
                while (rest := file.readline(limit)) and not rest.endswith(b"\n"):
                    pass
                yield number, None
            else:
                yield number, raw


def read_trace(
    path: str | os.PathLike[str],
    *,
    block_tokens: int = DEFAULT_BLOCK_TOKENS,
    on_error: OnError = "stop",
    first: int | None = None,
    tokenize=None,
) -> Trace:
    """Read and validate a Mooncake JSONL trace, plain or gzip-compressed (as the shipped
    samples are: :mod:`kvviz.samples`), or your own traffic (lines with ``tokens`` or
    ``text``: :mod:`kvviz.core.traffic`; ``tokenize`` cuts ``text`` into token ids).

    ``first`` stops after that many valid requests (the rest of the file is not read).
    ``on_error="stop"`` raises :class:`TraceFormatError` at the first bad line;
    ``"skip"`` leaves bad lines out, counts them and lists the first ones in
    :attr:`Trace.skipped`. More than
    ``MAX_TRACE_BLOCKS`` blocks raise :class:`TraceTooLarge` either way.
    ``OSError`` (missing file, permissions) propagates unchanged. O(file size).
    """
    if on_error not in ("stop", "skip"):
        raise ValueError(f"on_error must be 'stop' or 'skip', not {on_error!r}")
    if block_tokens < 1:
        raise ValueError(f"block_tokens must be at least 1, not {block_tokens}")
    if first is not None and first < 0:
        raise ValueError(f"first must be non-negative, not {first}")
    path = Path(path)
    shown = str(path)
    requests: list[TraceRequest] = []
    skipped: list[TraceLineError] = []
    skipped_count = 0
    if first == 0:
        return Trace(shown, block_tokens, ())
    blocks = 0
    interned: dict = {}  # your traffic's blocks -> hash ids, shared by the file's lines
    for number, raw in _iter_lines(path):
        if raw is not None and not raw.strip():
            continue
        try:
            if raw is None:
                raise LineProblem(f"longer than {MAX_TRACE_LINE_BYTES:,} bytes (a request line is a few KB)")
            timestamp, input_length, output_length, hash_ids = parse_line(raw, block_tokens=block_tokens,
                                                                          interned=interned, tokenize=tokenize)
        except LineProblem as error:
            problem = TraceLineError(shown, number, str(error), error.column)
            if on_error == "stop":
                raise TraceFormatError(problem) from None
            skipped_count += 1
            if len(skipped) < MAX_TRACE_SKIPS_LISTED:
                skipped.append(problem)
            continue
        blocks += len(hash_ids)
        if blocks > MAX_TRACE_BLOCKS:
            raise TraceTooLarge(TraceLineError(
                shown, number, f"the trace holds more than {MAX_TRACE_BLOCKS:,} blocks up to here, more than "
                "kvviz replays at once: read fewer requests (--first N)"))
        requests.append(TraceRequest(len(requests), number, timestamp, input_length, output_length, hash_ids))
        if first is not None and len(requests) >= first:
            break
    return Trace(shown, block_tokens, tuple(requests), tuple(skipped), skipped_count)


@dataclass(frozen=True, slots=True)
class PrefixReuse:
    """What an unlimited prefix cache would reuse: the trace's own prefix-reuse ratio.

    ``reused_tokens`` counts, per request, its leading blocks already seen (as a prefix) in
    an earlier request, times the block size, capped at the request's input length.
    """

    input_tokens: int
    reused_tokens: int
    blocks: int
    reused_blocks: int
    distinct_blocks: int

    @property
    def ratio(self) -> float:
        """Reused tokens / input tokens (0.0 for an empty trace)."""
        return self.reused_tokens / self.input_tokens if self.input_tokens else 0.0


def prefix_reuse(requests: Iterable[TraceRequest], *, block_tokens: int = DEFAULT_BLOCK_TOKENS) -> PrefixReuse:
    """The trace's prefix-reuse ratio, independent of any cache. O(total blocks).

    Prefixes are tracked as paths in a dict-based trie keyed on ``(parent node, hash id)``,
    so the figure is exact even for ids that are not globally unique chained hashes.
    """
    children: dict[tuple[int, int], int] = {}
    input_tokens = reused_tokens = blocks = reused_blocks = 0
    for request in requests:
        node = 0
        matched = 0
        hash_ids = request.hash_ids
        for hash_id in hash_ids:
            child = children.get((node, hash_id))
            if child is None:
                break
            node = child
            matched += 1
        for hash_id in hash_ids[matched:]:
            child = len(children) + 1
            children[(node, hash_id)] = child
            node = child
        input_tokens += request.input_length
        reused_tokens += min(matched * block_tokens, request.input_length)
        blocks += len(hash_ids)
        reused_blocks += matched
    return PrefixReuse(input_tokens, reused_tokens, blocks, reused_blocks, len(children))
