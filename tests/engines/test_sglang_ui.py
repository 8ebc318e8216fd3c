# SPDX-License-Identifier: Apache-2.0
"""`kvviz run lru --backend sglang` in the app (headless): the trie and the heap show SGLang's own
lock counts and eviction candidates."""

from __future__ import annotations

import asyncio

from engine_guard import require_engine

require_engine("sglang")

from kvviz.backends.registry import make_backend_factory  # noqa: E402
from kvviz.core.demos import load_demo  # noqa: E402
from kvviz.core.session import Session  # noqa: E402
from kvviz.explore.app import make_app  # noqa: E402

SIZE = (160, 45)


def texts(view) -> list[str]:
    return [view.row_text(i) for i in range(len(view.rows))]


def test_the_lru_demo_on_sglang_shows_its_refs_and_its_next_victim(tmp_path):
    asyncio.run(_shows_refs_and_next_victim(tmp_path))


async def _shows_refs_and_next_victim(tmp_path):
    session = Session.from_scenario(load_demo("lru"), backend_factory=make_backend_factory("sglang"))
    step = 27
    snapshot = session.frame(step).snapshot
    app = make_app(session, step, animations=False, cursor_blink=False, play_timer=False, export_dir=tmp_path)
    async with app.run_test(size=SIZE):
        assert app.view.snapshot is snapshot and app.view.snapshot.heap  # SGLang's evictable leaves
        trie = texts(app.trie)
        assert trie[0].startswith("root") and any(" ref " in row for row in trie[1:])
        heap = texts(app.heap)
        victim = snapshot.heap[0]
        assert any(f"node {victim}" in row and "next victim" in row for row in heap), heap
