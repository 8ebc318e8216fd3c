# SPDX-License-Identifier: Apache-2.0
"""Your own traffic as a trace: a JSONL of requests given by their tokens (or text) instead of
Mooncake's hash ids. ``kvviz trace`` reads both kinds of line, even mixed in one file.

One request a line::

    {"timestamp": 0, "tokens": [101, 7592, 2088, 102], "output_length": 12}
    {"timestamp": 40, "text": "You are a helpful assistant. Translate: bonjour"}

- ``tokens``: the prompt's token ids (non-negative ints); or ``text``: the prompt, cut into ids
  by ``--tokenizer PATH`` (a tokenizer.json, never downloaded);
- ``timestamp`` (optional, ms, default 0): when it arrives (``--concurrency`` orders by it;
  equal times keep file order);
- ``output_length`` (optional, default 0): tokens it generates.

Each full block of ``--page-tokens`` tokens becomes one hash id, chained on the blocks before it
(the same tokens under the same prefix are the same id, as an engine's block hash would make
them): the ids are interned in file order from 0. A prompt's partial last block is not a block
(an engine caches full blocks only), so its tokens can never hit: the miss breakdown counts
them as the partial tail, and a prompt under one block as below the floor.
"""

from __future__ import annotations

from collections.abc import Callable

from kvviz.core.limits import MAX_NUMBER

__all__ = ["TRAFFIC_FIELDS", "Interned", "traffic_request"]

TRAFFIC_FIELDS = ("tokens", "text")
"""The fields that make a line a request of your own traffic (one of them)."""

Interned = dict[tuple[int | None, tuple[int, ...]], int]
"""The hash ids given so far: (parent id, block tokens) -> id."""


class TrafficProblem(ValueError):
    """What is wrong with a traffic line (the reader adds file and line)."""


def _count(record: dict, field: str) -> int:
    value = record.get(field, 0)
    if type(value) is not int or value < 0:
        raise TrafficProblem(f"{field!r} must be a non-negative integer; found {value!r:.40}")
    if value > MAX_NUMBER:
        raise TrafficProblem(f"{field!r} is more than {MAX_NUMBER:,}")
    return value


def traffic_request(record: dict, block_tokens: int, interned: Interned,
                    tokenize: Callable[[str], list[int]] | None = None) -> tuple[int, int, int, tuple[int, ...]]:
    """``(timestamp, input_length, output_length, hash_ids)`` of a traffic line's ``record``;
    new blocks are added to ``interned``. Raises :class:`TrafficProblem`."""
    if "tokens" in record and "text" in record:
        raise TrafficProblem("give 'tokens' or 'text', not both")
    timestamp, output_length = _count(record, "timestamp"), _count(record, "output_length")  # before interning
    if "tokens" in record:
        tokens = record["tokens"]
        if not isinstance(tokens, list):
            raise TrafficProblem(f"'tokens' must be a list of token ids; found {type(tokens).__name__}")
        for position, token in enumerate(tokens):
            if type(token) is not int or not 0 <= token <= MAX_NUMBER:
                raise TrafficProblem(f"'tokens' item {position} is {token!r:.40}, not a token id "
                                     "(an integer, 0 or more)")
    else:
        text = record["text"]
        if not isinstance(text, str):
            raise TrafficProblem(f"'text' must be a string; found {type(text).__name__}")
        if tokenize is None:
            raise TrafficProblem("'text' needs a tokenizer: add --tokenizer PATH (a tokenizer.json), "
                                 "or give the prompt's 'tokens'")
        tokens = tokenize(text)
    ids: list[int] = []
    parent: int | None = None
    for start in range(0, len(tokens) // block_tokens * block_tokens, block_tokens):
        key = (parent, tuple(tokens[start:start + block_tokens]))
        parent = interned.setdefault(key, len(interned))
        ids.append(parent)
    return timestamp, len(tokens), output_length, tuple(ids)
