# SPDX-License-Identifier: Apache-2.0
"""The values of the scenario language: the cache config, ops, expects, steps, scenarios and
the error every problem in scenario text becomes. All frozen; the parser builds them, the
formatter writes them back, the session runs them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import kvcore
from kvcore.policies import MAX_PRIORITY as _PRIORITY_BOUND

from kvviz.core.designs import HASH, TRIE
from kvviz.core.expect import Expect, applies  # an expect line is its table's value; re-exported for the parser
from kvviz.core.vocab import Vocabulary

CACHE_KINDS = ("trie", "base", "hash")
"""The scenario language's keyword table of cache kinds (the design registry's names,
:data:`kvviz.core.designs.KVCORE_DESIGNS`, spelled as the language spells them): the kinds a scenario may run on; also the kinds an expect or narration may be scoped to
(``hash``: vLLM's design, full blocks under chained keys and one free queue, no trie)."""

ONLY_LRU = {
    HASH: "a hash cache evicts in its free queue's order, which is LRU",
}
"""The kinds that take ``policy=lru`` only, and why (the base cache takes any policy and
ignores it: it never evicts)."""

POLICIES = kvcore.POLICIES
"""The eviction policies a ``cache`` line may name (kvcore's seven, SGLang's names); lru first, the default."""

OP_FORMS: dict[str, str] = {
    "acquire": "acquire NAME TOKENS [extra=N] [priority=N], e.g. acquire r1 1..8 extra=2",
    "publish": "publish NAME [TOKENS], e.g. publish r1",
    "extend": "extend NAME TOKENS [extra=N] or extend NAME + TOKENS [extra=N]",
    "release": "release NAME, e.g. release r1",
}
"""Each op keyword and how it is written; error messages and the help use these."""

OP_OPTIONS: dict[str, tuple[str, ...]] = {"acquire": ("extra=", "priority="), "extend": ("extra=",)}
"""The ``key=`` options each op takes (ops not listed take none): completion data for the
command bar, and what the parser accepts."""

MAX_PRIORITY = _PRIORITY_BOUND - 1
"""The largest ``priority=`` an acquire may give (kvcore's bound: priorities are below 2**63)."""

COMMAND_KEYWORDS: tuple[str, ...] = (*OP_FORMS, "expect")
"""The first words a command-bar line may start with: an op, or ``expect`` (checked at once)."""


@dataclass(frozen=True)
class CacheConfig:
    """The cache a scenario runs on: its kind ('trie', 'base' or 'hash'), page count, page
    size and eviction policy (one of :data:`POLICIES`; a base cache never evicts, a hash
    cache evicts in its free queue's order: lru only). ``recompute_last_token`` (hash only,
    ``recompute_last_token=yes``) is vLLM's rule that a hit stops before a prompt's last
    token (:class:`kvcore.HashBlockPagedAttentionCache`)."""

    kind: str = TRIE
    pages: int = 8
    tokens_per_page: int = 4
    policy: str = "lru"
    recompute_last_token: bool = False


DEFAULT_CACHE_CONFIG = CacheConfig()
"""The cache of a scenario without a ``cache`` line: trie, 8 pages of 4 tokens, LRU."""


@dataclass(frozen=True)
class Op:
    """One operation on a named allocation.

    ``kind`` is 'acquire', 'publish', 'extend' or 'release'. ``tokens`` is None for a release
    and for a publish without tokens. With ``append`` (extend only) the tokens are added to
    the allocation's current tokens instead of replacing them. ``priority`` (acquire only)
    is what kvcore's ``priority`` policy evicts by: the allocation's nodes keep the highest
    priority of those that matched or published them (0, the default, under every other
    policy changes nothing). ``line`` and ``text`` (the
    op's canonical one-line form) say where it came from; they do not take part in equality,
    so an op equals itself parsed back from :func:`format_op`.
    """

    kind: str
    name: str
    tokens: tuple[int, ...] | None
    extra: int = 0
    append: bool = False
    priority: int = 0
    line: int = field(default=0, compare=False)
    text: str = field(default="", compare=False)


@dataclass(frozen=True)
class Paragraph:
    """One paragraph of a step's narration and the cache kinds it is written for (None: all)."""

    text: str
    kinds: tuple[str, ...] | None = None

    def applies_to(self, kind: str) -> bool:
        """Whether this paragraph is true of a run on a cache of ``kind``."""
        return applies(self.kinds, kind)


@dataclass(frozen=True)
class Step:
    """An op, the narration shown with it (paragraphs separated by "\\n") and its expects.

    ``narration`` is the text for every cache kind. When some paragraphs are scoped to a
    kind (``[base] > Base: no lookup at all``), ``paragraphs`` holds the whole narration in
    script order, scoped paragraphs included, and ``narration`` is derived from it (the
    unscoped paragraphs); give one or the other. :meth:`narration_for` is what a run on one
    kind shows.
    """

    op: Op
    narration: str = ""
    expects: tuple[Expect, ...] = ()
    paragraphs: tuple[Paragraph, ...] = ()

    def __post_init__(self) -> None:
        if not self.paragraphs:
            return
        if all(paragraph.kinds is None for paragraph in self.paragraphs):
            # Unscoped paragraphs say nothing ``narration`` does not: one spelling per value.
            derived = "\n".join(paragraph.text for paragraph in self.paragraphs)
            paragraphs: tuple[Paragraph, ...] = ()
        else:
            derived = "\n".join(p.text for p in self.paragraphs if p.kinds is None)
            paragraphs = tuple(self.paragraphs)
        if self.narration and self.narration != derived:
            raise ValueError("Step: narration disagrees with paragraphs (give one of them)")
        object.__setattr__(self, "narration", derived)
        object.__setattr__(self, "paragraphs", paragraphs)

    def narration_for(self, kind: str) -> str:
        """The narration a run on a cache of ``kind`` shows: every paragraph that applies to it."""
        if not self.paragraphs:
            return self.narration
        return "\n".join(p.text for p in self.paragraphs if p.applies_to(kind))

    def expects_for(self, kind: str) -> tuple[Expect, ...]:
        """The expect lines a run on a cache of ``kind`` checks."""
        return tuple(expect for expect in self.expects if expect.applies_to(kind))


@dataclass(frozen=True)
class Scenario:
    """A parsed scenario. ``source`` is the text it was parsed from, ``path`` its file.

    ``vocab`` knows the words the script spelled, so views can label tokens with them; it
    does not take part in equality.
    """

    title: str = ""
    description: str = ""
    config: CacheConfig = DEFAULT_CACHE_CONFIG
    steps: tuple[Step, ...] = ()
    path: str | None = None
    source: str = ""
    vocab: Vocabulary = field(default_factory=Vocabulary, compare=False, repr=False)


class ScenarioError(Exception):
    """A problem in scenario text, at a 1-based ``line`` and ``column`` of ``path``.

    ``str(error)`` is ``"PATH:LINE:COLUMN: MESSAGE (expected: EXPECTED)"``, with ``<input>``
    for text that did not come from a file: one line a person can act on. A file with
    several problems raises one error for the first; ``errors`` holds every problem reported
    (the first included, at most :data:`~kvviz.core.limits.MAX_SCENARIO_ERRORS`), ``more`` counts
    those left out, and :meth:`report` gives them all, one line each.
    """

    def __init__(self, path: str | None, line: int, column: int, message: str, expected: str):
        self.path = path
        self.line = line
        self.column = column
        self.message = message
        self.expected = expected
        self.errors: tuple[ScenarioError, ...] = (self,)
        self.more = 0
        super().__init__(f"{path or '<input>'}:{line}:{column}: {message} (expected: {expected})")

    @classmethod
    def several(cls, errors: Sequence[ScenarioError], more: int = 0) -> ScenarioError:
        """The first of ``errors`` (in file order), standing for them all and for ``more``
        not kept."""
        first = errors[0]
        first.errors = tuple(errors)
        first.more = more
        return first

    def report(self) -> str:
        """Every problem, one line each, then ``… and N more errors`` if some were left out."""
        lines = [str(error) for error in self.errors]
        if self.more:
            lines.append(f"… and {self.more:,} more error{'s' if self.more != 1 else ''}")
        return "\n".join(lines)

