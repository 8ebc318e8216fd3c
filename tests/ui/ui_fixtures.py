# SPDX-License-Identifier: Apache-2.0
"""Sessions the UI tests open: the lru demo, a small scenario of our own, and a session on a
cache that breaks an invariant (a fake backend that tampers with its snapshots)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from kvviz.backends.kvcore_backend import KvcoreBackend
from kvviz.core.demos import load_demo
from kvviz.core.scenario import CacheConfig, parse_command, parse_scenario_file
from kvviz.core.session import Session

HERE = Path(__file__).parent
SMALL = HERE / "scenarios" / "lru_small.kvs"


def lru_session() -> Session:
    """The shipped ``lru`` demo."""
    return Session.from_scenario(load_demo("lru"))


def small_session() -> Session:
    """tests/ui/scenarios/lru_small.kvs: 9 steps, an eviction at 6, a failed acquire at 7,
    three evictions at 9."""
    return Session.from_scenario(parse_scenario_file(SMALL))


class LeakyRefBackend(KvcoreBackend):
    """A kvcore backend whose snapshots, after ``leak_after`` ops, report one reference too
    many on the first cached node: the picture of a ref-count leak (invariant 2 fails)."""

    leak_after = 3

    def __init__(self, cache):
        super().__init__(cache)
        self.ops = 0

    def apply(self, *args) -> None:
        self.ops += 1
        super().apply(*args)

    def snapshot(self):
        snap = super().snapshot()
        if self.ops < self.leak_after or len(snap.nodes) < 2:
            return snap
        node = snap.nodes[1]
        leaked = dataclasses.replace(node, ref=node.ref + 1)
        pages = tuple(dataclasses.replace(p, ref=p.ref + 1) if p.page == node.page else p for p in snap.pages)
        return dataclasses.replace(snap, nodes=(snap.nodes[0], leaked, *snap.nodes[2:]), pages=pages)


def leaky_backend(config, snapshot):
    if snapshot is not None:
        return LeakyRefBackend.from_snapshot(snapshot)
    return LeakyRefBackend.fresh(config.kind, config.pages, config.tokens_per_page)


VIOLATION_SCRIPT = ("acquire r1 1..8", "publish r1", "acquire r2 1..8 9 10", "release r1", "release r2")


def violation_session() -> Session:
    """Five ops on a cache that starts leaking a reference at op 3: steps 3.. violate
    invariant 2 (and node 1 never becomes evictable)."""
    session = Session(CacheConfig("trie", 8, 4), title="A leaking reference", backend_factory=leaky_backend)
    for text in VIOLATION_SCRIPT:
        session.apply(parse_command(text, session.live_names(), session.vocab))
    return session
