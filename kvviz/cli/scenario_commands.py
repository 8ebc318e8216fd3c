"""The scenario commands: ``demo``, ``run``, ``check``, ``export``, ``open`` and ``help``.

Exit codes: 0 when all is well, 1 when a check failed (an expect, an invariant, a digest),
2 for bad input.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..model.scenario import SCENARIO_HELP, ScenarioError
from .common import (BadInput, backend_option, check_step, kind_option, load_file_or_demo, load_scenario,
                     make_session, render_svg, show)


@click.command()
@click.argument("name", required=False)
@click.option("--list", "list_", is_flag=True, help="List the demos with one-line descriptions.")
@click.option("--print", "print_only", is_flag=True, help="Print every step as text instead of opening the UI.")
@click.option("--step", type=int, default=None, help="Show only this step (0 = initial state).")
@kind_option
def demo(name: str | None, list_: bool, print_only: bool, step: int | None, kind: str | None) -> None:
    """Open a narrated demo (no NAME: list them)."""
    from ..demos import demo_names, load_demo

    if list_ or name is None:
        names = demo_names()
        width = max(map(len, names), default=0)
        for demo_name in names:
            try:
                title = load_demo(demo_name).title
            except ScenarioError as exc:  # a broken demo must not hide the others
                title = f"(broken: {exc})"
            click.echo(f"{demo_name:<{width}}  {title}")
        return
    scenario = load_scenario(name, demo=True)
    show(make_session(scenario, kind), step, print_only)


@click.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--print", "print_only", is_flag=True, help="Print every step as text instead of opening the UI.")
@click.option("--step", type=int, default=None, help="Show only this step (0 = initial state).")
@kind_option
@backend_option
def run(file: str, print_only: bool, step: int | None, kind: str | None, backend: str) -> None:
    """Open a scenario file."""
    show(make_session(load_scenario(file), kind, backend), step, print_only)


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@kind_option
@backend_option
def check(files: tuple[str, ...], kind: str | None, backend: str) -> None:
    """Run scenarios and verify their expect lines and the invariants.

    Exit 0 when all hold, 1 when a check failed, 2 for bad input.
    """
    failed = 0
    scenarios = [(f, load_scenario(f)) for f in files]  # parse all first: bad input is exit 2 before any run
    for file, scenario in scenarios:
        session = make_session(scenario, kind, backend)
        problems = []
        for i in range(1, len(session)):
            frame = session.frame(i)
            where = f"{file}:{frame.op.line}: step {i} `{frame.op.text}`"
            for v in frame.violations:
                problems.append(f"{where}: {v}")
            for r in frame.expect_failures:
                problems.append(f"{file}:{r.expect.line}: step {i} `{r.expect.text}`: {r.message}")
        n_expects = sum(len(s.expects) for s in scenario.steps)
        if problems:
            failed += 1
            click.echo(f"FAIL {file}: {len(problems)} problem(s)")
            for p in problems:
                click.echo(f"  {p}")
        else:
            click.echo(f"ok   {file}: {len(session) - 1} steps, {n_expects} expects, invariants hold")
    if failed:
        sys.exit(1)


@click.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--step", type=int, default=None, help="Step to export (default: the last).")
@click.option("-o", "--output", "output", required=True, type=click.Path(dir_okay=False),
              help="Output file; the format comes from the suffix: .json bundle, .md, .txt, .svg.")
@kind_option
@backend_option
def export(file: str, step: int | None, output: str, kind: str | None, backend: str) -> None:
    """Export a step of a scenario (or a demo name) as a bundle, Markdown, text or SVG."""
    from ..export import write_export

    scenario = load_file_or_demo(file)
    # Lazy: an export looks at one step (and the one before it); the bundle's per-step
    # digests come from one quiet replay, so no other frame needs building.
    session = make_session(scenario, kind, backend, lazy=True)
    step = len(session) - 1 if step is None else step
    check_step(session, step)
    try:
        write_export(session, step, Path(output), render_svg=render_svg)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    except OSError as exc:  # no such folder, no permission, disk full
        raise BadInput(f"{output}: cannot write the export ({exc.strerror or exc})") from None
    click.echo(f"wrote {output} (step {step})")


@click.command(name="open")
@click.argument("bundle", type=click.Path(dir_okay=False))
@click.option("--print", "print_only", is_flag=True, help="Print the bundled step as text instead of opening the UI.")
def open_(bundle: str, print_only: bool) -> None:
    """Replay a bug-report bundle, verify every per-step digest, show the bundled step."""
    from ..export.bundle import BundleError, open_bundle

    try:
        opened = open_bundle(bundle)
    except BundleError as exc:
        raise BadInput(str(exc)) from None
    if opened.divergence:
        click.echo(f"kvviz: replay diverges from the bundle: {opened.divergence}", err=True)
    else:
        click.echo(f"replayed {len(opened.session) - 1} steps: every digest matches", err=True)
    show(opened.session, opened.step, print_only)
    if opened.divergence:
        sys.exit(1)


@click.command(name="help")
@click.argument("topic", required=False)
def help_(topic: str | None) -> None:
    """Documentation topics: `kvviz help scenarios`."""
    if topic in (None, "scenarios", "scenario", "language"):
        click.echo(SCENARIO_HELP)
        return
    raise BadInput(f"no help topic {topic!r} (expected: scenarios)")
