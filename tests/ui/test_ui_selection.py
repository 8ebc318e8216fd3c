# SPDX-License-Identifier: Apache-2.0
"""Linked selection: choosing a node, page, allocation or heap entry marks it in every view."""

from __future__ import annotations

from kvviz.core.view import ALLOCATION, NODE, PAGE, Selection, highlight_for

SIZE = (100, 30)


def test_a_node_links_its_page_and_the_allocations_holding_it(small):
    snap = small.frame(4).snapshot  # r1 and r2 share the two prompt pages
    node = snap.node_for_page(0)
    highlight = highlight_for(Selection(NODE, node.id), snap)
    assert highlight.pages == {0}
    assert {snap.allocation(a).label for a in highlight.allocations} == {"r1", "r2"}


def test_a_page_links_its_node_and_holders_and_an_owned_page_its_owner(small):
    snap = small.frame(3).snapshot  # r2 has matched the prompt and owns one new page
    cached = highlight_for(Selection(PAGE, 0), snap)
    assert cached.nodes == {snap.node_for_page(0).id}
    owned_page = next(p.page for p in snap.pages if p.state == "owned")
    owned = highlight_for(Selection(PAGE, owned_page), snap)
    assert not owned.nodes and len(owned.allocations) == 1


def test_an_allocation_links_its_pages_and_published_nodes(small):
    snap = small.frame(4).snapshot
    r2 = snap.allocation_named("r2")
    highlight = highlight_for(Selection(ALLOCATION, r2.id), snap)
    assert highlight.pages == set(r2.pages)
    assert len(highlight.nodes) == r2.published


async def test_moving_the_trie_cursor_selects_the_node_everywhere(app_on, small):
    app = app_on(small, step=4)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("down")
        node = app.trie.cursor
        page = app.view.snapshot.node(node).page
        assert app.selection == Selection(NODE, node)
        assert app.pool.cursor == page, "the page grid moves to the node's page"
        assert page in app.view.highlight.pages
        assert app.allocations.is_linked(app.allocations.cursor)


async def test_moving_the_grid_cursor_selects_the_page_and_its_node(app_on, small):
    app = app_on(small, step=4)
    async with app.run_test(size=SIZE) as pilot:
        app.pool.focus()
        await pilot.press("full_stop")  # page 0
        await pilot.press("full_stop")  # page 1
        assert app.selection == Selection(PAGE, 1)
        node = app.view.snapshot.node_for_page(1).id
        assert app.trie.cursor == node
        assert app.trie.is_linked(node)


async def test_choosing_an_allocation_highlights_its_block_table_pages(app_on, small):
    app = app_on(small, step=4)
    async with app.run_test(size=SIZE) as pilot:
        app.allocations.focus()
        await pilot.press("down")
        allocation = app.view.snapshot.allocation(app.allocations.cursor)
        assert app.selection == Selection(ALLOCATION, allocation.id)
        assert app.view.highlight.pages == set(allocation.pages)
        assert app.pool.cursor in allocation.pages


async def test_choosing_a_heap_entry_selects_its_node_in_the_trie(app_on, small):
    app = app_on(small, step=5)  # r1 released: its question page is a candidate
    async with app.run_test(size=SIZE) as pilot:
        app.heap.focus()
        await pilot.press("down")
        node = app.heap.cursor
        assert node == app.view.snapshot.heap[0]
        assert app.selection == Selection(NODE, node)
        assert app.trie.cursor == node


async def test_the_selection_follows_the_timeline_by_id(app_on, small):
    app = app_on(small, step=4)
    async with app.run_test(size=SIZE) as pilot:
        app.select(Selection(PAGE, 0))
        await pilot.press("right")
        assert app.selection == Selection(PAGE, 0)
        assert 0 in app.view.highlight.pages


async def test_clicking_a_page_cell_selects_it(app_on, small):
    app = app_on(small, step=4)
    async with app.run_test(size=SIZE) as pilot:
        grid = app.pool
        cell = grid._layout[2]  # cell stride of the cells layout
        top = grid.region.y - grid.content_region.y  # the frame above the grid (negative)
        await pilot.click(grid, offset=(cell * 2 + 1 + grid.content_region.x - grid.region.x, -top))
        assert app.selection == Selection(PAGE, 2)
