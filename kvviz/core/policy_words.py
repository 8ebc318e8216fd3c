# SPDX-License-Identifier: Apache-2.0
"""How sentences word an eviction under each policy: one entry per policy, read by narration,
why-answers, quiz questions and exports alike.

kvcore names each policy's key by its fields (:data:`kvcore.KEY_FIELDS`); this module says
in words what those fields mean and why the smallest key is the victim: under ``lru`` the
least recently used leaf, under ``lfu`` the fewest hits, under ``fifo`` the oldest created,
under ``mru`` the most recently used, under ``filo`` the newest, under ``slru`` probationary
before protected, under ``priority`` the lowest priority. ``lru`` is the default, so its
phrases name no policy and need no rule ("the least recently used leaf"); narration tests hold
them word for word.

Phrases that depend on the victim take its key tuple (as kvcore's events carry it), never a
live node, so an eviction is explained from its event alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kvcore import KEY_FIELDS
from kvviz.core.words import count as plural

__all__ = ["PolicyWords", "WORDS", "key_fields", "key_phrase", "key_value", "words_for"]


def key_fields(snapshot) -> str:
    """The names of the policy's eviction key, as the heap view's header shows them: "(last_access, seq)"."""
    return "(" + ", ".join(KEY_FIELDS[getattr(snapshot, "policy", "lru")]) + ")"


def key_value(key: tuple[int, ...]) -> str:
    """A key tuple as sentences write it: "(2, 2)", and "(5)" for a one-field key (not "(5,)")."""
    return "(" + ", ".join(map(str, key)) + ")"


def _ties(seq: int) -> str:
    return f"seq {seq}, its creation order, breaks ties"


def _slru_tier(tier: int) -> str:
    return "tier 0, probationary: fewer than 2 hits" if tier == 0 else "tier 1, protected: 2 hits or more"


@dataclass(frozen=True)
class PolicyWords:
    """The phrases of one policy. ``gloss(key)`` says what a key's values mean ("last used at
    tick 2; seq 2, its creation order, breaks ties"); ``first(key)`` is the victim in a
    narration ("the oldest unreferenced leaf"), ``next`` each later victim of the same step,
    ``rest`` the clause for the victims not told one by one; ``rule`` is the policy in one
    clause (empty for lru, whose phrases need none); ``smallest``/``smaller`` order candidates
    ("the oldest key", "older keys": lru's keys grow with time, other keys do not);
    ``last_mistake`` models a learner who picks the candidate the policy evicts last."""

    policy: str
    gloss: Callable[[tuple[int, ...]], str]
    first: Callable[[tuple[int, ...]], str]
    next: str
    rule: str
    last_mistake: str
    smallest: str = "smallest"
    smaller: str = "smaller"

    @property
    def lru(self) -> bool:
        """Whether these are lru's words (the default: its sentences name no policy or rule)."""
        return self.policy == "lru"

    def victim(self, key: tuple[int, ...]) -> str:
        """Why-answers' victim: "the least recently used unreferenced leaf" under lru, else the
        narration's phrase with the policy's rule: "the unreferenced leaf with the fewest hits
        (lfu: ...)"."""
        if self.lru:
            return "the least recently used unreferenced leaf"
        return f"{self.first(key)} ({self.policy}: {self.rule})"

    @property
    def victim_then(self) -> str:
        """The victim of an earlier step, whose key is not at hand."""
        if self.lru:
            return "the least recently used unreferenced leaf"
        return f"the unreferenced leaf with the smallest key {key_fields(self)} ({self.policy}: {self.rule})"

    def rest(self, fields: str) -> str:
        """The victims of a step not told one by one: "each the next oldest candidate"."""
        return "each the next oldest candidate" if self.lru else f"each the next candidate by {fields}"

    def smallest_first(self) -> str:
        """How a list of candidates is ordered: "oldest first", "smallest key first"."""
        return "oldest first" if self.lru else "smallest key first"


WORDS: dict[str, PolicyWords] = {w.policy: w for w in (
    PolicyWords(
        "lru", gloss=lambda k: f"last used at tick {k[0]}; {_ties(k[1])}",
        first=lambda k: "the oldest unreferenced leaf", next="the next oldest", rule="",
        last_mistake="the most recently used leaf: LRU evicts the least recently used",
        smallest="oldest", smaller="older"),
    PolicyWords(
        "fifo", gloss=lambda k: f"seq {k[0]}: its creation order, all fifo compares",
        first=lambda k: "the first-created unreferenced leaf", next="the next in creation order",
        rule="first in, first out, however recently a page was used",
        last_mistake="the newest leaf: fifo evicts the leaf created first"),
    PolicyWords(
        "lfu", gloss=lambda k: f"{plural(k[0], 'hit')}, then last used at tick {k[1]}; {_ties(k[2])}",
        first=lambda k: "the unreferenced leaf with the fewest hits", next="the next fewest hits",
        rule="the fewest hits go first; among equal hits, the least recently used",
        last_mistake="the most hit leaf: lfu evicts the fewest hits first"),
    PolicyWords(
        "mru", gloss=lambda k: f"last used at tick {-k[0]}, negated so the most recent is smallest; {_ties(k[1])}",
        first=lambda k: "the most recently used unreferenced leaf", next="the next most recently used",
        rule="the most recently used goes first",
        last_mistake="the least recently used leaf: mru evicts the most recently used first"),
    PolicyWords(
        "filo", gloss=lambda k: f"seq {-k[0]}, its creation order, negated so the newest is smallest",
        first=lambda k: "the last-created unreferenced leaf", next="the next in reverse creation order",
        rule="first in, last out, however recently a page was used",
        last_mistake="the oldest leaf: filo evicts the leaf created last first"),
    PolicyWords(
        "slru", gloss=lambda k: f"{_slru_tier(k[0])}; then last used at tick {k[1]}; {_ties(k[2])}",
        first=lambda k: ("the least recently used probationary leaf (fewer than 2 hits)" if k[0] == 0 else
                         "the least recently used protected leaf (no probationary leaf was left)"),
        next="the next in line, probationary before protected",
        rule="probationary leaves (fewer than 2 hits) go before protected ones, each tier least recently used first",
        last_mistake="the last in line: slru evicts probationary leaves (fewer than 2 hits) before protected ones"),
    PolicyWords(
        "priority", gloss=lambda k: f"priority {k[0]}, then last used at tick {k[1]}; {_ties(k[2])}",
        first=lambda k: "the unreferenced leaf of lowest priority", next="the next lowest priority",
        rule="the lowest priority goes first; among equal priorities, the least recently used",
        last_mistake="the highest-priority leaf: the priority policy evicts the lowest priority first"),
)}
"""Every policy's words, keyed by name (the same names as :data:`kvcore.POLICIES`)."""


def words_for(snapshot) -> PolicyWords:
    """The words of ``snapshot``'s policy (a snapshot without one, or of a base cache: lru's)."""
    return WORDS[getattr(snapshot, "policy", "lru")]


def key_phrase(snapshot, key: tuple[int, ...]) -> str:
    """A key as a sentence names it: "(2, 2)" under lru (as always), else with the policy's
    fields, "(hits, last_access, seq) = (0, 2, 2)"."""
    if words_for(snapshot).lru:
        return key_value(key)
    return f"{key_fields(snapshot)} = {key_value(key)}"
