# SPDX-License-Identifier: Apache-2.0
"""``kvviz fuzz``: random scenarios on small pools with colliding prefixes; each failure class
not seen before is shrunk and, with ``--out DIR``, written as ``DIR/<class>.kvs`` and its bundle.

Exit codes: 0 when no run failed, 1 when a failure class was found, 2 for bad input, 130 when
Ctrl-C stopped it (the classes found until then are printed and written all the same).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from kvcore import POLICIES
from kvviz.backends.registry import BackendError
from kvviz.commands import BadInput
from kvviz.compare.shrink_command import Progress, chosen_mode, check_seconds, deadline, mode_options, write_failure_bundle
from kvviz.core.designs import KVCORE_DESIGNS, TRIE

MAX_RUNS = 1_000_000
"""The most ``--runs`` accepted: a bound checked before any work."""
MAX_OPS = 10_000
"""The most ``--ops`` per scenario accepted."""


@click.command()
@mode_options
@click.option("--seed", type=click.IntRange(0, 2**63 - 1), default=0, show_default=True,
              help="Which random scenarios: the same seed gives the same runs, in order.")
@click.option("--ops", type=click.IntRange(1, MAX_OPS), default=40, show_default=True, help="Ops per scenario.")
@click.option("--runs", type=click.IntRange(1, MAX_RUNS), default=200, show_default=True, help="Scenarios to run.")
@click.option("--out", "out_dir", default=None, type=click.Path(file_okay=False),
              help="Write each new class's minimal scenario and bundle here (DIR/<class>.kvs, .json); "
                   "existing files are never overwritten.")
@click.option("--kind", type=click.Choice(KVCORE_DESIGNS), default=TRIE, show_default=True,
              help="The cache design (shortfin and --diff: trie only).")
@click.option("--policy", type=click.Choice(POLICIES),
              default="lru", show_default=True, help="The trie's eviction policy (shortfin: lru only).")
@click.option("--no-shrink", is_flag=True, help="Count the classes only; do not shrink them.")
@click.option("--max-seconds", type=float, default=300.0, show_default=True,
              help="Time budget for the whole session: stop and report what was found so far.")
def fuzz(backend: str | None, diff_mode: bool, seed: int, ops: int, runs: int, out_dir: str | None, kind: str,
         policy: str, no_shrink: bool, max_seconds: float) -> None:
    """Run random scenarios until they fail; shrink each new failure class.

    Scenarios are drawn as the differential test draws them (small pools, two colliding token
    stems, four allocation names), valid for the state each op meets. On kvcore alone
    nothing should fail; on shortfin (--backend shortfin, or --diff against kvcore) the
    known issues show up as classes (B4b, B9, B10, SF1-SF3, and the differences by design
    D1-D3). Prints a table of the classes: count, first run, the shrunk size.
    Exit 0 when nothing failed, 1 when something did, 2 for bad input.
    """
    from kvviz.compare.engine import DiffError
    from kvviz.compare.fuzz import fuzz as run_fuzz

    mode = chosen_mode(backend, diff_mode)
    check_seconds(max_seconds)
    if kind != TRIE and policy != "lru":
        raise BadInput(f"--policy {policy}: the {kind} cache takes lru only (it has no eviction policy to choose)")
    if out_dir is not None:
        folder = Path(out_dir)
        if folder.exists() and not folder.is_dir():
            raise BadInput(f"--out {out_dir}: is not a folder")
    progress = Progress("fuzzing")
    try:
        report = run_fuzz(mode, seed=seed, runs=runs, ops=ops, shrink_new=not no_shrink, policy=policy, kind=kind,
                          out_of_time=deadline(max_seconds),
                          on_run=lambda run: progress(f"run {run + 1:,} of {runs:,}"))
    except (DiffError, BackendError) as exc:
        progress.done()
        raise BadInput(str(exc)) from None
    progress.done()
    written = _write_classes(report, out_dir) if out_dir is not None else {}
    for line in report_table(report, written):
        click.echo(line)
    sys.exit(130 if report.interrupted else 1 if report.classes else 0)


def _known(name: str, mode: str) -> str:
    """``defect``/``design`` for a known issue's code, else ``new``."""
    from kvviz.compare.failure import DIFF

    if mode not in ("shortfin", DIFF):
        return "new"
    try:
        from kvviz.backends.shortfin_backend import KNOWN_ISSUES
    except ImportError:  # pragma: no cover - the runs above needed it
        return "new"
    issue = KNOWN_ISSUES.get(name)
    return issue.kind if issue is not None else "new"


def report_table(report, written: dict[str, list[str]]) -> list[str]:
    """The lines ``kvviz fuzz`` prints: a heading, one row per class (in order found), totals."""
    from kvviz.compare.failure import mode_label

    failed = report.runs - report.passed
    lines = [f"kvviz fuzz {mode_label(report.mode)}, seed {report.seed}: {report.runs:,} runs of {report.ops} ops, "
             f"{report.passed:,} passed, {failed:,} failed, {len(report.classes)} class"
             f"{'es' if len(report.classes) != 1 else ''}"]
    if report.classes:
        width = max(len("class"), *(len(name) for name in report.classes))
        lines.append(f"  {'class'.ljust(width)}  known   count  first run  shrunk  what fails")
        for name, found in report.classes.items():
            shrunk = f"{found.shrunk.after.ops} ops" if found.shrunk is not None else "-"
            identity = found.shrunk.identity if found.shrunk is not None else found.failure.identity
            lines.append(f"  {name.ljust(width)}  {_known(name, report.mode):<6}  {found.count:>5}  {found.first_run:>9}  "
                         f"{shrunk:>6}  {identity.describe()}")
        for name, paths in written.items():
            lines += [f"  wrote {path}" for path in paths]
        stopped = [f"  {name}: {found.shrunk.stopped}" for name, found in report.classes.items()
                   if found.shrunk is not None and found.shrunk.stopped]
        lines += stopped
    else:
        lines.append("no failure: every run passed")
    if report.stopped:
        lines.append(report.stopped)
    return lines


def _write_classes(report, out_dir: str) -> dict[str, list[str]]:
    """Each shrunk class as ``DIR/<class>.kvs`` and ``DIR/<class>.json``; a file that exists is
    left alone and said so."""
    folder = Path(out_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInput(f"--out {out_dir}: cannot create the folder ({exc.strerror or exc})") from None
    written: dict[str, list[str]] = {}
    for name, found in report.classes.items():
        if found.shrunk is None:
            if report.interrupted and found.scenario is not None:  # Ctrl-C cut its shrink: keep it as found
                written[name] = _write_unshrunk(found, report.mode, folder)
            continue
        written[name] = _write_class_files(folder, name, found.shrunk.text, "", found.shrunk.minimal,
                                           report.mode, found.shrunk.failure)
    return written


def _write_unshrunk(found, mode: str, folder: Path) -> list[str]:
    """A class whose shrink Ctrl-C cut, as its first run found it: ``DIR/<class>.kvs`` (not
    minimal, and said so) and its bundle; a file that exists is left alone."""
    from kvviz.core.scenario import format_scenario

    return _write_class_files(folder, found.name, format_scenario(found.scenario),
                              " (as found, not shrunk: interrupted)", found.scenario, mode, found.failure)


def _write_class_files(folder: Path, name: str, kvs_text: str, kvs_note: str, scenario, mode: str,
                       failure) -> list[str]:
    """``DIR/<name>.kvs`` holding ``kvs_text`` (its path said with ``kvs_note`` after it) and
    ``DIR/<name>.json`` the failure bundle of ``scenario``; a file that exists is left alone
    and said so. What was written, one line each."""
    from kvviz.report.atomic import write_text_atomic

    kvs, bundle = folder / f"{name}.kvs", folder / f"{name}.json"
    paths = []
    for path in (kvs, bundle):
        if path.exists():
            paths.append(f"{path} exists: not overwritten")
            continue
        try:
            if path == kvs:
                write_text_atomic(path, kvs_text)
                paths.append(f"{path}{kvs_note}")
            else:
                paths.append(write_failure_bundle(scenario, mode, failure, str(path), ()).removeprefix("wrote "))
        except OSError as exc:
            raise BadInput(f"{path}: cannot write ({exc.strerror or exc})") from None
    return paths
