# SPDX-License-Identifier: Apache-2.0
"""A tiny vocabulary so scenarios can spell tokens as words and the UI can show them.

Real tokenizers are large and model-specific; a teaching tool needs only a stable mapping
from words to integer token ids. A short built-in list of common English words gets the
small ids ``1000 + index``; any other word gets an id derived from its CRC-32, which is the
same on every run and platform, so scripts, exports and digests are reproducible.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

# The order is part of the format: a word's id is 1000 + its index here. Append only.
BUILTIN_WORDS: tuple[str, ...] = (
    # the words of a typical system prompt
    "you", "are", "a", "helpful", "assistant", "the", "user", "system", "is", "be",
    "to", "of", "and", "in", "that", "it", "for", "on", "with", "as",
    "this", "what", "how", "can", "i", "your", "please", "answer", "question", "help",
    "me", "do", "not", "if", "or", "at", "by", "from", "my", "we",
    "they", "he", "she", "was", "were", "will", "would", "should", "could", "have",
    "has", "had", "about", "into", "than", "then", "there", "their", "which", "who",
    "why", "when", "where", "all", "any", "each", "more", "most", "other", "some",
    "no", "yes", "only", "so", "very", "just", "also", "but", "because", "while",
    "an", "here", "new", "good", "best", "first", "last", "long", "short", "next",
    # chat and task words
    "write", "code", "explain", "summarize", "translate", "following", "text", "response", "brief", "concise",
    "step", "think", "carefully", "context", "document", "chat", "message", "reply", "role", "content",
    "instructions", "task", "example", "hello", "hi", "thanks", "sure", "story", "poem", "list",
    "python", "function", "bug", "fix", "test", "data", "file", "name", "time", "day",
    # small talk for demos
    "weather", "today", "tomorrow", "city", "paris", "london", "cat", "dog", "once", "upon",
    "know", "tell", "make", "use", "get", "like", "want", "need", "see", "go",
)

BUILTIN_FIRST_ID = 1000
"""Id of ``BUILTIN_WORDS[0]``; built-in words use ``1000 .. 1000 + len(BUILTIN_WORDS) - 1``."""

HASHED_FIRST_ID = 100_000
"""Other words get ids in ``100_000 .. 999_999``, clear of the built-in ones."""

_HASHED_ID_COUNT = 900_000
_BUILTIN_IDS: dict[str, int] = {word: BUILTIN_FIRST_ID + index for index, word in enumerate(BUILTIN_WORDS)}


def word_id(word: str) -> int:
    """The token id of one word; case-insensitive and the same on every run and platform.

    Different unknown words may share an id (a CRC-32 collision); a teaching vocabulary of
    900,000 ids makes that rare, and the :class:`Vocabulary` shows the first spelling seen.
    """
    folded = word.lower()
    builtin = _BUILTIN_IDS.get(folded)
    if builtin is not None:
        return builtin
    # surrogatepass: a lone surrogate in text decoded with surrogateescape still hashes.
    return HASHED_FIRST_ID + zlib.crc32(folded.encode("utf-8", "surrogatepass")) % _HASHED_ID_COUNT


class Vocabulary:
    """Maps words to token ids and remembers how each id was first spelled.

    One vocabulary belongs to one scenario: it learns spellings as the scenario's quoted
    words are parsed, so the UI can label token ``1004`` as ``assistant`` and a hashed id as
    the word the script used ("Paris", not "paris").
    """

    def __init__(self) -> None:
        self._spellings: dict[int, str] = {}

    def ids(self, text: str) -> tuple[int, ...]:
        """The token ids of ``text`` split into words on whitespace. O(len(text))."""
        return tuple(self.id(word) for word in text.split())

    def id(self, word: str) -> int:
        """The token id of one word; the first spelling seen for an id is remembered."""
        token = word_id(word)
        self._spellings.setdefault(token, word)
        return token

    def spelling(self, token: int) -> str | None:
        """The word this vocabulary has seen spelled for ``token``, or None if none was seen.

        Unlike :meth:`word` this ignores built-in words that were never written, so a
        formatter can tell tokens that came from quoted words from plain integers.
        """
        return self._spellings.get(token)

    def spellings(self, tokens: Iterable[int]) -> list[str | None]:
        """:meth:`spelling` of each token, in one pass. O(len(tokens))."""
        return list(map(self._spellings.get, tokens))

    def word(self, token: int) -> str | None:
        """The word for ``token``: the spelling seen first, else the built-in word, else None."""
        seen = self._spellings.get(token)
        if seen is not None:
            return seen
        index = token - BUILTIN_FIRST_ID
        return BUILTIN_WORDS[index] if 0 <= index < len(BUILTIN_WORDS) else None

    def label(self, token: int) -> str:
        """How to show ``token``: the word the script spelled for it, else its integer.

        Built-in words the script never wrote are not used: ``acquire n 1000..1003`` shows
        numbers, not "you are a helpful".
        """
        word = self._spellings.get(token)
        return word if word is not None else str(token)

    def label_tokens(self, tokens: Iterable[int], limit: int | None = None) -> str:
        """Labels of ``tokens`` joined by spaces; with ``limit``, at most that many then ``… +N more``."""
        tokens = tuple(tokens)
        shown = tokens if limit is None else tokens[: max(limit, 0)]
        text = " ".join(self.label(token) for token in shown)
        hidden = len(tokens) - len(shown)
        if hidden:
            text = f"{text} … +{hidden} more" if text else f"… +{hidden} more"
        return text

    def __repr__(self) -> str:
        return f"Vocabulary({len(self._spellings)} spellings seen)"
