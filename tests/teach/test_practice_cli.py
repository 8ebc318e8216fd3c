# SPDX-License-Identifier: Apache-2.0
"""``kvviz practice --plain/--json`` and ``kvviz progress``: answers on stdin, the score per
move, bad input in one line (exit 2), the progress file in the data directory only."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from kvviz.cli import cli
from kvviz.teach.practice_command import _session, round_session
from kvviz.teach.course import Progress, next_round, progress_path, round_exercise
from kvviz.teach.exercise import MOVE_KINDS, build_exercise


def kvviz(*args: str, input: str = ""):
    return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)


def _moves(source, random_=False, seed=0, level=None, policy=None, design=None, steps=None, kinds=None,
           max_moves=40):
    session = _session(source, random_, seed, level, policy, design)
    return build_exercise(session, seed=seed, steps=steps, kinds=kinds, max_moves=max_moves).moves


def test_right_letters_score_every_move_and_json_records_each_one():
    moves = _moves("lru", steps=[29], kinds=["victim", "swap"])  # the lesson's kinds
    answers = "".join(f"{m.answer.letter}\n" for m in moves)
    result = kvviz("practice", "lru", "--step", "29", "--json", input=answers)
    assert "Lesson lru: its moves are victim, swap" in result.stdout
    assert result.exit_code == 0
    data = json.loads(result.stdout.strip().splitlines()[-1])
    assert data["score"] == data["played"] == data["total"] == len(moves)
    assert [m["kind"] for m in data["moves"]] == [m.kind for m in moves]
    assert all(m["right"] and not m["fixed"] for m in data["moves"])
    assert "kvcore: pop the heap's top" in result.stdout


def test_a_wrong_move_says_why_and_fix_applies_the_right_one_counting_the_miss():
    moves = _moves("lru", steps=[28], kinds=list(MOVE_KINDS))
    first = moves[0]
    wrong = next(c for c in first.choices if not c.right)
    answers = f"{wrong.letter}\nfix\n" + "".join(f"{m.answer.letter}\n" for m in moves[1:])
    result = kvviz("practice", "lru", "--step", "28", *(f"--move={k}" for k in MOVE_KINDS), "--json", input=answers)
    assert result.exit_code == 0
    assert f"Not so ({wrong.mistake}): {wrong.why}" in result.stdout
    assert "Fixed: " in result.stdout
    data = json.loads(result.stdout.strip().splitlines()[-1])
    assert data["score"] == len(moves) - 1
    assert data["moves"][0] == {**data["moves"][0], "right": False, "fixed": True, "mistake": wrong.mistake,
                                "given": wrong.letter, "why": wrong.why}


def test_typed_values_are_read_and_end_of_input_ends_with_the_score():
    moves = _moves("hash-vs-trie", design="hash", kinds=["take"])
    typed = " ".join(map(str, moves[0].answer.value))
    result = kvviz("practice", "hash-vs-trie", "--move", "take", "--plain", input=f"{typed}\n")
    assert result.exit_code == 0
    assert "Right: " in result.stdout and "End of input" in result.stdout
    assert "Final score: 1 of 1 move right first time" in result.stdout


def test_a_random_hash_exercise_asks_drops_and_is_the_same_for_the_same_seed():
    one = kvviz("practice", "--random", "--seed", "4", "--design", "hash", "--plain", input="")
    two = kvviz("practice", "--random", "--seed", "4", "--design", "hash", "--plain", input="")
    assert one.exit_code == 0 and one.stdout == two.stdout
    assert any(m.kind == "drop" for m in _moves(None, True, 4, None, None, "hash", max_moves=2000))


@pytest.mark.parametrize("args,problem", [
    (("practice", "lru", "--level", "hard", "--plain"), "use it with --random"),
    (("practice", "--random", "--design", "hash", "--policy", "lfu", "--plain"), "no eviction policy"),
    (("practice", "no-such-demo", "--plain"), "no demo named"),
    (("practice", "--plain"), "name a demo"),
    (("practice", "lru", "--step", "999", "--plain"), "does not exist"),
    (("practice", "lru", "--random", "--plain"), "not both"),
    (("practice", "base-vs-trie", "--design", "base", "--move", "victim", "--plain"), "no moves"),
])
def test_bad_input_is_one_line_and_exit_2(args, problem):
    result = CliRunner().invoke(cli, list(args), input="")
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line]
    assert len(lines) == 1 and problem in lines[0]


def test_next_plays_the_courses_round_and_records_it_in_the_data_directory_only(data_home, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    round_ = next_round(Progress())
    moves = round_exercise(round_session(round_), round_).moves
    result = kvviz("practice", "--next", "--plain", input="".join(f"{m.answer.letter}\n" for m in moves))
    assert result.exit_code == 0
    assert "passed." in result.stdout
    path = progress_path()
    assert str(path).startswith(str(data_home)) and path.is_file()
    assert os.listdir(tmp_path) == ["data"]  # nothing in the working directory
    shown = kvviz("progress")
    assert f"{round_.lesson}" in shown.stdout and "demo✓ easy·" in shown.stdout
    assert "Next up: lesson refcount: its demo" in shown.stdout
    listing = kvviz("demo", "--list")
    assert listing.stdout.rstrip().splitlines()[-1].startswith("Next up: lesson refcount: its demo")


def test_a_corrupt_progress_file_is_one_line_and_left_as_it_is_until_reset(data_home):
    path = progress_path()
    path.parent.mkdir(parents=True)
    path.write_text("{not json", encoding="utf-8")
    for args in (("progress",), ("practice", "--next", "--plain")):
        result = CliRunner().invoke(cli, list(args), input="")
        assert result.exit_code == 2
        lines = [line for line in result.stderr.splitlines() if line]
        assert len(lines) == 1 and str(path) in lines[0] and "--reset" in lines[0]
        assert path.read_text(encoding="utf-8") == "{not json"
    listing = kvviz("demo", "--list")
    assert listing.exit_code == 0 and "Next up: unknown" in listing.stdout
    reset = kvviz("progress", "--reset")
    assert reset.exit_code == 0 and "cleared" in reset.stdout
    assert "0 rounds played" in kvviz("progress").stdout


def test_f_is_a_choice_letter_and_x_is_fix_in_plain_text_too():
    moves = _moves("lru", steps=[29], kinds=["victim"])
    first = moves[0]
    assert len(first.choices) >= 6 and not first.choices[5].right  # choice f exists, and is wrong
    result = kvviz("practice", "lru", "--step", "29", "--move", "victim", "--json", input="f\nx\n")
    data = json.loads(result.stdout.strip().splitlines()[-1])
    assert data["moves"][0]["given"] == "f" and data["moves"][0]["fixed"]


def test_a_lesson_demo_on_a_design_without_its_kinds_plays_every_kind_there():
    result = kvviz("practice", "lru", "--design", "hash", "--json", input="")
    assert result.exit_code == 0 and "Lesson lru" not in result.stdout
    assert "Free queue (head first" in result.stdout  # a hash cache's take: its free queue
    data = json.loads(result.stdout.strip().splitlines()[-1])
    assert data["design"] == "hash" and data["total"] > 0
