# SPDX-License-Identifier: Apache-2.0
"""``kvviz quiz --plain`` end to end: questions on stdout, answers on stdin, score and JSON."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from kvviz.explore.quiz_command import quiz
from kvviz.core.demos import load_demo
from kvviz.teach.generate import generate
from kvviz.teach.quiz import questions
from kvviz.core.scenario import parse_scenario
from kvviz.core.session import Session


def _run(args, answers):
    result = CliRunner().invoke(quiz, [*args, "--plain", "--json"], input=answers)
    assert result.exit_code == 0, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    return result.output, json.loads(result.output.strip().splitlines()[-1])


def _expected(name, seed=0):
    return questions(Session.from_scenario(load_demo(name)), seed)


def test_right_answers_get_the_full_score():
    asked = _expected("dedup")
    out, report = _run(["dedup", "--no-state"], "".join(q.correct_line + "\n" for q in asked))
    assert report["score"] == report["asked"] == len(asked) > 0
    assert all(q["right"] for q in report["questions"])
    assert f"Final score: {len(asked)} of {len(asked)} right." in out


def test_right_choice_letters_get_the_full_score_too():
    asked = _expected("lru", seed=3)
    lines = [q.correct_choice.label for q in asked]
    _, report = _run(["lru", "--seed", "3", "--no-state"], "\n".join(lines) + "\n")
    assert report["score"] == len(asked)


def test_wrong_answers_score_zero_and_say_the_mistake():
    asked = _expected("lru")
    wrong = [next(c for c in q.choices if c.mistake) for q in asked]
    out, report = _run(["lru", "--no-state"], "".join(f"{c.label}\n" for c in wrong))
    assert report["score"] == 0 and report["asked"] == len(asked)
    assert not any(q["right"] for q in report["questions"])
    said, _, reason = wrong[0].mistake.partition(": ")
    assert f"Your choice ({said}) is the mistake: {reason}." in out
    assert out.count("Wrong:") == len(asked)


def test_garbage_is_refused_and_the_same_question_asked_again():
    asked = _expected("dedup")
    first = asked[0]
    answers = "banana\n999999\n" + "".join(q.correct_line + "\n" for q in asked)
    out, report = _run(["dedup", "--no-state"], answers)
    assert out.count("Not an answer:") == 2
    assert "'banana' is not" in out and "out of range" in out
    text = out.rsplit("\n", 2)[0]  # without the JSON line, which names the question too
    assert text.count(first.text) == 3  # asked, then again after each bad line
    assert report["score"] == len(asked)
    assert report["questions"][0]["given"] == first.correct_line


def test_a_blank_line_skips_and_a_skip_is_not_right():
    asked = _expected("dedup")
    answers = "\n" + "".join(q.correct_line + "\n" for q in asked[1:])
    out, report = _run(["dedup", "--no-state"], answers)
    first = report["questions"][0]
    assert {k: first[k] for k in ("kind", "step", "question", "choices", "given", "correct_answer", "right",
                                  "mistake", "hints", "why")} == {
        "kind": asked[0].kind, "step": asked[0].step, "question": asked[0].text,
        "choices": [c.line() for c in asked[0].choices], "given": None,
        "correct_answer": asked[0].correct_line, "right": False, "mistake": None,
        "hints": list(asked[0].hints), "why": asked[0].why}
    assert report["score"] == len(asked) - 1 and "Skipped." in out


def test_end_of_input_ends_cleanly_with_the_score_so_far():
    asked = _expected("lru")
    out, report = _run(["lru", "--no-state"], asked[0].correct_line + "\n")
    assert report["asked"] == 1 and report["score"] == 1 and report["total"] == len(asked)
    assert "End of input" in out and "Traceback" not in out
    _, empty = _run(["lru", "--no-state"], "")
    assert empty["asked"] == 0 and empty["questions"] == []


def test_hints_are_graduated_and_do_not_use_up_the_question():
    asked = _expected("dedup")
    out, report = _run(["dedup", "--no-state"], "?\n?\nhint\n?\n" + "".join(q.correct_line + "\n" for q in asked))
    for level, hint in enumerate(asked[0].hints, 1):
        assert f"Hint {level} of 3: {hint}" in out
    assert out.count("Hint 3 of 3:") == 2  # the last hint again, never an error
    assert report["score"] == len(asked) and report["questions"][0]["hints_seen"] == 3


def test_the_json_carries_the_mistake_tag_of_the_choice_given_the_hints_and_the_why():
    asked = _expected("lru")
    wrong = [next(c for c in q.choices if c.mistake) for q in asked]
    _, report = _run(["lru", "--no-state"], "".join(f"{c.label}\n" for c in wrong))
    for q, c, r in zip(asked, wrong, report["questions"]):
        assert r["mistake"] == c.tag and r["given"] == c.label and r["why"] == q.why
        assert r["hints"] == list(q.hints) and r["choice_mistakes"][c.label] == c.tag
        assert r["parted"] is None or r["parted"]["step"] == q.step


def test_the_json_object_comes_last_and_has_the_promised_shape():
    _, report = _run(["dedup"], "a\n" * 40)
    assert {"score", "questions"} <= set(report)
    for q in report["questions"]:
        assert set(q) == {"kind", "step", "question", "choices", "choice_mistakes", "given", "correct_answer",
                          "correct_choice", "right", "mistake", "hints", "hints_seen", "why", "parted"}
        assert isinstance(q["right"], bool) and isinstance(q["choices"], list)


def test_the_state_before_each_question_is_shown_unless_asked_not_to():
    out, _ = _run(["dedup"], "")
    assert "State before the step:" in out and "free" in out
    out, _ = _run(["dedup", "--no-state"], "")
    assert "State before the step:" not in out


def test_a_random_quiz_is_the_quiz_of_the_generated_scenario(tmp_path):
    saved = tmp_path / "practice.kvs"
    scenario = parse_scenario(generate(42, "hard"))
    asked = questions(Session.from_scenario(scenario), 42)
    out, report = _run(["--random", "--seed", "42", "--level", "hard", "--save", str(saved), "--no-state"],
                       "".join(q.correct_line + "\n" for q in asked))
    assert saved.read_text() == generate(42, "hard")
    assert report["score"] == len(asked) > 0
    assert [q["step"] for q in report["questions"]] == [q.step for q in asked]


@pytest.mark.parametrize("args, message", [
    ([], "name a demo or a .kvs file"),
    (["lru", "--random"], "not both"),
    (["lru", "--save", "x.kvs"], "use it with --random"),
    (["no-such-demo-xyz"], "no demo named"),
    (["lru", "--level", "hard"], "--level sets the difficulty of a generated scenario: use it with --random"),
])
def test_bad_invocations_are_one_line_and_exit_2(args, message):
    result = CliRunner().invoke(quiz, args, input="")
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output


def test_help_says_the_ui_is_the_default_and_plain_gives_text():
    result = CliRunner().invoke(quiz, ["--help"])
    assert result.exit_code == 0
    assert "Without --plain (or --json) the UI opens in quiz mode" in " ".join(result.output.split())


def test_without_plain_the_quiz_opens_the_ui_in_quiz_mode(monkeypatch):
    import kvviz.explore.quiz_command

    opened = []
    monkeypatch.setattr(kvviz.explore.quiz_command, "launch_ui",
                        lambda session, step=None, *, quiz_seed=None: opened.append((session, quiz_seed)))
    result = CliRunner().invoke(quiz, ["lru", "--seed", "7"])
    assert result.exit_code == 0, result.output
    ((session, seed),) = opened
    assert seed == 7 and session.title.startswith("LRU eviction")
    assert "Question" not in result.output  # nothing asked on stdout: the UI asks


def test_lines_that_are_no_answer_never_crash():
    asked = _expected("dedup")
    junk = "²\n" + "9" * 5000 + "\n" + "x" * 3000 + "\n-1\n1 2 banana\n"
    out, report = _run(["dedup", "--no-state"], junk + "".join(q.correct_line + "\n" for q in asked))
    assert out.count("Not an answer:") == 5
    assert "longer than 1,000 characters" in out
    assert report["score"] == len(asked)


def test_the_state_shown_does_not_give_the_next_victim_away():
    from kvviz.report.text import frame_text

    session = Session.from_scenario(load_demo("lru"))
    marked = [i for i in range(len(session)) if "<- next victim" in frame_text(session.frame(i), session)]
    assert marked  # the text export does mark the heap's top ...
    out, _ = _run(["lru"], "\n" * 40)
    assert "State before the step:" in out and "<- next victim" not in out  # ... the quiz does not
    assert "array order" not in out and "in no particular order" in out  # nor the heap in array order


def test_a_wrong_answer_offers_to_step_into_the_sub_step_where_it_parted():
    # kvviz quiz --random --seed 0 --level medium --plain --no-state, every answer wrong
    asked = questions(Session.from_scenario(parse_scenario(generate(0, "medium"))), 0)
    wrong = [next(c for c in q.choices if c.mistake) for q in asked]
    out, report = _run(["--random", "--seed", "0", "--level", "medium", "--no-state"],
                       "".join(f"{c.label}\n" for c in wrong))
    parted = [(q, q.divergence(c.value)) for q, c in zip(asked, wrong)]
    inside = [(q, p) for q, p in parted if p is not None and p.substep is not None]
    assert inside, "no wrong answer parted inside an op"
    for q, p in inside:
        assert f"Where it parted: {p.sentence}" in out
        assert f"Step into it: in the UI go to step {p.step} (g), press i, then → to sub-step {p.substep + 1}." in out
    assert [r["parted"] and r["parted"]["substep"] for r in report["questions"]] == \
        [p and p.substep for _, p in parted]


def test_an_answer_line_may_be_as_long_as_the_limit_and_no_longer():
    from kvviz.core.limits import MAX_ANSWER_CHARS

    first = _expected("dedup")[0]
    at_limit = first.correct_line.ljust(MAX_ANSWER_CHARS)
    out, report = _run(["dedup", "--no-state"], at_limit + "\n")
    assert report["questions"][0]["right"] and "longer than" not in out
    out, report = _run(["dedup", "--no-state"], at_limit + " \n" + first.correct_line + "\n")
    assert out.count("longer than") == 1 and report["questions"][0]["right"]


def test_ctrl_c_at_the_prompt_ends_the_quiz_with_the_score(monkeypatch, capsys):
    from kvviz.explore import quiz_command

    first = _expected("dedup")[0]

    class Interrupted:
        """stdin that answers once, then the learner presses Ctrl-C."""

        lines = [first.correct_line + "\n"]

        def readline(self, limit=-1):
            if self.lines:
                return self.lines.pop()
            raise KeyboardInterrupt

    monkeypatch.setattr(quiz_command.sys, "stdin", Interrupted())
    with pytest.raises(SystemExit) as done:
        quiz_command.quiz.main(["dedup", "--no-state", "--json"], standalone_mode=True)
    assert done.value.code == 0
    out = capsys.readouterr().out
    report = json.loads(out.strip().splitlines()[-1])
    assert report["asked"] == 1 and report["score"] == 1 and "End of input" in out


def test_a_long_scenario_is_quizzed_on_its_first_steps_only(tmp_path, monkeypatch):
    from kvviz.explore import quiz_command

    monkeypatch.setattr(quiz_command, "MAX_QUIZ_STEPS", 10)
    out, report = _run(["policies", "--no-state"], "")
    assert "the quiz asks about the first 10" in out
    first = questions(Session.from_scenario(load_demo("policies")), 0, last=10)
    assert report["total"] == len(first) and all(q.step <= 10 for q in first)
    assert 0 < len(first) < len(_expected("policies"))


def test_without_a_terminal_the_quiz_says_to_use_plain(monkeypatch):
    result = CliRunner().invoke(quiz, ["lru"])  # CliRunner's stdin and stdout are no terminals
    assert result.exit_code == 2
    assert result.output.strip().endswith("add --plain to be asked in plain text")


def test_a_hash_scenario_is_quizzed_with_the_hash_caches_own_kinds():
    from kvviz.core.designs import design

    asked = _expected("hash-vs-trie")
    assert asked and {q.kind for q in asked} <= set(design("hash").questions)
    out, report = _run(["hash-vs-trie", "--no-state"], "".join(q.correct_line + "\n" for q in asked))
    assert report["score"] == len(asked)
    assert "heap" not in out and "trie" not in " ".join(q.why for q in asked)


def test_the_state_shown_leaves_out_the_demos_story_and_the_hash_queues_next_eviction():
    out, _ = _run(["lru"], "\n" * 40)
    assert "The heap's top is s1's node 2" not in out  # the lru demo's story says who goes next
    out, _ = _run(["hash-vs-trie"], "\n" * 40)
    assert "State before the step:" in out and "free queue (head first" in out
    assert "next evicted" not in out and "The next block to go" not in out


def test_a_victim_question_does_not_list_the_candidates_keys_beside_it():
    asked = _expected("lru")
    victim = next(q for q in asked if q.kind == "victim")
    out, _ = _run(["lru"], "\n" * len(asked))
    shown = out[:out.index(victim.text)]
    last_state = shown[shown.rfind("clock "):]
    assert "Eviction candidates: not listed for this question" in last_state
    assert "in no particular order" not in last_state
