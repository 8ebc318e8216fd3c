# SPDX-License-Identifier: Apache-2.0
"""Usage errors at the command line: one line, ``kvviz: error: ...``, exit 2, for every command
(click's own four-line form included), and options that exclude each other say so."""

import re
import subprocess
import sys

import pytest
from click.testing import CliRunner

from kvviz.cli import cli

STORY = """\
cache trie pages=4 tokens_per_page=4
acquire r1 1..8
publish r1
acquire r2 1..4 9
expect hit r2 4
"""


def kvviz(*args: str):
    return CliRunner().invoke(cli, list(args), prog_name="kvviz")


@pytest.fixture
def story(tmp_path):
    path = tmp_path / "story.kvs"
    path.write_text(STORY, encoding="utf-8")
    return path


def one_error_line(result) -> str:
    """Exit 2, nothing on stdout, exactly one ``kvviz: error:`` line on stderr; returns it."""
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("kvviz: error: ")
    return lines[0]


@pytest.mark.parametrize("args,fragment", [
    (["check"], "Missing argument 'FILES...'"),
    (["demo", "--stpe", "3"], "No such option '--stpe'"),
    (["run", "--step", "x", "story.kvs"], "Invalid value for '--step': 'x' is not a valid integer"),
    (["export", "story.kvs"], "Missing option '-o' / '--output'"),
    (["open"], "Missing argument 'BUNDLE'"),
    (["diff", "--bogus", "story.kvs"], "No such option '--bogus'"),
    (["trace"], "Missing argument 'FILE'"),
    (["trace", "{story}", "--capacity-tokens", "lots"], "--capacity-tokens"),
    (["trace", "{story}", "--on-error", "ignore"], "Invalid value for '--on-error'"),
    (["quiz", "--level", "nope"], "Invalid value for '--level': 'nope' is not one of"),
    (["quiz", "--seed", "-1", "--random"], "Invalid value for '--seed'"),
    (["no-such-command"], "No such command 'no-such-command'"),
    (["--no-such-option"], "No such option '--no-such-option'"),
], ids=lambda a: " ".join(a) if isinstance(a, list) else None)
def test_every_usage_error_is_one_line_naming_the_problem_and_where_to_look(args, fragment, story):
    line = one_error_line(kvviz(*[a.format(story=story) for a in args]))
    assert fragment in line
    command = "kvviz" if args[0].startswith("-") or args[0] == "no-such-command" else f"kvviz {args[0]}"
    assert line.endswith(f"Try `{command} -h`.")


def test_a_usage_error_through_python_m_kvviz_is_one_line_too():
    result = subprocess.run([sys.executable, "-m", "kvviz", "check"], capture_output=True, text=True, check=False)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == "kvviz: error: Missing argument 'FILES...'. Try `kvviz check -h`.\n"


def test_kvviz_alone_still_prints_the_help():
    result = kvviz()
    assert "Usage: kvviz [OPTIONS] COMMAND [ARGS]..." in result.output
    assert "Commands:" in result.output


def test_the_group_lists_quiz_and_its_help_works_through_the_group():
    listed = kvviz("--help")
    assert listed.exit_code == 0
    commands = listed.stdout.split("Commands:", 1)[1]
    assert re.search(r"^  quiz +Predict", commands, flags=re.MULTILINE), commands
    helped = kvviz("quiz", "--help")
    assert (helped.exit_code, helped.stderr) == (0, "")
    assert helped.stdout.startswith("Usage: kvviz quiz [OPTIONS] [DEMO|FILE]")
    assert "--level" in helped.stdout and "--random" in helped.stdout


# -- --trie and --base ------------------------------------------------------------------------------


@pytest.mark.parametrize("flags", [["--trie", "--base"], ["--base", "--trie"]], ids=" ".join)
@pytest.mark.parametrize("command", [["demo", "lru", "--print"], ["run", "{story}", "--print"], ["check", "{story}"],
                                     ["export", "{story}", "-o", "{out}"]], ids=lambda c: c[0])
def test_trie_and_base_together_are_refused_in_one_line(command, flags, story, tmp_path):
    out = tmp_path / "out.md"
    args = [a.format(story=story, out=out) for a in command] + flags
    line = one_error_line(kvviz(*args))
    assert line == "kvviz: error: --trie and --base exclude each other: give one of them"
    assert not out.exists()


@pytest.mark.parametrize("flag,kind", [("--trie", "trie"), ("--base", "base"), (None, "trie")])
def test_one_kind_flag_or_none_picks_the_cache(flag, kind, story, tmp_path, monkeypatch):
    import kvviz.commands as common
    import kvviz.explore.commands as commands

    seen = []
    real = common.make_session

    def spy(scenario, k, *a, **kw):
        seen.append(k)
        return real(scenario, k, *a, **kw)

    # run --print streams through common.stream_session, other paths call make_session directly
    monkeypatch.setattr(commands, "make_session", spy)
    monkeypatch.setattr(common, "make_session", spy)
    result = kvviz("run", str(story), "--print", *([flag] if flag else []))
    assert seen == [flag and kind]
    assert ("no sharing in the base cache" in result.stdout) == (kind == "base")


def test_a_usage_error_whose_message_has_no_full_stop_gets_one_before_try():
    result = CliRunner().invoke(cli, ["trace", "x.jsonl", "--capacity-tokens", "1e20"], prog_name="kvviz")
    assert result.exit_code == 2
    assert result.stderr.endswith("the largest capacity kvviz replays. Try `kvviz trace -h`.\n"), result.stderr
