# SPDX-License-Identifier: Apache-2.0
"""``kvviz serve`` as a command: what it serves is fixed and checked before it listens.

Bad input is one line and exit 2 (a target that is neither a demo nor a file, an option that
would write or print instead of opening the UI, a scenario that does not start), a host
beyond this machine is warned about, and the package keeps to its layer.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvviz.cli import cli
from kvviz.serve.command import demo_pages, served_command
from kvviz.core.demos import demo_names
from kvviz.serve.plan import ServedPage, ServePlan

pytestmark = pytest.mark.slow  # starts kvviz serve processes

ROOT = Path(__file__).resolve().parents[2]


def kvviz(*args: str):
    return CliRunner().invoke(cli, list(args), prog_name="kvviz")


def one_error_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize(("args", "said"), [
    (["no-such-demo"], "no-such-demo: neither a demo"),
    (["lru", "--print"], "kvviz serve demo: --print is not served"),
    (["quiz", "lru", "--save", "answers.json"], "kvviz serve quiz: --save is not served"),
    (["quiz", "lru", "--plain"], "kvviz serve quiz: --plain is not served"),
    (["quiz", "--level", "impossible"], "'impossible' is not one of"),
    (["watch", "tcp://127.0.0.1:5557"], "ENDPOINT is not served"),
    (["watch"], "watch takes a recording"),
])
def test_serve_refuses_a_target_it_would_not_serve_in_one_line(args, said):
    assert said in one_error_line(kvviz("serve", *args))


def test_serve_refuses_a_recording_option_that_writes(tmp_path):
    recording = tmp_path / "r.jsonl"
    recording.write_text("")
    result = kvviz("serve", "watch", "--replay-file", str(recording), "--record", str(tmp_path / "out.jsonl"))
    assert "--record is not served" in one_error_line(result)


def test_a_scenario_that_does_not_start_is_the_serve_commands_error(tmp_path):
    broken = tmp_path / "broken.kvs"
    broken.write_text("cache trie pages=4 tokens_per_page=2\nacquire r1 1 2\nfrobnicate r1\n")
    result = subprocess.run([sys.executable, "-m", "kvviz", "serve", str(broken), "--port", "0"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120, start_new_session=True)
    assert result.returncode == 2, result
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("kvviz: error: `kvviz run ") and "did not start" in line and "broken.kvs:3" in line, line


def test_a_host_beyond_this_machine_is_warned_about(tmp_path):
    # 192.0.2.1 (TEST-NET-1) is no address of this machine: the bind fails at once, nothing is sent.
    result = subprocess.run([sys.executable, "-m", "kvviz", "serve", "--host", "192.0.2.1", "--port", "0"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=60, start_new_session=True)
    warning, error = result.stderr.strip().splitlines()
    assert "warning: --host 192.0.2.1 listens beyond this machine" in warning and "no password" in warning
    assert error.startswith("kvviz: error: cannot listen on 192.0.2.1:0") and result.returncode == 2


def test_the_served_command_is_the_targets_own_command_line(tmp_path):
    scenario = tmp_path / "mine.kvs"
    scenario.write_text("cache trie pages=4 tokens_per_page=2\nacquire r1 1 2\n")
    assert served_command(("lru",), cli)[0] == ("demo", "lru")
    assert served_command((str(scenario),), cli) == (("run", str(scenario.resolve())), "mine.kvs")
    assert served_command(("quiz", "lru", "--seed", "3"), cli)[0] == ("quiz", "lru", "--seed", "3")
    recording = tmp_path / "r.jsonl"
    recording.write_text("")
    words, title = served_command(("watch", "--replay-file", str(recording)), cli)
    assert words == ("watch", "--replay-file", str(recording.resolve())) and title == "watch r.jsonl"
    assert served_command(("quiz", "lru"), cli)[1] == "quiz: lru"  # p is quiz mode; practice is kvviz practice


def test_the_landing_page_calls_p_quiz_mode_as_the_app_does():
    landing = (ROOT / "kvviz" / "serve" / "templates" / "landing.html").read_text(encoding="utf-8")
    assert "<kbd>p</kbd> quiz" in landing and "practice" not in landing
    assert served_command((), cli) is None


def test_every_demo_has_a_page_running_exactly_that_demo():
    pages = demo_pages()
    assert {page.name for page in pages} == set(demo_names())
    for page in pages:
        assert page.path == f"/demo/{page.name}" and page.socket_path == f"/demo/{page.name}/ws"
        assert page.argv == (sys.executable, "-m", "kvviz", "demo", page.name)


def test_a_plan_refuses_two_pages_on_one_path():
    page = ServedPage("/app", "app", "t", "s", ("x",))
    with pytest.raises(ValueError, match="share a path"):
        ServePlan(pages=(page, page), home=None, version="0")


def test_the_serve_package_imports_neither_the_cli_nor_the_ui():
    # It starts the UI only as a process running the CLI: the house's layers hold.
    # Its click command (kvviz/serve/command.py) is the one module of the feature that speaks click.
    banned = ("kvviz.cli", "kvviz.ui", "click", "textual.app", "textual.widgets")
    for path in sorted((ROOT / "kvviz" / "serve").rglob("*.py")):
        if path.name == "command.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = "kvviz.serve" if node.level == 1 else ("kvviz" if node.level == 2 else "")
                names = [".".join(p for p in (base, node.module or "") if p)]
            for name in names:
                assert not any(name == b or name.startswith(b + ".") for b in banned), f"{path.name} imports {name}"
