# SPDX-License-Identifier: Apache-2.0
"""Seeded random scenarios for practice: ``generate(seed, level)`` is ordinary ``.kvs`` text.

A teacher hands out "seed 42, level medium" and every learner gets the same script. The text
parses with :func:`kvviz.core.scenario.parse_scenario` like any file (``kvviz quiz --random
--save F`` writes it), so a generated scenario can be opened, run, checked and exported.

Each level is one entry of :data:`LEVELS`; difficulty grows with the pool size, how much the
requests branch off shared prompts, whether idle chains are peeled by eviction cascades,
whether two requests compute the same prefix before either publishes (dedup), and whether
the pool runs out (failures). The script is built while driving a real kvcore cache, so every
op is valid for the state it meets (a failure is planned, never an accident). Deterministic:
one :class:`random.Random` per call, seeded by ``seed``; no global state.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from kvcore import CacheAllocationFailure, KVCacheError, PagePool, TriePagedAttentionCache

from kvviz.core.scenario import format_tokens


@dataclass(frozen=True)
class Level:
    """What a difficulty level puts in a scenario.

    ``pages`` and ``tokens_per_page``: inclusive ranges to draw the cache from; ``ops``: how
    many ops (inclusive range); ``prompts``: how many shared system prompts, each
    ``prompt_pages`` full pages long; ``branches``: how many shared continuations each prompt
    has (requests that share more than the prompt: a deeper trie); ``ragged``: request
    lengths that end inside a page (partial pages are never shared); ``hold``: chance that a
    request stays live after publishing (pins its path, fills the pool); ``extend``: chance
    of decode growth; ``dedup``: chance that two requests with one prompt are acquired before
    either publishes; ``failures``: how many planned failed acquires (a pool that says no).
    """

    summary: str
    pages: tuple[int, int]
    tokens_per_page: tuple[int, int]
    ops: tuple[int, int]
    prompts: tuple[int, int]
    prompt_pages: tuple[int, int]
    branches: int
    ragged: bool
    hold: float
    extend: float
    dedup: float
    failures: int


LEVELS: dict[str, Level] = {
    "easy": Level("a small pool, one or two shared prompts, requests that come and go, a few evictions",
                  pages=(5, 6), tokens_per_page=(4, 4), ops=(12, 16), prompts=(1, 2), prompt_pages=(1, 1),
                  branches=0, ragged=False, hold=0.15, extend=0.0, dedup=0.0, failures=0),
    "medium": Level("a bigger pool, prompts with shared continuations (branching), lengths that end inside a "
                    "page, decode growth, chains peeled by eviction",
                    pages=(8, 12), tokens_per_page=(2, 4), ops=(22, 30), prompts=(2, 3), prompt_pages=(1, 2),
                    branches=2, ragged=True, hold=0.25, extend=0.15, dedup=0.0, failures=0),
    "hard": Level("deep branching, long chains and eviction cascades, two requests computing one prefix "
                  "(dedup), held requests that fill the pool, and acquires that fail",
                  pages=(10, 16), tokens_per_page=(2, 4), ops=(32, 44), prompts=(2, 4), prompt_pages=(1, 3),
                  branches=3, ragged=True, hold=0.35, extend=0.2, dedup=0.3, failures=2),
}
"""The difficulty levels, easiest first (``kvviz quiz --level``)."""


class _Builder:
    """Drives a live kvcore cache and writes the script of what it did."""

    def __init__(self, rng: random.Random, level: Level):
        self.rng = rng
        self.level = level
        self.pages = rng.randint(*level.pages)
        self.tpp = rng.randint(*level.tokens_per_page)
        self.cache = TriePagedAttentionCache(PagePool(self.pages), self.tpp)
        self.lines: list[str] = []
        self.live: dict[str, object] = {}  # name -> live PageAllocation, in acquire order
        self.published: set[str] = set()
        self.serial = 0
        self.fresh = 90_000  # tokens nobody else uses: a request's own tail
        self.failures = 0
        self.prompts = [self._prompt(j) for j in range(rng.randint(*level.prompts))]

    def _prompt(self, j: int) -> list[tuple[int, ...]]:
        """Prompt ``j`` and its shared continuations: the token prefixes requests start with."""
        pages = self.rng.randint(*self.level.prompt_pages)
        base = tuple(range(1000 * (j + 1) + 1, 1000 * (j + 1) + 1 + pages * self.tpp))
        variants = [base]
        for b in range(self.level.branches):
            more = self.rng.randint(1, 2) * self.tpp
            start = 1000 * (j + 1) + 100 * (b + 1)
            variants.append(base + tuple(range(start, start + more)))
        return variants

    def _tokens(self) -> tuple[int, ...]:
        """A request: a shared prefix (maybe a continuation), then a tail of its own."""
        prefix = self.rng.choice(self.rng.choice(self.prompts))
        tail = self.rng.randint(0, 2) * self.tpp
        if self.level.ragged:
            tail += self.rng.randint(0, self.tpp - 1)
        own = tuple(range(self.fresh, self.fresh + tail))
        self.fresh += tail + 7  # a gap, so tails never spell each other
        return prefix + own

    def _emit(self, line: str) -> None:
        self.lines.append(line)

    def acquire(self, tokens: tuple[int, ...], *, allow_failure: bool = False) -> str | None:
        """Acquire a fresh name; a failure is written only when planned (``allow_failure``)."""
        extra = self.rng.choice((0, 0, 1, 2)) if self.level.extend else 0
        self.serial += 1
        name = f"r{self.serial}"
        try:
            self.live[name] = self.cache.acquire_pages_for_tokens(tokens, extra, name=name)
        except CacheAllocationFailure:
            if not allow_failure:
                self.serial -= 1
                return None
            self.failures += 1  # the parser counts a failed acquire's name as live: never reuse it
        self._emit(f"acquire {name} {format_tokens(tokens)}" + (f" extra={extra}" if extra else ""))
        return name if name in self.live else None

    def publish(self, name: str) -> None:
        self.live[name].publish_pages_for_tokens()
        self.published.add(name)
        self._emit(f"publish {name}")

    def release(self, name: str) -> None:
        self.live.pop(name).release_pages()
        self.published.discard(name)
        self._emit(f"release {name}")

    def extend(self, name: str) -> bool:
        allocation = self.live[name]
        more = tuple(range(self.fresh, self.fresh + self.rng.randint(1, self.tpp + 1)))
        self.fresh += len(more) + 7
        try:
            allocation.extend_allocation(tuple(allocation.tokens) + more)
        except KVCacheError:
            return False
        self._emit(f"extend {name} + {format_tokens(more)}")
        return True

    def impossible_tokens(self) -> tuple[int, ...] | None:
        """Tokens for an acquire that cannot fit: more new pages than free plus evictable."""
        snap = self.cache.snapshot()
        room = snap.free_count + snap.evictable_count
        if room + 1 > self.pages:
            return None  # nothing is held: any acquire that big is a misuse, not a lesson
        length = (room + 1) * self.tpp
        own = tuple(range(self.fresh, self.fresh + length))
        self.fresh += length + 7
        return own

    def step(self) -> None:
        """One move of the story, chosen by the level's odds."""
        rng, level = self.rng, self.level
        unpublished = [n for n in self.live if n not in self.published]
        if unpublished and rng.random() < 0.8:
            name = rng.choice(unpublished)
            if level.extend and rng.random() < level.extend and self.extend(name):
                return
            self.publish(name)
            return
        idle = [n for n in self.live if n in self.published]
        if idle and (rng.random() > level.hold or len(self.live) > 3):
            self.release(rng.choice(idle))
            return
        if level.failures > self.failures and len(self.lines) > 8 and rng.random() < 0.3:
            tokens = self.impossible_tokens()
            if tokens is not None:
                self.acquire(tokens, allow_failure=True)
                return
        if level.dedup and rng.random() < level.dedup:
            tokens = rng.choice(rng.choice(self.prompts))
            # Both acquire before either publishes: both miss, both compute the prefix.
            if self.acquire(tokens) is not None:
                self.acquire(tokens + (self.fresh,))
                self.fresh += 8
            return
        if self.acquire(self._tokens()) is None and idle:
            self.release(rng.choice(idle))  # the pool is full of held pages: let one go


def generate(seed: int, level: str) -> str:
    """A random scenario for ``level`` ('easy', 'medium' or 'hard'), as ``.kvs`` text.

    The same (seed, level) always gives the same text. KeyError names the levels for an
    unknown one."""
    if level not in LEVELS:
        raise KeyError(f"no level named {level!r} (levels: {', '.join(LEVELS)})")
    rng = random.Random(f"kvviz-quiz/{level}/{seed}")
    spec = LEVELS[level]
    builder = _Builder(rng, spec)
    target = rng.randint(*spec.ops)
    guard = 0
    while len(builder.lines) < target and guard < 20 * target:
        guard += 1  # every move usually writes a line; the guard only bounds bad luck
        builder.step()
    header = [
        f"title: A random {level} scenario, seed {seed}",
        f"description: Generated by kvviz quiz --random --seed {seed} --level {level}: {spec.summary}.",
        f"cache trie pages={builder.pages} tokens_per_page={builder.tpp}",
        "",
    ]
    return "\n".join(header + builder.lines) + "\n"
