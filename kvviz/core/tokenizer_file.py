# SPDX-License-Identifier: Apache-2.0
"""``--tokenizer PATH``: a ``tokenizer.json`` read with the ``tokenizers`` package (the watch
extra), to show token ids as text and to read a prompt given as text.

The file is read from the path given and nothing else: no name is ever resolved on a hub, nothing
is downloaded. Its size is bounded before it is read (:data:`MAX_TOKENIZER_BYTES`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

__all__ = ["MAX_TOKENIZER_BYTES", "TextTokenizer", "TokenizerError", "load_tokenizer"]

MAX_TOKENIZER_BYTES = 64 * 1024 * 1024
"""The largest ``tokenizer.json`` read (a large model's is some 10-20 MB). Kept here rather than
in :mod:`kvviz.core.limits` until the README's table of limits lists it."""

TOKENIZER_EXTRA_MISSING = 'kvviz: --tokenizer needs the tokenizers package: pip install "kvviz[watch]"'


class TokenizerError(ValueError):
    """A tokenizer that cannot be loaded: one line naming the file and why."""


class TextTokenizer:
    """Token ids to text and back, with one loaded ``tokenizer.json``."""

    def __init__(self, tokenizer, source: str) -> None:
        self._tokenizer = tokenizer
        self.source = source

    def encode(self, text: str) -> list[int]:
        """The ids of ``text`` as the tokenizer cuts it, without special tokens added."""
        return list(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids`` (ids the vocabulary lacks are skipped by the tokenizer)."""
        try:
            return self._tokenizer.decode(list(ids), skip_special_tokens=False)
        except (OverflowError, TypeError, ValueError):  # an id beyond u32: no text for it
            return ""


def load_tokenizer(path: str) -> TextTokenizer:
    """The tokenizer in the file ``path`` (a Hugging Face ``tokenizer.json``). Raises
    :class:`TokenizerError` (one line) for a missing, oversized or unreadable file, or when the
    ``tokenizers`` package is not installed."""
    try:
        size = os.stat(path).st_size
    except FileNotFoundError:
        raise TokenizerError(f"{path}: no such file (expected a tokenizer.json)") from None
    except OSError as exc:
        raise TokenizerError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if size > MAX_TOKENIZER_BYTES:
        raise TokenizerError(f"{path}: {size:,} bytes is more than a tokenizer may have "
                             f"({MAX_TOKENIZER_BYTES:,}, MAX_TOKENIZER_BYTES)")
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise TokenizerError(TOKENIZER_EXTRA_MISSING) from None
    try:
        return TextTokenizer(Tokenizer.from_file(path), path)
    except Exception as exc:  # noqa: BLE001 - the package raises its own Exception subclass
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise TokenizerError(f"{path}: not a tokenizer.json ({first[:200]})") from None
