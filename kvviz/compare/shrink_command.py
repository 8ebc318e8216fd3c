# SPDX-License-Identifier: Apache-2.0
"""``kvviz shrink``: a failing scenario cut to the smallest one that fails the same way.

Exit codes: 1 when the scenario fails (the minimal one is printed: it is a bug report), 0 when
it does not fail (said on stderr: nothing to shrink), 2 for bad input (not a scenario, bad
options, a mode that cannot run it; a backend that is not installed says how to install it).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

import click

from kvviz.backends.registry import BACKENDS, DIFF_BACKEND, ENGINE_KINDS, REFERENCE_BACKEND, BackendError
from kvviz.commands import BadInput, file_or_demo_path, load_file_or_demo, refused_scenario

MAX_SECONDS = 24 * 3600
"""The longest ``--max-seconds`` accepted (a day): a bound, not a promise."""

KEEP_SOURCES = ("violation", "expect", "error", "divergence", "crash")
"""``--keep``'s choices: :data:`kvviz.core.failure.SOURCES`, written out so that ``kvviz -h`` does not
import the session (a test holds the two equal)."""


def mode_options(f):
    """``--backend B`` / ``--diff [--backend B]``: what the scenario runs on (shared by shrink
    and fuzz). ``--diff --backend vllm`` reads as ``kvviz diff FILE --backend vllm``: one
    option names the real cache either way."""
    f = click.option("--diff", "diff_mode", is_flag=True,
                     help="Diff kvcore against a real cache, as kvviz diff does: a failure is the first divergence. "
                          "The cache is --backend's: shortfin (the default) or sglang against kvcore's trie, vllm "
                          "against kvcore's hash design.")(f)
    f = click.option("--backend", type=click.Choice(BACKENDS), default=None,
                     help="Run on this cache alone (default kvcore): a failure is what kvviz check reports. "
                          "With --diff: the cache diffed against kvcore (as kvviz diff --backend).")(f)
    return f


def chosen_mode(backend: str | None, diff_mode: bool) -> str:
    """The mode the options name; ``--diff --backend kvcore`` is bad input."""
    from kvviz.compare.failure import diff_mode as diff_against

    if not diff_mode:
        return backend or REFERENCE_BACKEND
    if backend == REFERENCE_BACKEND:
        others = [b for b in BACKENDS if b != REFERENCE_BACKEND]
        raise BadInput(f"--diff --backend {backend}: a diff compares {REFERENCE_BACKEND} with another backend "
                       f"(expected --backend {', '.join(others[:-1])} or {others[-1]})")
    return diff_against(backend or DIFF_BACKEND)


def check_seconds(seconds: float) -> float:
    """``--max-seconds`` within (0, a day]."""
    if not 0 < seconds <= MAX_SECONDS:
        raise BadInput(f"--max-seconds {seconds:g}: expected a number of seconds above 0 and at most {MAX_SECONDS:,}")
    return seconds


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
                   "and the bundle), kept even when one op or one diff run alone outlasts it: the work "
                   "runs in a worker process stopped at the deadline, and the smallest failing scenario "
                   "found so far is printed; a scenario whose first run does not fit is refused as too big.")
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
    from kvviz.compare.bounded import run_until
    from kvviz.compare.shrink import ShrinkBudget, report_lines

    started = time.monotonic()  # the budget covers reading the scenario too: the worker reads it
    mode = chosen_mode(backend, diff_mode)
    check_seconds(max_seconds)
    source = file_or_demo_path(file)
    inputs = [source]
    _check_outputs(output, bundle_path, inputs)
    end = started + max_seconds - min(max_seconds / 10, 0.5)  # the rest: print, write -o, place the bundle
    budget = ShrinkBudget(max_runs=max_runs, seconds=max_seconds, clock=time.monotonic,
                          runs_after=1 + (bundle_path is not None), started=started,
                          margin=max_seconds - 0.9 * (end - started))
    progress = Progress("shrinking")
    scratch = tempfile.mkdtemp(prefix="kvviz-shrink-") if bundle_path is not None else None
    try:
        found = _Found(progress)
        work = _shrink_work(file, mode, budget, (keep,) if keep else None, bundle_path, scratch, inputs)
        outcome = run_until(work, end, found)
        progress.done()
        if outcome.interrupted or found.interrupted:
            raise KeyboardInterrupt
        result = _shrink_result(source, mode, max_seconds, found)
        click.echo(result.text, nl=False)
        click.echo("")
        for line in report_lines(result):
            click.echo(f"# {line}")
        written = _write(result, output, inputs)
        if bundle_path is not None:
            written.append(_place_bundle(found, scratch, bundle_path, inputs))
    finally:
        progress.done()
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    for line in written:
        click.echo(f"# {line}")
    sys.exit(1)


class _Found:
    """What the shrink's worker sent: that it read the scenario, progress (drawn), the best
    scenario so far, the result, the bundle's line, or why there is none."""

    def __init__(self, progress: Progress):
        self.progress = progress
        self.start_ops = self.runs = 0
        self.loaded = self.interrupted = False
        self.best = self.result = self.bundle = self.refused = None

    def __call__(self, message: dict) -> None:
        kind = message["kind"]
        if kind == "loaded":
            self.loaded, self.start_ops = True, message["ops"]
        elif kind == "progress":
            self.runs = message["runs"]
            self.progress(_bar(message["runs"], message["ops"], self.start_ops))
        elif kind == "best":
            self.best = message
        elif kind == "result":
            self.result = message
        elif kind == "bundle":
            self.bundle = message["line"]
        elif kind == "interrupted":
            self.interrupted = True
        else:  # not-failing, bad-input, bundle-refused: the one line to say
            self.refused = message


def _shrink_work(file: str, mode: str, budget, sources, bundle_path: str | None, scratch: str | None, inputs):
    """The shrink as the worker process runs it, reading the scenario first (a 5 MB file takes
    seconds), telling ``send`` what it finds (see :class:`_Found`); the bundle is written in
    ``scratch``, for the parent to put in place."""
    from kvviz.compare.engine import DiffError
    from kvviz.compare.shrink import NotFailing, TooBigToShrink
    from kvviz.compare.shrink import shrink as shrink_scenario

    def work(send) -> None:
        scenario = None
        try:
            scenario = load_file_or_demo(file)
            send({"kind": "loaded", "ops": len(scenario.steps)})
            result = shrink_scenario(scenario, mode, budget=budget, sources=sources,
                                     on_progress=lambda runs, ops: send({"kind": "progress", "runs": runs, "ops": ops}),
                                     on_better=lambda best: send({"kind": "best", **best.payload()}))
        except KeyboardInterrupt:
            send({"kind": "interrupted"})
            return
        except NotFailing as exc:
            send({"kind": "not-failing", "message": str(exc)})
            return
        except (BadInput, TooBigToShrink) as exc:
            send({"kind": "bad-input", "message": str(exc), "more": list(getattr(exc, "more", ()))})
            return
        except (DiffError, BackendError) as exc:
            send({"kind": "bad-input", "message": str(refused_scenario(scenario, exc)), "more": []})
            return
        send({"kind": "result", **result.payload()})
        if bundle_path is None:
            return
        scratch_path = str(Path(scratch) / Path(bundle_path).name)
        try:
            line = write_failure_bundle(result.minimal, mode, result.failure, scratch_path, inputs)
        except BadInput as exc:
            send({"kind": "bundle-refused", "message": str(exc).replace(scratch_path, bundle_path)})
            return
        send({"kind": "bundle", "line": line.replace(scratch_path, bundle_path)})

    return work


STOPPED_MID_RUN = ("stopped early: the time budget ran out in the middle of a run; this is the smallest failing "
                   "scenario found so far")
"""What a shrink killed at its deadline says after the best scenario its worker had sent."""


def _shrink_result(source: str, mode: str, max_seconds: float, found: _Found):
    """The result to print from what the worker sent; bad input (or exit 0) when it sent why
    there is none, or nothing to print (reading the scenario, or its first run, did not end in
    time)."""
    from kvviz.compare.shrink import result_from_payload

    refused = found.refused
    if found.result is not None:
        return result_from_payload(mode, found.result)
    if refused is not None and refused["kind"] == "not-failing":
        click.echo(f"kvviz: {refused['message']}", err=True)
        sys.exit(0)
    if refused is not None:
        raise BadInput(refused["message"], tuple(refused.get("more", ())))
    if found.best is not None:
        return result_from_payload(mode, {**found.best, "runs": max(found.runs, found.best["runs"])},
                                   stopped=STOPPED_MID_RUN)
    what = "its first run" if found.loaded else "reading it"
    raise BadInput(f"{source}: too big to shrink in {max_seconds:g} s: {what} did not end in that time "
                   f"(give --max-seconds more)")


def _place_bundle(found: _Found, scratch: str, bundle_path: str, inputs) -> str:
    """Put the bundle the worker wrote in ``scratch`` at ``bundle_path`` (atomically: all of it
    or nothing); the line saying so, or that the time ran out before it was made."""
    from kvviz.core.limits import MAX_BUNDLE_BYTES
    from kvviz.report.atomic import open_atomic

    if found.bundle is None:
        if found.refused is not None and found.refused["kind"] == "bundle-refused":
            raise BadInput(found.refused["message"])
        return f"{bundle_path} not written: the time budget ran out before the bundle was made (give --max-seconds more)"
    made = Path(scratch) / Path(bundle_path).name
    try:
        with open(made, encoding="utf-8") as source, open_atomic(bundle_path, inputs=inputs,
                                                                 max_bytes=MAX_BUNDLE_BYTES) as write:
            while chunk := source.read(1 << 20):
                write(chunk)
    except (OSError, ValueError) as exc:
        raise BadInput(f"{bundle_path}: cannot write the bundle ({getattr(exc, 'strerror', None) or exc})") from None
    return found.bundle


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


def _write(result, output: str | None, inputs) -> list[str]:
    """Write the -o scenario; the lines saying what was written."""
    from kvviz.report.atomic import write_text_atomic

    lines = []
    if output is not None:
        try:
            write_text_atomic(output, result.text, inputs=inputs)
        except (OSError, ValueError) as exc:
            raise BadInput(f"{output}: cannot write the minimal scenario ({getattr(exc, 'strerror', None) or exc})") \
                from None
        lines.append(f"wrote {output}")
    return lines


def write_failure_bundle(scenario, mode: str, failure, path: str, inputs) -> str:
    """Write the bundle of ``failure``'s step of ``scenario`` (a diff's on the real cache's side),
    at the first sub-step where it shows; the line saying what was written."""
    from kvviz.report.bundle import write_bundle
    from kvviz.compare.failure import diffed_backend, failure_substep
    from kvviz.commands import make_session

    against = diffed_backend(mode)
    if against is None:
        session = make_session(scenario, None, mode)
    else:  # the real cache's side, of the design kvviz diff runs it on (vLLM: the hash design)
        session = make_session(scenario, None if against == DIFF_BACKEND else ENGINE_KINDS[against], against)
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
