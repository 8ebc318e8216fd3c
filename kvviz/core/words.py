# SPDX-License-Identifier: Apache-2.0
"""The counting helpers every sentence of kvviz is built with: a count and its noun in the
right number, the scenario's own units, page and node lists, number runs.

They sit below both the narration (:mod:`.narrate`, :mod:`.substeps`, :mod:`.why`) and the
cache designs (:mod:`.designs`), which word their events with them, so neither has to import
the other. Pure functions of their arguments; no kvcore state.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

__all__ = ["EVICTIONS_TOLD", "Labeler", "NODES_TOLD", "PAGES_LISTED", "TOKENS", "Units", "are", "count",
           "default_labeler", "did_you_mean", "there_are",
           "policy_key_text", "nodes_text", "number_ranges", "pages_text", "some_pages"]

Labeler = Callable[[tuple[int, ...]], str]
"""Turns tokens into the words a script spelled (:meth:`kvviz.core.vocab.Vocabulary.label_tokens`)."""

EVICTIONS_TOLD = 3
"""Evictions narrated one by one; the rest of a step's evictions are one clause."""
PAGES_LISTED = 12
"""Pages (or runs of pages) a clause lists before it says ``and N more``."""
NODES_TOLD = 3
"""Nodes a publish narrates one by one; more (a trace request publishes dozens) are one
clause with ranges of node and page numbers."""


def default_labeler(tokens: tuple[int, ...]) -> str:
    """Tokens as space-separated integers."""
    return " ".join(map(str, tokens))


_IRREGULAR = {"child": "children"}


def count(n: int, word: str, plural: str | None = None) -> str:
    """``1 page``, ``2 pages``, ``1,024 tokens``, ``0 children``: a count with its noun in the
    right number."""
    return f"{n:,} {word if n == 1 else (plural or _IRREGULAR.get(word) or word + 's')}"


def are(n: int, word: str = "", plural: str | None = None) -> str:
    """``1 is``, ``2 are``, ``1 page is``: a count as a sentence's subject, its verb agreeing."""
    subject = count(n, word, plural) if word else f"{n:,}"
    return f"{subject} {'is' if n == 1 else 'are'}"


def there_are(n: int, word: str = "", plural: str | None = None) -> str:
    """``there is 1``, ``there are 2 free pages``: the verb agrees with the count."""
    return f"there {'is' if n == 1 else 'are'} " + (count(n, word, plural) if word else f"{n:,}")


@dataclass(frozen=True, slots=True)
class Units:
    """What one kvcore token stands for, so narration can speak in the scenario's own units.

    The default counts tokens and full pages. ``block_tokens`` set means each kvcore token
    is one hash block of that many real tokens, one block per page (a converted Mooncake
    trace, :mod:`kvviz.trace.to_kvs`): a match is then "1 of 15 blocks (of 512 tokens)".
    """

    block_tokens: int | None = None

    def match(self, matched_pages: int, full_pages: int, matched_tokens: int, total_tokens: int,
              full: str = "full page") -> str:
        """``matched 1 of 4 full pages (4 of 16 tokens)`` or ``matched 1 of 15 blocks (of 512
        tokens)``; ``full`` is the design's noun for a full page ("full block" in a hash cache)."""
        if self.block_tokens is not None:
            return f"matched {matched_pages:,} of {count(full_pages, 'block')} (of {self.block_tokens:,} tokens)"
        return (f"matched {matched_pages:,} of {count(full_pages, full)} "
                f"({matched_tokens:,} of {count(total_tokens, 'token')})")


    def per_page(self, tokens_per_page: int) -> str:
        """What one page holds: ``4 tokens``, or ``1 block of 512 tokens`` (a converted trace,
        whose token is a block)."""
        if self.block_tokens is not None:
            return f"{count(tokens_per_page, 'block')} of {count(self.block_tokens, 'token')}"
        return count(tokens_per_page, "token")


TOKENS = Units()
"""The default units: tokens and pages."""


def did_you_mean(word: str, choices: Iterable[str], *, n: int = 1, cutoff: float = 0.6) -> str:
    """``"; did you mean 'lru'?"`` (or ``'a', 'b' or 'c'`` with ``n`` > 1) when ``word`` looks
    like a typo of ``choices``, else ``""``: the one wording of every "unknown NAME" message."""
    close = difflib.get_close_matches(word, list(choices), n=n, cutoff=cutoff)
    if not close:
        return ""
    quoted = [repr(choice) for choice in close]
    return f"; did you mean {' or '.join([', '.join(quoted[:-1]), quoted[-1]] if len(quoted) > 1 else quoted)}?"


def number_ranges(numbers, limit: int = PAGES_LISTED) -> str:
    """Numbers in their order, runs that count up or down by one written as the scenario
    language writes a range: ``560..577, 13..1, 40``; past ``limit`` runs, ``and N more``.
    The order is kept (a free queue's order is what a reader asks about)."""
    runs: list[list[int]] = []  # [first, last, direction]
    for n in numbers:
        if runs:
            first, last, direction = runs[-1]
            if direction in (0, 1) and n == last + 1 or direction in (0, -1) and n == last - 1:
                runs[-1] = [first, n, n - last]
                continue
        runs.append([n, n, 0])
    parts = [str(a) if a == b else (f"{a}, {b}" if abs(b - a) == 1 else f"{a}..{b}") for a, b, _ in runs[:limit]]
    rest = sum(abs(b - a) + 1 for a, b, _ in runs[limit:])
    return ", ".join(parts) + (f" and {rest:,} more" if rest else "")


def pages_text(pages) -> str:
    """``page 3``, ``pages 3, 5``; beyond :data:`NODES_TOLD` pages, runs: ``pages 560..577, 13..1``."""
    pages = list(pages)
    if len(pages) == 1:
        return f"page {pages[0]}"
    return "pages " + (", ".join(map(str, pages)) if len(pages) <= NODES_TOLD else number_ranges(pages))


def nodes_text(nodes: Sequence[int], pages: Sequence[int] | None = None) -> str:
    """``node 3 (page 2)``, ``nodes 1, 2 (pages 0, 1)``, ``no node``."""
    if not nodes:
        return "no node"
    head = f"node {nodes[0]}" if len(nodes) == 1 else "nodes " + ", ".join(map(str, nodes))
    return f"{head} ({pages_text(pages)})" if pages else head


def some_pages(evictions) -> str:
    """The pages of ``evictions``, the first :data:`PAGES_LISTED` of them: "4, 5 and 9 more"."""
    pages = ", ".join(str(e.page) for e in evictions[:PAGES_LISTED])
    return pages + (f" and {len(evictions) - PAGES_LISTED:,} more" if len(evictions) > PAGES_LISTED else "")


def policy_key_text(key) -> str:
    """A key compact, as sub-steps write it: ``(3,1)``; ``none`` for no key."""
    return "(" + ",".join(map(str, key)) + ")" if key is not None else "none"
