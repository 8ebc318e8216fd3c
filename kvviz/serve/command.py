# SPDX-License-Identifier: Apache-2.0
"""``kvviz serve``: the UI in a browser, one independent app process per tab.

    kvviz serve [DEMO | FILE | quiz ... | watch --replay-file F] [--host H] [--port P] [--max-sessions N]

What is served is fixed here, before the server listens: a table of pages
(:class:`~kvviz.serve.plan.ServePlan`), each with the exact command line its tabs run: the
one named (``kvviz demo lru``, ``kvviz run FILE``, ``kvviz quiz ...``, ``kvviz watch
--replay-file F``) and every shipped demo (the landing page links them; the app's palette
opens them anyway). The named command is parsed by its own command's options, and only the
options that open the UI are taken: one that writes a file (``quiz --save``, ``watch
--record``) or prints instead (``--print``, ``--json``) is refused, since a served app writes
nothing on the server. It is then started once, as a tab would start it, so a scenario that
does not parse is this command's error, not every tab's.
"""

from __future__ import annotations

import ipaddress
import re
import sys
from pathlib import Path

import click
from click.core import ParameterSource

from kvviz.extras import needs_extra
from kvviz.commands import BadInput, sample_or_path

SERVE_EXTRA_MISSING = needs_extra("kvviz serve", "serve")

SERVED_OPTIONS: dict[str, frozenset[str]] = {
    # command: the parameters a served app may be given (the others write files or print)
    "demo": frozenset({"name", "step", "kind"}),
    "run": frozenset({"file", "step", "kind", "backend"}),
    "quiz": frozenset({"source", "random_", "seed", "level"}),
    "watch": frozenset({"replay_file", "step", "against_file", "against_trace", "first_requests",
                        "tokens_per_page", "pages"}),
}

DEMO_PATH_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")
"""A demo name that is its own URL path part (every shipped one is)."""

PREFLIGHT_SECONDS = 120.0
"""How long the served command may take to open its UI once, at start (a large scenario
runs every op first)."""


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("target", nargs=-1, type=click.UNPROCESSED, metavar="[DEMO|FILE|quiz ...|watch --replay-file F]")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Where to listen. 0.0.0.0 lets anyone on the network connect (a warning says so).")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True,
              help="The port (0: any free one; the address is printed).")
@click.option("--max-sessions", type=click.IntRange(1, 1024), default=32, show_default=True,
              help="At most this many tabs at once, each its own app process; fewer when that many "
                   "would pass 4 GiB, at twice what one tab of the served command took at start "
                   "(a watch of the shipped vLLM recording: 58 MiB).")
def serve(target: tuple[str, ...], host: str, port: int, max_sessions: int) -> None:
    """Serve the UI to browsers: each tab runs its own app (every key, the command bar;
    exports become downloads). No TARGET: the landing page lists the demos."""
    try:
        from kvviz.serve.plan import ServePlan
        from kvviz.serve.server import KvvizServer
        from kvviz.serve.sessions import measure_tab
    except ImportError:
        raise BadInput(SERVE_EXTRA_MISSING) from None
    from importlib.metadata import version

    named = served_command(target, click.get_current_context().find_root().command)
    pages = demo_pages()
    home = None
    if named is not None:
        words, title = named
        home = next((p for p in pages if words == ("demo", p.name)), None)
        if home is None:
            home = _page("/app", "app", title, "Served here", words)
            pages = (home, *pages)
        problem, peak = measure_tab(home.argv, PREFLIGHT_SECONDS)
        if problem is not None:
            raise BadInput(f"`kvviz {' '.join(words)}` did not start: {problem}")
        max_sessions = _sessions_by_memory(max_sessions, peak, words)
    plan = ServePlan(pages=pages, home=home, version=version("kvviz"),
                     served=None if named is None else "kvviz " + " ".join(named[0]))
    if not _is_loopback(host):
        click.echo(f"kvviz serve: warning: --host {host} listens beyond this machine: anyone who can reach it "
                   "can open sessions (there is no password); --host 127.0.0.1 keeps it local", err=True)
    server = KvvizServer(plan, host=host, port=port, max_sessions=max_sessions)

    def ready(bound: int) -> None:
        shown = host if ":" not in host else f"[{host}]"
        base = f"http://{shown}:{bound}"
        what = f"`{plan.served}`" if plan.served else "the demos"
        click.echo(f"kvviz serve: {base}/ serves {what}, one app per browser tab (at most {max_sessions} at once)")
        click.echo(f"kvviz serve: every demo at {base}/demos · Ctrl+C stops the server and every session")
        sys.stdout.flush()

    try:
        server.serve(ready=ready)
    except OSError as error:
        reason = error.strerror or str(error)
        raise BadInput(f"cannot listen on {host}:{port}: {reason}; try another --port or --host") from None


def _sessions_by_memory(max_sessions: int, peak: int, words: tuple[str, ...]) -> int:
    """``max_sessions``, lowered so that that many tabs of the served command, each twice the
    ``peak`` bytes its first run took, fit :data:`~kvviz.core.limits.MAX_SERVE_MEMORY_BYTES` (said
    on stderr when it lowers it)."""
    from kvviz.core.limits import MAX_SERVE_MEMORY_BYTES

    if peak <= 0:  # not measured (no /proc): the count alone
        return max_sessions
    fits = max(1, MAX_SERVE_MEMORY_BYTES // (2 * peak))
    if fits < max_sessions:
        click.echo(f"kvviz serve: at most {fits} tab{'s' if fits != 1 else ''} at once, not {max_sessions}: one tab of "
                   f"`kvviz {' '.join(words)}` took {peak / 2**20:,.0f} MiB at start, and all tabs together get "
                   f"{MAX_SERVE_MEMORY_BYTES // 2**30} GiB (MAX_SERVE_MEMORY_BYTES)", err=True)
        return fits
    return max_sessions


def served_command(target: tuple[str, ...], group: click.Group) -> tuple[tuple[str, ...], str] | None:
    """The kvviz command line ``target`` names (its words after ``kvviz``) and a title for
    it, checked by that command's own options in ``group`` (the ``kvviz`` group); None for
    no target. Bad input otherwise."""
    if not target:
        return None
    first, rest = target[0], list(target[1:])
    if first in ("quiz", "watch"):
        words = (first, *rest)
    else:
        from kvviz.core.demos import demo_names

        if first in demo_names():
            words = ("demo", first, *rest)
        elif Path(first).is_file():
            words = ("run", str(Path(first).resolve()), *rest)
        else:
            raise BadInput(f"{first}: neither a demo (`kvviz demo --list` lists them) nor a file; "
                           "kvviz serve takes DEMO, FILE, quiz ... or watch --replay-file F")
    params = _checked_params(words, group)
    if words[0] == "watch":
        if params.get("replay_file") is None:
            raise BadInput("kvviz serve watch takes a recording (watch --replay-file F); a live endpoint is "
                           "not served")
        words = ("watch", *_absolute_after("--replay-file", words[1:], "recording"))
    title = {"demo": lambda: _demo_title(words[1]), "run": lambda: Path(words[1]).name,
             "quiz": lambda: "quiz: " + " ".join(words[1:]) if len(words) > 1 else "quiz",
             "watch": lambda: "watch " + Path(params["replay_file"]).name}[words[0]]()
    return tuple(words), title


def _checked_params(words: tuple[str, ...], group: click.Group) -> dict:
    """Parse ``kvviz WORDS`` with that command's options (a usage error is this one's) and
    refuse any option outside :data:`SERVED_OPTIONS`."""
    name, args = words[0], list(words[1:])
    command = group.commands[name]
    parent = click.get_current_context(silent=True)
    with command.make_context(name, args, parent=parent, resilient_parsing=False) as ctx:
        params = dict(ctx.params)
        for param in command.params:
            if (not param.expose_value  # e.g. --trie: it sets an exposed value (kind), checked there
                    or param.name in SERVED_OPTIONS[name]
                    or ctx.get_parameter_source(param.name) in (None, ParameterSource.DEFAULT)):
                continue
            if isinstance(param, click.Argument):  # watch's ENDPOINT: a live stream
                raise BadInput(f"kvviz serve {name}: {param.human_readable_name} is not served: serve takes "
                               "watch --replay-file F (a recording)")
            raise BadInput(f"kvviz serve {name}: {param.opts[-1]} is not served: a served app opens the UI and "
                           "writes nothing on the server (its exports are downloads)")
    return params


def _absolute_after(flag: str, args: tuple[str, ...], kind: str) -> list[str]:
    """``args`` with the path after ``flag`` (or in ``flag=PATH``) made absolute; a sample's
    name of ``kind`` becomes its installed file (the apps may start in another folder)."""
    out, take = [], False
    for arg in args:
        if take:
            arg, take = str(Path(sample_or_path(arg, kind)).resolve()), False
        elif arg == flag:
            take = True
        elif arg.startswith(flag + "="):
            arg = f"{flag}={Path(sample_or_path(arg.split('=', 1)[1], kind)).resolve()}"
        out.append(arg)
    return out


def _demo_title(name: str) -> str:
    from kvviz.core.demos import load_demo
    from kvviz.core.scenario import ScenarioError

    try:
        return load_demo(name).title or name
    except (KeyError, ScenarioError):
        return name


def _page(path: str, name: str, title: str, section: str, words: tuple[str, ...]):
    from kvviz.serve.plan import ServedPage

    return ServedPage(path=path, name=name, title=title, section=section,
                      argv=(sys.executable, "-m", "kvviz", *words))


def demo_pages() -> tuple:
    """A page per shipped demo, ``/demo/NAME``, lessons first (the course order), then the
    bug museum."""
    from kvviz.core.demos import demo_names, is_lesson

    names = [n for n in demo_names() if DEMO_PATH_NAME.fullmatch(n)]
    return tuple(_page(f"/demo/{n}", n, _demo_title(n), "Lessons" if is_lesson(n) else "Bug museum", ("demo", n))
                 for n in sorted(names, key=lambda n: not is_lesson(n)))


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
