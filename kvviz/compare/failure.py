# SPDX-License-Identifier: Apache-2.0
"""A scenario's first failure in a mode: on one backend, or two sides diffed (``shrink``,
``fuzz``, ``diff``). What a failure *is* (:class:`~kvviz.core.failure.Failure`, its identity,
a frame's failures) is the kernel's, shared with ``check``; running a scenario to find the
first one, and a diff's divergence as a failure, are this feature's."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kvviz.backends.registry import BACKENDS, DIFF_BACKEND, REFERENCE_BACKEND, make_backend_factory
from kvviz.compare.engine import run_diff
from kvviz.core.failure import Failure, FailureIdentity, frame_failures, known_cause
from kvviz.core.scenario import Scenario
from kvviz.core.session import ScopedScript, Session

__all__ = ["DIFF", "MODES", "NOTABLE_SUBSTEPS", "RunStopped", "RunVerdict", "diff_mode", "diffed_backend",
           "divergence_failure", "failure_substep", "first_failure", "mode_label"]

DIFF = "diff"
"""The mode that runs kvcore's trie against shortfin's (``kvviz diff``); ``diff:vllm`` and
``diff:sglang`` (:func:`diff_mode`) run kvcore against another backend as ``kvviz diff
--backend`` does. Any other mode is a backend's name (``kvcore``, ``shortfin``): one run,
checked as ``kvviz check`` checks."""


def diff_mode(backend: str = DIFF_BACKEND) -> str:
    """The mode that diffs kvcore against ``backend``: :data:`DIFF` for shortfin, else
    ``diff:BACKEND``."""
    return DIFF if backend == DIFF_BACKEND else f"{DIFF}:{backend}"


def diffed_backend(mode: str) -> str | None:
    """The backend a diff mode runs against kvcore (None for a mode on one backend)."""
    if mode == DIFF:
        return DIFF_BACKEND
    head, sep, backend = mode.partition(":")
    return backend if head == DIFF and sep else None


MODES = (*BACKENDS, DIFF, *(diff_mode(b) for b in BACKENDS if b not in (REFERENCE_BACKEND, DIFF_BACKEND)))
"""What a scenario can be run on to fail: each backend alone, or diffed against kvcore."""


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
    :class:`~kvviz.compare.engine.DiffError` for a diff that cannot run the scenario's cache.
    ``backend_factory`` replaces the mode's (a test's planted kvcore). ``out_of_time`` (the
    caller's clock) is asked before each op of a run on one backend, and :class:`RunStopped`
    raised when it says so: a long scenario cannot outlast a time budget by a whole run.
    """
    against = diffed_backend(mode)
    if against is not None:
        run = run_diff(scenario, against)
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
    """How reports name a mode: ``on kvcore``, ``on shortfin``, ``kvcore vs shortfin (diff)``."""
    against = diffed_backend(mode)
    return f"{REFERENCE_BACKEND} vs {against} (diff)" if against is not None else f"on {mode}"


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
