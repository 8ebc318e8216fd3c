# SPDX-License-Identifier: Apache-2.0
"""What "this scenario fails" means, once, for ``check``, ``diff``, ``compare``, ``shrink``,
``fuzz`` and the bug-report bundles.

A run on one backend fails at a step when, after its op, the invariant checker reports a
violation, an ``expect`` line does not hold, or the op raised a misuse (anything but
``CacheAllocationFailure``, a full cache being a fact of the workload) with no ``expect fail``
at its step: :func:`frame_failures`, in the order ``kvviz check`` lists them. A run on two
sides (``kvviz diff``, ``kvviz compare``) fails at its first divergence
(:func:`kvviz.compare.failure.divergence_failure`, beside the runs that find a first failure).

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

from kvviz.core.session import Frame

__all__ = ["SOURCES", "Failure", "FailureIdentity", "frame_failures", "known_cause", "unexpected_full"]

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
