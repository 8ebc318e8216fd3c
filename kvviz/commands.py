# SPDX-License-Identifier: Apache-2.0
"""What every ``kvviz`` command shares: the one error type, loading scenarios, building
sessions, the cache-kind and backend options, and the one place that starts the UI.

Bad input (malformed scenarios, foreign or corrupt bundles, unknown names, bad options)
raises :class:`BadInput`: one line on stderr, exit code 2, never a traceback. A scenario with
several problems lists the others after that line, one located line each (bounded).
"""

from __future__ import annotations

import errno
import os
import re
import sys
from contextlib import contextmanager
from pathlib import Path

import click

from kvviz.core import limits
from kvviz.core.designs import BASE, TRIE
from kvviz.report.atomic import special_file_kind
from kvviz.backends import BackendUnavailable
from kvviz.backends.registry import BACKENDS, BackendError, make_backend_factory
from kvviz.core.narrate import count as plural  # "1 step", "2 steps": one wording for CLI and narration
from kvviz.extras import install_command
from kvviz.printable import printable
from kvviz.core.scenario import Scenario, ScenarioError, parse_scenario_file


class BadInput(click.ClickException):
    """User error: a message, exit code 2, no traceback.

    The message is the one ``kvviz: error:`` line. ``more`` are further problems of the same
    input, each already a located line of its own (``PATH:LINE:COLUMN: ...``, as a compiler
    lists them), printed after it: a scenario with three mistakes is fixed in one round, not
    three, and the first line alone still says what is wrong and where.
    """

    exit_code = 2

    def __init__(self, message: str, more: tuple[str, ...] = ()):
        super().__init__(message)
        self.more = tuple(more)

    def show(self, file=None) -> None:
        # Messages quote files (names, digests, a stream's fields): made printable here, once
        # for every message, so a newline or an ESC in a file neither splits the line nor
        # reaches the terminal.
        click.echo(f"kvviz: error: {printable(self.format_message())}", err=True)
        for line in self.more:
            click.echo(printable(line), err=True)


def sample_or_path(text: str | None, kind: str) -> str | None:
    """The file ``text`` names: itself when it exists, else the shipped sample of ``kind``
    (``"trace"``, ``"recording"``) so called, else ``text`` unchanged (the reader then says
    "no such file" in its words; :func:`no_such_file_hint` adds the samples' names)."""
    from kvviz.samples import UnknownSample, resolve

    if text is None:
        return None
    try:
        return resolve(text, kind)
    except UnknownSample:
        return text


def no_such_file_hint(kind: str) -> str:
    """What to add to "no such file": the names of the samples of ``kind`` one could mean."""
    from kvviz.samples import sample_names

    return f"or a {kind} sample: {', '.join(sample_names(kind))} (kvviz help samples)"


class SampleOrPath(click.Path):
    """An existing file, or the name of a shipped sample of ``kind`` (its installed path is
    passed on): ``kvviz trace conversation``. A file of the sample's name wins."""

    def __init__(self, kind: str, **kwargs) -> None:
        super().__init__(exists=True, dir_okay=False, **kwargs)
        self.kind = kind

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not os.path.lexists(value):
            resolved = sample_or_path(value, self.kind)
            if resolved == value:
                self.fail(f"{value!r} does not exist (expected a {self.kind} file, {no_such_file_hint(self.kind)})",
                          param, ctx)
            value = resolved
        return super().convert(value, param, ctx)


def refuse_special_file(path: str | os.PathLike[str], expected: str) -> None:
    """Bad input when ``path`` exists but is not a regular file (a folder, FIFO, device, socket).

    Reading a FIFO blocks until someone writes to it, and ``/dev/zero`` never ends: refuse them
    before the first read. A missing path passes; the reader says "no such file" in its words.
    """
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):  # missing, a dangling symlink, a NUL in the name: the reader says so
        return
    what = special_file_kind(mode)
    if what is None:
        return
    raise BadInput(f"{os.fspath(path)}: is {what}, not a regular file (expected {expected})")


def read_source_file(path: str, noun: str, special: str, missing: str, read=Path.read_bytes):
    """``read(Path(path))`` for a file the user named, at most ``MAX_SOURCE_BYTES``: bad input in
    one line when it is not a regular file (``special``: what was expected, as
    :func:`refuse_special_file` says it), is missing (``missing``: what was expected), holds
    more than a ``noun`` may, or cannot be read. A decoding error of ``read`` is the caller's."""
    refuse_special_file(path, special)
    try:
        size = Path(path).stat().st_size
        if size > limits.MAX_SOURCE_BYTES:
            raise BadInput(f"{path}: {size:,} bytes is more than a {noun} may have "
                           f"({limits.MAX_SOURCE_BYTES:,}, MAX_SOURCE_BYTES)")
        return read(Path(path))
    except FileNotFoundError:
        raise BadInput(f"{path}: no such file (expected {missing})") from None
    except OSError as exc:
        raise BadInput(f"{path}: cannot read ({exc.strerror or exc})") from None


def at_cache_line(scenario: Scenario, message: str, value: str | None = None) -> str:
    """``message`` located where ``scenario``'s ``cache`` line says what it is refused for:
    ``PATH:LINE:COLUMN: message``, as a parse error is (the docs promise the location on
    every exit 2 about a file). The column is that of the line's word holding a value the
    message quotes (``policy=priority`` for ``a 'priority' policy``) or of ``value``, else of ``cache``; a
    scenario without a cache line (the default cache) is located at its first line."""
    path = scenario.path or "<input>"
    quoted = re.findall(r"'([^'\s]+)'", message) + ([value] if value else [])
    for number, text in enumerate(scenario.source.splitlines(), 1):
        words = [(m.start() + 1, m.group()) for m in re.finditer(r"\S+", text)]
        if not words or words[0][1] != "cache":
            continue
        column = words[0][0]
        for value in quoted:
            hit = next((c for c, w in words[1:] if w == value or w.endswith(f"={value}")), None)
            if hit is not None:
                column = hit
                break
        return f"{path}:{number}:{column}: {message}"
    return f"{path}:1:1: {message}"


def refused_scenario(scenario: Scenario, exc: Exception) -> BadInput:
    """The bad input of a scenario a backend cannot run: located at its cache line, unless
    the backend is only missing (an install problem, not the file's)."""
    if isinstance(exc, BackendUnavailable):
        return BadInput(str(exc))
    return BadInput(at_cache_line(scenario, str(exc)))


def load_scenario(path_or_demo: str, *, demo: bool = False) -> Scenario:
    """The scenario in the file ``path_or_demo`` (or the demo of that name with ``demo``)."""
    from kvviz.core.demos import demo_path

    try:
        path = demo_path(path_or_demo) if demo else Path(path_or_demo)
    except KeyError as exc:
        raise BadInput(exc.args[0]) from None
    refuse_special_file(path, "a .kvs scenario")
    if not demo and not path.is_file():
        raise BadInput(f"{path}: no such file (expected a .kvs scenario)")
    try:
        return parse_scenario_file(path)
    except ScenarioError as exc:
        other = other_input(path)  # a trace, a recording or a bundle is no scenario: name its command
        if other is not None:
            raise BadInput(other) from None
        first, *others = exc.report().split("\n")  # every problem, bounded by MAX_SCENARIO_ERRORS
        raise BadInput(first, tuple(others)) from None


_PEEK_BYTES = 65_536
"""Bytes :func:`other_input` reads to tell a JSON input's kind: a trace's or a recording's
first line, or a bundle's opening."""


def other_input(path: Path) -> str | None:
    """The one line for a file that is JSON, not a scenario (a scenario never starts with
    ``{``): what it looks like and the command that reads it; None for anything else."""
    import json

    try:
        with open(path, "rb") as f:
            head = f.read(_PEEK_BYTES).decode("utf-8", "replace")
    except OSError:
        return None
    if not head.lstrip("\ufeff \t\r\n").startswith("{"):
        return None
    try:
        first = json.loads(head.lstrip("\ufeff").split("\n", 1)[0])
    except ValueError:
        first = None
    if isinstance(first, dict) and "hash_ids" in first:
        what, command = "a Mooncake request trace (JSON lines)", f"kvviz trace {path}"
    elif isinstance(first, dict) and "payload" in first and "seq" in first:
        what, command = "a recording of KV events (JSON lines)", f"kvviz watch --replay-file {path}"
    elif '"kvviz.bundle/' in head or '"kvviz.watch-bundle/' in head:
        what, command = "a kvviz bundle", f"kvviz open {path}"
    else:
        what, command = "JSON", "kvviz trace (Mooncake traces), kvviz watch --replay-file (recordings) or kvviz open (bundles)"
    return f"{path}:1:1: {what}, not a .kvs scenario: read it with {command}"


def load_file_or_demo(name: str) -> Scenario:
    """A scenario file, or a demo's name when no such file exists (a file path wins)."""
    return load_scenario(name, demo=_names_a_demo(name))


def file_or_demo_path(name: str) -> str:
    """The path :func:`load_file_or_demo` reads for ``name``, found without reading it (bad
    input for a name that is neither a file nor a demo)."""
    from kvviz.core.demos import demo_path

    if not _names_a_demo(name):
        return name
    try:
        return str(demo_path(name))
    except KeyError as exc:
        raise BadInput(exc.args[0]) from None


def _names_a_demo(name: str) -> bool:
    return not os.path.lexists(name) and not name.endswith(".kvs")


def _kind_flag(ctx: click.Context, param: click.Parameter, given: bool) -> None:
    """Put ``--trie``/``--base`` into the command's one ``kind`` parameter; refuse both.

    Two flags writing one click parameter would let the last given silently win; two
    parameters feeding ``kind`` from callbacks can see each other.
    """
    kind = param.name
    chosen = ctx.params.get("kind")
    if given and chosen is not None and chosen != kind:
        raise BadInput("--trie and --base exclude each other: give one of them")
    if given:
        ctx.params["kind"] = kind
    else:
        ctx.params.setdefault("kind", None)


def kind_option(f):
    """``--trie`` / ``--base``: run on this cache kind instead of the script's header's.

    The command gets ``kind``: :data:`~kvviz.core.designs.TRIE`, :data:`~kvviz.core.designs.BASE` or None (the
    header's); both is bad input.
    """
    f = click.option("--base", BASE, is_flag=True, expose_value=False, callback=_kind_flag,
                     help="Run on the base cache (no sharing).")(f)
    f = click.option("--trie", TRIE, is_flag=True, expose_value=False, callback=_kind_flag,
                     help="Run on the trie cache.")(f)
    return f


def backend_option(f):
    """``--backend kvcore|shortfin``: which cache runs the scenario (default kvcore)."""
    return click.option(
        "--backend", type=click.Choice(BACKENDS), default="kvcore", show_default=True,
        help='The cache to run: kvcore (ours), shortfin (shortfin 3.9.0\'s TriePagedAttentionCache; '
             f'needs {install_command("shortfin")}), vllm (vLLM 0.33.0\'s KVCacheManager, for `cache hash` '
             'scripts) or sglang (SGLang 0.5.23\'s RadixCache, for `cache trie` lru scripts); the engines '
             'need their own venv with a CPU torch: bash scripts/install-engines.sh VENV, then run VENV/bin/kvviz.')(f)


def backend_factory(backend: str, kind: str | None):
    """The session's backend factory for ``--backend`` (and ``--trie``/``--base``)."""
    if backend != "kvcore" and kind == BASE:
        raise BadInput(f"--base runs kvcore's base cache; the {backend} backend is a trie cache (drop --base)")
    try:
        return make_backend_factory(backend)
    except BackendError as exc:
        raise BadInput(str(exc)) from None


def make_session(scenario: Scenario, kind: str | None, backend: str = "kvcore", *, lazy: bool = False,
                 on_frame=None, on_start=None, full_check: bool = False):
    """The session of ``scenario`` on ``backend``; a config the backend cannot run is bad input.
    ``on_frame`` sees each frame as it is applied, ``on_start`` the session before the first
    op (:meth:`Session.from_scenario`);
    ``full_check`` checks every frame's invariants whole, not only what its op changed."""
    from kvviz.core.session import Session

    try:
        return Session.from_scenario(scenario, kind=kind, backend_factory=backend_factory(backend, kind), lazy=lazy,
                                     on_frame=on_frame, on_start=on_start, full_check=full_check)
    except BackendError as exc:  # e.g. a `cache base` scenario on the shortfin backend
        raise refused_scenario(scenario, exc) from None


def check_step(session, step: int | None) -> None:
    """Bad input unless ``step`` is None or one of the session's steps."""
    if step is not None and not 0 <= step < len(session):
        raise BadInput(f"step {step} does not exist: the scenario has steps 0..{len(session) - 1}")


def stdout_console():
    """A Rich console on stdout for a command's text output.

    Rich meets a closed pipe by exiting 1 itself, which reads as "a check failed"; this one
    raises BrokenPipeError instead, so the group exits 0 quietly, once, for every command.
    """
    from rich.console import Console

    console = Console()
    console.on_broken_pipe = _closed_pipe
    return console


def _closed_pipe() -> None:
    raise BrokenPipeError(errno.EPIPE, "the reader closed stdout")


def print_session(session, step: int | None, legends: bool | None = None) -> list[int]:
    """Every step (or only ``step``) as text on stdout: the headless view. The legends print
    once: above every step, or with the one step (``legends`` False: the caller printed them).

    Returns the printed steps whose checks failed (an expect, or an invariant violation).
    """
    console = stdout_console()
    check_step(session, step)
    steps = range(len(session)) if step is None else [step]
    if step is None:
        _print_heading(console, session)
    failed = []
    for i in steps:
        _print_step(console, session, session.frame(i), rule=step is None,
                    legends=step is not None if legends is None else legends, failed=failed)
    return failed


def stream_session(scenario, kind: str | None, backend: str = "kvcore"):
    """``run --print`` of every step: each step printed as the session applies it, so the
    first steps are on stdout while the rest still run (and no frame is built twice).

    The same text as :func:`print_session` of the finished session. Returns the session and
    the steps whose checks failed.
    """
    console = stdout_console()
    total = len(scenario.steps)  # one step per op after step 0: the headers say "step i/total" from the start
    failed: list[int] = []
    started = []

    def start(session) -> None:
        started.append(session)
        _print_heading(console, session)
        _print_step(console, session, session.frame(0), rule=True, legends=False, failed=failed, total=total)

    def step(frame) -> None:
        _print_step(console, started[0], frame, rule=True, legends=False, failed=failed, total=total)

    session = make_session(scenario, kind, backend, on_frame=step, on_start=start)
    return session, failed


def _print_heading(console, session) -> None:
    """What a whole timeline prints above its steps: the title and the legends, once."""
    from kvviz.report.text import legends_text

    if session.title:
        console.print(f"[bold]{session.title}[/bold]")  # the description is step 0's narration
    console.print(legends_text())  # once, not at every step


def _print_step(console, session, frame, *, rule: bool, legends: bool, failed: list[int],
                total: int | None = None) -> None:
    """One step's text (after a rule, in a whole timeline); its index joins ``failed`` when
    one of its checks failed."""
    from kvviz.report.text import frame_renderable, plain_rule, plain_text, writes_plain

    renderable = frame_renderable(frame, session, legends=legends, total=total)
    if writes_plain(console):
        # No colour (a pipe, a file): the same text as strings, written at once; Rich's
        # pipeline was most of a 2,048-page step (benchmarks/bench_print.py).
        console.file.write((plain_rule(console) if rule else "") + plain_text(console, renderable))
    else:
        if rule:
            console.rule()
        console.print(renderable)
    if frame.expect_failures or frame.violations:
        failed.append(frame.index)


def failed_checks_line(session, failed_steps: list[int]) -> str:
    """One line saying which printed steps failed a check, counted as ``check`` counts them.

    (Expects written for another cache kind are not evaluated at all: the session leaves a
    script's untagged expects out on a kind other than its header's, and says so.)
    """
    frames = [session.frame(i) for i in failed_steps]
    expects = sum(len(f.expect_failures) for f in frames)
    violations = sum(len(f.violations) for f in frames)
    what = [text for count, text in ((expects, f"{plural(expects, 'expect')} failed"),
                                     (violations, plural(violations, "invariant violation"))) if count]
    shown = ", ".join(map(str, failed_steps[:10])) + (", ..." if len(failed_steps) > 10 else "")
    where = f"step {shown}" if len(failed_steps) == 1 else f"{len(failed_steps)} steps: {shown}"
    return f"check failed: {' and '.join(what)} ({where})"


def refuse_ui_too_big(scenario) -> None:
    """Bad input before any op runs when one op of ``scenario`` could take or give back more
    pages than the UI shows in bounded time (:data:`~kvviz.core.limits.MAX_UI_OP_PAGES`)."""
    from kvviz.core.limits import MAX_UI_OP_PAGES

    config = scenario.config
    tpp, held, most = config.tokens_per_page, {}, 0
    for step in scenario.steps:
        op = step.op
        tokens, extra = held.get(op.name, (0, 0))
        given = 0 if op.tokens is None else len(op.tokens)
        if op.kind == "acquire":
            tokens, extra = given, op.extra
        elif op.kind in ("extend", "publish"):
            tokens, extra = (tokens + given if getattr(op, "append", False) else max(tokens, given)), max(extra, op.extra)
        held[op.name] = (tokens, extra)
        most = max(most, min(config.pages, -(-(tokens + extra) // tpp)))
    if most > MAX_UI_OP_PAGES:
        where = scenario.path or scenario.title or "the scenario"
        raise BadInput(f"{where}: one op may take or give back {most:,} pages, more than the {MAX_UI_OP_PAGES:,} "
                       f"the UI shows in bounded time (MAX_UI_OP_PAGES); use --print, --json or kvviz check")


WEB_DRIVER = "textual.drivers.web_driver:WebDriver"
"""The driver textual-serve names in ``TEXTUAL_DRIVER`` for the app processes it starts."""


def require_terminal() -> None:
    """Bad input unless stdin and stdout are both terminals: the UI needs both.

    Redirected to a file, Textual wrote escape codes for minutes. We refuse
    rather than print instead: the text form differs by command (``--print`` for a session,
    the report for ``diff``/``trace``), a trace's text would be thousands of frames, and a
    redirect should not quietly change what a command produces. The message names the flag.
    """
    if os.environ.get("TEXTUAL_DRIVER") == WEB_DRIVER:
        return  # served (kvviz serve): the pipes carry textual-serve's packets; a browser is the terminal
    closed = [name for name, stream in (("stdout", sys.stdout), ("stdin", sys.stdin)) if not _isatty(stream)]
    if not closed:
        return
    ctx = click.get_current_context(silent=True)
    params = ctx.params if ctx is not None else {}
    if "print_only" in params:
        hint = "add --print to print the steps as text"
    elif "ui" in params:
        hint = "drop --ui to print the report as text"
    elif "plain" in params:
        hint = "add --plain to be asked in plain text"
    else:
        hint = "run it in a terminal"
    raise BadInput(f"the UI needs a terminal, but {' and '.join(closed)} "
                   f"{'is' if len(closed) == 1 else 'are'} not one: {hint}")


def _isatty(stream) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError):  # replaced or closed streams
        return False


def run_app(app) -> None:
    """Run ``app`` on the terminal, on a settled heap: settled now, or, for an app that calls
    :func:`settle_heap` itself once its first frame is painted (KvvizApp's
    ``after_idle_work``), with the collector paused until then."""
    require_terminal()  # every UI starts here: demo, run, open, diff --ui, trace --ui, watch
    if getattr(app, "after_idle_work", None) is None:
        settle_heap()
        app.run()
        return
    with collector_paused():
        app.run()


@contextmanager
def collector_paused():
    """Build without the cyclic garbage collector (``trace --ui``'s replay, scenario and
    lazy session): its automatic passes walked every row built so far, again and again, a
    quarter of the CPU time of opening a 3,000-step trace (benchmarks/bench_trace_ui.py).
    What is built is bounded by the caller (1,000 requests by default); any garbage cycle
    it leaves is freed by :func:`settle_heap`'s collection."""
    import gc

    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def freeze_heap() -> None:
    """Move everything built so far out of the cyclic collector's sight, without a collection:
    for a caller whose building left no garbage cycles (a collection would free nothing and
    cost ~0.1 s on a 3,000-step trace). Objects frozen are still freed when no longer
    referenced; only a cycle among them would be kept."""
    import gc

    gc.freeze()


def settle_heap() -> None:
    """Move everything built so far (the timeline's keyframes, ops, summaries, the UI's
    widgets) out of the cyclic garbage collector's sight, once: before the UI starts, or,
    for kvviz's app, once its first frame is painted and its idle work done.

    A long timeline holds hundreds of thousands of immutable rows; a full collection walking
    them paused scrubbing for 0.4-0.9 s (benchmarks/bench_timeline.py). The process shows one
    session until it exits, so these objects would never be collected anyway. The collector
    runs from here on, also when the building was done with it paused
    (:func:`collector_paused`), and its full passes come ten times less often than Python's
    default: with the frozen heap out of its count, one came in most ``trace --ui`` jumps,
    each walking the frames and the cache rebuilt since (benchmarks/bench_trace_ui.py). What
    they free is little: a rebuild's cache is freed by reference counting
    (:meth:`kvviz.backends.kvcore_backend.KvcoreBackend.discard`).
    """
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(700, 10, 100)  # Python's default is (700, 10, 10)
    gc.enable()
