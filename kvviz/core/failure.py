# SPDX-License-Identifier: Apache-2.0
"""What "this scenario fails" means, once, for ``check``, ``diff``, ``compare``, ``shrink``,
``fuzz`` and the bug-report bundles.

A run on one backend fails at a step when, after its op, the invariant checker reports a
violation, an ``expect`` line does not hold, or the op raised a misuse (anything but
``CacheAllocationFailure``, a full cache being a fact of the workload) with no ``expect fail``
at its step: :func:`frame_failures`, in the order ``kvviz check`` lists them. A run on two
sides (``kvviz diff``, ``kvviz compare``) fails at its first divergence: :func:`divergence_failure`.

A failure's :class:`FailureIdentity` is what "the same failure" means while shrinking: its
``source`` (:data:`SOURCES`: violation, expect, error, divergence, crash), a ``detail`` (the
invariant's number, the expect's kind, the error's kind and the op's, the first field that
differs) and its ``cause``: the known issue of the backend (shortfin's B9, SF1, ...) seen last
at or before it, a defect before a difference by design (:func:`known_cause`). Step numbers, page numbers and names are not part of it, so a
scenario cut to three ops that breaks invariant 2 after shortfin's B4b fails as the 300-op one
did; one that breaks invariant 1 instead, or the same invariant with no known issue seen, does
not. :attr:`FailureIdentity.failure_class` is the coarser name ``kvviz fuzz`` counts by (the
cause alone when there is one: every B9 is one class).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kvviz.backends.registry import BACKENDS, DIFF_BACKEND, REFERENCE_BACKEND, make_backend_factory
from kvviz.core.scenario import Scenario
from kvviz.core.session import Frame, ScopedScript, Session

__all__ = ["DIFF", "MODES", "NOTABLE_SUBSTEPS", "SOURCES", "Failure", "FailureIdentity", "RunStopped", "RunVerdict",
           "divergence_failure", "failure_substep", "first_failure", "frame_failures", "known_cause", "mode_label",
           "unexpected_full"]

SOURCES = {
    "violation": "an invariant violation",
    "expect": "a failed expect line",
    "error": "an op that raised with no `expect fail` at its step",
    "divergence": "a divergence between the two caches",
    "crash": "an op that raised something other than a cache error (a crash of the cache)",
}
"""Each kind of failure and how reports name it."""

FULL = "CacheAllocationFailure"
"""The error that is not a failure by itself: the pool did not fit the request."""

DIFF = "diff"
"""The mode that runs kvcore's trie against shortfin's (``kvviz diff``); any other mode is a
backend's name (``kvcore``, ``shortfin``): one run, checked as ``kvviz check`` checks."""


MODES = (*BACKENDS, DIFF)
"""What a scenario can be run on to fail: each backend alone, or ``diff``."""


@dataclass(frozen=True, slots=True)
class FailureIdentity:
    """What makes two failures the same one (see the module docstring)."""

    source: str
    detail: str
    cause: str = ""

    @property
    def failure_class(self) -> str:
        """The class ``kvviz fuzz`` counts by: the known issue when one is seen, else the
        source and detail (``violation-2``, ``divergence-free``), file-name safe."""
        if self.cause:
            return self.cause
        return re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{self.source}-{self.detail}").strip("-")

    def describe(self) -> str:
        """In words: ``invariant 2 broken, after known issue B4b``."""
        what = {"violation": f"invariant {self.detail} broken", "expect": f"an `expect {self.detail}` line fails",
                "error": f"{self.detail} with no `expect fail`",
                "divergence": f"the caches diverge first on {self.detail}",
                "crash": f"the cache crashes: {self.detail}"}.get(self.source, self.detail)
        return what + (f", after known issue {self.cause}" if self.cause else "")

    def to_dict(self) -> dict:
        """JSON-able form."""
        return {"source": self.source, "detail": self.detail, "cause": self.cause, "class": self.failure_class}


@dataclass(frozen=True, slots=True)
class Failure:
    """One failure at a step: its identity, where it is (``step``, the script ``line``, the
    ``text`` of the op or expect line) and the ``message`` ``kvviz check`` prints."""

    identity: FailureIdentity
    step: int
    line: int
    text: str
    message: str

    def located(self, file: str) -> str:
        """``FILE:LINE: step N `TEXT`: MESSAGE``: the line ``kvviz check`` prints."""
        return f"{file}:{self.line}: step {self.step} `{self.text}`: {self.message}"


def unexpected_full(frame: Frame) -> bool:
    """True when ``frame``'s op did not fit (``CacheAllocationFailure``) and no ``expect fail``
    at its step says it would: worth saying, not a failure."""
    return frame.error is not None and frame.error.kind == FULL and not _expected_to_fail(frame)


def _expected_to_fail(frame: Frame) -> bool:
    return any(r.expect.kind == "fail" for r in frame.expects)


def frame_failures(frame: Frame, cause: str = "") -> tuple[Failure, ...]:
    """The failures of one frame, in the order ``kvviz check`` lists them: violations, failed
    expect lines, then an unexpected misuse. ``cause``: the known issue seen so far, if any."""
    if frame.op is None:
        return ()
    i, op = frame.index, frame.op
    found = [Failure(FailureIdentity("violation", str(v.invariant), cause), i, op.line, op.text, str(v))
             for v in frame.violations]
    found += [Failure(FailureIdentity("expect", r.expect.kind, cause), i, r.expect.line, r.expect.text, r.message)
              for r in frame.expect_failures]
    error = frame.error
    if error is not None and error.kind != FULL and not _expected_to_fail(frame):
        found.append(Failure(FailureIdentity("error", f"{error.kind} on {op.kind}", cause), i, op.line, op.text,
                             f"{error.kind} and no `expect fail` says so: {error.message}"))
    return tuple(found)


def known_cause(codes, known_issues: Mapping) -> str:
    """The cause among known-issue ``codes`` (in order seen): the latest defect, else the latest
    difference by design, else ``""``. The latest, because the issue seen closest before a
    failure is the one that made it; an earlier one left the caches agreeing."""
    codes = list(codes)
    defects = [c for c in codes if getattr(known_issues.get(c), "kind", "defect") == "defect"]
    return (defects or codes or [""])[-1]


def divergence_failure(run) -> Failure | None:
    """The failure of a two-sided run (:class:`~kvviz.compare.engine.CompareRun`, a diff's
    included): its first divergence, or None when the sides agree at every step."""
    d = run.divergence
    if d is None:
        return None
    issues = {}
    for side in run.sides:
        issues.update(getattr(side.session.backend, "known_issues", {}) or {})
    cause = known_cause(d.known, issues)
    fields = ", ".join(d.fields)
    return Failure(FailureIdentity("divergence", d.fields[0] if d.fields else "state", cause), d.step, d.line,
                   d.op_text, f"{run.left.name} and {run.right.name} differ in {fields}")


@dataclass(frozen=True)
class RunVerdict:
    """What one run of a scenario in a mode found: its first failure (None: it passed) and
    how many steps ran."""

    failure: Failure | None
    steps_run: int


class RunStopped(Exception):
    """A run stopped before its end because the caller's ``out_of_time`` said so."""

    def __init__(self, steps_run: int, steps: int) -> None:
        self.steps_run, self.steps = steps_run, steps
        super().__init__(f"stopped after {steps_run:,} of {steps:,} ops")


def first_failure(scenario: Scenario, mode: str, *, backend_factory: Callable | None = None,
                  sources: tuple[str, ...] | None = None,
                  out_of_time: Callable[[], bool] | None = None) -> RunVerdict:
    """Run ``scenario`` in ``mode`` (a backend's name, or :data:`DIFF`) and find its first failure.

    On one backend the run stops at the first failing step: nothing after it changes which
    failure is first. ``sources`` keeps only failures of those sources (``("violation",)``:
    the first invariant violation, whatever expect lines fail before it); a crash always counts. Raises :class:`~kvviz.backends.BackendError` (and its
    ``BackendUnavailable``) when the backend cannot run the scenario, and
    :class:`~kvviz.compare.engine.DiffError` for a diff of a cache that is not a trie.
    ``backend_factory`` replaces the mode's (a test's planted kvcore). ``out_of_time`` (the
    caller's clock) is asked before each op of a run on one backend, and :class:`RunStopped`
    raised when it says so: a long scenario cannot outlast a time budget by a whole run.
    """
    if mode == DIFF:
        from kvviz.compare.engine import run_diff

        run = run_diff(scenario)
        return RunVerdict(divergence_failure(run), len(scenario.steps))
    factory = backend_factory if backend_factory is not None else make_backend_factory(mode)
    plan = ScopedScript(scenario, scenario.config.kind)
    session = Session(scenario.config, title=scenario.title, vocab=scenario.vocab, backend_factory=factory)
    backend = session.backend
    issues = getattr(backend, "known_issues", {}) or {}
    seen: list[str] = [f.code for f in backend.take_findings()]
    for index, step in enumerate(scenario.steps):
        if out_of_time is not None and out_of_time():
            raise RunStopped(index, len(scenario.steps))
        try:
            frame = session.apply(step.op, "", plan.expects(step))
        except Exception as exc:  # noqa: BLE001 - a cache that crashes (not a KVCacheError) fails here
            cause = known_cause(seen, issues)
            return RunVerdict(Failure(FailureIdentity("crash", f"{type(exc).__name__} on {step.op.kind}", cause),
                                      index + 1, step.op.line, step.op.text,
                                      f"the cache crashed: {type(exc).__name__}: {exc}"), index + 1)
        seen += [f.code for f in backend.take_findings()]
        failures = [f for f in frame_failures(frame, known_cause(seen, issues))
                    if sources is None or f.identity.source in sources]
        if failures:
            return RunVerdict(failures[0], index + 1)
    return RunVerdict(None, len(scenario.steps))


def mode_label(mode: str) -> str:
    """How reports name a mode: ``on kvcore``, ``on shortfin``, ``kvcore vs shortfin``."""
    return f"{REFERENCE_BACKEND} vs {DIFF_BACKEND} (diff)" if mode == DIFF else f"on {mode}"


NOTABLE_SUBSTEPS = ("fail", "refused", "pop", "evict", "dedup", "free", "take")
"""Sub-step kinds where a failure with no state to check is first seen, most telling first:
a refusal, the victim, an adopted page, pages that move."""


def failure_substep(session: Session, failure: Failure) -> int | None:
    """The first sub-step of ``failure``'s op at which it shows, for a bug report that points
    at the moment (the bad swap, the wrong victim); None when the step has no sub-steps.

    A violation shows at the first sub-step whose state the backend's checker (its whole-state
    check) finds breaking the same invariant; an error, a crash or a divergence at the first
    sub-step of the most telling kind of :data:`NOTABLE_SUBSTEPS` (a divergence whose frame
    breaks an invariant on this side, as a violation does); else at the op's last sub-step."""
    if failure.step < 1 or failure.step >= len(session):
        return None
    try:
        subs = session.substeps(failure.step)
    except RuntimeError:  # a broken cache that does not redo its own op alike: point at the step
        return None
    if not len(subs):
        return None
    number = None
    if failure.identity.source == "violation":
        number = int(failure.identity.detail)
    elif failure.identity.source == "divergence":
        violations = session.frame(failure.step).violations
        number = violations[0].invariant if violations else None
    if number is not None:
        check = getattr(session.backend, "check_full", session.backend.check)
        for k in range(len(subs)):
            if any(v.invariant == number for v in check(subs.state(k))):
                return k
    kinds = [s.kind for s in subs]
    for kind in NOTABLE_SUBSTEPS:
        if kind in kinds:
            return kinds.index(kind)
    return len(subs) - 1
