# SPDX-License-Identifier: Apache-2.0
"""Every bug-museum demo that fails somewhere, padded with random unrelated ops, shrinks back
to a scenario no larger than the demo and failing the same way.

Where each demo fails: on shortfin 3.9.0 alone (its first invariant violation, in shortfin's
terms: the demos' expect lines speak of kvcore's page numbers) and, for those whose bug
shortfin still has, against kvcore (``kvviz diff``). B6 (fixed after shortfin 3.1.0) is
planted in kvcore for its test. The museum's B1, B2 and B7 fail nowhere today: shortfin 3.9.0
fixed them and kvcore never had them (test_every_other_exhibit_fails_nowhere says so).
"""

from __future__ import annotations

import pytest

from kvviz.core.demos import demo_names, is_lesson, load_demo
from kvviz.compare.failure import DIFF, first_failure
from kvviz.compare.shrink import ShrinkBudget, shrink

from .helpers import assert_one_minimal, padded, plant_tail_leak, require_shortfin

require_shortfin()

VIOLATION = ("violation",)
ON_SHORTFIN = ("bug-b3-empty-publish", "bug-b4-dup-publish", "bug-b4b-root-ref", "bug-b5-ref-leak",
               "bug-b8-republish", "bug-b9-lookup-no-ref", "bug-b10-zero-page-ref", "bug-b12-extend-self",
               "bug-s1-evictable-count", "bug-s2-unlocked-node", "shortfin-b4b-root-ref",
               "shortfin-b9-lookup-no-ref", "shortfin-b10-zero-page-ref")
IN_DIFF = ("bug-b4-dup-publish", "bug-b4b-root-ref", "bug-b5-ref-leak", "bug-b9-lookup-no-ref",
           "bug-b10-zero-page-ref", "bug-s2-unlocked-node", "shortfin-b4b-root-ref", "shortfin-b9-lookup-no-ref",
           "shortfin-b10-zero-page-ref")
# Exhibits of an engine's own cache (tests/engines runs them: their divergence is from the engine, which
# `shrink`'s modes do not drive yet).
ON_ENGINES = ("sglang-split-refresh",)
FAIL_NOWHERE = ("bug-b1-heap-tie", "bug-b2-parent-leaf", "bug-b6-tail-leak", "bug-b7-token-list")
BUDGET = ShrinkBudget(max_runs=4_000)  # a step budget: the same result on any machine


def shrinks_back(name: str, mode: str, sources=None, seed: int = 0) -> None:
    demo = load_demo(name)
    wanted = first_failure(demo, mode, sources=sources).failure
    assert wanted is not None, f"{name} does not fail in {mode}"
    copy = padded(demo, seed)
    assert len(copy.steps) > len(demo.steps) + 10
    found = first_failure(copy, mode, sources=sources).failure
    assert found is not None and found.identity == wanted.identity, "the padding changed the failure"
    result = shrink(copy, mode, budget=BUDGET, sources=sources)
    assert not result.stopped
    assert result.identity == wanted.identity
    assert result.after.ops <= len(demo.steps), result.text
    assert_one_minimal(result.text, mode, wanted.identity, sources)


@pytest.mark.parametrize("name", ON_SHORTFIN)
def test_a_padded_museum_demo_shrinks_back_to_its_violation_on_shortfin(name):
    shrinks_back(name, "shortfin", VIOLATION)


@pytest.mark.parametrize("name", IN_DIFF)
def test_a_padded_museum_demo_shrinks_back_to_its_divergence_from_kvcore(name):
    shrinks_back(name, DIFF)


def test_the_padded_tail_leak_demo_shrinks_back_on_a_kvcore_with_b6_planted(monkeypatch):
    assert first_failure(load_demo("bug-b6-tail-leak"), "kvcore").failure is None  # kvcore is right
    plant_tail_leak(monkeypatch)
    demo = load_demo("bug-b6-tail-leak")
    wanted = first_failure(demo, "kvcore", sources=VIOLATION).failure
    assert wanted.identity.source == "violation" and wanted.identity.detail == "1"  # a page in no place
    result = shrink(padded(demo, 1), "kvcore", budget=BUDGET, sources=VIOLATION)
    assert result.identity == wanted.identity and result.after.ops <= len(demo.steps)
    assert_one_minimal(result.text, "kvcore", wanted.identity, VIOLATION)


def test_every_exhibit_is_covered_here_or_said_to_fail_nowhere():
    museum = {n for n in demo_names() if not is_lesson(n)}
    assert museum == set(ON_SHORTFIN) | set(IN_DIFF) | set(FAIL_NOWHERE) | set(ON_ENGINES)


@pytest.mark.parametrize("name", FAIL_NOWHERE)
def test_every_other_exhibit_fails_nowhere(name):
    demo = load_demo(name)
    for mode, sources in (("kvcore", None), ("shortfin", VIOLATION), (DIFF, None)):
        assert first_failure(demo, mode, sources=sources).failure is None, (name, mode)
