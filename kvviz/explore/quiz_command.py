# SPDX-License-Identifier: Apache-2.0
"""``kvviz quiz``: predict, then reveal. Questions before the interesting steps of a demo, a
file or a seeded random scenario, graded by the state the cache really reached.

Without ``--plain`` the quiz opens the UI in quiz mode (the question panel asks before
each interesting step). ``--plain`` (and ``--json``, which implies it) runs in plain text: each
question with numbered choices on stdout, one answer per line on stdin, feedback after each,
the score at the end, and with ``--json`` one JSON object after everything else.
"""

from __future__ import annotations

import json
import re
import sys

import click

from kvviz.core.limits import MAX_ANSWER_CHARS, MAX_QUIZ_STEPS
from kvviz.core.designs import design_of
from kvviz.teach.generate import generate
from kvviz.teach.quiz import AnswerError, Question, Tally, feedback, questions, record, refusal, shown_candidates
from kvviz.teach.quiz.choices import HINT_WORDS
from kvviz.core.scenario import ScenarioError, parse_scenario
from kvviz.commands import BadInput, at_cache_line, load_file_or_demo, make_session
from kvviz.explore.launch import launch_ui
from kvviz.teach.practice_command import scenario_source

_NEXT_EVICTED = re.compile(r";\s+next\s+evicted:\s+block\s+\d+\s+on\s+page\s+\d+,\s+when\s+an\s+acquire\s+takes\s+that"
                           r"\s+far")
NEXT_VICTIM_MARK = "  <- next victim"


@click.command()
@scenario_source("Quiz", "the questions", "quiz")
@click.option("--save", type=click.Path(dir_okay=False), default=None,
              help="With --random: also write the generated scenario to this .kvs file.")
@click.option("--plain", is_flag=True,
              help="Plain text on stdin/stdout (for scripts and screen readers) instead of the UI's quiz mode.")
@click.option("--json", "as_json", is_flag=True,
              help='Plain text, ending with one JSON object: {"score", "asked", "questions": [{"kind", "step", "question", '
                   '"choices", "choice_mistakes", "given", "correct_answer", "correct_choice", "right", "mistake", "hints", '
                   '"hints_seen", "why", "parted"}, ...]}.')
@click.option("--no-state", is_flag=True, help="Do not print the cache's state before each question.")
def quiz(source: str | None, random_: bool, seed: int, level: str | None, save: str | None, plain: bool,
         as_json: bool, no_state: bool) -> None:
    """Predict what the cache does at each interesting step, then see if you were right.

    A lesson demo's quiz asks what its lesson teaches, never one kind of question twice in a
    row (`kvviz quiz lru`: the victim and the heap's next swap at its three eviction steps);
    another scenario gets one question at each interesting step. Each question comes with
    lettered choices; answer with a choice letter or the answer itself (a number, a page list
    such as `3 5`), `?` for a hint (again: a closer one), a blank line to skip. A wrong answer
    says where it parted from the cache (the sub-step to step into). The quiz ends with the
    score; end of input ends it early. Without --plain (or --json) the UI opens in quiz mode
    (`p` in any session): the answer line takes the same answers.
    """
    session = _session(source, random_, seed, level, save)
    if not plain and not as_json:
        launch_ui(session, quiz_seed=seed)
        return
    steps = len(session) - 1
    if steps > MAX_QUIZ_STEPS:
        click.echo(f"The scenario has {steps:,} steps; the quiz asks about the first {MAX_QUIZ_STEPS:,}.")
    asked = questions(session, seed, last=MAX_QUIZ_STEPS)
    _run_plain(session, asked, seed, show_state=not no_state, as_json=as_json)


def _session(source: str | None, random_: bool, seed: int, level: str | None, save: str | None):
    """The session to quiz on: the named demo or file, or the generated scenario."""
    if level is not None and not random_:
        raise BadInput("--level sets the difficulty of a generated scenario: use it with --random")
    level = level or "easy"
    if random_ and source is not None:
        raise BadInput(f"give a demo or file ({source!r}) or --random, not both")
    if save is not None and not random_:
        raise BadInput("--save writes the generated scenario: use it with --random")
    if not random_:
        if source is None:
            raise BadInput("name a demo or a .kvs file to quiz on, or use --random (`kvviz demo --list` lists demos)")
        return _quizzed(load_file_or_demo(source))
    text = generate(seed, level)
    try:
        scenario = parse_scenario(text, f"<random seed {seed} level {level}>")
    except ScenarioError as exc:  # a generator bug, said as bad input rather than a traceback
        raise BadInput(str(exc)) from None
    if save is not None:
        from kvviz.report.atomic import write_text_atomic

        try:
            write_text_atomic(save, text)
        except OSError as exc:  # no such folder, no permission, a FIFO or a symlink there
            raise BadInput(f"{save}: cannot write the scenario: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise BadInput(f"{save}: cannot write the scenario: {exc}") from None
    return _quizzed(scenario)


def _quizzed(scenario):
    """The session of ``scenario``, or bad input located at its cache line when the quiz has
    no questions for that cache."""
    session = make_session(scenario, None)
    why_not = refusal(session)
    if why_not is not None:
        raise BadInput(at_cache_line(scenario, why_not, scenario.config.kind))
    return session


def _ask(question: Question, number: int, total: int, state: str | None) -> None:
    click.echo(f"\n--- Question {number} of {total} (step {question.step}, {question.spec.title}) ---")
    if state is not None:
        click.echo("State before the step:")
        click.echo(state.rstrip("\n"))
    _show(question)


def _show(question: Question) -> None:
    click.echo(question.text)
    for choice in question.choices:
        click.echo(f"  {choice.line()}")


def _run_plain(session, asked: list[Question], seed: int, *, show_state: bool, as_json: bool) -> None:
    """Ask every question in turn, reading answers from stdin; print the score (and JSON)."""
    stdin = sys.stdin  # click's test runner swaps it too
    title = session.title or "this scenario"
    click.echo(f"Quiz on {title}: {len(asked)} question{'s' if len(asked) != 1 else ''} (seed {seed}). "
               "Answer with a choice letter or the answer itself, `?` for a hint (again: a closer one), a blank line "
               "to skip.")
    tally = Tally()
    records = []
    for number, question in enumerate(asked, 1):
        state = None
        if show_state:
            state = _state(session, question, seed)
        _ask(question, number, len(asked), state)
        ended, given, reply, hints_seen = _answer(question, stdin)
        if ended:
            click.echo("\nEnd of input: the quiz ends here.")
            break
        tally = tally.add(reply)
        for line in feedback(question, reply):
            click.echo(line)
        click.echo(tally.line())
        parted = question.divergence(reply.value) if reply is not None and not reply.right else None
        if parted is not None and parted.substep is not None:
            click.echo(f"Step into it: in the UI go to step {parted.step} (g), press i, then → to sub-step "
                       f"{parted.substep + 1}.")
        records.append(record(question, reply, given, hints_seen))
    click.echo(f"\nFinal score: {tally.right} of {tally.asked} right"
               + (f" ({len(asked) - tally.asked} not asked)." if tally.asked < len(asked) else "."))
    if as_json:
        click.echo(json.dumps({"score": tally.right, "asked": tally.asked, "total": len(asked), "seed": seed,
                               "questions": records}))


UNLISTED = ("victim", "victims")
"""Question kinds whose answer is the smallest key among the candidates: the candidates are
not listed beside them (the learner finds them in the trie, which is what the lesson teaches)."""


def _state(session, question: Question, seed: int) -> str:
    """The state before ``question``'s step as text, without giving the answer away: the heap
    in array order puts the next victim in slot 0 (and the text export marks it), so the
    eviction candidates are listed with their keys in a shuffled order instead; a hash cache's
    queue line names the next block evicted, so that clause goes; and a demo's story, which
    often tells what comes next, is left out."""
    from dataclasses import replace

    from kvviz.report.text import frame_text, heap_list

    frame = replace(session.frame(question.step - 1), story="")
    text = frame_text(frame, session)
    snap = frame.snapshot
    heap = heap_list(frame, session).plain
    candidates = shown_candidates(snap, seed, question.step)
    if candidates and question.kind in UNLISTED:  # the smallest listed key would be the answer 94% of the time
        candidates = ("Eviction candidates: not listed for this question; find them in the trie (childless, "
                      "ref 0) and compare their keys.")
    if candidates and heap:
        text = text.replace(heap, candidates)
    elif design_of(snap).lazy:  # the clause may wrap: matched across line breaks
        text = _NEXT_EVICTED.sub("", text)
    return text.replace(NEXT_VICTIM_MARK, "")


def _answer(question: Question, stdin):
    """Read lines until one is an answer or a skip: (ended, given, reply, hints seen)."""
    hints = 0
    while True:
        click.echo("answer> ", nl=False)
        try:
            line = _read_line(stdin)
        except KeyboardInterrupt:  # Ctrl-C at the prompt: stop like end of input, with the score
            click.echo()
            return True, None, None, hints
        except (UnicodeDecodeError, ValueError) as exc:
            click.echo(f"Not an answer: {exc}.")
            _show(question)
            continue
        if line is None:
            return True, None, None, hints
        text = line.strip()
        if text.lower() in HINT_WORDS:
            level = min(hints, len(question.hints) - 1)
            hints = min(hints + 1, len(question.hints))
            click.echo(f"Hint {level + 1} of {len(question.hints)}: {question.hints[level]}")
            continue
        try:
            reply = question.read(text)
        except AnswerError as exc:
            click.echo(f"Not an answer: {exc}.")
            _show(question)
            continue
        return False, (text or None), reply, hints


def _read_line(stdin) -> str | None:
    """One line of stdin, None at end of input; ValueError for a line over MAX_ANSWER_CHARS
    (read to its end first, so the next answer starts on the next line)."""
    line = stdin.readline(MAX_ANSWER_CHARS + 2)  # the limit, one more, and the newline
    if not line:
        return None
    if len(line.removesuffix("\n")) > MAX_ANSWER_CHARS:
        while line and not line.endswith("\n"):
            line = stdin.readline(MAX_ANSWER_CHARS)  # drain the rest, bounded per read
        raise ValueError(f"the line is longer than {MAX_ANSWER_CHARS:,} characters")
    return line
