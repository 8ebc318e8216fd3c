# SPDX-License-Identifier: Apache-2.0
"""The policy demos tell the truth about the policies they are not run under.

`policies` runs under lru (its header) and its expects check lru; its narration says what lfu,
fifo and slru evict instead. Here the same script runs under each of them and the narration's
claims (read from its text) are held to what kvcore did. `priority` runs under the priority
policy; under lru its expects must fail, or they would not prove the point.
"""

from __future__ import annotations

import dataclasses
import re

import pytest

from kvviz.core.demos import LESSONS, demo_names, load_demo
from kvviz.core.session import Session

NAMED = ("lru", "lfu", "fifo", "slru")


def run(name: str, policy: str | None = None) -> Session:
    scenario = load_demo(name)
    if policy is not None:
        scenario = dataclasses.replace(scenario, config=dataclasses.replace(scenario.config, policy=policy))
    return Session.from_scenario(scenario)


def _step_of(session: Session, op_name: str) -> int:
    return next(i for i in range(1, len(session)) if session.frame(i).op.name == op_name)


def _claimed_victims(session: Session, step: int) -> dict[str, int]:
    """policy -> the page the narration of ``step`` says it evicts ("lfu would evict the poem, page 3")."""
    claims = {}
    for paragraph in session.frame(step).story.split("\n"):
        match = re.match(r"(\w+) (?:would )?evicts? [^,]+, page (\d+)", paragraph)
        if match:
            claims[match[1]] = int(match[2])
    return claims


def test_the_policies_demo_runs_under_lru_and_narrates_all_four():
    session = run("policies")
    assert session.config.policy == "lru"
    step = _step_of(session, "new")
    assert set(_claimed_victims(session, step)) == set(NAMED)


@pytest.mark.parametrize("policy", NAMED)
def test_each_policy_evicts_the_page_the_narration_says(policy):
    claimed = _claimed_victims(run("policies"), _step_of(run("policies"), "new"))[policy]
    session = run("policies", policy)
    frame = session.frame(_step_of(session, "new"))
    assert [e.page for e in frame.evictions] == [claimed]
    assert not frame.violations and not session.last.violations


def test_the_four_policies_choose_four_different_victims():
    victims = {p: run("policies", p).frame(_step_of(run("policies"), "new")).evictions[0].page for p in NAMED}
    assert len(set(victims.values())) == 4, victims


@pytest.mark.parametrize("policy", NAMED)
def test_the_popular_page_comes_back_a_hit_except_under_lru(policy):
    session = run("policies", policy)
    back = session.frame(_step_of(session, "faq4")).snapshot.allocation_named("faq4")
    assert back.hit_tokens == (0 if policy == "lru" else 4)


def test_the_priority_demo_pins_the_system_prompt():
    session = run("priority")
    assert session.config.policy == "priority"
    assert session.frame(_step_of(session, "chat")).snapshot.allocation_named("chat").hit_tokens == 8
    prompt = [n for n in session.last.snapshot.nodes if n.parent is not None and n.priority == 10]
    assert len(prompt) == 2


def test_the_priority_demos_expects_fail_under_lru():
    session = run("priority", "lru")
    failed = {session.frame(i).op.name for i in range(1, len(session)) if session.frame(i).expect_failures}
    assert {"big", "chat"} <= failed
    chat = session.frame(_step_of(session, "chat"))
    assert "expected hit 8, got hit 0" in [r.message for r in chat.expect_failures]


def test_the_policy_lessons_follow_the_lru_lessons_in_the_course():
    names = demo_names()
    assert names.index("heap-ties") < names.index("policies") < names.index("priority") < names.index("extend")
    assert {"policies", "priority"} <= set(LESSONS)
