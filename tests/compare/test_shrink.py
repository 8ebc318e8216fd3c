# SPDX-License-Identifier: Apache-2.0
"""The shrinker on kvcore alone: ddmin, what is kept, 1-minimality, budgets, determinism."""

from __future__ import annotations

import pytest

from kvviz.compare.failure import first_failure
from kvviz.core.demos import demo_names, load_demo
from kvviz.compare.fuzz import random_scenario, run_rng
from kvviz.core.scenario import parse_scenario
from kvviz.compare.shrink import NotFailing, ShrinkBudget, ddmin, rename_allocations, scenario_size, shrink

from .helpers import assert_one_minimal, plant_tail_leak

# A failing expect on kvcore: the trie shares the first page, so `free` after c is 2, not 1.
EXPECT_FAILS = """title: sharing, with a wrong expect and chatter
description: A long story about nothing in particular.
cache trie pages=6 tokens_per_page=2 policy=lfu

> A request.
acquire first 1 2 3 4 extra=3 priority=7
expect pages first 0 1 2 3
publish first
acquire other 9 9
release other
> Another one, sharing the prefix.
acquire second 1 2 3 4 5 6
expect hit second 4
publish second
acquire third 7 8
expect free 1
release first
"""


def test_ddmin_finds_a_one_minimal_subset():
    calls = []

    def needs_3_and_7(items):
        calls.append(len(items))
        return 3 in items and 7 in items

    assert ddmin(range(20), needs_3_and_7) == [3, 7]
    assert len(calls) < 60  # not every subset


def test_ddmin_can_remove_everything_when_asked():
    assert ddmin([1, 2, 3], lambda items: True, allow_empty=True) == []
    assert ddmin([1, 2, 3], lambda items: bool(items)) in ([1], [2], [3])


def test_a_failing_expect_shrinks_to_the_ops_it_needs_and_keeps_only_that_expect():
    scenario = parse_scenario(EXPECT_FAILS, path="sharing.kvs")
    wanted = first_failure(scenario, "kvcore").failure
    assert (wanted.identity.source, wanted.identity.detail, wanted.step) == ("expect", "free", 7)
    result = shrink(scenario, "kvcore", budget=ShrinkBudget(max_runs=2_000))
    assert result.identity == wanted.identity and not result.stopped
    text = result.text
    lines = text.splitlines()
    # An `expect free` line fails: after one acquire of nothing, 2 pages are free, not 1.
    assert lines[-4:] == ["cache trie pages=2 tokens_per_page=1", "", "acquire a", "expect free 1"], text
    assert ">" not in text and "chatter" not in text and "nothing in particular" not in text  # narration gone
    assert "priority=" not in text and "extra=" not in text and "policy=" not in text  # lowered, lfu dropped
    assert "first" not in text  # renamed a, b, ...
    assert (result.before.ops, result.after.ops) == (8, 1) and result.after.tokens == 0
    assert_one_minimal(text, "kvcore", wanted.identity)


def test_the_same_input_gives_the_same_output():
    scenario = parse_scenario(EXPECT_FAILS)
    assert shrink(scenario, "kvcore").text == shrink(scenario, "kvcore").text


def test_a_scenario_that_does_not_fail_is_not_shrunk():
    with pytest.raises(NotFailing, match="does not fail on kvcore: nothing to shrink"):
        shrink(parse_scenario("cache trie pages=2 tokens_per_page=2\nacquire a 1 2\nrelease a\n"), "kvcore")


def test_a_step_budget_stops_early_with_a_scenario_that_still_fails_the_same_way():
    scenario = parse_scenario(EXPECT_FAILS)
    wanted = first_failure(scenario, "kvcore").failure.identity
    result = shrink(scenario, "kvcore", budget=ShrinkBudget(max_runs=3))
    assert result.runs == 3 and "stopped early: the budget of 3 runs ran out" in result.stopped
    assert result.identity == wanted
    assert first_failure(parse_scenario(result.text), "kvcore").failure.identity == wanted


def test_a_clock_budget_is_the_callers_and_stops_the_shrink():
    ticks = iter(range(100))
    result = shrink(parse_scenario(EXPECT_FAILS), "kvcore",
                    budget=ShrinkBudget(out_of_time=lambda: next(ticks) >= 5))
    # Asked before each run and each op of a run: a run may be stopped mid-way, so at most 5.
    assert 1 <= result.runs <= 5 and "the time budget ran out" in result.stopped


def test_a_different_failure_is_not_progress(monkeypatch):
    # On a kvcore with B6 planted, the padded story first breaks invariant 1 when the tail is
    # leaked; candidates that fail on an expect instead are refused, so the result still does.
    plant_tail_leak(monkeypatch)
    text = EXPECT_FAILS.replace("release other", "release other\nexpect free 9")
    scenario = parse_scenario(text)
    wanted = first_failure(scenario, "kvcore").failure.identity
    assert wanted.source == "violation"
    result = shrink(scenario, "kvcore")
    assert result.identity == wanted
    assert not any(line.startswith("expect") for line in result.text.splitlines())


def test_renaming_follows_first_appearance_in_ops_and_expects():
    scenario = parse_scenario("cache trie pages=4 tokens_per_page=2\nacquire zed 1 2\nacquire ann 3\n"
                              "expect live zed ann\nrelease zed\nexpect pages ann 1\n")
    renamed = rename_allocations(scenario.steps)
    assert [s.op.text for s in renamed] == ["acquire a 1 2", "acquire b 3", "release a"]
    assert [x.text for s in renamed for x in s.expects] == ["expect live a b", "expect pages b 1"]


def test_sizes_count_ops_tokens_and_pages_of_tokens():
    size = scenario_size(parse_scenario("cache trie pages=3 tokens_per_page=2\nacquire a 1 2 3\nrelease a\n"))
    assert (size.ops, size.tokens, size.token_pages, size.pool_pages, size.tokens_per_page) == (2, 3, 2, 3, 2)


@pytest.mark.parametrize("policy", ["lru", "fifo", "lfu", "mru", "filo", "slru", "priority"])
def test_random_scenarios_fail_nowhere_on_kvcore_under_every_policy(policy):
    for run in range(15):
        scenario = random_scenario(run_rng(7, run), 40, policy=policy)
        assert first_failure(scenario, "kvcore").failure is None


@pytest.mark.parametrize("kind", ["base", "hash"])
def test_the_shrinker_works_on_the_other_designs(kind):
    scenario = parse_scenario(f"cache {kind} pages=4 tokens_per_page=2\nacquire a 1 2 3\nacquire b 1 2\n"
                              f"acquire c 7\nrelease c\npublish a\nexpect free 9\n")
    result = shrink(scenario, "kvcore")
    assert result.identity.source == "expect" and f"cache {kind}" in result.text
    assert result.after.ops <= 2



def test_a_script_whose_liveness_only_the_parser_can_judge_still_shrinks_to_text_that_parses():
    # A tagged `expect fail` covering every kind frees the name again (the parser's rule).
    scenario = parse_scenario("cache trie pages=1 tokens_per_page=1\nacquire a 1 2 3\n[trie base hash] expect fail alloc\n"
                              "acquire a 1\nacquire b 2\nexpect free 3\n")
    result = shrink(scenario, "kvcore")
    assert parse_scenario(result.text).steps == result.minimal.steps
    assert result.identity.detail == "free" and result.after.ops == 1


@pytest.mark.parametrize("name", demo_names())
def test_a_failure_is_placed_where_parsing_the_canonical_text_puts_its_op_or_expect_line(name):
    """A killed worker's best scenario is printed as sent: its failure's line is found without
    parsing the text, and must be the line parsing it would give (narration, tags and all)."""
    from kvviz.compare.shrink import placed
    from kvviz.core.failure import Failure, FailureIdentity
    from kvviz.core.scenario import format_scenario

    scenario = load_demo(name)
    reparsed = parse_scenario(format_scenario(scenario))
    identity = FailureIdentity("expect", "free")
    checked = 0
    for number, (step, again) in enumerate(zip(scenario.steps, reparsed.steps), 1):
        for where, expected in [(step.op, again.op), *zip(step.expects, again.expects)]:
            found = placed(scenario, Failure(identity, number, where.line, where.text, "message"))
            assert (found.line, found.text) == (expected.line, expected.text), (number, where.text)
            checked += 1
    assert checked > len(scenario.steps)  # expect lines were placed too
