# SPDX-License-Identifier: Apache-2.0
"""Opening a session in the stepping app (or printing it): what ``demo``, ``run``, ``open``,
``quiz`` and ``trace --ui`` share. The app runs through :func:`kvviz.commands.run_app`, the one
place any command starts a Textual app."""

from __future__ import annotations

import sys

import click

from kvviz import commands


def show(session, step: int | None, print_only: bool, demo: str | None = None, substep: int | None = None) -> None:
    """Print the session (``--print``) or open it in the UI at ``step``; ``demo`` names the
    demo or file it came from (a bug-museum demo's buggy code is shown beside ours);
    ``substep`` (0-based) opens the UI inside the step's op there, or prints that sub-step's
    line under the step.

    Printed, a failed expect or invariant is a failed check, as in ``kvviz check``: a line on
    stderr at the end and exit code 1.
    """
    if print_only:
        failed = commands.print_session(session, step)
        if substep is not None and step:
            sub = session.substeps(step)[substep]
            click.echo(f"sub-step {substep + 1}/{len(session.substeps(step))} {sub.kind}: {sub.sentence}")
        if failed:
            sys.stdout.flush()  # the verdict comes after the steps it sums up, even on a shared tty
            click.echo(f"kvviz: {commands.failed_checks_line(session, failed)}", err=True)
            sys.exit(1)
        return
    commands.check_step(session, step)
    launch_ui(session, step, demo=demo, substep=substep)


def launch_ui(session, step: int | None = None, *, quiz_seed: int | None = None,
              demo: str | None = None, substep: int | None = None) -> None:
    """Open ``session`` in the terminal UI at ``step``: the only place a command starts the app.
    With ``quiz_seed``, in quiz mode asking that seed's questions; ``demo``: the demo
    name or file path it came from (the code pane's buggy variant, ``b``)."""
    from kvviz.explore.app import make_app

    quiz = {} if quiz_seed is None else {"quiz": True, "quiz_seed": quiz_seed}
    inside = {} if substep is None else {"substep": substep}  # a bundle that points inside an op
    # The heap is settled once the first frame is painted and the session's idle work done:
    # the collection (~0.1 s on a 3,000-step trace) is then not in the time to the first frame,
    # nor are the UI's own objects left for the collector to walk during the first jumps.
    commands.run_app(make_app(session, step, demo=demo, after_idle_work=commands.settle_heap, **quiz, **inside))


def render_svg(session, step: int, substep: int | None = None) -> str:
    """The UI's screenshot at ``step`` (inside its op at ``substep``) as SVG text (what
    ``export -o x.svg`` writes)."""
    from kvviz.explore.screenshot import screenshot_svg

    return screenshot_svg(session, step) if substep is None else screenshot_svg(session, step, substep=substep)
