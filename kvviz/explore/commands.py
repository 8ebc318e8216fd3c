# SPDX-License-Identifier: Apache-2.0
"""The scenario commands: ``demo``, ``run``, ``check``, ``export``, ``open`` and ``help``.

Exit codes: 0 when all is well, 1 when a check failed (an expect, an invariant, a digest),
2 for bad input.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from kvviz.core import limits
from kvviz.core.scenario import ScenarioError
from kvviz.printable import printable
from kvviz.commands import (
    BadInput,
    backend_option,
    check_step,
    failed_checks_line,
    kind_option,
    load_file_or_demo,
    load_scenario,
    make_session,
    plural,
    print_session,
    refuse_special_file,
    refuse_ui_too_big,
    require_terminal,
    stdout_console,
    stream_session,
)
from kvviz.explore.launch import render_svg, show


@click.command()
@click.argument("name", required=False)
@click.option("--list", "list_", is_flag=True, help="List the demos, as a course: lessons first, then the bug museum.")
@click.option("--path", "path_only", is_flag=True, help="Print where the demo's .kvs file is installed.")
@click.option("--print", "print_only", is_flag=True, help="Print every step as text instead of opening the UI.")
@click.option("--step", type=int, default=None, help="Show only this step (0 = initial state).")
@kind_option
def demo(name: str | None, list_: bool, path_only: bool, print_only: bool, step: int | None,
         kind: str | None) -> None:
    """Open a narrated demo (no NAME: list them, in the order to take them)."""
    from kvviz.core.demos import demo_path

    if list_ or name is None:
        if path_only:
            raise BadInput("--path needs a demo NAME (`kvviz demo --list` lists them)")
        _list_demos()
        return
    if path_only:
        try:
            click.echo(demo_path(name))
        except KeyError as exc:
            raise BadInput(exc.args[0]) from None
        return
    scenario = load_scenario(name, demo=True)
    if not print_only:
        refuse_ui_too_big(scenario)
    show(make_session(scenario, kind), step, print_only, demo=name)


def _list_demos() -> None:
    """The demos as a course: the lessons in teaching order, then the bug museum."""
    from kvviz.core.demos import demo_names, is_lesson, load_demo

    names = demo_names()
    lessons = [n for n in names if is_lesson(n)]
    museum = [n for n in names if not is_lesson(n)]
    width = max(map(len, names), default=0)
    sections = []
    if lessons:
        sections.append((f"Lessons, in teaching order (start here: kvviz demo {lessons[0]}):", lessons))
    if museum:
        sections.append(("Bug museum: real cache bugs, replayed step by step (shortfin-* run on shortfin's own "
                         "cache: kvviz run NAME --backend shortfin):", museum))
    for heading, members in sections:
        click.echo(heading)
        for demo_name in members:
            try:
                title = load_demo(demo_name).title
            except ScenarioError as exc:  # a broken demo must not hide the others
                title = f"(broken: {exc})"
            click.echo(f"  {demo_name:<{width}}  {title}")
    if lessons:  # where the learner is in the course (kvviz progress)
        from kvviz.teach.progress_command import listing_next_up

        click.echo(listing_next_up())


@click.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--print", "print_only", is_flag=True, help="Print every step as text instead of opening the UI.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the timeline as JSON lines, one object per step (fields: `kvviz help json`).")
@click.option("--substeps", is_flag=True,
              help="With --print or --json: every op's sub-steps too, under it (kind, sentence, pseudo-code lines).")
@click.option("--states", is_flag=True,
              help="With --json --substeps: each sub-step's state too (bounded: MAX_SUBSTEP_STATE_PAGES).")
@click.option("--snapshots", is_flag=True,
              help="With --json: every step's state whole, not its changes from the step before "
                   "(bounded: MAX_STEP_STATE_PAGES).")
@click.option("--step", type=int, default=None, help="Show only this step (0 = initial state).")
@kind_option
@backend_option
def run(file: str, print_only: bool, as_json: bool, substeps: bool, states: bool, snapshots: bool,
        step: int | None, kind: str | None, backend: str) -> None:
    """Open a scenario file (or a demo name); --print or --json print it instead.

    `--json` is the machine interface: JSON lines, one object per step (and per sub-step with
    `--substeps`), the first state whole and each later one as its changes (`--snapshots`:
    every one whole); `kvviz help json` documents every field. Exit 1 when a printed step
    failed an expect or an invariant, 2 for bad input.
    """
    _check_run_flags(print_only, as_json, substeps, states, snapshots)
    scenario = load_file_or_demo(file)
    if as_json and (step is not None or states):
        # Lazy: the ops run first (a step to pick, sub-step states to count before the first
        # line), then frames are built as their lines are written, one at a time.
        session = make_session(scenario, kind, backend, lazy=True)
        _print_json(session, step, backend, substeps, states, snapshots)
    elif as_json:
        _stream_json(scenario, kind, backend, substeps, snapshots)
    elif substeps:
        _print_with_substeps(make_session(scenario, kind, backend), step)
    elif print_only and step is None:
        # Each step printed as it is applied: the first is on screen while the rest run.
        session, failed = stream_session(scenario, kind, backend)
        _verdict(session, failed)
    else:
        if not print_only:
            refuse_ui_too_big(scenario)
        show(make_session(scenario, kind, backend), step, print_only, demo=file)


def _check_run_flags(print_only: bool, as_json: bool, substeps: bool, states: bool, snapshots: bool) -> None:
    """Bad input for flags that cannot go together, before any work."""
    if snapshots and not as_json:
        raise BadInput("--snapshots needs --json (it writes each step's state whole in its JSON object)")
    if print_only and as_json:
        raise BadInput("--print and --json exclude each other: give one of them")
    if substeps and not (print_only or as_json):
        raise BadInput("--substeps needs --print or --json (in the UI, step into an op instead)")
    if states and not (as_json and substeps):
        raise BadInput("--states needs --json --substeps (it adds each sub-step's state to its JSON object)")


def _printed_steps(session, step: int | None) -> range | list[int]:
    check_step(session, step)
    return range(len(session)) if step is None else [step]


def _print_with_substeps(session, step: int | None) -> None:
    """``--print --substeps``: each step as ``--print`` shows it, then its op's sub-steps."""
    from kvviz.report.text import legends_text

    console = stdout_console()
    steps = _printed_steps(session, step)
    if step is None and session.title:
        console.print(f"[bold]{session.title}[/bold]")
    if step is None:
        console.print(legends_text())  # once, as --print does
    failed = []
    for i in steps:
        if step is None:
            console.rule()
        failed += print_session(session, i, legends=step is not None)
        for line in _substep_text(session, i):
            # out(): no wrapping, no markup. Sentences hold [token lists] and scripts grep lines.
            console.out(line, highlight=False)
    _verdict(session, failed)


def _substep_text(session, index: int) -> list[str]:
    """The lines ``--print --substeps`` prints under step ``index``: a heading with the
    sub-steps' note, then one line per sub-step: its number, kind, ``algorithm:lines`` and the
    sentence, in columns. Numbered from 1, as people count sub-steps everywhere (the UI's
    "sub-step 5/10", ``export --substep 5``); only ``--json``'s ``index`` counts from 0."""
    if index == 0:
        return ["  no sub-steps: step 0 is the initial state, before any op"]
    subs = session.substeps(index)
    where = [f"{s.algorithm}:{_lines_text(s.lines)}" for s in subs]
    index_width = len(str(len(subs)))
    kind_width = max(len(s.kind) for s in subs)
    where_width = max(map(len, where))
    lines = [f"  {plural(len(subs), 'sub-step')} ({subs.note}):"]
    lines += [f"    {s.index + 1:>{index_width}}  {s.kind:<{kind_width}}  {w:<{where_width}}  {s.sentence}"
              for s, w in zip(subs, where)]
    return lines


def _lines_text(lines: tuple[int, ...]) -> str:
    """Pseudo-code line numbers as ranges: ``(4, 5)`` is ``4-5``, ``(2, 3, 4, 7)`` is ``2-4,7``,
    none is ``-``."""
    if not lines:
        return "-"
    runs: list[list[int]] = []
    for n in sorted(set(lines)):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _print_json(session, step: int | None, backend: str, substeps: bool, states: bool, snapshots: bool) -> None:
    """``--json`` of a session whose ops have run (lazily): the header line, then the steps'
    (and sub-steps') lines, written as built."""
    from kvviz.report.timeline_json import header_record, json_line, timeline_lines

    steps = _printed_steps(session, step)
    if step is not None or snapshots:
        _check_snapshot_budget(session.config, len(steps))
    else:
        _check_items_budget(session.config, session.steps)
    if states:
        _check_state_budget(session, steps, step)
    out = sys.stdout
    out.write(json_line(header_record(session, backend=backend, step=step, substeps=substeps, states=states,
                                      snapshots=snapshots)) + "\n")
    for line in timeline_lines(session, steps, substeps=substeps, states=states, snapshots=snapshots):
        out.write(line + "\n")
    # Each frame was built for its line, so its summary knows its checks' results by now.
    summaries = session.summaries
    _verdict(session, [i for i in steps if summaries[i].violations or summaries[i].expect_failures])


def _stream_json(scenario, kind: str | None, backend: str, substeps: bool, snapshots: bool) -> None:
    """``--json`` of every step, each line written as the session applies its op (the frame
    is built once, and the cache's account of what the op changed is fresh: the changes
    cost what changed). Bounded before the session starts."""
    from kvviz.report.timeline_json import TimelineWriter, header_record, json_line

    steps = len(scenario.steps) + 1
    if snapshots:
        _check_snapshot_budget(scenario.config, steps)
    else:
        _check_items_budget(scenario.config, scenario.steps)
    out = sys.stdout
    failed: list[int] = []
    writers: list[TimelineWriter] = []

    def start(session) -> None:
        out.write(json_line(header_record(session, backend=backend, step=None, substeps=substeps, states=False,
                                          snapshots=snapshots, steps=steps - 1)) + "\n")
        writers.append(TimelineWriter(session, substeps=substeps, snapshots=snapshots, last=steps - 1))
        write(session.frame(0))

    def write(frame) -> None:
        for line in writers[0].lines(frame):
            out.write(line + "\n")
        if frame.violations or frame.expect_failures:
            failed.append(frame.index)

    session = make_session(scenario, kind, backend, on_frame=write, on_start=start)
    _verdict(session, failed)


def _check_snapshot_budget(config, snapshots: int) -> None:
    """Bad input, before the first line, when ``snapshots`` whole states would hold more than
    :data:`~kvviz.core.limits.MAX_STEP_STATE_PAGES` (snapshots x the cache's pages): a whole
    state lists every page (35 MB at a million pages)."""
    pages = max(config.pages, 1)
    allowed = limits.MAX_STEP_STATE_PAGES // pages
    if snapshots > allowed:
        fix = ("drop --snapshots (later steps are then written as their changes), or pick one step with --step N"
               + (f" (at most {allowed:,} steps fit)" if allowed > 1 else ""))
        raise BadInput(f"--json --snapshots would write {snapshots:,} step snapshots of {plural(pages, 'page')}, "
                       f"but MAX_STEP_STATE_PAGES ({limits.MAX_STEP_STATE_PAGES:,} snapshots x pages) allows "
                       f"{allowed:,}: {fix}")


def _check_items_budget(config, steps) -> None:
    """Bad input, before the first line, when the states ``--json`` writes (the first whole,
    then each op's changes) could hold more than :data:`~kvviz.core.limits.MAX_TIMELINE_JSON_ITEMS`
    values, by :func:`~kvviz.report.timeline_json.state_items_bound` of the scenario."""
    from kvviz.report.timeline_json import state_items_bound

    bound = state_items_bound(config, [s.op for s in steps])
    if bound > limits.MAX_TIMELINE_JSON_ITEMS:
        raise BadInput(f"--json could write up to {bound:,} values of state for {plural(len(steps), 'op')} on "
                       f"{plural(config.pages, 'page')}, but MAX_TIMELINE_JSON_ITEMS "
                       f"({limits.MAX_TIMELINE_JSON_ITEMS:,}) allows fewer: run a shorter excerpt, or pick "
                       f"one step with --step N")


def _check_state_budget(session, steps, step: int | None) -> None:
    """Bad input, before the first line, when ``--states`` would write more than
    :data:`~kvviz.core.limits.MAX_SUBSTEP_STATE_PAGES` (states x the cache's pages).

    Every op has at least one sub-step, so too many ops is refused at once; otherwise the
    sub-steps are counted (one run of each op, no states), stopping as soon as they are too many.
    """
    pages = max(session.config.pages, 1)
    allowed = limits.MAX_SUBSTEP_STATE_PAGES // pages
    ops = [i for i in steps if i > 0]
    total = len(ops)
    if total <= allowed:
        total = 0
        for i in ops:
            total += len(session.substeps(i))
            if total > allowed:
                break
    if total > allowed:
        fix = "drop --states" if step is not None else "pick one op with --step N, or drop --states"
        raise BadInput(f"--states would write at least {total:,} sub-step states of {plural(pages, 'page')}, "
                       f"but MAX_SUBSTEP_STATE_PAGES ({limits.MAX_SUBSTEP_STATE_PAGES:,} states x pages) allows "
                       f"{allowed:,}: {fix}")


def _verdict(session, failed: list[int]) -> None:
    """As ``--print`` ends: a failed check is one line on stderr after the output, exit 1."""
    if failed:
        sys.stdout.flush()  # the verdict comes after the steps it sums up, even on a shared tty
        click.echo(f"kvviz: {failed_checks_line(session, failed)}", err=True)
        sys.exit(1)


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@kind_option
@backend_option
@click.option("--full", "full_check", is_flag=True,
              help="Check every step's invariants on the whole state (by default a step re-checks what its op "
                   "changed; the verdict is the same).")
def check(files: tuple[str, ...], kind: str | None, backend: str, full_check: bool) -> None:
    """Run scenarios (files or demo names) and verify their expect lines and the invariants.

    Exit 0 when all hold, 1 when a check failed, 2 for bad input. An op that fails with a
    misuse (InvalidOperation) without an `expect fail` at its step is a failed check; one that
    does not fit (CacheAllocationFailure) is counted on the file's line. A run checks the expect
    lines written for its cache kind; lines written for another kind (`--base` on a trie
    script) are not failures, and each file's line says how many were not checked.
    """
    from kvviz.core.failure import frame_failures
    from kvviz.core.failure import unexpected_full as frame_full

    failed = 0
    # Parse all first: bad input is exit 2 before any run. A demo is named by its file.
    scenarios = [(scenario.path or f, scenario) for f in files for scenario in [load_file_or_demo(f)]]
    for file, scenario in scenarios:
        problems = []
        unexpected_full: list[tuple[int, int]] = []  # (step, line) of ops that did not fit, unexpected

        def collect(frame, file=file, problems=problems, unexpected_full=unexpected_full):
            """Each frame's problems as the run makes it (no frame is built twice). What fails
            is kvviz.core.failure's one definition, shared with diff, shrink and fuzz: a misuse
            is a failed check; a full cache is a fact of the workload, worth saying only."""
            problems.extend(failure.located(file) for failure in frame_failures(frame))
            if frame_full(frame):
                unexpected_full.append((frame.index, frame.op.line))

        session = make_session(scenario, kind, backend, on_frame=collect, full_check=full_check)
        not_checked = _unchecked_note(scenario, session)
        full = _unexpected_full_note(unexpected_full)
        if problems:
            failed += 1
            click.echo(f"FAIL {file}: {plural(len(problems), 'problem')}{not_checked}{full}")
            for p in problems:
                click.echo(f"  {p}")
        else:
            checked = sum(len(step.expects) for step in session.steps)
            click.echo(f"ok   {file}: {plural(len(session) - 1, 'step')}, {plural(checked, 'expect')} checked"
                       f"{not_checked}, invariants hold{full}")
    if failed:
        sys.exit(1)


def _unexpected_full_note(where: list[tuple[int, int]]) -> str:
    """``"; 2 ops failed to fit without an `expect fail` (steps 4, 7, lines 9, 12)"``, or ``""``."""
    if not where:
        return ""
    shown = where[:5]
    more = ", ..." if len(where) > 5 else ""
    one = len(where) == 1
    return (f"; {plural(len(where), 'op')} failed to fit without an `expect fail` "
            f"({'step' if one else 'steps'} {', '.join(str(step) for step, _ in shown)}{more}, "
            f"{'line' if one else 'lines'} {', '.join(str(line) for _, line in shown)}{more})")


def _unchecked_note(scenario, session) -> str:
    """``" (56 written for the trie cache not checked on base)"``, or ``""`` when the session
    checked every expect line of ``scenario``.

    A run checks only the lines that apply to its cache kind (a tagged line, to the kinds in
    its tag; an untagged one, to the header's kind). Lines left out are not failures, so
    ``check`` still exits 0 without them, but the ok line must not read as if they held.
    The count comes from what the session really checked, step by step.
    """
    written_for: dict[tuple[str, ...], int] = {}
    for step, run in zip(scenario.steps, session.steps):
        for expect in step.expects:
            if expect not in run.expects:
                kinds = expect.kinds if expect.kinds is not None else (scenario.config.kind,)
                written_for[kinds] = written_for.get(kinds, 0) + 1
    if not written_for:
        return ""
    groups = ", ".join(f"{count} written for the {' and '.join(kinds)} cache{'s' if len(kinds) > 1 else ''}"
                       for kinds, count in written_for.items())
    return f" ({groups} not checked on {session.config.kind})"


@click.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--step", type=int, default=None, help="Step to export (default: the last).")
@click.option("--substep", type=click.IntRange(1, None), default=None,
              help="Point at this moment inside the step's op: sub-step K of N, counted from 1 as the UI "
                   "shows it (\"sub-step 4/7 pop\"). The bundle records it and `kvviz open` returns to it.")
@click.option("-o", "--output", "output", required=True, type=click.Path(dir_okay=False),
              help="Output file; the format comes from the suffix: .json bundle, .md, .txt, .svg.")
@kind_option
@backend_option
def export(file: str, step: int | None, substep: int | None, output: str, kind: str | None, backend: str) -> None:
    """Export a step of a scenario (or a demo name) as a bundle, Markdown, text or SVG."""
    from kvviz.report import write_export

    scenario = load_file_or_demo(file)
    # Lazy: an export looks at one step (and the one before it); the bundle's per-step
    # digests come from one quiet replay, so no other frame needs building.
    session = make_session(scenario, kind, backend, lazy=True)
    step = len(session) - 1 if step is None else step
    check_step(session, step)
    try:
        # The scenario is an input: `export s.md -o s.md` must not replace it with its report.
        write_export(session, step, Path(output), render_svg=render_svg, inputs=[scenario.path or file],
                     substep=None if substep is None else substep - 1)
    except ValueError as exc:  # a sub-step the op does not have is one (its message counts from 0)
        raise BadInput(_from_one(str(exc)) if substep is not None else str(exc)) from None
    except OSError as exc:  # no such folder, no permission, disk full
        raise BadInput(f"{output}: cannot write the export ({exc.strerror or exc})") from None
    click.echo(f"wrote {output} (step {step}" + (f", sub-step {substep})" if substep is not None else ")"))


def _from_one(message: str) -> str:
    """A sub-step message of the export code (0-based) in the CLI's numbering (from 1)."""
    import re

    def shifted(match) -> str:
        return f"{match[1]}{int(match[2]) + 1}" + (f"..{int(match[3]) + 1}" if match[3] else "")

    return re.sub(r"(sub-step |sub-steps )(\d+)(?:\.\.(\d+))?", shifted, message)


@click.command(name="open")
@click.argument("bundle", type=click.Path(dir_okay=False))
@click.option("--print", "print_only", is_flag=True, help="Print the bundled step as text instead of opening the UI.")
def open_(bundle: str, print_only: bool) -> None:
    """Replay a bug-report bundle, verify every per-step digest, show the bundled step.

    A watch bundle (`kvviz watch ... -o B.json`) replays in time linear in its steps, about
    twice `kvviz watch --print` of its recording, and stops checking at the first step whose
    digest differs."""
    from kvviz.report.bundle import BundleError, open_bundle
    from kvviz.report.bundle_kinds import bundle_kind_of

    refuse_special_file(bundle, "a .json bundle")  # a FIFO would block the read forever
    kind = bundle_kind_of(bundle)
    if kind is not None:  # e.g. a watched stream's step (kvviz watch -o X.json): its own replay
        kind.open(bundle, print_only)
        return
    try:
        opened = open_bundle(bundle)
    except BundleError as exc:
        raise BadInput(str(exc)) from None
    if not print_only:
        require_terminal()  # before the verdict line, so that the refusal is the only line
    if opened.divergence:
        click.echo(f"kvviz: replay diverges from the bundle: {printable(opened.divergence)}", err=True)
    else:
        # Since bundle schema 2 "every digest matches" covers the recorded values too (open
        # re-derives each one); the line keeps its old words, which scripts may grep for.
        click.echo(f"replayed {plural(len(opened.session) - 1, 'step')}: every digest matches", err=True)
        for note in opened.notes:  # e.g. another kvviz version recorded it: worth knowing, not a failure
            click.echo(f"kvviz: note: {printable(note)}", err=True)
    show(opened.session, opened.step, print_only, substep=opened.substep)  # the moment the report points at
    if opened.divergence:
        sys.exit(1)
