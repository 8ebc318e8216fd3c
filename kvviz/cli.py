"""The `kvviz` command line: demos, scenarios, checks, exports and bundles.

Bad input (malformed scenarios, foreign or corrupt bundles, unknown names) prints one clear
line naming the place and exits with code 2; a failed check exits with 1.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .backends.commands import backend_option
from .model.scenario import SCENARIO_HELP, Scenario, ScenarioError, parse_scenario_file


class BadInput(click.ClickException):
    """User error: a message, exit code 2, no traceback."""

    exit_code = 2

    def show(self, file=None) -> None:
        click.echo(f"kvviz: error: {self.format_message()}", err=True)


def _load(path_or_demo: str, *, demo: bool = False) -> Scenario:
    from .demos import demo_path

    try:
        path = demo_path(path_or_demo) if demo else Path(path_or_demo)
    except KeyError as exc:
        raise BadInput(exc.args[0]) from None
    if not demo and not path.is_file():
        raise BadInput(f"{path}: no such file (expected a .kvs scenario)")
    try:
        return parse_scenario_file(path)
    except ScenarioError as exc:
        raise BadInput(str(exc)) from None


def _kind_option(f):
    f = click.option("--base", "kind", flag_value="base", help="Run on the base cache (no sharing).")(f)
    f = click.option("--trie", "kind", flag_value="trie", help="Run on the trie cache.")(f)
    return f


def _session(scenario: Scenario, kind: str | None, backend: str = "kvcore", *, lazy: bool = False):
    from .backends.commands import backend_factory
    from .backends.registry import BackendError
    from .model.session import Session

    try:
        return Session.from_scenario(scenario, kind=kind, backend_factory=backend_factory(backend, kind), lazy=lazy)
    except BackendError as exc:  # e.g. a `cache base` scenario on the shortfin backend
        raise BadInput(str(exc)) from None


def _print_session(session, step: int | None) -> None:
    from rich.console import Console

    from .export.text import frame_renderable

    console = Console()
    if step is not None:
        if not 0 <= step < len(session):
            raise BadInput(f"step {step} does not exist: the scenario has steps 0..{len(session) - 1}")
        console.print(frame_renderable(session.frame(step), session))
        return
    if session.title:
        console.print(f"[bold]{session.title}[/bold]")  # the description is step 0's narration
    for i in range(len(session)):
        console.rule()
        console.print(frame_renderable(session.frame(i), session))


def _show(session, step: int | None, print_only: bool) -> None:
    if print_only:
        _print_session(session, step)
        return
    from .app import run_app

    settle_heap()
    run_app(session, step=step)


def settle_heap() -> None:
    """Move everything built so far (the timeline's keyframes, ops, summaries) out of the
    cyclic garbage collector's sight before the UI starts.

    A long timeline holds hundreds of thousands of immutable rows; a full collection walking
    them paused scrubbing for 0.4-0.9 s (benchmarks/bench_timeline.py). The process shows one
    session until it exits, so these objects would never be collected anyway.
    """
    import gc

    gc.collect()
    gc.freeze()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="kvviz")
def cli() -> None:
    """kvviz: see inside the KV cache of an LLM server, step by step."""


@cli.command()
@click.argument("name", required=False)
@click.option("--list", "list_", is_flag=True, help="List the demos with one-line descriptions.")
@click.option("--print", "print_only", is_flag=True, help="Print every step as text instead of opening the UI.")
@click.option("--step", type=int, default=None, help="Show only this step (0 = initial state).")
@_kind_option
def demo(name: str | None, list_: bool, print_only: bool, step: int | None, kind: str | None) -> None:
    """Open a narrated demo (no NAME: list them)."""
    from .demos import demo_names, load_demo

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
    scenario = _load(name, demo=True)
    _show(_session(scenario, kind), step, print_only)


@cli.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--print", "print_only", is_flag=True, help="Print every step as text instead of opening the UI.")
@click.option("--step", type=int, default=None, help="Show only this step (0 = initial state).")
@_kind_option
@backend_option
def run(file: str, print_only: bool, step: int | None, kind: str | None, backend: str) -> None:
    """Open a scenario file."""
    _show(_session(_load(file), kind, backend), step, print_only)


@cli.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@_kind_option
@backend_option
def check(files: tuple[str, ...], kind: str | None, backend: str) -> None:
    """Run scenarios and verify their expect lines and the invariants.

    Exit 0 when all hold, 1 when a check failed, 2 for bad input.
    """
    failed = 0
    scenarios = [(f, _load(f)) for f in files]  # parse all first: bad input is exit 2 before any run
    for file, scenario in scenarios:
        session = _session(scenario, kind, backend)
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


@cli.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--step", type=int, default=None, help="Step to export (default: the last).")
@click.option("-o", "--output", "output", required=True, type=click.Path(dir_okay=False),
              help="Output file; the format comes from the suffix: .json bundle, .md, .txt, .svg.")
@_kind_option
@backend_option
def export(file: str, step: int | None, output: str, kind: str | None, backend: str) -> None:
    """Export a step of a scenario (or a demo name) as a bundle, Markdown, text or SVG."""
    from .export import write_export

    scenario = _load(file, demo=not Path(file).exists() and not file.endswith(".kvs"))
    # Lazy: an export looks at one step (and the one before it); the bundle's per-step
    # digests come from one quiet replay, so no other frame needs building.
    session = _session(scenario, kind, backend, lazy=True)
    step = len(session) - 1 if step is None else step
    if not 0 <= step < len(session):
        raise BadInput(f"step {step} does not exist: the scenario has steps 0..{len(session) - 1}")
    try:
        write_export(session, step, Path(output))
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    except OSError as exc:  # no such folder, no permission, disk full
        raise BadInput(f"{output}: cannot write the export ({exc.strerror or exc})") from None
    click.echo(f"wrote {output} (step {step})")


@cli.command(name="open")
@click.argument("bundle", type=click.Path(dir_okay=False))
@click.option("--print", "print_only", is_flag=True, help="Print the bundled step as text instead of opening the UI.")
def open_(bundle: str, print_only: bool) -> None:
    """Replay a bug-report bundle, verify every per-step digest, show the bundled step."""
    from .export.bundle import BundleError, open_bundle

    try:
        opened = open_bundle(bundle)
    except BundleError as exc:
        raise BadInput(str(exc)) from None
    if opened.divergence:
        click.echo(f"kvviz: replay diverges from the bundle: {opened.divergence}", err=True)
    else:
        click.echo(f"replayed {len(opened.session) - 1} steps: every digest matches", err=True)
    _show(opened.session, opened.step, print_only)
    if opened.divergence:
        sys.exit(1)


@cli.command(name="help")
@click.argument("topic", required=False)
def help_(topic: str | None) -> None:
    """Documentation topics: `kvviz help scenarios`."""
    if topic in (None, "scenarios", "scenario", "language"):
        click.echo(SCENARIO_HELP)
        return
    raise BadInput(f"no help topic {topic!r} (expected: scenarios)")


def _register_optional() -> None:
    from .backends.commands import diff

    cli.add_command(diff)
    try:
        from .trace.command import trace
    except ImportError:
        return
    cli.add_command(trace)


_register_optional()


def main() -> None:
    """Console entry point."""
    cli(prog_name="kvviz")
