# SPDX-License-Identifier: Apache-2.0
"""``kvviz practice``: play the cache, move by move.

At each op of a demo, a file or a seeded random scenario, the learner makes the cache's
moves (the walk's stop, the pages taken, the victim, each heap swap, a dedup, a hash queue's
drop), each graded against kvcore's own sub-steps (:mod:`kvviz.teach.exercise`). Without
``--plain``/``--json`` the exercise opens in the UI. ``--plain`` reads one answer per line:
a letter, the value typed in full, ``fix`` (the cache's move, counted as a miss), ``?`` (the
move's sub-step kinds and what to look at). ``--json`` ends with one JSON object.
``--next`` plays the course's next-up round (:mod:`kvviz.teach.course`) and records it.
"""

from __future__ import annotations

import json
import re
import sys

import click

from kvcore import POLICIES
from kvviz.core.designs import BASE, HASH, KVCORE_DESIGNS, TRIE
from kvviz.core.limits import MAX_ANSWER_CHARS, MAX_NUMBER
from kvviz.teach.course import CONCEPTS, MIN_MOVES
from kvviz.teach.exercise import MOVE_KINDS, Play, build_exercise, state_lines
from kvviz.teach.generate import LEVELS, generate
from kvviz.teach.quiz.choices import FIX_WORDS, HINT_WORDS
from kvviz.core.words import count
from kvviz.core.scenario import ScenarioError, parse_scenario
from kvviz.commands import BadInput, load_file_or_demo, make_session

DESIGNS = KVCORE_DESIGNS
MAX_PRACTICE_MOVES = 2_000


def scenario_source(activity: str, seeded: str, sitting: str):
    """The options that say what a quiz or an exercise plays on: ``[DEMO|FILE]``, or
    ``--random`` with its ``--seed`` and ``--level``. ``activity`` starts the --random help
    ("Practise"), ``seeded`` says what else the seed fixes ("the choices' order"), ``sitting``
    names what the same seed gives again ("exercise")."""
    def decorate(f):
        f = click.option("--level", type=click.Choice(tuple(LEVELS)), default=None,
                         help="With --random: the scenario's difficulty (default easy): "
                              + "; ".join(f"{k}: {v.summary}" for k, v in LEVELS.items()))(f)
        f = click.option("--seed", type=click.IntRange(0, MAX_NUMBER), default=0, show_default=True,
                         help=f"Seed of the random scenario and of {seeded}: the same seed, the same "
                              f"{sitting}.")(f)
        f = click.option("--random", "random_", is_flag=True,
                         help=f"{activity} on a generated scenario (see --seed, --level).")(f)
        return click.argument("source", required=False, metavar="[DEMO|FILE]")(f)
    return decorate


@click.command()
@scenario_source("Practise", "the choices' order", "exercise")
@click.option("--policy", type=click.Choice(POLICIES), default=None,
              help="Run on this eviction policy (trie only).")
@click.option("--design", type=click.Choice(DESIGNS), default=None, help="Run on this cache design.")
@click.option("--move", "kinds", multiple=True, type=click.Choice(tuple(MOVE_KINDS)),
              help="Only moves of this kind (repeatable; default: a lesson demo's own kinds, else all).")
@click.option("--step", type=click.IntRange(1, MAX_NUMBER), default=None, help="Only the op of this step.")
@click.option("--max-moves", type=click.IntRange(1, MAX_PRACTICE_MOVES), default=40, show_default=True,
              help="Stop after the op that reaches this many moves.")
@click.option("--next", "next_up", is_flag=True,
              help="The course's next-up round (`kvviz progress`), recorded in the progress file.")
@click.option("--plain", is_flag=True, help="Plain text on stdin/stdout (scripts, screen readers) instead of the UI.")
@click.option("--json", "as_json", is_flag=True,
              help='Plain text, ending with one JSON object: {"score", "moves": [{"kind", "step", "substep", '
                   '"prompt", "choices", "given", "answer", "right", "fixed", "mistake", "why"}, ...]}: "why" is the '
                   'first choice given\'s.')
def practice(source, random_, seed, level, policy, design, kinds, step, max_moves, next_up, plain, as_json) -> None:
    """Play the cache: make each move of an op (the walk's stop, pages taken, the victim,
    heap swaps, dedup, a hash queue's drop) and see each graded.

    Answer with a choice's letter or the value itself (`2`, `3 5`, `[0] [1]`, `node 4`, `stop`,
    `none`); `fix` (or `x`) applies the cache's move (counted as a miss); `?` states the rule.
    """
    lesson_kinds = ()
    if next_up:
        if source is not None or random_:
            raise BadInput("--next plays the course's next-up round: give no DEMO and no --random")
        from kvviz.teach.progress_command import next_round

        round_ = next_round()
        source, random_, seed, level, policy, design, kinds, max_moves = (
            round_.demo, round_.random, round_.seed, round_.level, round_.policy, round_.design, round_.kinds,
            round_.max_moves)
        click.echo(f"Next up: {round_.title}")
    else:
        round_ = None
        if not kinds and not random_ and source in CONCEPTS:  # a lesson's demo practises what it teaches
            lesson_kinds = CONCEPTS[source].kinds
    session = _session(source, random_, seed, level, policy, design) if round_ is None else round_session(round_)
    if step is not None and step >= len(session):
        raise BadInput(f"step {step} does not exist: the scenario has ops 1..{len(session) - 1}")
    steps = None if step is None else [step]
    exercise = None
    if round_ is not None:
        from kvviz.teach.course import round_exercise

        exercise = round_exercise(session, round_)
    if lesson_kinds:
        exercise = build_exercise(session, seed=seed, steps=steps, kinds=lesson_kinds, max_moves=max_moves)
        if exercise.moves:
            click.echo(f"Lesson {source}: its moves are {', '.join(lesson_kinds)} (--move KIND for others).")
    if not (exercise and exercise.moves):
        exercise = build_exercise(session, seed=seed, steps=steps, kinds=kinds or None, max_moves=max_moves)
    if not exercise.moves:
        raise BadInput(f"no moves to play in {exercise.title}" + (f" of kind {', '.join(kinds)}" if kinds else "")
                       + (f" at step {step}" if step is not None else "")
                       + (": try another --seed or --level" if random_ else ""))
    if not plain and not as_json:
        from kvviz.commands import require_terminal, settle_heap
        from kvviz.teach.exercise_screen import make_exercise_app

        require_terminal()
        settle_heap()
        app = make_exercise_app(session, exercise)
        app.run()
        play = app.play
    else:
        play = _run_plain(session, exercise, as_json=as_json)
    if round_ is not None and play is not None and play.results:
        from kvviz.teach.progress_command import record_round

        for line in record_round(round_, play):
            click.echo(line)


def _session(source, random_: bool, seed: int, level: str | None, policy: str | None, design: str | None):
    """The session to practise on: the demo or file, or the generated scenario, on the
    design and policy asked for."""
    if random_ and source is not None:
        raise BadInput(f"give a demo or file ({source!r}) or --random, not both")
    if level is not None and not random_:
        raise BadInput("--level sets the generated scenario's difficulty: use it with --random")
    if policy is not None and design in (BASE, HASH):
        raise BadInput(f"--policy {policy}: a {design} cache has no eviction policy (trie only)")
    if random_:
        text = generate(seed, level or "easy")
        try:
            scenario = parse_scenario(text, f"<random seed {seed} level {level or 'easy'}>")
        except ScenarioError as exc:  # a generator bug, said as bad input rather than a traceback
            raise BadInput(str(exc)) from None
    elif source is None:
        raise BadInput("name a demo or a .kvs file to practise on, or use --random (`kvviz demo --list` lists demos)")
    else:
        scenario = load_file_or_demo(source)
    return _on(scenario, design, policy)


def round_session(round_):
    """The session a course round (:class:`kvviz.teach.course.Round`) plays: its demo or
    random scenario on its design and policy. A demo with fewer than
    :data:`~kvviz.teach.course.MIN_MOVES` moves of any kind there (base-vs-trie on a base cache
    has 3) goes on, on the same cache, with the ops of a generated easy scenario seeded by the
    round (:func:`continued`), so the round has the moves a stage needs."""
    session = _session(round_.demo, round_.random, round_.seed, round_.level, round_.policy, round_.design)
    if round_.demo is None or len(build_exercise(session, max_moves=MIN_MOVES).moves) >= MIN_MOVES:
        return session
    return _on(continued(load_file_or_demo(round_.demo), round_.seed), round_.design, round_.policy)


def continued(scenario, seed: int):
    """``scenario`` followed by the ops of ``generate(seed, "easy")``, their allocations renamed
    ``g1``, ``g2``, ... (``g`` doubled until no name of ``scenario`` is taken)."""
    names = {step.op.name for step in scenario.steps}
    ops = generate(seed, "easy").split("\n\n", 1)[1]
    prefix = "g"
    while any(re.fullmatch(f"{prefix}[0-9]+", name or "") for name in names):
        prefix += "g"
    ops = re.sub(r"^(acquire|publish|release|extend) r([0-9]+)\b", rf"\1 {prefix}\2", ops, flags=re.MULTILINE)
    label = f"<{scenario.path or scenario.title} then random seed {seed} level easy>"
    try:
        return parse_scenario(scenario.source.rstrip("\n") + "\n\n" + ops, label)
    except ScenarioError as exc:  # a generator bug, said as bad input rather than a traceback
        raise BadInput(str(exc)) from None


def _on(scenario, design: str | None, policy: str | None):
    """The session of ``scenario`` on ``design`` and ``policy`` (None: the script's own); a
    design other than the script's runs as ``kvviz demo NAME --base`` does (expects and
    narration scoped to the kind it was written for)."""
    from dataclasses import replace

    config = scenario.config
    kind = design or config.kind
    if policy is not None and kind != TRIE:
        raise BadInput(f"--policy {policy}: this scenario runs on a {kind} cache, which has no eviction policy")
    wanted = policy or (config.policy if kind == TRIE else "lru")  # base and hash evict by lru only
    if wanted != config.policy:
        scenario = replace(scenario, config=replace(config, policy=wanted))
    return make_session(scenario, kind if kind != config.kind else None)


def _run_plain(session, exercise, *, as_json: bool) -> Play:
    """Ask every move in turn, reading answers from stdin; print the score (and JSON)."""
    stdin = sys.stdin  # click's test runner swaps it too
    label = session.label_tokens
    click.echo(f"Practice: {exercise.title}: {count(len(exercise.moves), 'move')} (seed {exercise.seed}). Answer with a "
               "letter or the value itself; `fix` (or `x`) applies the cache's move (a miss); `?` states the rule.")
    play = Play(exercise)
    records = []
    current_step = None
    while not play.done:
        move = play.move
        if move.step != current_step:
            current_step = move.step
            click.echo(f"\n=== Step {move.step}: {move.op_text} ===")
        click.echo(f"\n--- Move {move.index + 1} of {len(exercise.moves)}: {MOVE_KINDS[move.kind].title} "
                   f"(before sub-step {move.anchor + 1}) ---")
        for line in state_lines(move, label):
            click.echo(line)
        _show(move)
        given = None
        while True:
            click.echo("move> ", nl=False)
            try:
                line = _read_line(stdin)
            except KeyboardInterrupt:
                line = None
            except (UnicodeDecodeError, ValueError) as exc:
                click.echo(f"Not a move: {exc}.")
                continue
            if line is None:
                click.echo("\nEnd of input: the exercise ends here.")
                _final(play, exercise, records, as_json)
                return play
            text = line.strip()
            if text.lower() in HINT_WORDS:
                kind = MOVE_KINDS[move.kind]
                click.echo(f"Hint ({kind.title}): {kind.rule}. Look at the {', '.join(kind.looks)} above.")
                continue
            if text.lower() in FIX_WORDS:
                play, verdict = play.fix()
                click.echo(verdict.line)
                break
            try:
                choice = move.read(text)
            except ValueError as exc:
                click.echo(f"Not a move: {exc}.")
                continue
            given = given or choice.letter
            play, verdict = play.answer(choice)
            click.echo(verdict.line)
            if verdict.right:
                break
        result = play.results[-1]
        first = next((c for c in move.choices if c.letter == result.first), None)
        for sentence in move.said:
            click.echo(f"  kvcore: {sentence}")
        click.echo(play.score_line())
        records.append({"kind": move.kind, "step": move.step, "substep": move.anchor, "prompt": move.prompt,
                        "choices": [f"{c.letter}) {c.text}" for c in move.choices], "given": result.first,
                        "answer": f"{move.answer.letter}) {move.answer.text}", "right": result.right,
                        "fixed": result.fixed, "mistake": result.mistake,
                        "why": first.why if first is not None else move.answer.why})
    _final(play, exercise, records, as_json)
    return play


def _show(move) -> None:
    click.echo(move.prompt)
    for choice in move.choices:
        click.echo(f"  {choice.letter}) {choice.text}")


def _final(play: Play, exercise, records: list, as_json: bool) -> None:
    left = len(exercise.moves) - len(play.results)
    click.echo(f"\nFinal {play.score_line().lower()}" + (f" ({left} not played)." if left else "."))
    misses = play.misses_by_kind()
    if misses:
        click.echo("Missed: " + ", ".join(f"{MOVE_KINDS[k].title} x{n}" for k, n in misses.items()))
    if as_json:
        click.echo(json.dumps({"score": play.right, "played": len(play.results), "total": len(exercise.moves),
                               "seed": exercise.seed, "design": exercise.design, "moves": records}))


def _read_line(stdin) -> str | None:
    """One line of stdin, None at end of input; ValueError for a line over MAX_ANSWER_CHARS
    (read to its end first, so the next answer starts on the next line)."""
    line = stdin.readline(MAX_ANSWER_CHARS + 2)
    if not line:
        return None
    if len(line.removesuffix("\n")) > MAX_ANSWER_CHARS:
        while line and not line.endswith("\n"):
            line = stdin.readline(MAX_ANSWER_CHARS)
        raise ValueError(f"the line is longer than {MAX_ANSWER_CHARS:,} characters")
    return line
