# SPDX-License-Identifier: Apache-2.0
"""The UI starts only on a terminal, and a reader closing the pipe early is not a failure.

Where a real terminal or pipe matters the tests run ``python -m kvviz`` in a process; the
commands' breadth is checked in-process with the apps replaced by fakes that record a run.
"""

import os
import pty
import subprocess
import sys
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

import kvviz.commands
import kvviz.explore.commands
from kvviz.cli import cli

STORY = """\
title: a short story
description: one request publishes, another reuses its page.
cache trie pages=4 tokens_per_page=4
acquire r1 1..8
expect free 2
publish r1
expect cached 2
acquire r2 1..4 9
expect hit r2 4
release r1
"""

TRACE = "\n".join([
    '{"timestamp": 0, "input_length": 1500, "output_length": 5, "hash_ids": [1, 2, 3]}',
    '{"timestamp": 10, "input_length": 1300, "output_length": 5, "hash_ids": [1, 2, 4]}',
]) + "\n"


@pytest.fixture
def story(tmp_path):
    path = tmp_path / "story.kvs"
    path.write_text(STORY, encoding="utf-8")
    return path


@pytest.fixture
def bundle(story, tmp_path):
    path = tmp_path / "story.json"
    result = CliRunner().invoke(cli, ["export", str(story), "--step", "2", "-o", str(path)])
    assert result.exit_code == 0, result.output
    return path


@pytest.fixture
def terminal():
    """A pseudo-terminal: (the side kvviz gets as its terminal, the other side)."""
    primary, replica = pty.openpty()
    yield replica, primary
    os.close(primary)
    os.close(replica)


def kvviz_process(*args, stdin, stdout, timeout=60):
    """``python -m kvviz ARGS`` with the given stdin and stdout; a hang is a failure."""
    return subprocess.run([sys.executable, "-m", "kvviz", *map(str, args)], stdin=stdin, stdout=stdout,
                          stderr=subprocess.PIPE, text=True, timeout=timeout, check=False)


# -- the UI needs a terminal -----------------------------------------------------------------------


def test_a_demo_with_stdout_redirected_to_a_file_exits_2_and_writes_nothing(terminal, tmp_path):
    tty, _ = terminal
    out = tmp_path / "out.txt"
    with out.open("w") as file:
        result = kvviz_process("demo", "lru", "--step", "23", stdin=tty, stdout=file)
    assert result.returncode == 2
    assert out.read_text() == ""  # no escape codes
    assert result.stderr == ("kvviz: error: the UI needs a terminal, but stdout is not one: add --print to "
                             "print the steps as text\n")


def test_a_demo_with_stdin_not_a_terminal_exits_2(terminal):
    tty, _ = terminal
    result = kvviz_process("demo", "lru", stdin=subprocess.DEVNULL, stdout=tty)
    assert result.returncode == 2
    assert result.stderr == ("kvviz: error: the UI needs a terminal, but stdin is not one: add --print to "
                             "print the steps as text\n")


class FakeApp:
    """Stands in for the Textual apps: records whether anything tried to run it."""

    runs: list = []

    def __init__(self, *args, **kwargs):
        pass

    def run(self):
        FakeApp.runs.append(self)


@pytest.fixture
def fake_apps(monkeypatch):
    import kvviz.compare.engine
    import kvviz.explore.app
    import kvviz.compare.app

    FakeApp.runs = []
    monkeypatch.setattr(kvviz.explore.app, "make_app", FakeApp)
    monkeypatch.setattr(kvviz.compare.app, "make_diff_app", FakeApp)
    # diff needs shortfin to run; the UI check comes after the run, so a stand-in run will do
    monkeypatch.setattr(kvviz.compare.engine, "run_diff", lambda scenario, *backend: SimpleNamespace(divergence=None))
    return FakeApp.runs


@pytest.mark.parametrize("command,hint", [
    (["demo", "lru"], "add --print"),
    (["demo", "lru", "--step", "3", "--base"], "add --print"),
    (["run", "{story}"], "add --print"),
    (["run", "lru"], "add --print"),
    (["open", "{bundle}"], "add --print"),
    (["diff", "{story}", "--ui"], "drop --ui"),
    (["trace", "{trace}", "--ui", "--no-progress"], "drop --ui"),
])
def test_every_command_that_opens_the_ui_refuses_when_stdout_is_not_a_terminal(
        command, hint, fake_apps, story, bundle, tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text(TRACE, encoding="utf-8")
    args = [a.format(story=story, bundle=bundle, trace=trace) for a in command]
    result = CliRunner().invoke(cli, args, prog_name="kvviz")  # CliRunner's stdout is no terminal
    assert result.exit_code == 2, result.output
    assert fake_apps == []
    (line,) = result.stderr.splitlines()
    assert line.startswith("kvviz: error: the UI needs a terminal, but stdout")
    assert line.endswith(hint + (" to print the steps as text" if hint == "add --print" else
                                 " to print the report as text"))


def test_with_a_terminal_the_ui_starts(fake_apps, monkeypatch):
    """The check looks at the streams, not at the command: given terminals, the app runs."""
    common = kvviz.commands
    monkeypatch.setattr(common, "_isatty", lambda stream: True)
    monkeypatch.setattr(common, "settle_heap", lambda: None)  # gc.freeze() is for the kvviz process only
    from kvviz.explore.launch import launch_ui

    launch_ui(common.make_session(common.load_scenario("lru", demo=True), None), 3)
    assert len(fake_apps) == 1


# -- a closed pipe ---------------------------------------------------------------------------------


@pytest.fixture
def closed_pipe():
    """The writing end of a pipe whose reader has already gone (as after ``| head -1``)."""
    read, write = os.pipe()
    os.close(read)
    yield write
    os.close(write)


@pytest.mark.parametrize("command", [
    ["demo", "lru", "--print"],
    ["demo", "--list"],
    ["demo", "--path", "lru"],
    ["run", "{story}", "--print"],
    ["check", "{story}"],
    ["export", "{story}", "-o", "{out}"],
    ["help"],
    ["--help"],
    ["quiz", "lru", "--plain"],
    ["trace", "{trace}", "--no-progress"],
], ids=lambda c: " ".join(c))
def test_a_reader_closing_the_pipe_early_is_not_a_failure(command, closed_pipe, story, bundle, tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text(TRACE, encoding="utf-8")
    args = [a.format(story=story, bundle=bundle, trace=trace, out=tmp_path / "out.md") for a in command]
    result = kvviz_process(*args, stdin=subprocess.DEVNULL, stdout=closed_pipe)
    assert (result.returncode, result.stderr) == (0, "")


def test_open_with_a_closed_pipe_still_reports_the_replay_on_stderr(closed_pipe, bundle):
    result = kvviz_process("open", bundle, "--print", stdin=subprocess.DEVNULL, stdout=closed_pipe)
    assert (result.returncode, result.stderr) == (0, "replayed 4 steps: every digest matches\n")


def test_a_closed_pipe_does_not_hide_bad_input(closed_pipe, tmp_path):
    result = kvviz_process("run", tmp_path / "missing.kvs", "--print", stdin=subprocess.DEVNULL, stdout=closed_pipe)
    assert result.returncode == 2
    assert result.stderr == f"kvviz: error: {tmp_path / 'missing.kvs'}: no such file (expected a .kvs scenario)\n"


def test_a_broken_pipe_in_any_command_exits_0_quietly_in_process(monkeypatch):
    def closed(*args, **kwargs):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(kvviz.explore.commands, "show", closed)
    result = CliRunner().invoke(cli, ["demo", "lru", "--print"], prog_name="kvviz")
    assert (result.exit_code, result.stdout, result.stderr) == (0, "", "")


@pytest.mark.parametrize("args, demo", [
    (["demo", "bug-b5-ref-leak"], "bug-b5-ref-leak"),
    (["run", "bug-b5-ref-leak"], "bug-b5-ref-leak"),
    (["demo", "lru"], "lru"),
])
def test_the_ui_knows_which_demo_it_shows_so_b_can_show_the_buggy_code(monkeypatch, args, demo):
    from kvviz.core import pseudocode

    opened = []
    monkeypatch.setattr(kvviz.commands, "run_app", opened.append)
    result = CliRunner().invoke(cli, args, prog_name="kvviz")
    assert result.exit_code == 0, result.output
    (app,) = opened
    assert app.demo == demo
    assert (pseudocode.buggy_variant(app.demo) is not None) == demo.startswith("bug-")
