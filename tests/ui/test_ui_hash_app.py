# SPDX-License-Identifier: Apache-2.0
"""The main app on a hash cache: the block view and the free-queue view take the trie's and
the heap's places (kvviz/ui/panes.py), the page pool numbers the free queue, and loading a
session of another design swaps the views back."""

from __future__ import annotations

from kvviz.core.demos import load_demo
from kvviz.core.hash_view import free_queue_title
from kvviz.core.session import Session
from kvviz.core.view import PAGE
from kvviz.ui.widgets.block_view import BlockView

SIZE = (160, 45)


def hash_demo() -> Session:
    return Session.from_scenario(load_demo("hash-vs-trie"))


async def test_a_hash_session_shows_its_blocks_and_free_queue_in_the_trie_and_heap_places(app_on):
    session = hash_demo()
    step = 6  # release b: every cached page is in the free queue
    app = app_on(session, step)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        shown = {wid: app.query_one(f"#{wid}").display for wid in ("trie", "blocks", "heap", "queue")}
        assert shown == {"trie": False, "blocks": True, "heap": False, "queue": True}
        snap = session.frame(step).snapshot
        assert app.queue.border_title == free_queue_title(snap)
        assert app.blocks.view.frame is session.frame(step)
        for position, page in enumerate(snap.free):  # the pool numbers the queue, q0 at the head
            assert app.pool.page_text(page).split()[-1] == f"q{position}"
        assert app.focused is app.blocks


async def test_a_block_selected_selects_its_page(app_on):
    session = hash_demo()
    app = app_on(session, 6)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        block = session.frame(6).snapshot.blocks[0]
        app.blocks.post_message(BlockView.BlockSelected(app.blocks, block.id, block.page))
        await pilot.pause()
        assert (app.selection.kind, app.selection.id) == (PAGE, block.page)
        assert app.queue.is_linked(block.page) and block.page in app.pool.view.highlight.pages


async def test_loading_a_trie_session_brings_the_trie_and_heap_back(app_on, small):
    app = app_on(hash_demo(), 0)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        app.load_session(small, 3)
        await pilot.pause()
        shown = {wid: app.query_one(f"#{wid}").display for wid in ("trie", "blocks", "heap", "queue")}
        assert shown == {"trie": True, "blocks": False, "heap": True, "queue": False}
        assert app.trie.view.frame is small.frame(3)
