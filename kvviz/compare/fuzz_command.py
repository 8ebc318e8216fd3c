# SPDX-License-Identifier: Apache-2.0
"""``kvviz fuzz``: random scenarios on small pools with colliding prefixes; each failure class
not seen before is shrunk and, with ``--out DIR``, written as ``DIR/<class>.kvs`` and its bundle.

Exit codes: 0 when no run failed, 1 when a failure class was found, 2 for bad input, 130 when
Ctrl-C stopped it (the classes found until then are printed and written all the same).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

import click

from kvcore import POLICIES
from kvviz.backends.registry import ENGINE_KINDS, REFERENCE_BACKEND, BackendError
from kvviz.commands import BadInput
from kvviz.compare.shrink_command import Progress, chosen_mode, check_seconds, mode_options, write_failure_bundle
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
@click.option("--kind", type=click.Choice(KVCORE_DESIGNS), default=None,
              help="The cache design (default: the one the backend runs, hash for vllm, else trie; with --diff "
                   "it must be that one, as kvviz diff runs it).")
@click.option("--policy", type=click.Choice(POLICIES),
              default="lru", show_default=True, help="The trie's eviction policy (shortfin: lru only).")
@click.option("--no-shrink", is_flag=True, help="Count the classes only; do not shrink them.")
@click.option("--max-seconds", type=float, default=300.0, show_default=True,
              help="Time budget for the whole session, kept even when one run outlasts it (the runs are "
                   "made in a worker process stopped at the deadline): stop and report what was found so far.")
def fuzz(backend: str | None, diff_mode: bool, seed: int, ops: int, runs: int, out_dir: str | None,
         kind: str | None, policy: str, no_shrink: bool, max_seconds: float) -> None:
    """Run random scenarios until they fail; shrink each new failure class.

    Scenarios are drawn as the differential test draws them (small pools, two colliding token
    stems, four allocation names), valid for the state each op meets. On kvcore alone
    nothing should fail; on shortfin (--backend shortfin, or --diff against kvcore) the
    known issues show up as classes (B4b, B9, B10, SF1-SF3, and the differences by design
    D1-D3); --diff --backend vllm or sglang diffs kvcore against those engines (SGLang's
    known issues SG1-SG3 show up as classes). Prints a table of the classes: count, first run,
    the shrunk size.
    Exit 0 when nothing failed, 1 when something did, 2 for bad input.
    """
    from kvviz.compare.bounded import run_until
    from kvviz.compare.failure import diffed_backend

    started = time.monotonic()
    mode = chosen_mode(backend, diff_mode)
    check_seconds(max_seconds)
    against = diffed_backend(mode)
    wanted = ENGINE_KINDS.get(against or mode, TRIE)  # the design the real cache runs: vLLM's is hash
    if against is not None and kind is not None and kind != wanted:
        raise BadInput(f"--kind {kind}: a diff against {against} runs kvcore's {wanted} design (give --kind {wanted} "
                       f"or leave it out)")
    kind = kind or wanted
    if kind != TRIE and policy != "lru":
        raise BadInput(f"--policy {policy}: the {kind} cache takes lru only (it has no eviction policy to choose)")
    if out_dir is not None:
        folder = Path(out_dir)
        if folder.exists() and not folder.is_dir():
            raise BadInput(f"--out {out_dir}: is not a folder")
    end = started + max_seconds - min(max_seconds / 10, 1.0)  # the rest: this process reports and writes
    soft = started + 0.9 * (end - started)  # the worker stops starting runs and shrinks here
    progress = Progress("fuzzing")
    scratch = tempfile.mkdtemp(prefix="kvviz-fuzz-") if out_dir is not None else None
    try:
        session = _Session(mode, seed, ops, runs, progress)
        work = _fuzz_work(mode, seed, runs, ops, not no_shrink, policy, kind, soft, scratch)
        outcome = run_until(work, end, session)
        progress.done()
        report = session.report(outcome)
        written = _write_classes(report, out_dir, session, scratch) if out_dir is not None else {}
    finally:
        progress.done()
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    for line in report_table(report, written, session.known):
        click.echo(line)
    sys.exit(130 if report.interrupted else 1 if report.classes else 0)


class _Session:
    """What the fuzz worker sent: runs counted, classes found (each as found, then shrunk),
    bundles made, how it ended, or why it could not run."""

    def __init__(self, mode: str, seed: int, ops: int, runs: int, progress: Progress):
        self.mode, self.seed, self.ops, self.runs, self.progress = mode, seed, ops, runs, progress
        self.made = self.passed = 0
        self.counts: dict[str, int] = {}
        self.found: dict[str, dict] = {}  # name -> the "found" message
        self.shrunk: dict[str, dict | None] = {}  # name -> the shrink's payload (None: not shrunk)
        self.known: dict[str, str] = {}
        self.bundles: dict[str, str] = {}  # name -> where in its scenario the bundle points
        self.done: dict | None = None
        self.cut: list[str] = []
        """Classes whose shrink the deadline cut: kept as found."""

    def __call__(self, message: dict) -> None:
        kind = message["kind"]
        if kind == "run":
            self.made, self.passed, self.counts = message["runs"], message["passed"], message["counts"]
            self.progress(f"run {message['run'] + 1:,} of {self.runs:,}")
        elif kind == "found":
            self.found[message["name"]] = message
            self.known[message["name"]] = message["known"]
        elif kind == "class":
            self.shrunk[message["name"]] = message["shrunk"]
        elif kind == "bundle":
            self.bundles[message["name"]] = message["line"]
        elif kind == "refused":
            raise BadInput(message["message"])
        elif kind == "done":
            self.done = message

    def report(self, outcome):
        """The :class:`~kvviz.compare.fuzz.FuzzReport` of what was received."""
        from kvviz.compare.fuzz import FuzzClass, FuzzReport, stopped_after
        from kvviz.compare.shrink import result_from_payload

        report = FuzzReport(self.mode, self.seed, self.ops, self.made, self.passed)
        for name, found in self.found.items():
            failure = result_from_payload(self.mode, found["failure"]).failure
            shrunk = self.shrunk.get(name)
            report.classes[name] = FuzzClass(name, self.counts.get(name, 1), found["run"], failure,
                                             result_from_payload(self.mode, shrunk) if shrunk is not None else None)
        if self.done is not None:
            report.stopped, report.interrupted = self.done["stopped"], self.done["interrupted"]
        else:  # killed at the deadline (or after a second Ctrl-C)
            report.interrupted = outcome.interrupted
            report.stopped = (f"interrupted (Ctrl-C) after {self.made:,} of {self.runs:,} runs: what was found until "
                              f"then" if outcome.interrupted else stopped_after(self.made, self.runs))
            self.cut = [name for name in self.found if name not in self.shrunk]
        return report


def _fuzz_work(mode: str, seed: int, runs: int, ops: int, shrink_new: bool, policy: str, kind: str, soft: float,
               scratch: str | None):
    """The fuzz session as the worker process runs it, telling ``send`` what it finds (see
    :class:`_Session`); bundles are written in ``scratch`` for the parent to put in place."""
    from kvviz.compare.engine import DiffError
    from kvviz.compare.fuzz import FuzzReport
    from kvviz.compare.fuzz import fuzz as run_fuzz
    from kvviz.compare.shrink import Best, scenario_size

    def work(send) -> None:
        report = FuzzReport(mode, seed, ops)

        def bundle(found, scenario, failure) -> None:
            if scratch is None:
                return
            path = str(Path(scratch) / f"{found.name}.json")
            try:
                line = write_failure_bundle(scenario, mode, failure, path, ())
            except BadInput as exc:
                send({"kind": "refused", "message": str(exc)})
                return
            send({"kind": "bundle", "name": found.name, "line": line.removeprefix(f"wrote {path}")})

        def on_found(found) -> None:
            size = scenario_size(found.scenario)
            send({"kind": "found", "name": found.name, "run": found.first_run, "known": known_kind(found.name, mode),
                  "failure": Best(found.scenario, found.failure, 0, size).payload()})

        def on_class(found) -> None:
            shrunk = found.shrunk
            send({"kind": "class", "name": found.name,
                  "shrunk": None if shrunk is None else shrunk.payload()})
            if shrunk is not None:
                bundle(found, shrunk.minimal, shrunk.failure)

        def on_run(run) -> None:
            send({"kind": "run", "run": run, "runs": report.runs, "passed": report.passed,
                  "counts": {name: found.count for name, found in report.classes.items()}})

        try:
            run_fuzz(mode, seed=seed, runs=runs, ops=ops, shrink_new=shrink_new, policy=policy, kind=kind,
                     out_of_time=lambda: time.monotonic() >= soft, on_found=on_found, on_class=on_class,
                     on_run=on_run, report=report)
        except (DiffError, BackendError) as exc:
            send({"kind": "refused", "message": str(exc)})
            return
        if report.interrupted:  # Ctrl-C cut a shrink: that class is kept as found, with its bundle
            for found in report.classes.values():
                if found.shrunk is None and found.scenario is not None:
                    bundle(found, found.scenario, found.failure)
        send({"kind": "done", "stopped": report.stopped, "interrupted": report.interrupted})

    return work


def known_kind(name: str, mode: str) -> str:
    """``defect``/``design`` for a known issue's code of the real cache ``mode`` runs (alone or
    diffed against kvcore), else ``new``: a divergence a known issue explains is no news."""
    import importlib

    from kvviz.compare.failure import diffed_backend

    backend = diffed_backend(mode) or mode
    if backend == REFERENCE_BACKEND:
        return "new"
    try:
        issues = importlib.import_module(f"kvviz.backends.{backend}_backend").KNOWN_ISSUES
    except ImportError:  # pragma: no cover - the runs above needed it
        return "new"
    issue = issues.get(name)
    return issue.kind if issue is not None else "new"


def report_table(report, written: dict[str, list[str]], known: dict[str, str]) -> list[str]:
    """The lines ``kvviz fuzz`` prints: a heading, one row per class (in order found), totals.
    ``known`` is each class's :func:`known_kind`, as the worker found it (an engine's backend
    module is not imported here: vLLM takes seconds to import)."""
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
            lines.append(f"  {name.ljust(width)}  {known.get(name, 'new'):<6}  {found.count:>5}  {found.first_run:>9}  "
                         f"{shrunk:>6}  {identity.describe()}")
        for name, paths in written.items():
            lines += [f"  wrote {path}" for path in paths]
        stopped = [f"  {name}: {found.shrunk.stopped}" for name, found in report.classes.items()
                   if found.shrunk is not None and found.shrunk.stopped]
        lines += stopped
    else:
        lines.append("no failure: every run passed" if report.runs else "no failure: no run ended in the time budget")
    if report.stopped:
        lines.append(report.stopped)
    return lines


def _write_classes(report, out_dir: str, session: _Session, scratch: str) -> dict[str, list[str]]:
    """Each shrunk class as ``DIR/<class>.kvs`` and ``DIR/<class>.json`` (the bundle the worker
    made in ``scratch``); a class whose shrink Ctrl-C or the deadline cut, as found; a file
    that exists is left alone and said so."""
    folder = Path(out_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInput(f"--out {out_dir}: cannot create the folder ({exc.strerror or exc})") from None
    written: dict[str, list[str]] = {}
    for name, found in report.classes.items():
        bundle = (Path(scratch) / f"{name}.json", session.bundles.get(name))
        if found.shrunk is not None:
            written[name] = _write_class_files(folder, name, found.shrunk.text, "", bundle)
        elif report.interrupted or name in session.cut:  # its shrink was cut: keep it as found
            why = "interrupted" if report.interrupted else "the time budget ran out"
            written[name] = _write_class_files(folder, name, session.found[name]["failure"]["text"],
                                               f" (as found, not shrunk: {why})", bundle)
    return written


def _write_class_files(folder: Path, name: str, kvs_text: str, kvs_note: str, bundle) -> list[str]:
    """``DIR/<name>.kvs`` holding ``kvs_text`` (its path said with ``kvs_note`` after it) and
    ``DIR/<name>.json``, the bundle the worker made (``bundle``: its file and where it points,
    None when the time ran out first); a file that exists is left alone and said so. What was
    written, one line each. Both are written atomically: all of a file, or nothing."""
    from kvviz.core.limits import MAX_BUNDLE_BYTES
    from kvviz.report.atomic import open_atomic, write_text_atomic

    made, where = bundle
    kvs, json_path = folder / f"{name}.kvs", folder / f"{name}.json"
    paths = []
    for path in (kvs, json_path):
        if path.exists():
            paths.append(f"{path} exists: not overwritten")
            continue
        try:
            if path == kvs:
                write_text_atomic(path, kvs_text)
                paths.append(f"{path}{kvs_note}")
            elif where is None:
                paths.append(f"{path} not written: the time budget ran out before the bundle was made")
            else:
                with open(made, encoding="utf-8") as source, open_atomic(path, max_bytes=MAX_BUNDLE_BYTES) as write:
                    while chunk := source.read(1 << 20):
                        write(chunk)
                paths.append(f"{path}{where}")
        except (OSError, ValueError) as exc:
            raise BadInput(f"{path}: cannot write ({getattr(exc, 'strerror', None) or exc})") from None
    return paths
