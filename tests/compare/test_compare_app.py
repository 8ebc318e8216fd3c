# SPDX-License-Identifier: Apache-2.0
"""`kvviz compare` in the UI: two configurations side by side (kvviz/compare/app.py on a
compare run), with running counters per side."""

from __future__ import annotations

import pytest

from kvviz.core.demos import load_demo
from kvviz.compare.engine import SideSpec, run_compare
from kvviz.core.view import NODE
from kvviz.compare.app import DiffApp, make_diff_app
from kvviz.ui.widgets.trie_view import TrieView

pytestmark = pytest.mark.usefixtures("colours_on_in_a_scratch_directory")  # as in tests/ui: snapshots in colour, exports in tmp

SIZE = (160, 45)


@pytest.fixture(scope="module")
def lru_fifo():
    return run_compare(load_demo("lru"), SideSpec("trie", "lru"), SideSpec("trie", "fifo"))


def compare_app(run, step=None) -> DiffApp:
    return make_diff_app(run, step, animations=False)


def text_of(app: DiffApp, selector: str) -> str:
    return str(app.query_one(selector).render())


def counters_shown(app: DiffApp, side: str) -> list[int]:
    """The values of a column's counter line, in order (each part is "VALUE [+N] what")."""
    return [int(part.split()[0].replace(",", "")) for part in text_of(app, f"#{side}-counters").split(" · ")]


async def test_opens_at_the_first_divergence_with_both_configurations_named(lru_fifo):
    app = compare_app(lru_fifo)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert app.step == lru_fifo.divergence.step
        assert app.query_one("#left-side").border_title == "left · trie:lru"
        assert app.query_one("#right-side").border_title == "right · trie:fifo"
        assert app.widget("left", "trie").view.frame is lru_fifo.left.session.frame(app.step)
        assert app.widget("right", "trie").view.frame is lru_fifo.right.session.frame(app.step)
        assert app.widget("right", "heap").border_title.startswith("FIFO heap")
        report = text_of(app, "#report")
        assert "FIRST DIVERGENCE" in report and "only in trie:fifo: [200 201 202 203]" in report
        # Each side says in its own words who it evicted.
        assert "trie:lru: acquire n" in report and "trie:fifo: acquire n" in report


async def test_stepping_moves_both_columns_and_their_counters(lru_fifo):
    app = compare_app(lru_fifo, 0)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert counters_shown(app, "left") == [0, 0, 0, 0, 0]
        app.action_last_step()
        await pilot.pause()
        last = app.last_step
        assert app.step == last
        for side in ("left", "right"):
            c = app.side(side).counters[last]
            assert counters_shown(app, side) == [c.hit_tokens, c.pages_computed, c.pages_reused, c.evictions,
                                                 c.failures]
            assert app.widget(side, "pool").view.frame.index == last
        left, right = (app.side(s).counters[last] for s in ("left", "right"))
        assert left.hit_tokens != right.hit_tokens  # lru keeps the refreshed pages; fifo does not
        app.action_first_step()
        await pilot.pause()
        assert app.step == 0 and "both agree" in text_of(app, "#report")
        app.action_divergence()
        await pilot.pause()
        assert app.step == lru_fifo.divergence.step


async def test_a_step_that_adds_shows_plus_marks(lru_fifo):
    step = lru_fifo.divergence.step  # acquire n: one page computed, one evicted
    app = compare_app(lru_fifo, step)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        text = text_of(app, "#left-counters")
        before, now = lru_fifo.left.counters[step - 1], lru_fifo.left.counters[step]
        assert now.pages_computed - before.pages_computed == 1
        assert f"{now.pages_computed} +1 computed" in text and f"{now.evictions} +1 evicted" in text


async def test_a_selection_stays_in_its_column(lru_fifo):
    app = compare_app(lru_fifo)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        trie = app.widget("right", "trie")
        node = lru_fifo.right.session.frame(app.step).snapshot.nodes[-1].id
        trie.post_message(TrieView.NodeSelected(trie, node))
        await pilot.pause()
        assert (app.selection["right"].kind, app.selection["right"].id) == (NODE, node)
        assert app.selection["left"] is None


def test_a_diff_run_shows_no_counters_and_a_compare_run_does(lru_fifo):
    assert compare_app(lru_fifo).show_counters
    assert not make_diff_app(lru_fifo, counters=False).show_counters


def test_snapshot_at_the_first_divergence(snap_compare, lru_fifo):
    assert snap_compare(compare_app(lru_fifo), terminal_size=SIZE)


@pytest.fixture(scope="module")
def policies_lru_lfu():
    return run_compare(load_demo("policies"), SideSpec("trie", "lru"), SideSpec("trie", "lfu"))


async def test_at_80x24_both_tries_get_rows_and_show_the_nodes_each_side_evicted(policies_lru_lfu):
    run = policies_lru_lfu
    app = compare_app(run)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert app.query_one("#report-box").outer_size.height >= 4  # the report keeps a few lines, and scrolls
        for side, session in (("left", run.left.session), ("right", run.right.session)):
            trie = app.widget(side, "trie")
            height = trie.scrollable_content_region.height
            assert height >= 3, f"the {side} trie has {height} rows"
            shown = [trie.render_line(y).text for y in range(height)]
            evicted = session.frame(app.step).diff.nodes_evicted
            assert evicted and all(any("evicted" in line for line in shown) for _ in evicted), shown
