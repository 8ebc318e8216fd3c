# SPDX-License-Identifier: Apache-2.0
"""`acquire NAME TOKENS priority=N`: parsed, bounded, formatted back, documented, run by the
kvcore backend and carried by bundles."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvviz.report.bundle import open_bundle, write_bundle
from kvviz.core.scenario import (OP_FORMS, SCENARIO_HELP, Op, ScenarioError, format_op, format_scenario, parse_command,
                                  parse_scenario)
from kvviz.core.scenario.values import MAX_PRIORITY
from kvviz.core.session import Session

PINNED = """\
cache trie pages=4 tokens_per_page=4 policy=priority
acquire system 1..8 priority=5
publish system
release system
acquire chat 20..23 extra=0
publish chat
release chat
acquire big 40..47
"""


def _error(text: str) -> ScenarioError:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(text)
    return caught.value


def test_an_acquire_takes_a_priority_in_any_spelling_and_position():
    ops = [step.op for step in parse_scenario(
        "acquire a 1 2 priority=3\nacquire b PRIORITY = 4 5 extra=1\nacquire c 6 priority= 0\n").steps]
    assert [(op.name, op.tokens, op.extra, op.priority) for op in ops] == [
        ("a", (1, 2), 0, 3), ("b", (5,), 1, 4), ("c", (6,), 0, 0)]


def test_the_priority_takes_part_in_equality_and_defaults_to_zero():
    assert Op("acquire", "r1", (1,)) == Op("acquire", "r1", (1,), priority=0)
    assert Op("acquire", "r1", (1,)) != Op("acquire", "r1", (1,), priority=1)


def test_the_canonical_text_writes_a_priority_after_extra_and_omits_zero():
    op = parse_command("acquire r1 priority=7 1..8 extra=2")
    assert op.text == format_op(op) == "acquire r1 1..8 extra=2 priority=7"
    assert format_op(Op("acquire", "r1", (1, 2, 3), priority=0)) == "acquire r1 1..3"


@given(st.integers(0, MAX_PRIORITY), st.integers(0, 3), st.lists(st.integers(0, 50), max_size=6))
def test_an_acquire_with_a_priority_round_trips_through_its_text(priority, extra, tokens):
    op = Op("acquire", "r1", tuple(tokens), extra, priority=priority)
    assert parse_command(format_op(op)) == op
    scenario = parse_scenario(f"cache trie policy=priority\n{format_op(op)}\n")
    assert parse_scenario(format_scenario(scenario)).steps == scenario.steps


@pytest.mark.parametrize("text, column, message", [
    ("acquire r1 1 priority=x", 23, "bad priority 'x'"),
    ("acquire r1 1 priority=-1", 23, "bad priority '-1'"),
    ("acquire r1 1 priority=", 23, "missing priority"),
    ("acquire r1 1 priority=9223372036854775808", 23,
     "priority '9223372036854775808' is too large (at most 9,223,372,036,854,775,807)"),
    ("acquire r1 1 priority=1 priority=2", 25, "priority given twice"),
    ("acquire r1 1 prioity=2", 14, "unknown option 'prioity'; did you mean 'priority'?"),
])
def test_a_bad_priority_is_one_located_error(text, column, message):
    error = _error(text)
    assert (error.line, error.column, error.message) == (1, column, message)
    assert str(error).startswith(f"<input>:1:{column}: {message} (expected: ")


def test_the_largest_priority_is_kvcores():
    assert parse_command(f"acquire r1 1 priority={MAX_PRIORITY}").priority == 2**63 - 1


@pytest.mark.parametrize("line", ["extend r1 + 5 priority=1", "publish r1 priority=1", "release r1 priority=1"])
def test_only_an_acquire_takes_a_priority(line):
    error = _error(f"acquire r1 1..4\n{line}\n")
    assert error.line == 2 and error.message in ("unknown option 'priority'", "unexpected 'priority=1'")


def test_the_help_and_the_op_forms_document_the_priority():
    assert "[priority=N]" in OP_FORMS["acquire"]
    assert "acquire NAME TOKENS [extra=N] [priority=N]" in SCENARIO_HELP
    assert "policy=priority evicts by" in SCENARIO_HELP


def test_the_kvcore_backend_gives_the_cache_the_ops_priority():
    session = Session.from_scenario(parse_scenario(PINNED))
    system = session.frame(2).snapshot
    assert [n.priority for n in system.nodes if n.parent is not None] == [5, 5]
    assert system.allocation_named("system").priority == 5
    # The pinned prompt outlives the newer, idle chat: its priority is higher.
    last = session.last.snapshot
    assert [e.tokens for e in session.last.evictions] == [(20, 21, 22, 23)]
    assert sorted(n.tokens for n in last.nodes if n.parent is not None) == [(1, 2, 3, 4), (5, 6, 7, 8)]


def test_without_the_priority_the_same_script_evicts_the_system_prompt():
    """The test above can fail: the priorities, not the policy alone, decide."""
    session = Session.from_scenario(parse_scenario(PINNED.replace(" priority=5", "")))
    assert [e.tokens for e in session.last.evictions] == [(5, 6, 7, 8)]  # the prompt's leaf, the oldest


def test_a_bundle_of_a_scenario_with_priorities_replays_them(tmp_path):
    session = Session.from_scenario(parse_scenario(PINNED))
    output = tmp_path / "pinned.json"
    write_bundle(session, len(session) - 1, output)
    assert "acquire system 1..8 priority=5" in json.loads(output.read_text(encoding="utf-8"))["script"]
    opened = open_bundle(output)
    assert opened.divergence is None
    assert opened.session.frame(2).snapshot == session.frame(2).snapshot
    assert [step.op for step in opened.session.steps] == [step.op for step in session.steps]
