# SPDX-License-Identifier: Apache-2.0
"""What each view shows for a frame: the trie, the page pool, allocations, the heap, the
narration, the timeline marks, the why panel, themes."""

from __future__ import annotations

from kvviz.core.scenario import CacheConfig, parse_command
from kvviz.core.session import Session
from kvviz.ui.widgets.timeline_bar import track_cells

SIZE = (100, 30)


def texts(view) -> list[str]:
    return [view.row_text(i) for i in range(len(view.rows))]


async def test_the_trie_shows_words_page_ref_and_last_access_and_marks_new_nodes(app_on, small):
    app = app_on(small, step=2)
    async with app.run_test(size=SIZE):
        rows = texts(app.trie)
        assert rows[0].startswith("root") and "3 nodes: 3 referenced" in rows[0]
        assert rows[1] == "└─● [you are a helpful] p0 ref 1 t2 new"
        assert "[what is the weather]" in rows[3]


async def test_the_trie_tells_referenced_from_evictable_and_shows_evicted_nodes_for_that_step(app_on, small):
    app = app_on(small, step=6)
    async with app.run_test(size=SIZE):
        rows = texts(app.trie)
        assert any("● [tell me a story]" in row for row in rows), "referenced by r2"
        ghost = next(row for row in rows if "[what is the weather]" in row)
        assert "✗" in ghost and ghost.endswith("evicted")
    app = app_on(small, step=5)
    async with app.run_test(size=SIZE):
        assert any("○ [what is the weather]" in row and "ref 0(-1)" in row for row in texts(app.trie))


async def test_touched_nodes_are_marked(app_on, small):
    app = app_on(small, step=3)  # r2 matches the prompt: its two nodes are touched
    async with app.run_test(size=SIZE):
        rows = texts(app.trie)
        assert sum(row.endswith("touched") for row in rows) == 2


async def test_the_base_cache_has_no_trie_and_no_heap(app_on):
    session = Session(CacheConfig("base", 8, 4))
    session.apply(parse_command("acquire a 1..8", []))
    app = app_on(session, step=1)
    async with app.run_test(size=SIZE):
        assert "no trie" in app.trie.row_text(0)
        assert "no eviction" in app.heap.row_text(0)


async def test_the_page_grid_shows_owner_ref_and_what_changed(app_on, small):
    app = app_on(small, step=6)
    async with app.run_test(size=SIZE):
        grid = app.pool
        assert grid.page_text(0).split() == ["0", "ref1"]
        assert grid.page_text(2).startswith("✗") and "@r3" in grid.page_text(2), "evicted, then taken by r3"
        assert grid.page_text(4).startswith("+") and "@r3" in grid.page_text(4)
        legend = " ".join(grid.render_line(y).text for y in range(grid.virtual_size.height))
        assert "free 0" in legend and "owned 5" in legend and "evicted" in legend


async def test_big_pools_use_one_character_per_page(app_on):
    session = Session(CacheConfig("trie", 4096, 16))
    session.apply(parse_command("acquire a 1..64", []))
    app = app_on(session, step=1)
    async with app.run_test(size=(120, 40)):
        grid = app.pool
        assert grid.is_compact
        assert grid.page_text(0) == "▪" and grid.page_text(4095) == "·"
        per_row, rows, _ = grid._layout
        assert per_row * rows >= 4096 and per_row % 8 == 0
        assert grid.render_line(0).text.startswith("   0 ▪▪▪▪")


async def test_the_allocation_table_shows_block_tables_with_shared_pages(app_on, small):
    app = app_on(small, step=4)
    async with app.run_test(size=SIZE):
        rows = texts(app.allocations)
        assert "block table" in rows[0]
        r2 = next(row for row in rows if row.startswith("r2"))
        assert "0:0* 1:1* 2:3" in r2, "the prompt pages are shared with r1"
        assert any("you are a helpful assistant" in row for row in rows), "tokens as words"


async def test_a_released_allocation_is_shown_for_that_step(app_on, small):
    app = app_on(small, step=5)
    async with app.run_test(size=SIZE):
        assert any(row.startswith("r1") and "released" in row for row in texts(app.allocations))


async def test_the_heap_puts_the_next_victim_on_top_and_lists_entries_that_left(app_on, lru):
    app = app_on(lru, step=27)
    async with app.run_test(size=SIZE):
        rows = texts(app.heap)
        assert rows[1].startswith("[0] node 3 p2 (7,3) ← next victim")
        assert rows[2].startswith("  [1]"), "children are indented under their parent"
        keys = [app.view.snapshot.node(n).key for n in app.view.snapshot.heap]
        assert keys[0] == min(keys)
    app = app_on(lru, step=lru.summaries.index(next(s for s in lru.summaries if s.evictions)))
    async with app.run_test(size=SIZE):
        assert any(row.startswith("left: node") and row.endswith("evicted") for row in texts(app.heap))


async def test_the_narration_shows_story_explanation_expects_and_events(app_on, small):
    app = app_on(small, step=6)
    async with app.run_test(size=SIZE):
        text = app.narration.text
        assert text.startswith("Step 6/9 · acquire r3 10..29")
        assert "oldest unreferenced leaf goes" in text  # the script's story
        assert "evicted page 2 [what is the weather]" in text  # the generated explanation
        assert "✓ expect evictions 1" in text
        assert "── events ──" in text and "evicted node 3 (page 2)" in text


async def test_a_failed_op_and_a_violation_are_shown_in_the_narration(app_on, small, leaky):
    app = app_on(small, step=7)
    async with app.run_test(size=SIZE):
        assert "FAILED (CacheAllocationFailure)" in app.narration.text
        assert "Nothing changed" in app.narration.text
    app = app_on(leaky, step=3)
    async with app.run_test(size=SIZE):
        assert "⚠ invariant 2" in app.narration.text
        assert "VIOLATION" in app.timeline.text
        node = app.view.frame.violations[0].nodes[0]
        assert node in app.view.violations.nodes
        assert any("⚠ violation" in row for row in texts(app.trie)), "the offending node is marked"
        assert app.view.snapshot.node(node).page in app.view.violations.pages


def test_the_timeline_marks_evictions_failures_and_violations(small, leaky):
    marks = [mark for _, _, mark in track_cells(small.summaries, len(small))]
    assert marks[6] == "eviction" and marks[7] == "failed" and marks[9] == "eviction"
    assert [mark for _, _, mark in track_cells(leaky.summaries, len(leaky))][3] == "violation"


def test_a_long_timeline_shares_cells_and_keeps_the_most_serious_mark(small):
    cells = track_cells(small.summaries, 3)  # 10 steps in 3 cells
    assert len(cells) == 3
    assert cells[0][0] == 0 and cells[-1][1] == 9
    assert cells[2][2] == "failed", "the cell holding step 7 shows the failure over the evictions"


async def test_clicking_the_timeline_jumps_to_that_step(app_on, small):
    app = app_on(small)
    async with app.run_test(size=SIZE) as pilot:
        bar = app.timeline
        stride = len(bar.cells(bar.size.width)) // len(small)
        await pilot.click(bar, offset=(bar.content_region.x - bar.region.x + stride * 6, 1))
        assert app.step == 6


async def test_the_why_panel_answers_for_a_selected_evicted_page_and_an_allocation(app_on, small):
    from kvviz.core.view import ALLOCATION, PAGE, Selection

    app = app_on(small, step=9)
    async with app.run_test(size=SIZE):
        app.action_toggle_why()
        app.select(Selection(PAGE, 2))
        assert "Why was page 2 evicted? (step 6)" in app.why.text
        r4 = app.view.snapshot.allocation_named("r4")
        app.select(Selection(ALLOCATION, r4.id))
        assert "Why did r4 match 0 of 3 full pages?" in app.why.text


async def test_built_in_and_kvviz_themes_all_render(app_on, small):
    app = app_on(small, step=6)
    async with app.run_test(size=SIZE) as pilot:
        for theme in ("kvviz-light", "textual-dark", "textual-light", "nord", "solarized-light", "ansi-dark",
                      "kvviz-dark"):
            app.theme = theme
            await pilot.pause()
            assert app.pool.render_line(0).text.strip(), theme
            assert app.theme_variables["kv-new"], theme


async def test_the_heap_view_names_and_shows_the_policys_key():
    """Under lfu the heap is the LFU heap and each entry shows (hits, last_access, seq)."""
    from kvviz.core.scenario import parse_scenario
    from kvviz.core.session import Session
    from kvviz.explore.app import make_app

    script = ("cache trie pages=4 tokens_per_page=1 policy=lfu\n"
              "acquire a 1\npublish a\nrelease a\n"
              "acquire b 1\nrelease b\n"       # node [1]: one hit
              "acquire c 2\npublish c\nrelease c\n")
    session = Session.from_scenario(parse_scenario(script))
    app = make_app(session, len(session) - 1, animations=False, cursor_blink=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        heap = app.heap
        assert str(heap.border_title).startswith("LFU heap · 2 candidates")
        text = "\n".join("".join(t for t, _ in heap.render_row(row, 80)) for row in heap.rows)
        assert "key (hits, last_access, seq)" in text
        snap = session.last.snapshot
        for node in snap.nodes:
            if node.id in snap.heap:
                assert f"node {node.id} p{node.page} ({node.hits},{node.last_access},{node.seq})" in text


async def test_a_deep_chain_evicted_at_once_keeps_every_rows_guides_bounded(app_on):
    # A 1,500-page chain evicted by one acquire: its ghosts are a chain 1,500 deep. Guides grew
    # two columns a level, n² characters in all (a 100,000-page eviction took 20 GB).
    from kvviz.core.scenario import parse_scenario
    from kvviz.ui.widgets.trie_view import MAX_GUIDE_CHARS

    n = 1_500
    scenario = parse_scenario(f"cache trie pages={n} tokens_per_page=1\nacquire a 1..{n}\npublish a\nrelease a\n"
                              f"acquire big {10 * n + 1}..{11 * n}\n")
    app = app_on(Session.from_scenario(scenario), step=4)
    async with app.run_test(size=SIZE):
        prefixes = [row.data.prefix for row in app.trie._rows if hasattr(row.data, "prefix")]
        assert len(prefixes) >= n  # the ghosts are all there
        assert max(map(len, prefixes)) <= MAX_GUIDE_CHARS + 2
