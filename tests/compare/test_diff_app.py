# SPDX-License-Identifier: Apache-2.0
"""``kvviz diff --ui``: kvcore and shortfin side by side (kvviz/compare/app.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("shortfin")

from click.testing import CliRunner

from kvviz.compare.app import DiffApp, make_diff_app
from kvviz.compare.engine import run_diff
from kvviz.core.scenario import parse_scenario_file

pytestmark = pytest.mark.usefixtures("colours_on_in_a_scratch_directory")  # as in tests/ui: snapshots in colour, exports in tmp

ROOT = Path(__file__).resolve().parents[2]
B9 = ROOT / "demos" / "shortfin-b9-lookup-no-ref.kvs"
SIZE = (160, 45)


@pytest.fixture(scope="module")
def b9_run():
    return run_diff(parse_scenario_file(B9))


def diff_app(run, step=None) -> DiffApp:
    return make_diff_app(run, step, animations=False)


def text_of(app: DiffApp, selector: str) -> str:
    return str(app.query_one(selector).render())


def column(app: DiffApp, side: str) -> tuple:
    """What one column shows: the frame each view holds, and the column's outcome line."""
    views = [app.widget(side, role).view for role in ("trie", "pool", "allocations", "heap")]
    return tuple(v.frame.index for v in views), app.query_one(f"#{side}-side").border_subtitle


async def test_opens_at_the_divergence_with_both_outcomes(b9_run):
    assert b9_run.divergence is not None and b9_run.divergence.step == 5
    app = diff_app(b9_run)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert app.step == 5
        kv_frames, kv_outcome = column(app, "left")
        sf_frames, sf_outcome = column(app, "right")
        assert kv_frames == sf_frames == (5, 5, 5, 5)
        assert app.widget("left", "trie").view.frame is b9_run.left.session.frame(5)
        assert app.widget("right", "trie").view.frame is b9_run.right.session.frame(5)
        assert "FAILED (CacheAllocationFailure)" in kv_outcome  # kvcore refuses R
        assert sf_outcome.startswith("ok") and "violation" in sf_outcome  # shortfin succeeds, wrongly
        assert app.query_one("#left-side").border_title == "kvcore trie"
        assert app.query_one("#right-side").border_title == "shortfin 3.9.0"
        header = text_of(app, "#header")
        assert "Step 5/7" in header and "acquire R 1..8" in header and "◆" in header
        report = text_of(app, "#report")
        assert "FIRST DIVERGENCE" in report
        assert "success or failure: kvcore CacheAllocationFailure, shortfin ok" in report
        assert "shortfin ⚠ invariant" in report
        assert "B9" in report
        assert app.query_one("#report-box").has_class("-differs")


async def test_stepping_changes_both_columns_and_d_jumps_back(b9_run):
    app = diff_app(b9_run, 0)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert app.step == 0
        assert column(app, "left")[0] == column(app, "right")[0] == (0, 0, 0, 0)
        assert "both agree" in text_of(app, "#report")
        await pilot.press("right", "l")
        assert app.step == 2
        assert column(app, "left")[0] == column(app, "right")[0] == (2, 2, 2, 2)
        await pilot.press("left")
        assert app.step == 1
        await pilot.press("h", "h")
        assert app.step == 0
        await pilot.press("end")
        assert app.step == 7
        assert column(app, "left")[0] == column(app, "right")[0] == (7, 7, 7, 7)
        assert "FAILED" in column(app, "right")[1] and column(app, "left")[1].startswith("ok")
        assert "Step 7 differs" in text_of(app, "#report")
        await pilot.press("d")
        assert app.step == 5
        await pilot.press("home")
        assert app.step == 0
        await pilot.press("question_mark")
        await pilot.pause()
        assert app._notifications


async def test_a_selection_lands_in_the_column_whose_view_made_it(b9_run):
    """Each view's selection message names the view (``message.control``); the diff app
    uses it to put the selection in that column only."""
    from kvviz.core.view import NODE, PAGE
    from kvviz.ui.widgets.page_grid import PageGrid
    from kvviz.ui.widgets.trie_view import TrieView

    app = diff_app(b9_run)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        trie = app.widget("left", "trie")
        node = b9_run.left.session.frame(app.step).snapshot.nodes[-1].id
        message = TrieView.NodeSelected(trie, node)
        assert message.control is trie
        trie.post_message(message)
        await pilot.pause()
        assert (app.selection["left"].kind, app.selection["left"].id) == (NODE, node)
        assert app.selection["right"] is None
        pool = app.widget("right", "pool")
        pool.post_message(PageGrid.PageSelected(pool, 3))
        await pilot.pause()
        assert (app.selection["right"].kind, app.selection["right"].id) == (PAGE, 3)
        assert app.selection["left"].kind == NODE


def test_snapshot_at_the_divergence(snap_compare, b9_run):
    assert snap_compare(diff_app(b9_run), terminal_size=SIZE)


def test_cli_diff_ui_calls_run_diff_app(monkeypatch):
    import kvviz.compare.diff_command
    from kvviz.cli import cli

    calls = []
    monkeypatch.setattr(kvviz.compare.diff_command, "launch_diff_ui", lambda run: calls.append(run))
    result = CliRunner().invoke(cli, ["diff", str(B9), "--ui"], prog_name="kvviz")
    assert len(calls) == 1, result.output
    assert calls[0].divergence.step == 5
    assert result.exit_code == 1  # a divergence, as without --ui
    assert "first divergence" not in result.output  # the app, not the printed report
