# SPDX-License-Identifier: Apache-2.0
"""What every folder's UI tests share (tests/ui for the kit, and each feature's folder for its
app): the sessions they open (the lru demo, a small scenario of our own, and a session on a cache
that breaks an invariant, from a fake backend that tampers with its snapshots), the fixtures
that build deterministic apps on them, and the hook that runs ``async def`` tests.

A folder's conftest.py imports the fixtures and the hook it needs from here (pytest registers
what a conftest module holds, imported or not), so no folder keeps a copy. Colours on and a
scratch working directory are a fixture a test asks for (tests/ui's conftest asks for every
test; a feature's UI test module with ``pytestmark``), not autouse here: most tests in a
feature's folder run CLIs and need neither."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from pathlib import Path

import pytest

from kvviz.backends.kvcore_backend import KvcoreBackend
from kvviz.core.demos import load_demo
from kvviz.core.scenario import CacheConfig, parse_command, parse_scenario_file
from kvviz.core.session import Session
from kvviz.explore.app import make_app

SMALL = Path(__file__).parent / "ui" / "scenarios" / "lru_small.kvs"


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


@pytest.fixture
def colours_on_in_a_scratch_directory(monkeypatch, tmp_path):
    """Colours on (NO_COLOR would turn snapshots monochrome) and a scratch working directory,
    so nothing a test exports lands in the checkout."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def app_on(tmp_path):
    """``app_on(session, step=None)``: a deterministic app that exports into ``tmp_path``."""

    def build(session, step=None, **opts):
        opts.setdefault("export_dir", tmp_path)
        opts.setdefault("play_timer", False)  # no clock: tests call play_tick() themselves
        return make_app(session, step, animations=False, cursor_blink=False, **opts)

    return build


@pytest.fixture
def small():
    return small_session()


@pytest.fixture
def lru():
    return lru_session()


@pytest.fixture
def leaky():
    return violation_session()


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """Run ``async def`` tests in a fresh event loop (no async plugin needed)."""
    if inspect.iscoroutinefunction(pyfuncitem.obj):
        arguments = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
        asyncio.run(pyfuncitem.obj(**arguments))
        return True
    return None
