# SPDX-License-Identifier: Apache-2.0
"""`kvviz run --print` without colour (a pipe, a file) writes its text as strings. The oracle is Rich itself: every
step of every demo, the hash and base designs, deep chains, wide characters and narrow
consoles print exactly the text ``console.print`` prints; the page grid's cells, remade only
where a step changed them, are the cells made whole."""

from __future__ import annotations

import io
import sys

import pytest
from click.testing import CliRunner
from rich.console import Console

import kvviz.report.text as text_module
from kvviz.cli import cli
from kvviz.core.demos import demo_names, load_demo
from kvviz.report.text import (MAX_GRID_PAGES, PageGridText, frame_renderable, plain_rule, plain_text,
                               writes_plain)
from kvviz.core.scenario import parse_scenario
from kvviz.core.session import Session

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_print import scenario_text  # noqa: E402  the benchmark's own workload

WIDE = """\
title: wide words
cache trie pages=6 tokens_per_page=2
acquire a "東京" "大阪" "京都" "奈良" "x"
publish a
acquire b "東京" "大阪" "京都" "名古屋"
release a
"""

DEEP = "cache trie pages=64 tokens_per_page=1\n" + "acquire a " + " ".join(map(str, range(1000, 1040))) + \
    "\npublish a\nrelease a\nacquire b " + " ".join(map(str, range(1000, 1020))) + " 7 8 9\npublish b\n"


def console(width: int) -> Console:
    return Console(file=io.StringIO(), width=width, color_system=None, force_terminal=False, legacy_windows=False)


def rich_print(frame, session, width: int, **flags) -> str:
    c = console(width)
    c.print(frame_renderable(frame, session, **flags))
    return c.file.getvalue()


def assert_plain_is_rich(session: Session, widths=(20, 120)) -> None:
    for i in range(len(session)):
        frame = session.frame(i)
        for width in widths:
            expected = rich_print(frame, session, width)
            assert plain_text(console(width), frame_renderable(frame, session)) == expected, (i, width)


@pytest.mark.parametrize("name", demo_names())
def test_every_step_of_every_demo_prints_plain_as_rich_prints_it(name):
    assert_plain_is_rich(Session.from_scenario(load_demo(name)))


@pytest.mark.parametrize("kind", ["base", "hash"])
def test_the_other_designs_print_plain_as_rich_prints_them(kind):
    assert_plain_is_rich(Session.from_scenario(load_demo("lru"), kind=kind))


@pytest.mark.parametrize("script", [WIDE, DEEP], ids=["wide-characters", "a-deep-chain"])
def test_wide_characters_and_deep_chains_print_plain_as_rich_prints_them(script):
    assert_plain_is_rich(Session.from_scenario(parse_scenario(script)), widths=(12, 30, 50, 80))


def test_the_benchmarks_evicting_workload_prints_plain_as_rich_prints_it():
    assert_plain_is_rich(Session.from_scenario(parse_scenario(scenario_text(45))), widths=(60, 120))


def test_the_rule_is_what_rich_draws():
    for width in (1, 40, 120):
        c = console(width)
        c.rule()
        assert plain_rule(c) == c.file.getvalue()


def test_a_colour_console_still_prints_through_rich():
    assert writes_plain(console(80))
    assert not writes_plain(Console(file=io.StringIO(), width=80, color_system="truecolor", force_terminal=True))
    assert not writes_plain(Console(file=io.StringIO(), width=80, color_system=None, force_terminal=False,
                                    legacy_windows=False, soft_wrap=True))


def test_grid_cells_remade_where_a_step_changed_them_are_the_cells_made_whole():
    session = Session.from_scenario(parse_scenario(scenario_text(240)))
    text_module._LAST_GRID.clear()
    reused = 0
    for i in range(len(session)):
        frame = session.frame(i)  # in order: each snapshot follows the one drawn before it
        changes = frame.snapshot._changes
        reused += changes is not None and text_module._LAST_GRID.get("snapshot") is not None and \
            changes.before() is text_module._LAST_GRID["snapshot"]()
        drawn = PageGridText(frame).rows()
        diff = frame.diff
        cell = PageGridText._cell_maker(frame.snapshot, set(diff.pages_taken), set(diff.pages_freed),
                                    set(diff.pages_evicted))
        assert drawn == [cell(info) for info in frame.snapshot.pages[:MAX_GRID_PAGES]], i
    assert reused > 200  # the incremental path is what ran


def test_the_childrens_index_kept_from_step_to_step_is_the_snapshots_own():
    session = Session.from_scenario(parse_scenario(scenario_text(240)))
    text_module._LAST_CHILDREN.clear()
    for i in range(len(session)):
        snap = session.frame(i).snapshot
        index = text_module._children_index(snap)
        assert {n: tuple(kids) for n, kids in index.items() if kids} == {
            n.id: snap.children(n.id) for n in snap.nodes if snap.children(n.id)}, i


def test_run_print_writes_the_same_bytes_as_through_rich(monkeypatch, tmp_path):
    path = tmp_path / "bench.kvs"
    path.write_text(scenario_text(30))
    for args in (["run", str(path), "--print"], ["run", "eviction-cascade", "--print"],
                 ["demo", "lru", "--print", "--step", "3"], ["run", "lru", "--print", "--substeps"]):
        plain = CliRunner().invoke(cli, args, prog_name="kvviz", env={"COLUMNS": "100"})
        with monkeypatch.context() as patched:
            patched.setattr(text_module, "writes_plain", lambda console: False)
            rich = CliRunner().invoke(cli, args, prog_name="kvviz", env={"COLUMNS": "100"})
        assert (plain.exit_code, plain.stdout) == (rich.exit_code, rich.stdout), args
        assert plain.stdout.count("step ") > 0
