# SPDX-License-Identifier: Apache-2.0
"""``kvviz shrink``: a failing scenario cut to the smallest one that fails the same way.

Exit codes: 1 when the scenario fails (the minimal one is printed: it is a bug report), 0 when
it does not fail (said on stderr: nothing to shrink), 2 for bad input (not a scenario, bad
options, a mode that cannot run it; a backend that is not installed says how to install it).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from kvviz.backends.registry import BACKENDS, BackendError
from kvviz.commands import BadInput, load_file_or_demo, refused_scenario

MAX_SECONDS = 24 * 3600
"""The longest ``--max-seconds`` accepted (a day): a bound, not a promise."""

KEEP_SOURCES = ("violation", "expect", "error", "divergence", "crash")
"""``--keep``'s choices: :data:`kvviz.core.failure.SOURCES`, written out so that ``kvviz -h`` does not
import the session (a test holds the two equal)."""


def mode_options(f):
    """``--backend B`` / ``--diff``: what the scenario runs on (shared by shrink and fuzz)."""
    f = click.option("--diff", "diff_mode", is_flag=True,
                     help="Run kvcore's trie against shortfin's (kvviz diff): a failure is the first divergence.")(f)
    f = click.option("--backend", type=click.Choice(BACKENDS), default=None,
                     help="Run on this cache alone (default kvcore): a failure is what kvviz check reports.")(f)
    return f


def chosen_mode(backend: str | None, diff_mode: bool) -> str:
    """The mode the options name; both is bad input."""
    from kvviz.compare.failure import DIFF

    if diff_mode and backend is not None:
        raise BadInput("--backend and --diff exclude each other: a diff runs kvcore and shortfin both")
    return DIFF if diff_mode else (backend or "kvcore")


def check_seconds(seconds: float) -> float:
    """``--max-seconds`` within (0, a day]."""
    if not 0 < seconds <= MAX_SECONDS:
        raise BadInput(f"--max-seconds {seconds:g}: expected a number of seconds above 0 and at most {MAX_SECONDS:,}")
    return seconds


def deadline(seconds: float):
    """``out_of_time()`` for a budget of ``seconds``: the one clock these commands read."""
    end = time.monotonic() + seconds
    return lambda: time.monotonic() >= end


class Progress:
    """One status line on stderr, rewritten in place, only when stderr is a terminal."""

    def __init__(self, what: str):
        self.what = what
        self.shown = _isatty(sys.stderr)
        self.last = ""

    def __call__(self, text: str) -> None:
        """Show ``text`` as the status (when it changed)."""
        if not self.shown or text == self.last:
            return
        self.last = text
        sys.stderr.write(f"\r\x1b[2K{self.what}: {text}")
        sys.stderr.flush()

    def done(self) -> None:
        """Clear the status line, before the command prints its output."""
        if self.shown and self.last:
            sys.stderr.write("\r\x1b[2K")
            sys.stderr.flush()


def _isatty(stream) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError):
        return False


def _bar(runs: int, ops: int, start_ops: int, width: int = 24) -> str:
    done = 0 if start_ops <= 1 else (start_ops - ops) / (start_ops - 1)
    filled = int(round(done * width))
    return f"[{'#' * filled}{'.' * (width - filled)}] {ops} of {start_ops} ops left, {runs:,} runs"


@click.command()
@click.argument("file", type=click.Path(dir_okay=False))
@mode_options
@click.option("-o", "--output", default=None, type=click.Path(dir_okay=False),
              help="Also write the minimal scenario to this .kvs file.")
@click.option("--bundle", "bundle_path", default=None, type=click.Path(dir_okay=False),
              help="Also write the bug-report bundle (.json) of the failing step, at the first sub-step "
                   "where the failure shows.")
@click.option("--keep", type=click.Choice(KEEP_SOURCES), default=None,
              help="Keep the first failure of this kind (e.g. violation: ignore expect lines that fail "
                   "before the first invariant violation). Default: the first failure of any kind.")
@click.option("--max-seconds", type=float, default=60.0, show_default=True,
              help="Time budget for everything (the first run, the search, the check of the result "
                   "and the bundle): the search stops in time to print the smallest failing scenario "
                   "found so far; a scenario whose first run does not fit is refused as too big.")
@click.option("--max-runs", type=click.IntRange(1, 10_000_000), default=200_000, show_default=True,
              help="Budget of candidate runs (deterministic: the same budget gives the same output).")
def shrink(file: str, backend: str | None, diff_mode: bool, output: str | None, bundle_path: str | None,
           keep: str | None, max_seconds: float, max_runs: int) -> None:
    """Cut a failing scenario (a file or a demo name) to a minimal one that fails the same way.

    "The same way": the first failure's kind (an invariant and its number, an expect line's
    kind, an error kind, a divergence's first field) and the known issue seen before it.
    Drops ops (delta debugging), tokens and pages of tokens, lowers extra=, the pool and the
    page size, lowers the pool together with the ops that fill it, renames allocations a, b,
    ... and drops narration and other expect lines, until a whole round changes nothing: the
    result is 1-minimal for its ops and its pool and page size.
    Prints the minimal scenario, what fails in it and where, and the sizes before and after.
    Exit 1 when it fails, 0 when it does not (nothing to shrink), 2 for bad input.
    """
    from kvviz.compare.engine import DiffError
    from kvviz.compare.shrink import NotFailing, ShrinkBudget, TooBigToShrink, report_lines
    from kvviz.compare.shrink import shrink as shrink_scenario

    started = time.monotonic()  # the budget covers reading the scenario too
    mode = chosen_mode(backend, diff_mode)
    check_seconds(max_seconds)
    scenario = load_file_or_demo(file)
    inputs = [scenario.path or file]
    _check_outputs(output, bundle_path, inputs)
    progress = Progress("shrinking")
    start_ops = len(scenario.steps)
    budget = ShrinkBudget(max_runs=max_runs, seconds=max_seconds, clock=time.monotonic,
                          runs_after=1 + (bundle_path is not None), started=started)
    try:
        result = shrink_scenario(scenario, mode, budget=budget, sources=(keep,) if keep else None,
                                 on_progress=lambda runs, ops: progress(_bar(runs, ops, start_ops)))
    except NotFailing as exc:
        progress.done()
        click.echo(f"kvviz: {exc}", err=True)
        sys.exit(0)
    except TooBigToShrink as exc:
        progress.done()
        raise BadInput(str(exc)) from None
    except (DiffError, BackendError) as exc:
        progress.done()
        raise refused_scenario(scenario, exc) from None
    progress.done()
    click.echo(result.text, nl=False)
    click.echo("")
    for line in report_lines(result):
        click.echo(f"# {line}")
    written = _write(result, output, bundle_path, inputs)
    for line in written:
        click.echo(f"# {line}")
    sys.exit(1)


def _check_outputs(output: str | None, bundle_path: str | None, inputs) -> None:
    """Bad input before any work: wrong suffixes, an output that is the input, two outputs
    that are one file, an output that cannot be written (a missing or read-only folder)."""
    from kvviz.report.atomic import check_writable, refuse_overwriting_inputs

    if output is not None and Path(output).suffix.lower() != ".kvs":
        raise BadInput(f"-o {output}: the minimal scenario is a .kvs file (give a name ending in .kvs)")
    if bundle_path is not None and Path(bundle_path).suffix.lower() != ".json":
        raise BadInput(f"--bundle {bundle_path}: a bug-report bundle is a .json file")
    for given in (output, bundle_path):
        if given is None:
            continue
        try:
            refuse_overwriting_inputs(given, inputs)
        except ValueError as exc:
            raise BadInput(str(exc)) from None
        try:
            check_writable(given)
        except OSError as exc:
            raise BadInput(f"{given}: cannot be written ({exc.strerror or exc}); nothing was shrunk") from None
    if output is not None and bundle_path is not None and Path(output).resolve() == Path(bundle_path).resolve():
        raise BadInput(f"-o {output} and --bundle {bundle_path} are one file: name two")


def _write(result, output: str | None, bundle_path: str | None, inputs) -> list[str]:
    """Write the -o scenario and the --bundle; the lines saying what was written."""
    from kvviz.report.atomic import write_text_atomic

    lines = []
    if output is not None:
        try:
            write_text_atomic(output, result.text, inputs=inputs)
        except (OSError, ValueError) as exc:
            raise BadInput(f"{output}: cannot write the minimal scenario ({getattr(exc, 'strerror', None) or exc})") \
                from None
        lines.append(f"wrote {output}")
    if bundle_path is not None:
        lines.append(write_failure_bundle(result.minimal, result.mode, result.failure, bundle_path, inputs))
    return lines


def write_failure_bundle(scenario, mode: str, failure, path: str, inputs) -> str:
    """Write the bundle of ``failure``'s step of ``scenario`` (a diff's on the shortfin side),
    at the first sub-step where it shows; the line saying what was written."""
    from kvviz.report.bundle import write_bundle
    from kvviz.compare.failure import DIFF, failure_substep
    from kvviz.commands import make_session

    session = make_session(scenario, None, "shortfin" if mode == DIFF else mode)
    substep = failure_substep(session, failure)
    try:
        write_bundle(session, failure.step, path, inputs=inputs, substep=substep)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    except OSError as exc:
        raise BadInput(f"{path}: cannot write the bundle ({exc.strerror or exc})") from None
    where = f"step {failure.step}"
    if substep is not None:  # counted from 1, as the UI and `kvviz export --substep` count
        subs = session.substeps(failure.step)
        where += f", sub-step {substep + 1}/{len(subs)} {subs[substep].kind}"
    return f"wrote {path} ({where})"
