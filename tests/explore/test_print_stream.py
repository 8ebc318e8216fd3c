# SPDX-License-Identifier: Apache-2.0
"""`kvviz run --print` streams: each step is on stdout as soon as the session has
applied it, the text is what the whole session printed at the end would be, and the page
grid and the trie, drawn without Rich's per-cell machinery, read exactly as Rich drew them."""

from __future__ import annotations

import io
import sys

import pytest
from click.testing import CliRunner
from rich.console import Console
from rich.table import Table

from kvviz.cli import cli
from kvviz.core.demos import demo_path
from kvviz.report.text import PageGridText, TreeLines, trie_tree
from kvviz.core.scenario import parse_scenario_file
from kvviz.core.session import Session

THREE_OPS = """\
title: three ops
cache trie pages=4 tokens_per_page=2
acquire a 1 2 3 4
publish a
release a
expect cached 2
"""

FAILING = """\
cache trie pages=4 tokens_per_page=2
acquire a 1 2 3 4
expect free 3
release a
"""


def kvviz(*args: str):
    return CliRunner().invoke(cli, list(args), prog_name="kvviz")


def test_step_one_is_on_stdout_before_the_second_op_runs(monkeypatch, tmp_path):
    script = tmp_path / "three.kvs"
    script.write_text(THREE_OPS, encoding="utf-8")
    out = io.StringIO()
    seen_before: dict[int, str] = {}
    apply = Session.apply

    def watched_apply(self, op, *args, **kwargs):
        seen_before[len(self.summaries)] = out.getvalue()  # what was printed before this op runs
        return apply(self, op, *args, **kwargs)

    monkeypatch.setattr(Session, "apply", watched_apply)
    monkeypatch.setattr(sys, "stdout", out)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["run", str(script), "--print"], prog_name="kvviz")
    assert exit_.value.code in (0, None)
    assert sorted(seen_before) == [1, 2, 3]
    assert "step 0/3" in seen_before[1] and "step 1/" not in seen_before[1]
    assert "step 1/3  acquire a 1..4" in seen_before[2] and "step 2/" not in seen_before[2]
    assert "step 2/3  publish a" in seen_before[3]
    assert "step 3/3  release a" in out.getvalue()


@pytest.mark.parametrize("name", ["lru", "eviction-cascade", "base-vs-trie"])
def test_a_streamed_run_prints_what_the_finished_session_prints(name):
    streamed = kvviz("run", name, "--print")
    whole = kvviz("demo", name, "--print")  # demo prints the finished session: the oracle
    assert streamed.exit_code == whole.exit_code
    assert streamed.stdout == whole.stdout
    assert streamed.stdout.count("step 0/") == 1


def test_a_streamed_run_that_fails_a_check_keeps_its_exit_code_and_verdict_line(tmp_path):
    script = tmp_path / "failing.kvs"
    script.write_text(FAILING, encoding="utf-8")
    streamed = kvviz("run", str(script), "--print")
    assert streamed.exit_code == 1
    assert streamed.stderr == "kvviz: check failed: 1 expect failed (step 1)\n"
    assert "step 2/2  release a" in streamed.stdout  # every step printed before the verdict


def test_step_n_still_prints_that_one_step_alone():
    text = kvviz("run", "lru", "--print", "--step", "3").stdout
    assert text.count("step 3/") == 1
    assert "step 2/" not in text and "step 4/" not in text


def _frames(name: str, kind: str | None = None):
    session = Session.from_scenario(parse_scenario_file(demo_path(name)), kind=kind)
    return session, [session.frame(i) for i in range(len(session))]


def _plain(renderable, width: int) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None, force_terminal=False)
    console.print(renderable)
    return console.file.getvalue()


def _styled_cells(renderable, width: int) -> list[list[tuple[str, str]]]:
    """Each line as (character, style) pairs: the same look, however the runs are split."""
    console = Console(file=io.StringIO(), width=width, color_system="truecolor", force_terminal=True)
    return [[(ch, str(seg.style) if seg.style else "") for seg in line for ch in seg.text]
            for line in console.render_lines(renderable, pad=False)]


def _rich_grid(grid: PageGridText, width: int) -> Table:
    """The grid as Rich's table drew it before (the oracle)."""
    cells = grid.cells()
    columns = max(1, min(32, width // (max(len(c) for c in cells) + 1)))
    table = Table.grid(padding=(0, 1))
    for start in range(0, len(cells), columns):
        table.add_row(*cells[start:start + columns])
    return table


@pytest.mark.parametrize("name,kind", [("lru", None), ("eviction-cascade", None), ("prefix-sharing", "base"),
                                       ("base-vs-trie", None)])
def test_the_page_grid_reads_and_colours_as_rich_s_table_drew_it(name, kind):
    _, frames = _frames(name, kind)
    for frame in frames:
        grid = PageGridText(frame)
        for width in (30, 80, 120):
            assert _plain(grid, width) == _plain(_rich_grid(grid, width), width)
            assert _styled_cells(grid, width) == _styled_cells(_rich_grid(grid, width), width)


@pytest.mark.parametrize("name", ["lru", "eviction-cascade", "prefix-sharing", "base-vs-trie"])
def test_the_trie_reads_and_colours_as_rich_s_tree_drew_it(name):
    session, frames = _frames(name)
    drawn = 0
    for frame in frames:
        tree = trie_tree(frame, session)
        if not isinstance(tree, TreeLines):
            continue
        drawn += 1
        for width in (12, 40, 80, 120):  # 12: deep labels narrower than MIN_WIDTH go through Rich
            assert _plain(tree, width) == _plain(tree.tree, width)
            assert _styled_cells(tree, width) == _styled_cells(tree.tree, width)
    assert drawn


def test_a_long_label_wraps_and_folds_as_rich_wraps_it():
    from rich.text import Text
    from rich.tree import Tree

    root = Tree(Text("root", style="bold"))
    branch = root.add(Text("a " * 30 + "x" * 70 + " tail   spaces   ", style="cyan"))
    branch.add(Text("[1 2 3 … +40 more] page 7 ref 0 t3 (evictable)", style="magenta"))
    root.add(Text("x evicted node 4", style="red"))
    for width in (9, 10, 17, 33, 64, 200):
        assert _plain(TreeLines(root), width) == _plain(root, width)
        assert _styled_cells(TreeLines(root), width) == _styled_cells(root, width)
