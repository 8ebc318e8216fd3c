"""Reader for Mooncake request traces (FAST'25 release, JSONL).

One JSON object per line::

    {"timestamp": 27482, "input_length": 6955, "output_length": 52,
     "hash_ids": [46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 2353, 2354]}

``timestamp`` is the arrival time in milliseconds, ``hash_ids`` holds one id per block of
``block_tokens`` (512) prompt tokens. An id covers its block *and every block before it*
(a chained prefix hash), so two requests share a KV-cache prefix exactly as far as their
``hash_ids`` agree from the start.

Every line is validated; a bad line is reported as ``file:line: what was expected``. With
``on_error="stop"`` the first bad line raises :class:`TraceFormatError`; with
``on_error="skip"`` bad lines are collected in :attr:`Trace.skipped` and reading goes on.
Blank lines are ignored (a trailing newline is not a request). Unknown extra fields are
ignored, so a trace with more columns still reads.

``len(hash_ids)`` must equal ``ceil(input_length / block_tokens)``: both released traces
satisfy this on every line, and a mismatch means either a damaged line or a wrong block
size (``--page-tokens``), which would silently skew every hit rate, so it is an error.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

__all__ = [
    "DEFAULT_BLOCK_TOKENS",
    "FIELDS",
    "PrefixReuse",
    "Trace",
    "TraceFormatError",
    "TraceLineError",
    "TraceRequest",
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
    """A line that is not a valid request: where it is and what was expected."""

    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


class TraceFormatError(ValueError):
    """Raised by :func:`read_trace` with ``on_error="stop"`` at the first bad line."""

    def __init__(self, problem: TraceLineError) -> None:
        super().__init__(str(problem))
        self.problem = problem


@dataclass(frozen=True, slots=True)
class Trace:
    """The valid requests of a trace file, in file order, and the lines that were skipped."""

    path: str
    block_tokens: int
    requests: tuple[TraceRequest, ...]
    skipped: tuple[TraceLineError, ...] = ()

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


def parse_line(text: str | bytes, *, block_tokens: int = DEFAULT_BLOCK_TOKENS) -> tuple[int, int, int, tuple[int, ...]]:
    """Validate one JSONL line; return ``(timestamp, input_length, output_length, hash_ids)``.

    Raises ``ValueError`` whose message says what was expected and what was found
    (without the file and line, which the caller knows).
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ValueError(f"not UTF-8 text (bad byte at column {error.start + 1})") from None
    try:
        record = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"not valid JSON ({error.msg} at column {error.colno})") from None
    if not isinstance(record, dict):
        raise ValueError(f"expected a JSON object with fields {', '.join(FIELDS)}; found {_describe(record)}")
    missing = [field for field in FIELDS if field not in record]
    if missing:
        names = ", ".join(repr(field) for field in missing)
        plural = "s" if len(missing) > 1 else ""
        raise ValueError(f"missing field{plural} {names} (every line needs {', '.join(FIELDS)})")
    for field in FIELDS[:3]:
        value = record[field]
        if not _is_count(value):
            raise ValueError(f"{field!r} must be a non-negative integer; found {_describe(value)}")
    hash_ids = record["hash_ids"]
    if not isinstance(hash_ids, list):
        raise ValueError(f"'hash_ids' must be a list of non-negative integers; found {_describe(hash_ids)}")
    for position, value in enumerate(hash_ids):
        if not _is_count(value):
            raise ValueError(
                f"'hash_ids' must be a list of non-negative integers; item {position} is {_describe(value)}"
            )
    input_length = record["input_length"]
    blocks = -(-input_length // block_tokens)
    if len(hash_ids) != blocks:
        raise ValueError(
            f"'hash_ids' has {len(hash_ids)} ids but input_length {input_length} needs "
            f"ceil({input_length}/{block_tokens}) = {blocks} blocks of {block_tokens} tokens "
            f"(is the block size, --page-tokens, right?)"
        )
    return record["timestamp"], input_length, record["output_length"], tuple(hash_ids)


def _iter_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    # Binary, so one line with bad UTF-8 is a bad line rather than a crash of the whole read.
    with path.open("rb") as file:
        for number, raw in enumerate(file, start=1):
            yield number, raw


def read_trace(
    path: str | os.PathLike[str],
    *,
    block_tokens: int = DEFAULT_BLOCK_TOKENS,
    on_error: OnError = "stop",
    first: int | None = None,
) -> Trace:
    """Read and validate a Mooncake JSONL trace.

    ``first`` stops after that many valid requests (the rest of the file is not read).
    ``on_error="stop"`` raises :class:`TraceFormatError` at the first bad line;
    ``"skip"`` leaves bad lines out and lists them in :attr:`Trace.skipped`.
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
    if first == 0:
        return Trace(shown, block_tokens, ())
    for number, raw in _iter_lines(path):
        if not raw.strip():
            continue
        try:
            timestamp, input_length, output_length, hash_ids = parse_line(raw, block_tokens=block_tokens)
        except ValueError as error:
            problem = TraceLineError(shown, number, str(error))
            if on_error == "stop":
                raise TraceFormatError(problem) from None
            skipped.append(problem)
            continue
        requests.append(TraceRequest(len(requests), number, timestamp, input_length, output_length, hash_ids))
        if first is not None and len(requests) >= first:
            break
    return Trace(shown, block_tokens, tuple(requests), tuple(skipped))


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
