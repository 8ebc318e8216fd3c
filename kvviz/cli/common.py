"""What every ``kvviz`` command shares: the one error type, loading scenarios, building
sessions, the cache-kind and backend options, and the one place that starts the UI.

Bad input (malformed scenarios, foreign or corrupt bundles, unknown names, bad options)
raises :class:`BadInput`: one line on stderr, exit code 2, never a traceback.
"""

from __future__ import annotations

from pathlib import Path

import click

from ..backends.registry import BACKENDS, BackendError, make_backend_factory
from ..model.scenario import Scenario, ScenarioError, parse_scenario_file


class BadInput(click.ClickException):
    """User error: a message, exit code 2, no traceback."""

    exit_code = 2

    def show(self, file=None) -> None:
        click.echo(f"kvviz: error: {self.format_message()}", err=True)


def load_scenario(path_or_demo: str, *, demo: bool = False) -> Scenario:
    """The scenario in the file ``path_or_demo`` (or the demo of that name with ``demo``)."""
    from ..demos import demo_path

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


def load_file_or_demo(name: str) -> Scenario:
    """A scenario file, or a demo's name when no such file exists."""
    return load_scenario(name, demo=not Path(name).exists() and not name.endswith(".kvs"))


def kind_option(f):
    """``--trie`` / ``--base``: run on this cache kind instead of the script's header's."""
    f = click.option("--base", "kind", flag_value="base", help="Run on the base cache (no sharing).")(f)
    f = click.option("--trie", "kind", flag_value="trie", help="Run on the trie cache.")(f)
    return f


def backend_option(f):
    """``--backend kvcore|shortfin``: which cache runs the scenario (default kvcore)."""
    return click.option(
        "--backend", type=click.Choice(BACKENDS), default="kvcore", show_default=True,
        help='The cache to run: kvcore (ours) or shortfin (shortfin 3.9.0\'s TriePagedAttentionCache; '
             'needs pip install -e ".[shortfin]").')(f)


def backend_factory(backend: str, kind: str | None):
    """The session's backend factory for ``--backend`` (and ``--trie``/``--base``)."""
    if backend != "kvcore" and kind == "base":
        raise BadInput(f"--base runs kvcore's base cache; the {backend} backend is a trie cache (drop --base)")
    try:
        return make_backend_factory(backend)
    except BackendError as exc:
        raise BadInput(str(exc)) from None


def make_session(scenario: Scenario, kind: str | None, backend: str = "kvcore", *, lazy: bool = False):
    """The session of ``scenario`` on ``backend``; a config the backend cannot run is bad input."""
    from ..model.session import Session

    try:
        return Session.from_scenario(scenario, kind=kind, backend_factory=backend_factory(backend, kind), lazy=lazy)
    except BackendError as exc:  # e.g. a `cache base` scenario on the shortfin backend
        raise BadInput(str(exc)) from None


def check_step(session, step: int | None) -> None:
    """Bad input unless ``step`` is None or one of the session's steps."""
    if step is not None and not 0 <= step < len(session):
        raise BadInput(f"step {step} does not exist: the scenario has steps 0..{len(session) - 1}")


def print_session(session, step: int | None) -> None:
    """Every step (or only ``step``) as text on stdout: the headless view."""
    from rich.console import Console

    from ..export.text import frame_renderable

    console = Console()
    check_step(session, step)
    if step is not None:
        console.print(frame_renderable(session.frame(step), session))
        return
    if session.title:
        console.print(f"[bold]{session.title}[/bold]")  # the description is step 0's narration
    for i in range(len(session)):
        console.rule()
        console.print(frame_renderable(session.frame(i), session))


def show(session, step: int | None, print_only: bool) -> None:
    """Print the session (``--print``) or open it in the UI at ``step``."""
    if print_only:
        print_session(session, step)
        return
    check_step(session, step)
    launch_ui(session, step)


def launch_ui(session, step: int | None = None) -> None:
    """Open ``session`` in the terminal UI at ``step``: the only place a command starts the app."""
    from ..ui.app import make_app

    _run_app(make_app(session, step))


def launch_diff_ui(run) -> None:
    """Open a kvcore-vs-shortfin run side by side in the terminal UI."""
    from ..ui.diff_app import make_diff_app

    _run_app(make_diff_app(run))


def render_svg(session, step: int) -> str:
    """The UI's screenshot at ``step`` as SVG text (what ``export -o x.svg`` writes)."""
    from ..ui.screenshot import screenshot_svg

    return screenshot_svg(session, step)


def _run_app(app) -> None:
    settle_heap()
    app.run()


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
