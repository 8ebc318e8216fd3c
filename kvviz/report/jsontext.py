# SPDX-License-Identifier: Apache-2.0
"""Canonical JSON text of a bundle, streamed in bounded chunks.

The text is exactly ``json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False)`` (a
test holds it to that), but produced piece by piece: ``json.dumps`` with an indent runs the
pure-Python encoder, which keeps millions of small strings alive and then joins them into
one more copy, so a bundle of a few million tokens peaked at gigabytes. Here a long list of
integers (the tokens of an allocation, the digests) is written in slices, each one joined
in C, and nothing is kept once it is written.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

#: Elements of a list of scalars joined into one chunk: big enough to run at C speed,
#: small enough that a chunk stays a few hundred kilobytes.
SLICE = 16_384

_string = json.encoder.encode_basestring  # ensure_ascii=False: the C encoder when present


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if type(value) is int:
        return int.__repr__(value)
    if type(value) is str:
        return _string(value)
    return json.dumps(value)  # floats and the like: never in a bundle, but stay exact


def iter_json(value: Any, level: int = 0, indent: int = 2) -> Iterator[str]:
    """Chunks of ``json.dumps(value, sort_keys=True, indent=indent, ensure_ascii=False)``.

    Iterative (an explicit stack), so nesting depth is bounded by memory, not by Python's
    recursion limit; tuples are written as lists, as ``json`` does.
    """
    # The stack holds either text to emit or a (value, level) still to expand.
    stack: list[Any] = [(value, level)]
    while stack:
        item = stack.pop()
        if type(item) is str:
            yield item
            continue
        value, level = item
        if isinstance(value, dict):
            if not value:
                yield "{}"
                continue
            inner = "\n" + " " * (indent * (level + 1))
            parts: list[Any] = ["\n" + " " * (indent * level) + "}"]
            keys = sorted(value)
            for i in range(len(keys) - 1, -1, -1):
                key = keys[i]
                parts.append((value[key], level + 1))
                parts.append(("{" if i == 0 else ",") + inner + _string(key) + ": ")
            stack.extend(parts)
        elif isinstance(value, (list, tuple)):
            if not value:
                yield "[]"
                continue
            inner = "\n" + " " * (indent * (level + 1))
            close = "\n" + " " * (indent * level) + "]"
            kinds = set(map(type, value))
            if kinds <= _SCALARS:  # token lists, digests, page rows: written a slice at a time
                yield from _scalar_list(value, kinds, inner, close)
                continue
            parts = [close]
            for i in range(len(value) - 1, -1, -1):
                parts.append((value[i], level + 1))
                parts.append(("[" if i == 0 else ",") + inner)
            stack.extend(parts)
        else:
            yield _scalar(value)


_SCALARS = frozenset((int, str, bool, type(None)))


def _scalar_list(values, kinds: set, inner: str, close: str) -> Iterator[str]:
    """``[`` + the elements (scalars), one per line, + ``]``; a slice at a time."""
    separator = "," + inner
    convert = int.__repr__ if kinds == {int} else _scalar
    for start in range(0, len(values), SLICE):
        chunk = separator.join(map(convert, values[start:start + SLICE]))
        yield ("[" + inner if start == 0 else separator) + chunk
    yield close


def iter_json_blocks(value: Any, size: int = 1 << 20) -> Iterator[str]:
    """The chunks of :func:`iter_json` gathered into blocks of about ``size`` characters: a
    file write per block, not per row."""
    block: list[str] = []
    held = 0
    for chunk in iter_json(value):
        block.append(chunk)
        held += len(chunk)
        if held >= size:
            yield "".join(block)
            block, held = [], 0
    if block:
        yield "".join(block)


def dumps(value: Any) -> str:
    """The whole canonical text in one string (small values, tests)."""
    return "".join(iter_json(value))
