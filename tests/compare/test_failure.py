# SPDX-License-Identifier: Apache-2.0
"""The one definition of failure: what fails in a frame, identities, causes, the moment."""

from __future__ import annotations

from types import SimpleNamespace

from kvcore import Violation
from kvviz.compare.failure import failure_substep, first_failure
from kvviz.core.failure import Failure, FailureIdentity, frame_failures, known_cause, unexpected_full
from kvviz.core.scenario import parse_scenario
from kvviz.core.session import Session

SCRIPT = """cache trie pages=2 tokens_per_page=2
acquire a 1 2
publish a 1 3
acquire b 1..9
acquire c 5 6
expect free 1
expect pages c 0
"""


def frames(text):
    session = Session.from_scenario(parse_scenario(text))
    return [session.frame(i) for i in range(len(session))]


def test_a_misuse_fails_a_full_pool_is_only_noted_and_failed_expects_fail():
    _, acquire, publish, full, last = frames(SCRIPT)
    assert frame_failures(acquire) == ()
    (misuse,) = frame_failures(publish)
    assert misuse.identity == FailureIdentity("error", "InvalidOperation on publish")
    assert misuse.located("f.kvs").startswith("f.kvs:3: step 2 `publish a 1 3`: InvalidOperation and no `expect fail`")
    assert frame_failures(full) == () and unexpected_full(full)
    assert [f.identity.detail for f in frame_failures(last)] == ["free", "pages"]
    assert [f.line for f in frame_failures(last)] == [6, 7]


def test_identity_ignores_steps_pages_and_names_but_not_the_cause():
    one = Failure(FailureIdentity("violation", "2", "B4b"), 4, 9, "publish Y", "node 1 ...")
    other = Failure(FailureIdentity("violation", "2", "B4b"), 3, 5, "publish b", "node 7 ...")
    assert one.identity == other.identity
    assert FailureIdentity("violation", "2", "B4b") != FailureIdentity("violation", "2")
    assert FailureIdentity("violation", "2", "B4b").failure_class == "B4b"
    assert FailureIdentity("error", "InvalidOperation on publish").failure_class == "error-InvalidOperation-on-publish"


def test_the_cause_is_the_latest_defect_else_the_latest_design_difference():
    issues = {"D1": SimpleNamespace(kind="design"), "D3": SimpleNamespace(kind="design"),
              "B9": SimpleNamespace(kind="defect"), "SF1": SimpleNamespace(kind="defect")}
    assert known_cause(["SF1", "D1", "B9", "D3"], issues) == "B9"
    assert known_cause(["D1", "D3"], issues) == "D3"
    assert known_cause([], issues) == ""


def test_sources_keep_only_the_failures_asked_for():
    scenario = parse_scenario(SCRIPT)
    assert first_failure(scenario, "kvcore").failure.identity.source == "error"
    assert first_failure(scenario, "kvcore", sources=("expect",)).failure.step == 4
    assert first_failure(scenario, "kvcore", sources=("violation",)).failure is None


class _Subs(list):
    """An op's sub-steps as failure_substep reads them: kinds, and a state after each (here
    just its index, which the fake checker below reads)."""

    def __init__(self, kinds):
        super().__init__(SimpleNamespace(kind=k) for k in kinds)

    def state(self, k):
        return k


class _Session:
    """A session of ``frames`` frames whose step-1 op has sub-steps ``kinds``; the backend's
    checker finds invariant 2 broken in every state from sub-step ``broken_from`` on."""

    def __init__(self, kinds, broken_from, frames=2):
        self.frames = frames
        self.subs = _Subs(kinds)

        def check(state):
            return [Violation(2, "x")] if state >= broken_from else []

        self.backend = SimpleNamespace(check_full=check, check=check)

    def __len__(self):
        return self.frames

    def substeps(self, step):
        return self.subs

    def frame(self, step):
        return SimpleNamespace(violations=())


def test_the_bundle_points_at_the_first_substep_whose_state_breaks_the_same_invariant():
    session = _Session(["start", "take", "pop", "swap", "evict"], broken_from=3)
    violation = Failure(FailureIdentity("violation", "2"), 1, 2, "acquire a", "")
    assert failure_substep(session, violation) == 3
    other = Failure(FailureIdentity("violation", "5"), 1, 2, "acquire a", "")
    assert failure_substep(session, other) == 2  # never broken: the most telling kind (the pop: the victim)
    error = Failure(FailureIdentity("error", "InvalidOperation on publish"), 1, 2, "publish a", "")
    assert failure_substep(session, error) == 2
    assert failure_substep(_Session(["start"], 0, frames=1), error) is None  # no step 1: no moment


def test_compare_and_diff_fail_at_their_first_divergence_with_one_identity():
    from kvviz.core.demos import load_demo
    from kvviz.compare.engine import SideSpec, run_compare
    from kvviz.compare.failure import divergence_failure

    policies = load_demo("policies")
    run = run_compare(policies, SideSpec("trie", "lru"), SideSpec("trie", "lfu"))
    failure = divergence_failure(run)
    assert failure.step == run.divergence.step and failure.identity.source == "divergence"
    assert failure.identity.detail == run.divergence.fields[0] and failure.identity.cause == ""
    same = run_compare(policies, SideSpec("trie", "lru"), SideSpec("trie", "lru"))
    assert divergence_failure(same) is None


def test_shrinks_keep_choices_are_the_failure_sources():
    from kvviz.compare.shrink_command import KEEP_SOURCES
    from kvviz.core.failure import SOURCES

    assert KEEP_SOURCES == tuple(SOURCES)
