# SPDX-License-Identifier: Apache-2.0
"""The progress file is never where a played round gets lost: a symbolic link is written
through to its target, a file that cannot be written is refused before the round starts, and
two kvviz recording at once both count."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from click.testing import CliRunner

from kvviz.cli import cli
from kvviz.teach.course import Progress, next_round, parse_progress, progress_path


def _answers_for_the_first_round() -> str:
    from kvviz.teach.practice_command import _session
    from kvviz.teach.course import round_exercise

    round_ = next_round(Progress())
    exercise = round_exercise(_session(round_.demo, round_.random, round_.seed, round_.level, round_.policy,
                                       round_.design), round_)
    return "".join(f"{m.answer.letter}\n" for m in exercise.moves)


def test_a_round_played_with_a_symlinked_progress_file_is_written_through_the_link(data_home, tmp_path):
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    target = dotfiles / "progress.json"
    target.write_text('{"schema": "kvviz.progress/1", "rounds": [], "reviews": {}}\n', encoding="utf-8")
    link = progress_path()
    link.parent.mkdir(parents=True)
    link.symlink_to(target)
    result = CliRunner().invoke(cli, ["practice", "--next", "--plain"], input=_answers_for_the_first_round())
    assert result.exit_code == 0, result.output
    assert "Recorded in" in result.stdout
    assert link.is_symlink() and os.readlink(link) == str(target)  # the link stays a link
    assert len(parse_progress(target.read_text(encoding="utf-8")).rounds) == 1


def test_a_progress_file_that_cannot_be_written_is_refused_before_the_round_starts(data_home):
    data_home.mkdir()
    (data_home / "kvviz").write_text("a file where the folder should be", encoding="utf-8")
    result = CliRunner().invoke(cli, ["practice", "--next", "--plain"], input=_answers_for_the_first_round())
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line]
    assert len(lines) == 1 and "cannot write the progress file" in lines[0]
    assert "Move 1" not in result.stdout  # no move was asked: nothing was played to be lost


def test_a_symlink_loop_is_refused_before_the_round_starts(data_home):
    link = progress_path()
    link.parent.mkdir(parents=True)
    link.symlink_to(link)
    result = CliRunner().invoke(cli, ["practice", "--next", "--plain"], input=_answers_for_the_first_round())
    assert result.exit_code == 2 and "Move 1" not in result.stdout


_RECORDER = textwrap.dedent("""
    import sys
    from kvviz.teach.progress_command import record_round
    from kvviz.teach.course import Progress, next_round

    class Played:
        results = (None,) * 5
        right = 5

        def misses_by_kind(self):
            return {}

    round_ = next_round(Progress())
    print("ready", flush=True)
    sys.stdin.readline()  # go: both processes record at the same time
    for _ in range(int(sys.argv[1])):
        record_round(round_, Played())
""")


def test_two_processes_recording_at_once_keep_every_round(data_home):
    rounds = 150
    env = {**os.environ, "XDG_DATA_HOME": str(data_home)}
    procs = [subprocess.Popen([sys.executable, "-c", _RECORDER, str(rounds)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, env=env, text=True) for _ in range(2)]
    try:
        for proc in procs:
            assert proc.stdout.readline().strip() == "ready"
        for proc in procs:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        for proc in procs:
            proc.stdin.close()
            assert proc.wait(timeout=120) == 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    progress = parse_progress(progress_path().read_text(encoding="utf-8"))
    assert len(progress.rounds) == 2 * rounds
