# SPDX-License-Identifier: Apache-2.0
"""The hash-block cache's chained block keys: a block's key is sha256 of its parent's key and
its tokens (vLLM's ``hash_block_tokens``; see :mod:`kvcore.hashblock`).

A module of its own, below both the cache and :mod:`kvcore.invariants`, so the invariant
checker recomputes keys without importing the cache it checks."""

from __future__ import annotations

import struct
import sys
from array import array
from hashlib import sha256

#: The parent key of a first block (vLLM's ``NONE_HASH``, fixed here: see the module doc).
ROOT_KEY = sha256(b"kvcore.hashblock root").digest()

_BIG_ENDIAN = sys.byteorder == "big"  # keys hash little-endian ints on every machine


def block_key(parent: bytes | None, tokens: tuple[int, ...]) -> bytes:
    """The chained key of a block: sha256 of the parent's key (``ROOT_KEY`` when None) and
    the block's tokens. Tokens are encoded as 8-byte little-endian signed ints when they
    all fit, else as their decimal text; a tag byte tells the two apart, so the encoding is
    injective, and it is the same on every machine."""
    h = sha256(ROOT_KEY if parent is None else parent)
    try:
        ints = array("q", tokens)
    except OverflowError:
        h.update(b"r" + repr(tuple(tokens)).encode())
    else:
        if _BIG_ENDIAN:
            ints.byteswap()
        h.update(b"q" + ints.tobytes())
    return h.digest()


#: Packers of ``n`` little-endian int64s, by ``n`` (see :func:`_packer`); at most
#: ``_PACKERS`` of them are kept.
_packers: dict[int, object] = {}
_PACKERS = 256


def _packer(count: int):
    """``struct.Struct(f"<{count}q").pack``: the tokens of a run of blocks as the bytes
    :func:`block_key` hashes (``array("q")`` gives the same bytes, at about four times
    the cost: it parses each token with ``PyArg_Parse``)."""
    pack = _packers.get(count)
    if pack is None:
        if len(_packers) >= _PACKERS:
            _packers.clear()
        pack = _packers[count] = struct.Struct(f"<{count}q").pack
    return pack


def chain_keys(parent: bytes | None, tokens: tuple[int, ...], first: int, stop: int,
               tokens_per_page: int) -> list[bytes]:
    """The keys of blocks ``first .. stop-1`` of ``tokens``, chained from ``parent`` (the
    key of block ``first - 1``; None before block 0): :func:`block_key` of each in turn
    (one sha256 per block), with the tokens encoded once for the whole run rather than
    once per block."""
    tpp = tokens_per_page
    if stop <= first:
        return []
    try:
        raw = _packer((stop - first) * tpp)(*tokens[first * tpp:stop * tpp])
    except struct.error:  # some block needs the text encoding: block by block
        keys = []
        for i in range(first, stop):
            parent = block_key(parent, tokens[i * tpp:(i + 1) * tpp])
            keys.append(parent)
        return keys
    step = 8 * tpp
    key = ROOT_KEY if parent is None else parent
    keys = []
    append = keys.append
    for start in range(0, len(raw), step):
        key = sha256(key + b"q" + raw[start:start + step]).digest()
        append(key)
    return keys


def key_text(key: bytes | None) -> str | None:
    """A key as snapshots and events show it: 64 hex digits (None stays None)."""
    return None if key is None else key.hex()
