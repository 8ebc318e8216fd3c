# SPDX-License-Identifier: Apache-2.0
"""The scenario parser: ``.kvs`` text (files, the UI's command bar, the scripts in exports)
into the values of :mod:`.values`.

Parsing is line based and strict about what it accepts but forgiving about how it is typed
(case, spacing, commas). Every problem is a :class:`ScenarioError` naming the file, line and
column and what was expected there; no input, however broken, raises anything else. A file
is read to its end: every problem is reported (up to :data:`~kvviz.core.limits.MAX_SCENARIO_ERRORS`).

Every list the language spells (an op's tokens, an expect's pages) counts against one budget:
at most :data:`~kvviz.core.limits.MAX_TOKENS_PER_OP` values on one line and
:data:`~kvviz.core.limits.MAX_TOKENS_PER_SCENARIO` in one scenario, charged before a range is built,
so no input, valid or not, makes the parser build more than that.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import replace
from itertools import chain
from typing import NamedTuple

from kvviz.core.limits import (MAX_EXTRA, MAX_NUMBER, MAX_PAGES, MAX_SCENARIO_ERRORS, MAX_SOURCE_BYTES,
                       MAX_TOKENS_PER_OP, MAX_TOKENS_PER_PAGE, MAX_TOKENS_PER_SCENARIO)
from kvviz.printable import first_control, printable
from kvviz.core.designs import design
from kvviz.core.expect import EXPECT_KINDS, FAILURE_SPELLINGS
from kvviz.core.vocab import Vocabulary
from kvviz.core.words import did_you_mean
from kvviz.core.scenario.format import format_expect, format_op
from kvviz.core.scenario.values import (CACHE_KINDS, DEFAULT_CACHE_CONFIG, MAX_PRIORITY, ONLY_LRU, OP_FORMS, OP_OPTIONS, POLICIES,
                     CacheConfig, Expect, Op, Paragraph, Scenario, ScenarioError, Step)

__all__ = ["parse_command", "parse_scenario", "parse_scenario_bytes", "parse_scenario_file"]

_TOKEN_EXPECTED = 'an integer, a range like 1..8, or "quoted words"'
_PAGE_EXPECTED = "a page number like 3, or a range like 0..3"
_NAME_EXPECTED = "a name like r1 (letters, digits, _ . -; not starting with a digit)"
_LINE_EXPECTED = (
    "an op (acquire, publish, extend, release), expect, cache, title:, description:, > narration or # comment"
)
_TAG_EXPECTED = "cache kinds in brackets before an expect or > narration line, like [trie] expect hit r2 8"
_KINDS_EXPECTED = ", ".join(CACHE_KINDS[:-1]) + " or " + CACHE_KINDS[-1]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_INTEGER = re.compile(r"[0-9]+")  # ASCII only: int() would also take other scripts' digits
_RANGE = re.compile(r"([0-9]+)\.\.([0-9]+)")
_OPTION_KEY = re.compile(r"[A-Za-z_]+")
# An item is a quoted string (the closing quote may be missing: reported, not guessed) or a
# run of characters up to whitespace, a comma or a quote. re's \s is exactly str.isspace,
# the same whitespace str.split() uses for quoted words.
_ITEM = re.compile(r'"(?P<quoted>[^"]*)(?P<close>"?)|(?P<bare>[^\s,"]+)')
_HEADER = re.compile(r"\s*(title|description)\s*:(.*)", re.IGNORECASE | re.DOTALL)
_TAG_WORD = re.compile(r"[^\s,\]]+")


# -- lines and items ------------------------------------------------------------------------


class _Item(NamedTuple):
    """One word of a line: a bare item, or the words between double quotes."""

    text: str
    column: int  # 1-based; for a quoted item, the column of its opening quote
    quoted: bool = False

    @property
    def raw(self) -> str:
        """The item as written, for messages."""
        return f'"{self.text}"' if self.quoted else self.text


class _Line:
    """One source line and where it is, so any parsing step can raise a located error."""

    def __init__(self, path: str | None, number: int, text: str):
        self.path = path
        self.number = number
        self.text = text
        self.code = _strip_comment(text)
        self.rest = text
        self.code_start = 0

    def error(self, column: int, message: str, expected: str) -> ScenarioError:
        """A ScenarioError at ``column`` of this line."""
        return ScenarioError(self.path, self.number, column, message, expected)

    def blank(self, end: int) -> None:
        """Read the code from index ``end`` on, keeping columns (the scope tag before it is
        done with); ``rest`` is the text from there, comments included."""
        self.code = " " * end + self.code[end:]
        self.rest = self.text[end:]
        self.code_start = end

    @property
    def first_column(self) -> int:
        """The column of the line's first non-blank character."""
        return 1 + len(self.text) - len(self.text.lstrip())

    @property
    def end_column(self) -> int:
        """Where a missing item would have been: just past the last character of code."""
        return max(len(self.code.rstrip()), self.code_start) + 1

    def items(self) -> list[_Item]:
        """The line's items, left to right; an unterminated quote is an error."""
        items = []
        for match in _ITEM.finditer(self.code):
            if match["bare"] is not None:
                items.append(_Item(match["bare"], match.start() + 1))
            elif not match["close"]:
                raise self.error(match.start() + 1, "unterminated quoted words", 'a closing " on the same line')
            else:
                items.append(_Item(match["quoted"], match.start() + 1, quoted=True))
        return items


def _strip_comment(text: str) -> str:
    """``text`` up to its first ``#`` outside double quotes."""
    position = 0
    while True:
        hash_at = text.find("#", position)
        if hash_at < 0:
            return text
        quote_at = text.find('"', position, hash_at)
        if quote_at < 0:
            return text[:hash_at]
        close = text.find('"', quote_at + 1)
        if close < 0:
            return text  # an unterminated quote: the item reader reports it
        position = close + 1


def _source_lines(text: str) -> list[str]:
    """The lines of ``text`` as an editor numbers them (any newline convention, BOM dropped)."""
    if text.startswith("\ufeff"):
        text = text[1:]
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _shown(text: str, limit: int = 40) -> str:
    """``text`` quoted for a message, shortened if long (a 5 MB item must not fill a screen)."""
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


def _suggestion(word: str, choices: Iterable[str]) -> str:
    """'; did you mean X?' when ``word`` looks like a typo of one of ``choices`` (any case)."""
    return did_you_mean(word.lower(), choices)


class _Option(NamedTuple):
    key: str
    column: int
    value: str
    value_column: int


class _Cursor:
    """Reads a line's items left to right; errors give the line's usage as what was expected."""

    def __init__(self, line: _Line, items: list[_Item], start: int, usage: str):
        self.line = line
        self.items = list(items)
        self.index = start
        self.usage = usage

    @property
    def at_end(self) -> bool:
        return self.index >= len(self.items)

    def peek(self, ahead: int = 0) -> _Item | None:
        index = self.index + ahead
        return self.items[index] if index < len(self.items) else None

    def take(self) -> _Item:
        item = self.items[self.index]
        self.index += 1
        return item

    def require(self, what: str) -> _Item:
        """The next item; its absence is an error at the end of the line."""
        if self.at_end:
            raise self.line.error(self.line.end_column, f"missing {what}", self.usage)
        return self.take()

    def name(self, what: str = "allocation name") -> _Item:
        """The next item, which must be an allocation name."""
        item = self.require(what)
        if item.quoted or not _NAME.fullmatch(item.text):
            raise self.line.error(item.column, f"bad {what} {_shown(item.raw)}", _NAME_EXPECTED)
        return item

    def number(self, what: str, expected: str) -> int:
        """The next item, which must be a whole number."""
        item = self.require(what)
        if item.quoted:
            raise self.line.error(item.column, f"bad {what} {_shown(item.raw)}", expected)
        return _whole_number(self.line, item.text, item.column, what, expected)

    def plus(self) -> bool:
        """Consume a leading ``+`` (the append form of extend), spaced or not: ``+ 5`` / ``+5``."""
        item = self.peek()
        if item is None or item.quoted or not item.text.startswith("+"):
            return False
        if len(item.text) > 1:
            self.items[self.index] = _Item(item.text[1:], item.column + 1)
        else:
            self.index += 1
        return True

    def option(self) -> _Option | None:
        """A ``key=value`` option if one comes next (spaces around ``=`` allowed), else None."""
        item = self.peek()
        if item is None or item.quoted:
            return None
        key, equals, value = item.text.partition("=")
        if equals:
            self.index += 1
            value_column = item.column + len(key) + 1
        else:
            following = self.peek(1)
            if not (_OPTION_KEY.fullmatch(key) and following and not following.quoted
                    and following.text.startswith("=")):
                return None
            self.index += 2
            value, value_column = following.text[1:], following.column + 1
        if not key:
            raise self.line.error(item.column, "'=' without an option name", self.usage)
        if not value and self.peek() is not None and not self.peek().quoted:
            value_item = self.take()  # "key= value" or "key = value"
            value, value_column = value_item.text, value_item.column
        if not value:
            value_column = self.line.end_column if self.at_end else self.peek().column
        return _Option(key, item.column, value, value_column)

    def end(self) -> None:
        """Nothing may follow."""
        if not self.at_end:
            item = self.peek()
            raise self.line.error(item.column, f"unexpected {_shown(item.raw)}", self.usage)


# -- numbers, tokens, pages, and the budget they are spelled against ------------------------


def _whole_number(
    line: _Line, text: str, column: int, what: str, expected: str, minimum: int = 0, maximum: int = MAX_NUMBER
) -> int:
    """``text`` as an integer in ``minimum..maximum``, or an error naming ``what``."""
    if not text:
        raise line.error(column, f"missing {what}", expected)
    if not _INTEGER.fullmatch(text):
        raise line.error(column, f"bad {what} {_shown(text)}", expected)
    # Convert only the significant digits, and only when few: Python refuses int() of more
    # than 4,300 digits (leading zeros included), and a long string is slow to convert.
    digits = text.lstrip("0") or "0"
    if len(digits) > len(str(maximum)) or int(digits) > maximum:
        raise line.error(column, f"{what} {_shown(text)} is too large (at most {maximum:,})", expected)
    value = int(digits)
    if value < minimum:
        raise line.error(column, f"{what} {value} is too small (at least {minimum:,})", expected)
    return value


class _OverBudget(ScenarioError):
    """The scenario's budget is spent: said once, for the first line past it; the lines after
    it are counted with the errors left out, not listed (they would all say the same)."""


class _Budget:
    """The values (tokens, listed pages) a scenario has spelled so far, against its limits.

    Values are charged as each item is read, before anything is built, and a line that fails
    later still pays for its values. With ``build`` False the parser checks everything but
    builds no value (a dry run, for scripts whose ranges may exceed the budget: refusing
    them must cost neither the time nor the memory of building ten million ints first).
    """

    def __init__(self, build: bool = True) -> None:
        self.spent = 0
        self.build = build

    def charge(self, line: _Line, item: _Item, line_total: int, count: int, what: str) -> None:
        """Refuse ``item`` if it brings its line to more than :data:`MAX_TOKENS_PER_OP` values
        (``line_total``) or the scenario to more than :data:`MAX_TOKENS_PER_SCENARIO`; else pay ``count``."""
        if line_total > MAX_TOKENS_PER_OP:
            raise line.error(
                item.column, f"too many {what}s: {_shown(item.raw)} brings this line to {line_total:,}",
                f"at most {MAX_TOKENS_PER_OP:,} {what}s per {'op' if what == 'token' else 'line'}",
            )
        if self.spent + count > MAX_TOKENS_PER_SCENARIO:
            also = "" if what == "token" else f" ({what}s listed in expect lines count too)"
            raise _OverBudget(line.path, line.number, line.first_column,
                              f"the scenario spells more than {MAX_TOKENS_PER_SCENARIO:,} tokens{also}",
                              f"a smaller scenario: at most {MAX_TOKENS_PER_SCENARIO:,} tokens and listed pages in all")
        self.spent += count


class _Values:
    """The values one line spells, kept as ranges and tuples until the line is read."""

    def __init__(self, line: _Line, budget: _Budget, what: str):
        self.line = line
        self.budget = budget
        self.what = what
        self.chunks: list[Sequence[int]] = []
        self.count = 0

    def add(self, item: _Item, values: Sequence[int]) -> None:
        """Charge ``values`` (spelled by ``item``) to the budget, then keep them."""
        self.budget.charge(self.line, item, self.count + len(values), len(values), self.what)
        self.chunks.append(values)
        self.count += len(values)

    def built(self) -> tuple[int, ...]:
        """The values as one tuple; empty in a dry run. O(count)."""
        return tuple(chain.from_iterable(self.chunks)) if self.budget.build else ()


def _number_or_range(line: _Line, item: _Item, what: str, expected: str) -> range:
    """A bare item ``N`` or ``A..B`` as a range of ints (not built: a range costs O(1))."""
    match = _RANGE.fullmatch(item.text)
    if match:
        start = _whole_number(line, match[1], item.column, what, expected)
        end = _whole_number(line, match[2], item.column + len(match[1]) + 2, what, expected)
        if end < start:
            raise line.error(
                item.column, f"descending range {_shown(item.text)}", "a range with start <= end, like 1..8"
            )
        values = range(start, end + 1)
    elif _INTEGER.fullmatch(item.text):
        value = _whole_number(line, item.text, item.column, what, expected)
        values = range(value, value + 1)
    else:
        raise line.error(item.column, f"bad {what} {_shown(item.raw)}", expected)
    return values


def _tokens(line: _Line, item: _Item, vocab: Vocabulary) -> Sequence[int]:
    """The tokens one item spells: an integer, an inclusive range or quoted words."""
    if item.quoted:
        return vocab.ids(item.text)  # no longer than the text: the source size bounds it
    return _number_or_range(line, item, "token", _TOKEN_EXPECTED)


def _page_list(cursor: _Cursor, at_least: int, budget: _Budget) -> tuple[int, ...]:
    """The rest of an expect line as page numbers (ranges allowed)."""
    pages = _Values(cursor.line, budget, "page")
    while not cursor.at_end:
        item = cursor.take()
        if item.quoted:
            raise cursor.line.error(item.column, f"bad page {_shown(item.raw)}", _PAGE_EXPECTED)
        pages.add(item, _number_or_range(cursor.line, item, "page", _PAGE_EXPECTED))
    if pages.count < at_least:
        raise cursor.line.error(cursor.line.end_column, "missing page", cursor.usage)
    return pages.built()


# -- ops ------------------------------------------------------------------------------------


def _parse_op(line: _Line, items: list[_Item], vocab: Vocabulary, budget: _Budget) -> tuple[Op, _Item]:
    """The op of a line whose first item is an op keyword, and the item naming its allocation."""
    kind = items[0].text.lower()
    cursor = _Cursor(line, items, 1, OP_FORMS[kind])
    name = cursor.name()
    if kind == "release":
        cursor.end()
        return Op(kind, name.text, None, line=line.number), name
    append = kind == "extend" and cursor.plus()
    # publish without tokens (None) publishes what the allocation holds; 'publish r1 ""'
    # publishes zero tokens, which is a different request.
    has_tokens = not cursor.at_end or kind != "publish"
    tokens, options = _token_arguments(cursor, vocab, budget, OP_OPTIONS.get(kind, ()))
    return Op(kind, name.text, tokens if has_tokens else None, options.get("extra", 0), append,
              options.get("priority", 0), line=line.number), name


#: Each op option: what a bad value is expected to be, and its largest value.
_OP_OPTION_VALUES = {
    "extra": ("a number of extra token slots, like extra=4", MAX_EXTRA),
    "priority": ("a priority, a whole number from 0 to 2**63 - 1, like priority=5", MAX_PRIORITY),
}


def _token_arguments(cursor: _Cursor, vocab: Vocabulary, budget: _Budget,
                     allowed: tuple[str, ...]) -> tuple[tuple[int, ...], dict[str, int]]:
    """The rest of an op line: tokens, and the ``key=N`` options of ``allowed`` (e.g.
    ``("extra=",)``) anywhere among them, each at most once."""
    tokens = _Values(cursor.line, budget, "token")
    options: dict[str, int] = {}
    while not cursor.at_end:
        option = cursor.option()
        if option is None:
            item = cursor.take()
            tokens.add(item, _tokens(cursor.line, item, vocab))
            continue
        key = option.key.lower()
        if f"{key}=" not in allowed:
            known = [name.rstrip("=") for name in allowed]
            raise cursor.line.error(option.column, f"unknown option {_shown(option.key)}{_suggestion(key, known)}",
                                    cursor.usage)
        if key in options:
            raise cursor.line.error(option.column, f"{key} given twice", cursor.usage)
        expected, maximum = _OP_OPTION_VALUES[key]
        options[key] = _whole_number(cursor.line, option.value, option.value_column, key, expected, maximum=maximum)
    return tokens.built(), options


class _LiveNames:
    """Which allocations are live at a point of a script, assuming each op does what it says.

    An op followed by ``expect fail`` changed nothing, so :meth:`undo_last_op` takes its
    effect back: a failed acquire leaves the name free to retry.
    """

    def __init__(self, names: Iterable[str] = ()):
        self._acquired_on: dict[str, int | None] = dict.fromkeys(names)  # name -> line
        self._released_on: dict[str, int] = {}
        self._undo: tuple[str, str, int | None] | None = None

    def check(self, line: _Line, op: Op, name: _Item) -> None:
        """Refuse acquiring a live name or using a name that is not live."""
        if op.kind == "acquire":
            if op.name in self._acquired_on:
                where = self._acquired_on[op.name]
                since = f" (acquired on line {where})" if where else ""
                raise line.error(
                    name.column, f"allocation {op.name!r} is already live{since}",
                    f"a new name, or release {op.name} first",
                )
        elif op.name not in self._acquired_on:
            released = self._released_on.get(op.name)
            problem = f"allocation {op.name!r} was released on line {released}" if released else (
                f"unknown allocation {op.name!r}")
            raise line.error(
                name.column, f"{problem}: {self._listing()}", "the name of a live allocation (acquire it first)"
            )

    def is_live(self, name: str) -> bool:
        """Whether ``name`` is live at this point of the script."""
        return name in self._acquired_on

    def apply(self, op: Op) -> None:
        """Record the effect of ``op`` on which names are live."""
        self._undo = None
        if op.kind == "acquire":
            self._acquired_on[op.name] = op.line
            self._undo = ("acquire", op.name, None)
        elif op.kind == "release":
            acquired = self._acquired_on.pop(op.name)
            self._released_on[op.name] = op.line
            self._undo = ("release", op.name, acquired)

    def undo_last_op(self) -> None:
        """The last op failed: it neither acquired nor released anything."""
        if self._undo is None:
            return
        kind, name, acquired = self._undo
        if kind == "acquire":
            del self._acquired_on[name]
        else:
            self._released_on.pop(name, None)
            self._acquired_on[name] = acquired
        self._undo = None

    def _listing(self, limit: int = 10) -> str:
        names = list(self._acquired_on)
        if not names:
            return "there are no live allocations"
        shown = ", ".join(names[:limit])
        more = f", … ({len(names):,} in all)" if len(names) > limit else ""
        return f"live allocations are {shown}{more}"


def _read_op(line: _Line, items: list[_Item], vocab: Vocabulary, live: _LiveNames | None, budget: _Budget) -> Op:
    """Parse an op line, check its allocation name against ``live`` and give it its canonical text."""
    op, name = _parse_op(line, items, vocab, budget)
    if live is not None:
        live.check(line, op, name)
    return replace(op, text=format_op(op, vocab))


# -- expects and scope tags --------------------------------------------------------------------


def _parse_expect(line: _Line, items: list[_Item], kinds: tuple[str, ...] | None, budget: _Budget) -> Expect:
    """An ``expect`` line (``items[0]`` is the keyword), read slot by slot as its kind declares
    in :data:`~kvviz.core.expect.EXPECT_KINDS`; ``kinds`` is its scope tag (None: every kind)."""
    names_of_kinds = ", ".join(EXPECT_KINDS)
    if len(items) < 2:
        raise line.error(line.end_column, "missing what to expect", f"one of {names_of_kinds}")
    kind_item = items[1]
    kind = kind_item.text.lower()
    form = None if kind_item.quoted else EXPECT_KINDS.get(kind)
    if form is None:
        raise line.error(
            kind_item.column, f"unknown expect {_shown(kind_item.raw)}{_suggestion(kind, EXPECT_KINDS)}",
            f"one of {names_of_kinds}",
        )
    cursor = _Cursor(line, items, 2, form.usage)
    name, values, names, detail = None, [], [], None
    for slot in form.slots:
        if slot == "name":
            name = cursor.name().text
        elif slot in ("count", "page"):
            values.append(cursor.number(slot, form.usage))
        elif slot in ("pages", "pages+"):
            values.extend(_page_list(cursor, 1 if slot == "pages+" else 0, budget))
        elif slot == "names":
            while not cursor.at_end:
                item = cursor.name()
                budget.charge(line, item, len(names) + 1, 1, "name")  # every list counts, names too
                names.append(item.text)
        elif slot == "failure" and not cursor.at_end:
            detail = _failure_kind(line, cursor.take(), form.usage)
    cursor.end()
    expect = Expect(kind, name, tuple(values), detail, line.number, names=tuple(names), kinds=kinds)
    return replace(expect, text=format_expect(expect))


def _refuse_for_kinds(line: _Line, kind_item: _Item, expect: Expect, kinds: Iterable[str]) -> None:
    """Refuse an expect checked on a cache kind it means nothing on (``expect candidates`` on
    a hash cache, which has no heap), at its kind's column, saying what to write instead."""
    for kind in kinds:
        why = EXPECT_KINDS[expect.kind].not_for.get(kind)
        if why is not None:
            tag = f" (tagged [{kind}])" if expect.kinds else f" (the cache line says {kind})"
            raise line.error(kind_item.column, f"expect {expect.kind} on a {kind} cache{tag}: {why}",
                             f"another expect, or a tag naming the kinds it is true of, like [trie] expect {expect.kind}")


def _failure_kind(line: _Line, item: _Item, usage: str) -> str:
    detail = None if item.quoted else FAILURE_SPELLINGS.get(item.text.lower())
    if detail is None:
        raise line.error(item.column, f"unknown failure kind {_shown(item.raw)}", "alloc, invalid or nothing: " + usage)
    return detail


def _scope_tag(line: _Line) -> tuple[str, ...] | None:
    """The ``[KIND ...]`` tag the line starts with, if any, as kinds in :data:`CACHE_KINDS`
    order; the tag is blanked out of ``line.code`` so the rest reads (and is located) as usual."""
    start = line.first_column - 1
    if not line.code.startswith("[", start):
        return None
    close = line.code.find("]", start)
    if close < 0:
        raise line.error(start + 1, "unterminated scope tag (no ']')", _TAG_EXPECTED)
    kinds: list[str] = []
    for match in _TAG_WORD.finditer(line.code, start + 1, close):
        kind = match[0].lower()
        if kind not in CACHE_KINDS:
            raise line.error(match.start() + 1, f"unknown cache kind {_shown(match[0])}{_suggestion(kind, CACHE_KINDS)}",
                             _KINDS_EXPECTED)
        if kind in kinds:
            raise line.error(match.start() + 1, f"cache kind {kind!r} given twice", _TAG_EXPECTED)
        kinds.append(kind)
    if not kinds:
        raise line.error(start + 1, "empty scope tag", _TAG_EXPECTED)
    line.blank(close + 1)
    return tuple(kind for kind in CACHE_KINDS if kind in kinds)


def _covers_every_kind(kinds: tuple[str, ...] | None, spoken_of: set[str]) -> bool:
    """Whether a line scoped to ``kinds`` is checked on every kind the script speaks of (its
    header's and those its tags named so far): ``[trie base] expect fail`` in a trie script
    is, though a hash run would not check it (the script says nothing of hash)."""
    return kinds is None or set(kinds) >= spoken_of


# -- the header -----------------------------------------------------------------------------

_CACHE_USAGE = ("cache trie|base|hash pages=N tokens_per_page=N [policy=lru|fifo|lfu|...] "
                "[recompute_last_token=yes|no], e.g. cache trie pages=8 tokens_per_page=4 policy=lfu")
_CACHE_OPTIONS = {
    "pages": "pages", "tokens_per_page": "tokens_per_page", "page_size": "tokens_per_page",
    "tpp": "tokens_per_page", "policy": "policy", "recompute_last_token": "recompute_last_token",
}
#: The words a yes/no cache option takes, and what each means.
_YES_NO = {"yes": True, "no": False}


def _parse_cache(line: _Line, items: list[_Item]) -> CacheConfig:
    """A ``cache`` line: the kind anywhere, options in any order, defaults for the rest."""
    cursor = _Cursor(line, items, 1, _CACHE_USAGE)
    kind = None
    options: dict[str, _Option] = {}
    while not cursor.at_end:
        option = cursor.option()
        if option is None:
            item = cursor.take()
            if item.quoted or item.text.lower() not in CACHE_KINDS:
                raise line.error(item.column, f"unknown cache kind {_shown(item.raw)}", _KINDS_EXPECTED)
            if kind is not None:
                raise line.error(item.column, "cache kind given twice", _CACHE_USAGE)
            kind = item.text.lower()
            continue
        setting = _CACHE_OPTIONS.get(option.key.lower())
        if setting is None:
            raise line.error(
                option.column, f"unknown cache option {_shown(option.key)}{_suggestion(option.key, _CACHE_OPTIONS)}",
                f"pages=N, tokens_per_page=N (or page_size=N, tpp=N), policy={'|'.join(POLICIES)}, "
                "recompute_last_token=yes|no (hash)",
            )
        if setting in options:
            raise line.error(option.column, f"{setting} given twice", _CACHE_USAGE)
        options[setting] = option
    kind = kind or DEFAULT_CACHE_CONFIG.kind
    policy = _cache_policy(line, options.get("policy"))
    if kind in ONLY_LRU and policy != "lru":
        raise line.error(options["policy"].value_column, f"{ONLY_LRU[kind]}: policy must be lru, not {policy!r}",
                         f"policy=lru or no policy=, like cache {kind} pages=8 tokens_per_page=4")
    return CacheConfig(
        kind,
        _cache_number(line, options.get("pages"), "pages", MAX_PAGES, DEFAULT_CACHE_CONFIG.pages),
        _cache_number(
            line, options.get("tokens_per_page"), "tokens_per_page", MAX_TOKENS_PER_PAGE,
            DEFAULT_CACHE_CONFIG.tokens_per_page,
        ),
        policy,
        _recompute_last_token(line, options.get("recompute_last_token"), kind),
    )


def _recompute_last_token(line: _Line, option: _Option | None, kind: str) -> bool:
    """``recompute_last_token=yes|no``: vLLM's hit cap, taken by the designs that list it in
    their :attr:`~kvviz.core.designs.Design.cache_options` (the hash cache)."""
    if option is None:
        return False
    value = _YES_NO.get(option.value.lower())
    if value is None:
        raise line.error(option.value_column, f"recompute_last_token takes yes or no, not {_shown(option.value)}",
                         "recompute_last_token=yes or recompute_last_token=no")
    if value and "recompute_last_token" not in design(kind).cache_options:
        takers = [name for name in CACHE_KINDS if "recompute_last_token" in design(name).cache_options]
        raise line.error(option.column, f"recompute_last_token is a {' or '.join(takers)} cache's rule (vLLM's), "
                         f"not a {kind} cache's",
                         f"cache {takers[0]} pages=8 tokens_per_page=4 recompute_last_token=yes, or no such option")
    return value


def _cache_number(line: _Line, option: _Option | None, what: str, maximum: int, default: int) -> int:
    if option is None:
        return default
    expected = f"a whole number from 1 to {maximum:,}, like {what}={default}"
    return _whole_number(line, option.value, option.value_column, what, expected, minimum=1, maximum=maximum)


def _cache_policy(line: _Line, option: _Option | None) -> str:
    if option is None:
        return DEFAULT_CACHE_CONFIG.policy
    if option.value.lower() not in POLICIES:
        raise line.error(option.value_column, f"unknown policy {_shown(option.value)}", ", ".join(POLICIES))
    return option.value.lower()


# -- the scenario ---------------------------------------------------------------------------


class _Narration:
    """Narration lines waiting for the op they introduce, as paragraphs with their scope."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self.paragraphs: list[tuple[tuple[str, ...] | None, list[str]]] = []
        self.open = False  # whether the next line of the same scope joins the last paragraph
        self.first_line: int | None = None

    def add(self, number: int, text: str, kinds: tuple[str, ...] | None) -> None:
        """One ``>`` line; an empty one ends a paragraph, and so does a change of scope."""
        self.first_line = self.first_line or number
        if not text:
            self.open = False
        elif self.open and self.paragraphs[-1][0] == kinds:
            self.paragraphs[-1][1].append(text)
        else:
            self.paragraphs.append((kinds, [text]))
            self.open = True

    def take(self) -> tuple[Paragraph, ...]:
        """The waiting narration, and start afresh."""
        paragraphs = tuple(Paragraph(" ".join(lines), kinds) for kinds, lines in self.paragraphs)
        self._reset()
        return paragraphs


class _StepDraft:
    """A step while its expect lines are still being read."""

    def __init__(self, op: Op, paragraphs: tuple[Paragraph, ...]):
        self.op = op
        self.paragraphs = paragraphs
        self.expects: list[Expect] = []

    def add(self, line: _Line, expect: Expect) -> None:
        """Add ``expect``; refuse one that contradicts the step's ok/fail expectation."""
        if expect.kind in ("ok", "fail"):
            for earlier in self.expects:
                if _contradicts(earlier, expect):
                    raise line.error(
                        line.first_column,
                        f"'{expect.text}' contradicts '{earlier.text}' on line {earlier.line}",
                        "one outcome per step",
                    )
        self.expects.append(expect)

    def step(self) -> Step:
        return Step(self.op, expects=tuple(self.expects), paragraphs=self.paragraphs)


def _contradicts(first: Expect, second: Expect) -> bool:
    """Whether two expects claim different outcomes for one cache kind: ok against fail, or
    alloc against invalid (``[trie] expect ok`` and ``[base] expect fail`` agree)."""
    if first.kinds is not None and second.kinds is not None and not set(first.kinds) & set(second.kinds):
        return False
    outcomes = {first.kind, second.kind}
    if outcomes == {"ok", "fail"}:
        return True
    return outcomes == {"fail"} and None not in (first.detail, second.detail) and first.detail != second.detail


class _ScenarioReader:
    """Reads a scenario line by line, keeping the state the grammar depends on.

    A bad line is reported and skipped, and the reader goes on, so one pass finds every
    problem. What a skipped line would have done is guessed only where that avoids a cascade
    of errors it caused: a bad acquire still makes its name live, and the expects after a bad
    op are checked for their own mistakes but belong to no step.
    """

    def __init__(self, path: str | None, build: bool = True):
        self.path = path
        self.vocab = Vocabulary()
        self.title: str | None = None
        self.title_line = 0
        self.description: list[str] = []
        self.config: CacheConfig | None = None
        self.config_line = 0
        self.steps: list[_StepDraft] = []
        self.narration = _Narration()
        self.live = _LiveNames()
        self.budget = _Budget(build)
        self.after_bad_op = False
        self.kinds_named: set[str] = set()  # every kind a scope tag has named so far
        self.errors: list[ScenarioError] = []
        self.error_count = 0
        self.over_budget = False

    def read(self, line: _Line) -> None:
        """Take one line into the scenario; a problem in it is recorded, not raised."""
        try:
            self._read(line)
        except ScenarioError as error:
            self._record(error)

    def _record(self, error: ScenarioError) -> None:
        self.error_count += 1
        if isinstance(error, _OverBudget):
            if self.over_budget:
                return  # counted among those left out: every later line would say the same
            self.over_budget = True
        if len(self.errors) < MAX_SCENARIO_ERRORS:
            self.errors.append(error)

    def _read(self, line: _Line) -> None:
        nul = line.text.find("\0")
        if nul >= 0:
            raise line.error(nul + 1, "NUL character (is this a binary file?)", "scenario text")
        control = first_control(line.text, allowed="\t")
        if control >= 0:
            # An ESC in a title or a narration line would reach the terminal of whoever opens
            # the file (or a bundle holding it): refuse it where it is, as the NUL above.
            raise line.error(control + 1, f"control character {printable(line.text[control])}",
                             "printable text (a tab is fine)")
        stripped = line.text.strip()
        if not stripped or stripped.startswith("#"):
            return
        kinds = _scope_tag(line)
        if kinds is not None:
            self.kinds_named.update(kinds)
            self._read_scoped(line, kinds)
            return
        if stripped.startswith(">"):
            self.narration.add(line.number, stripped[1:].strip(), None)
            return
        header = _HEADER.match(line.text)
        if header:
            self._read_text_header(line, header[1].lower(), header[2].strip())
            return
        items = line.items()
        if not items:  # only separators, e.g. a stray comma
            raise line.error(line.first_column, f"unexpected {_shown(stripped)}", _LINE_EXPECTED)
        keyword = "" if items[0].quoted else items[0].text.lower()
        if keyword in ("cache", "cache:"):
            self._read_cache(line, items)
        elif keyword == "expect":
            self._read_expect(line, items, None)
        elif keyword in OP_FORMS:
            self._read_op(line, items)
        else:
            raise line.error(
                items[0].column,
                f"unknown op {_shown(items[0].raw)}{_suggestion(keyword, [*OP_FORMS, 'expect', 'cache'])}",
                _LINE_EXPECTED,
            )

    def _read_scoped(self, line: _Line, kinds: tuple[str, ...]) -> None:
        """The rest of a line after its scope tag: narration or an expect, nothing else."""
        rest = line.code.lstrip()
        if rest.startswith(">"):
            # Narration is prose: read it from the text, where '#' is not a comment.
            self.narration.add(line.number, line.rest.lstrip()[1:].strip(), kinds)
            return
        items = line.items()
        if items and not items[0].quoted and items[0].text.lower() == "expect":
            self._read_expect(line, items, kinds)
            return
        column = items[0].column if items else line.end_column
        raise line.error(column, "a scope tag before something other than expect or narration",
                         "expect or > narration after [KIND]; ops and header lines apply to every kind")

    def _refuse_late_header(self, line: _Line, name: str) -> None:
        if self.steps:
            raise line.error(
                line.first_column, f"{name} after the first op",
                f"header lines (title:, description:, cache) before the first op on line {self.steps[0].op.line}",
            )

    def _read_text_header(self, line: _Line, name: str, text: str) -> None:
        # Title and description are prose, like narration: '#' in them is text, not a comment.
        self._refuse_late_header(line, f"'{name}:'")
        if name == "description":
            if text:
                self.description.append(text)
        elif self.title is not None:
            raise line.error(
                line.first_column, f"second title (the first is on line {self.title_line})", "one title: line"
            )
        else:
            self.title, self.title_line = text, line.number

    def _read_cache(self, line: _Line, items: list[_Item]) -> None:
        self._refuse_late_header(line, "'cache'")
        if self.config is not None:
            raise line.error(items[0].column, f"second cache line (the first is on line {self.config_line})",
                             "one cache line")
        self.config, self.config_line = _parse_cache(line, items), line.number

    def _read_expect(self, line: _Line, items: list[_Item], kinds: tuple[str, ...] | None) -> None:
        if not self.steps and not self.after_bad_op:
            raise line.error(items[0].column, "expect before the first op",
                             "an op first: expect checks the state after the op above it")
        expect = _parse_expect(line, items, kinds, self.budget)
        # An untagged line is checked on the header's kind only (ScopedScript), a tagged one
        # on its kinds: refuse a kind whose state the expect says nothing true about.
        _refuse_for_kinds(line, items[1], expect, kinds or ((self.config or DEFAULT_CACHE_CONFIG).kind,))
        if self.after_bad_op:
            return  # its op was not read: report only the line's own mistakes
        self.steps[-1].add(line, expect)
        # A failed op changed nothing, so its name is free again; but only if it fails on
        # every kind: '[base] expect fail' leaves the trie run's allocation live.
        spoken_of = self.kinds_named | {(self.config or DEFAULT_CACHE_CONFIG).kind}
        if expect.kind == "fail" and _covers_every_kind(expect.kinds, spoken_of):
            self.live.undo_last_op()

    def _read_op(self, line: _Line, items: list[_Item]) -> None:
        paragraphs = self.narration.take()
        self.after_bad_op = True
        try:
            op = _read_op(line, items, self.vocab, self.live, self.budget)
        except ScenarioError:
            self._assume_acquired(items)
            raise
        self.after_bad_op = False
        self.live.apply(op)
        self.steps.append(_StepDraft(op, paragraphs))

    def _assume_acquired(self, items: list[_Item]) -> None:
        """After a bad acquire line, treat its name as live: its later uses are not new errors."""
        if len(items) > 1 and items[0].text.lower() == "acquire" and not items[1].quoted \
                and _NAME.fullmatch(items[1].text) and not self.live.is_live(items[1].text):
            self.live.apply(Op("acquire", items[1].text, ()))

    def finish(self, source: str) -> Scenario:
        """The scenario read so far; narration must have an op to go with. Raises the
        problems found, if any, as one :class:`ScenarioError`."""
        if self.narration.first_line is not None:
            self._record(ScenarioError(self.path, self.narration.first_line, 1, "narration with no op after it",
                                       "an op after narration lines: narration is shown with the next op"))
        if self.errors:
            raise ScenarioError.several(self.errors, self.error_count - len(self.errors))
        return Scenario(
            title=self.title or "",
            description=" ".join(self.description),
            config=self.config or DEFAULT_CACHE_CONFIG,
            steps=tuple(draft.step() for draft in self.steps),
            path=self.path,
            source=source,
            vocab=self.vocab,
        )


def parse_scenario(text: str, path: str | None = None) -> Scenario:
    """Parse scenario ``text``; ``path`` names it in errors. Raises :class:`ScenarioError` only,
    for every problem of the text (see :meth:`ScenarioError.report`).

    O(length of the text + values spelled), and the values spelled are at most
    :data:`MAX_TOKENS_PER_SCENARIO`: a text whose ranges might spell more is first read
    without building any value, so refusing it is as cheap as reading it.
    """
    if len(text) > MAX_SOURCE_BYTES:
        raise ScenarioError(path, 1, 1, f"scenario of {len(text):,} characters is too large",
                            f"at most {MAX_SOURCE_BYTES:,}")
    lines = _source_lines(text)
    if _may_exceed_budget(text):
        _read_lines(path, lines, text, build=False)  # raises if it does exceed (or is otherwise wrong)
    return _read_lines(path, lines, text, build=True)


def _read_lines(path: str | None, lines: list[str], text: str, build: bool) -> Scenario:
    reader = _ScenarioReader(path, build)
    for number, text_line in enumerate(lines, 1):
        reader.read(_Line(path, number, text_line))
    return reader.finish(text)


# Only from the start of a run of digits: trying every position inside a long run would make
# the scan quadratic (5,000 zeros, then no '..').
_ANY_RANGE = re.compile(r"(?<![0-9])([0-9]+)\.\.([0-9]+)")


def _may_exceed_budget(text: str) -> bool:
    """Whether ``text`` might spell more than :data:`MAX_TOKENS_PER_SCENARIO` values: an upper
    bound, from every ``A..B`` anywhere in it (comments and prose too) plus one value per two
    characters (a lone int or word needs at least a character and a separator). O(len(text))."""
    total = len(text) // 2
    for start, end in _ANY_RANGE.findall(text):
        if len(start) > 19 or len(end) > 19:  # beyond any limit: the parser refuses it, cheaply
            return True
        total += max(int(end) - int(start) + 1, 0)
        if total > MAX_TOKENS_PER_SCENARIO:
            return True
    return total > MAX_TOKENS_PER_SCENARIO


def parse_scenario_bytes(data: bytes, path: str | None = None) -> Scenario:
    """Parse a scenario from raw bytes: UTF-8 (a BOM is fine), no NUL, at most 5 MB."""
    if len(data) > MAX_SOURCE_BYTES:
        raise ScenarioError(path, 1, 1, f"file of {len(data):,} bytes is too large",
                            f"a scenario of at most {MAX_SOURCE_BYTES:,} bytes")
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        line_start = data.rfind(b"\n", 0, error.start) + 1
        column = len(data[line_start:error.start].decode("utf-8")) + 1  # valid: before the first bad byte
        raise ScenarioError(path, line, column, f"bytes that are not UTF-8 ({data[error.start:error.end]!r})",
                            "UTF-8 text (is this a binary file?)") from None
    return parse_scenario(text, path)


def parse_scenario_file(path: str | os.PathLike[str]) -> Scenario:
    """Read and parse a ``.kvs`` file; unreadable, binary or oversized files are ScenarioErrors."""
    name = os.fspath(path)
    try:
        with open(name, "rb") as file:
            data = file.read(MAX_SOURCE_BYTES + 1)  # enough to tell it is too big
    except OSError as error:
        raise ScenarioError(name, 1, 1, f"cannot read the file: {error.strerror or error}",
                            "a readable scenario file") from None
    return parse_scenario_bytes(data, name)




def parse_command(text: str, live_names: Iterable[str] | None = (),
                  vocab: Vocabulary | None = None) -> Op | Expect:
    """Parse one line typed in the UI's command bar: an op, or an ``expect`` line.

    Returns an :class:`Op` to apply, or an :class:`Expect` (``line`` 1) to check at once
    against the frame shown: ``kvviz.core.expect.evaluate(expect, frame)`` gives its
    :class:`~kvviz.core.expect.ExpectResult`; a scoped one (``[base] expect free 3``) says
    with ``expect.applies_to(kind)`` whether it concerns the session's cache kind.
    ``live_names`` are the allocations live now: acquiring one of them, or using any other
    name in an op, is an error (None skips the check). Quoted words go into ``vocab``. Errors
    are :class:`ScenarioError` at line 1 with the column in ``text``.
    """
    line = _Line(None, 1, text.rstrip())
    for position, character in enumerate(line.text):
        if character in "\n\r\0":
            raise line.error(position + 1, f"{character!r} in a command", "one op or expect line on one line")
    expected = "an op: " + ", ".join(OP_FORMS.values()) + "; or expect ..."
    kinds = _scope_tag(line)
    items = line.items()
    if not items:
        raise line.error(line.end_column, "empty command", expected)
    keyword = items[0]
    if not keyword.quoted and keyword.text.lower() == "expect":
        expect = _parse_expect(line, items, kinds, _Budget())
        _refuse_for_kinds(line, items[1], expect, kinds or ())  # untagged: evaluate says it per frame
        return expect
    if keyword.quoted or keyword.text.lower() not in OP_FORMS:
        raise line.error(keyword.column,
                         f"unknown op {_shown(keyword.raw)}{_suggestion(keyword.text, [*OP_FORMS, 'expect'])}",
                         expected)
    if kinds is not None:
        raise line.error(line.first_column, "a scope tag before an op",
                         "an op without [KIND]: ops apply to every kind; scope expect lines instead")
    live = None if live_names is None else _LiveNames(live_names)
    return _read_op(line, items, vocab if vocab is not None else Vocabulary(), live, _Budget())
