# SPDX-License-Identifier: Apache-2.0
"""A tiny tokenizer.json and a one-batch recording of its tokens, made here for the --tokenizer
tests (nothing is downloaded)."""

from __future__ import annotations

import base64
import json

import msgspec

WORDS = ["the", "cat", "sat", "on", "mat", "dog", "ran", "far", "a", "red", "big", "hat"]


def write_tokenizer(path) -> None:
    """A word-level tokenizer of :data:`WORDS` (id 0 unknown), saved as ``path``."""
    from tokenizers import Tokenizer
    from tokenizers.decoders import WordPiece
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit

    vocab = {word: i for i, word in enumerate(["[UNK]", *WORDS])}
    tokenizer = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = WhitespaceSplit()
    tokenizer.decoder = WordPiece(prefix="##")  # joins words with spaces
    tokenizer.save(str(path))


def ids(text: str) -> list[int]:
    """The ids of ``text``'s words."""
    return [WORDS.index(word) + 1 for word in text.split()]


def write_recording(path) -> None:
    """One batch: a chain of two blocks of 4 tokens, "the cat sat on" then "the mat a red"."""
    event = {"type": "BlockStored", "block_hashes": [11, 12], "parent_block_hash": None,
             "token_ids": ids("the cat sat on the mat a red"), "block_size": 4, "lora_id": None, "medium": "GPU"}
    payload = base64.b64encode(msgspec.msgpack.encode([1.0, [event], 0])).decode("ascii")
    path.write_text(json.dumps({"topic": "kv", "seq": 0, "payload": payload}) + "\n")
