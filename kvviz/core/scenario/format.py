# SPDX-License-Identifier: Apache-2.0
"""The formatter: canonical scenario text that parses back to an equal value.

Ranges stay ranges: a run of three or more consecutive ints, in an op's tokens or an expect's
page list, is written ``a..b``, so formatting costs O(values) time and the text stays as
small as the script that spelled it (an exported bundle of ``expect pages a 0..999999``
holds 9 characters for the list, not a million numbers).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import count, groupby
from operator import sub

from kvviz.core.expect import EXPECT_KINDS
from kvviz.core.vocab import Vocabulary
from kvviz.core.scenario.values import DEFAULT_CACHE_CONFIG, CacheConfig, Expect, Op, Paragraph, Scenario, Step

__all__ = ["format_cache", "format_expect", "format_ints", "format_op", "format_scenario", "format_tokens",
           "kinds_tag"]


def format_tokens(tokens: Iterable[int], vocab: Vocabulary | None = None) -> str:
    """Tokens as the language writes them: words the script spelled in quotes, runs of three or
    more consecutive ints as ranges ``a..b``, other ints as themselves. O(len(tokens))."""
    tokens = tuple(tokens)
    words = _quotable_words(tokens, vocab)
    if words is None:
        return format_ints(tokens)
    parts = []
    position = 0
    for quoted, run in groupby(words, key=_is_word):
        length = len(list(run))
        segment = slice(position, position + length)
        parts.append('"' + " ".join(words[segment]) + '"' if quoted else format_ints(tokens[segment]))
        position += length
    return " ".join(parts)


def _quotable_words(tokens: tuple[int, ...], vocab: Vocabulary | None) -> list[str | None] | None:
    """For each token the word to write for it, or None for an int; None if no token is a word."""
    spellings = vocab.spellings(tokens) if vocab is not None else []
    if not any(spellings):
        return None
    # A spelling from Vocabulary.ids() called by other code could hold a quote or a NUL;
    # such a word cannot be written back inside quotes, so its token is written as an int.
    return [word if word is not None and _can_quote(word) else None for word in spellings]


def _can_quote(word: str) -> bool:
    return word.split() == [word] and '"' not in word and "\0" not in word


def _is_word(word: str | None) -> bool:
    return word is not None


def format_ints(values: Sequence[int]) -> str:
    """Ints separated by spaces, each run of three or more consecutive ones as ``a..b``.
    O(len(values)); the order is kept (``5 3`` stays ``5 3``)."""
    parts: list[str] = []
    position = 0
    # value - index is the same along a run of consecutive ints, so grouping on it finds
    # the runs without a Python-level comparison per token (ops may hold a million).
    for _, run in groupby(map(sub, values, count())):
        length = len(list(run))
        if length >= 3:
            parts.append(f"{values[position]}..{values[position + length - 1]}")
        else:
            parts.extend(map(str, values[position:position + length]))
        position += length
    return " ".join(parts)


def kinds_tag(kinds: Iterable[str] | None) -> str:
    """The scope tag written before a line for some cache kinds only, e.g. ``"[trie] "``;
    "" for a line that applies to every kind."""
    return "" if kinds is None else "[" + " ".join(kinds) + "] "


def format_op(op: Op, vocab: Vocabulary | None = None) -> str:
    """The canonical one-line form of ``op``, e.g. ``acquire r1 1..8 extra=2 priority=5``.

    It parses back to an equal op. With ``vocab``, tokens the script spelled as words are
    written as quoted words.
    """
    parts = [op.kind, op.name]
    if op.append:
        parts.append("+")
    if op.tokens:
        parts.append(format_tokens(op.tokens, vocab))
    elif op.tokens is not None and op.kind == "publish":
        parts.append('""')  # publish zero tokens, not "publish what you hold"
    if op.extra:
        parts.append(f"extra={op.extra}")
    if op.priority:
        parts.append(f"priority={op.priority}")
    return " ".join(parts)


def format_expect(expect: Expect) -> str:
    """The canonical one-line form of ``expect``, e.g. ``expect pages r1 0..2 7`` or, scoped
    to a cache kind, ``[trie] expect hit r2 8``; written slot by slot as its kind declares."""
    parts = ["expect", expect.kind]
    slots = EXPECT_KINDS[expect.kind].slots if expect.kind in EXPECT_KINDS else ()
    values, position = expect.values, 0
    for slot in slots:
        if slot == "failure" and expect.detail:
            parts.append(expect.detail)
        elif slot == "name" and expect.name is not None:
            parts.append(expect.name)
        elif slot in ("count", "page") and position < len(values):
            parts.append(str(values[position]))
            position += 1
        elif slot in ("pages", "pages+") and position < len(values):
            parts.append(format_ints(values[position:]))
            position = len(values)
        elif slot == "names":
            parts.extend(expect.names)
    return kinds_tag(expect.kinds) + " ".join(parts)


def format_cache(config: CacheConfig) -> str:
    """The ``cache`` line of ``config``."""
    text = f"cache {config.kind} pages={config.pages} tokens_per_page={config.tokens_per_page}"
    if config.policy != DEFAULT_CACHE_CONFIG.policy:
        text += f" policy={config.policy}"
    return f"{text} recompute_last_token=yes" if config.recompute_last_token else text


def format_scenario(scenario: Scenario) -> str:
    """The canonical text of ``scenario``; it parses back to an equal scenario (path and
    source aside). Prose is wrapped at 88 columns. O(size of the text written)."""
    lines = []
    if scenario.title:
        lines.append(f"title: {_one_line(scenario.title)}")
    if scenario.description:
        lines.extend(_wrap_prose("description: ", scenario.description))
    lines.append(format_cache(scenario.config))
    lines.append("")
    for index, step in enumerate(scenario.steps):
        narration = _narration_lines(step)
        if narration and index:
            lines.append("")
        lines.extend(narration)
        lines.append(format_op(step.op, scenario.vocab))
        lines.extend(format_expect(expect) for expect in step.expects)
    return "\n".join(lines) + "\n"


def _narration_lines(step: Step) -> list[str]:
    """The ``>`` lines of a step. Consecutive paragraphs of one scope are parted by a bare
    ``>`` (with its tag); a change of scope starts a new paragraph by itself."""
    paragraphs = step.paragraphs or tuple(Paragraph(text) for text in step.narration.split("\n") if step.narration)
    lines: list[str] = []
    previous: object = object()  # no scope yet: the first paragraph needs no separator
    for paragraph in paragraphs:
        prefix = kinds_tag(paragraph.kinds) + ">"
        if paragraph.kinds == previous:
            lines.append(prefix)
        lines.extend(_wrap_prose(prefix + " ", paragraph.text))
        previous = paragraph.kinds
    return lines


def _one_line(text: str) -> str:
    return " ".join(text.replace("\r", "\n").split("\n"))


def _wrap_prose(prefix: str, text: str, width: int = 88) -> list[str]:
    """``text`` on lines starting with ``prefix``; the parser joins them back with single spaces."""
    text = _one_line(text)
    words = text.split(" ")
    # Only wrap where joining with one space gives the text back exactly.
    if any(not word or word != word.strip() for word in words):
        return [prefix + text]
    lines, current = [], ""
    for word in words:
        if current and len(prefix) + len(current) + 1 + len(word) > width:
            lines.append(prefix + current)
            current = word
        else:
            current = f"{current} {word}" if current else word
    lines.append(prefix + current)
    return lines
