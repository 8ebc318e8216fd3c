# SPDX-License-Identifier: Apache-2.0
"""Every expect kind, evaluated against real frames: the right value holds, a wrong one fails
with a message naming what was wanted and what the frame shows."""

from __future__ import annotations

import dataclasses

import pytest

from kvcore.invariants import Violation
from kvviz.core.expect import EXPECT_KINDS, ExpectResult, abbreviate, evaluate
from kvviz.core.scenario import Expect, parse_scenario
from kvviz.core.session import Session

# On 4 pages of 2 tokens. What each step leaves (worked out by hand from the trie's rules):
#  1 acquire a: pages [0 1], free 2, owned 2       2 publish a: both cached, a published 2
#  3 acquire b: matches [1 2] (hit 2), pages [0 2], page 0's node has ref 2, free 1
#  4 release a: page 1's node is a childless ref-0 leaf: evictable 1, candidate 1, victim 1
#  5 acquire c 5..10 needs 3 pages, 1 free + 1 evictable: CacheAllocationFailure
#  6 acquire c 5..8 takes free page 3, evicts page 1: pages [3 1]
#  7 extend b 7 7 does not start with b's tokens: InvalidOperation
#  8 publish c: its pages join the trie under the root (cached 3)
#  9 release c: a chain of two ref-0 nodes: evictable 2, but only its leaf (page 1) is a candidate
# Each case below picks a step where its count differs from the others, so reading the
# wrong counter fails.
SCRIPT = """
cache trie pages=4 tokens_per_page=2
acquire a 1..4
publish a
acquire b 1 2 9 9
release a
acquire c 5..10
expect fail
acquire c 5..8
extend b 7 7
expect fail
publish c
release c
"""


@pytest.fixture(scope="module")
def frames():
    session = Session.from_scenario(parse_scenario(SCRIPT))
    return [session.frame(index) for index in range(len(session))]


# (step, a line that holds there, a line that does not, the message of the one that does not)
CASES = [
    (1, "expect ok", "expect fail", "expected any failure, got success"),
    (5, "expect fail", "expect ok", "expected success, got failure CacheAllocationFailure"),
    (5, "expect fail alloc", "expect fail invalid", "expected InvalidOperation, got CacheAllocationFailure"),
    (7, "expect fail invalid", "expect fail alloc", "expected CacheAllocationFailure, got InvalidOperation"),
    (0, "expect free 4", "expect free 3", "expected free 3, got free 4"),
    (9, "expect cached 3", "expect cached 2", "expected cached 2, got cached 3"),
    (9, "expect evictable 2", "expect evictable 1", "expected evictable 1, got evictable 2"),
    (6, "expect owned 3", "expect owned 0", "expected owned 0, got owned 3"),
    (9, "expect candidates 1", "expect candidates 2", "expected candidates 2, got candidates 1"),
    (9, "expect victim 1", "expect victim 0", "expected victim 0, got victim 1"),
    (3, "expect hit b 2", "expect hit b 4", "expected hit 4, got hit 2"),
    (6, "expect pages c 3 1", "expect pages c 1 3", "expected pages [1 3], got pages [3 1]"),
    (2, "expect published a 2", "expect published a 1", "expected published 1, got published 2"),
    (6, "expect evicted 1", "expect evicted 3", "expected evicted [3], got evicted [1]"),
    (6, "expect evictions 1", "expect evictions 0", "expected evictions 0, got evictions 1"),
    (3, "expect ref 0 2", "expect ref 0 1", "expected ref 1, got ref 2"),
    (4, "expect live b", "expect live a b", "expected live [a b], got live [b]"),
    (1, "expect violations 0", "expect violations 1", "expected violations 1, got violations 0"),
    (0, "expect queue 0..3", "expect queue 3 2 1 0", "expected queue [3 2 1 0], got queue [0 1 2 3]"),
    (6, "expect unreachable 0", "expect unreachable 1", "expected unreachable 1, got unreachable 0"),
]


def expect_of(line: str) -> Expect:
    """The Expect a line parses to (after an op, as in a script)."""
    (step,) = parse_scenario(f"acquire a 1 2\n{line}").steps
    (expect,) = step.expects
    return expect


@pytest.mark.parametrize(("step", "right", "wrong", "message"), CASES, ids=[case[1] for case in CASES])
def test_each_expect_kind_holds_when_right_and_fails_with_the_actual_value_when_wrong(frames, step, right, wrong,
                                                                                      message):
    assert evaluate(expect_of(right), frames[step]) == ExpectResult(expect_of(right), True, "ok")
    result = evaluate(expect_of(wrong), frames[step])
    assert (result.ok, result.message) == (False, message)


def test_every_expect_kind_has_a_case():
    assert {expect_of(case[1]).kind for case in CASES} == set(EXPECT_KINDS)


def test_a_general_fail_holds_for_either_failure_and_fails_on_success(frames):
    assert evaluate(expect_of("expect fail"), frames[7]).ok
    assert evaluate(expect_of("expect fail"), frames[5]).ok
    assert not evaluate(expect_of("expect fail"), frames[6]).ok


def test_evicted_ignores_the_order_pages_are_listed_in(frames):
    frame = dataclasses.replace(frames[6], diff=dataclasses.replace(frames[6].diff, pages_evicted=(3, 1)))
    assert evaluate(expect_of("expect evicted 1 3"), frame).ok
    assert evaluate(expect_of("expect evicted 3 1"), frame).ok


def test_live_ignores_the_order_names_are_listed_in(frames):
    assert evaluate(expect_of("expect live c b"), frames[6]).ok


def test_violations_counts_the_frames_violations(frames):
    frame = dataclasses.replace(frames[1], violations=(Violation(1, "page 0 is in two places"),))
    assert evaluate(expect_of("expect violations 1"), frame).ok
    assert evaluate(expect_of("expect violations 0"), frame).message == "expected violations 0, got violations 1"


def test_an_expect_about_an_allocation_that_is_not_live_says_who_is(frames):
    result = evaluate(expect_of("expect hit a 0"), frames[4])
    assert (result.ok, result.message) == (False, "expected allocation 'a' to be live, but it is not (live: b)")


def test_ref_of_a_page_no_node_holds_says_what_the_page_is(frames):
    assert evaluate(expect_of("expect ref 2 1"), frames[3]).message == (
        "expected page 2 to be cached in a trie node, but it is owned")
    assert evaluate(expect_of("expect ref 9 1"), frames[3]).message == (
        "expected page 9 to be cached in a trie node, but it is not a page")


def test_victim_of_an_empty_heap_is_none(frames):
    assert evaluate(expect_of("expect victim 0"), frames[1]).message == "expected victim 0, got no victim (nothing is evictable)"


def test_an_unknown_kind_fails_instead_of_raising(frames):
    result = evaluate(Expect("bogus"), frames[1])
    assert (result.ok, result.message) == (False, "unknown expect kind 'bogus'")


def test_a_long_list_is_quoted_abbreviated_with_its_count(frames):
    result = evaluate(expect_of("expect pages c 0..999999"), frames[6])
    assert not result.ok
    assert result.message == (
        "expected pages [0 1 2 3 4 5 6 7 … 999997 999998 999999 (1,000,000 in all)], got pages [3 1]")


@pytest.mark.parametrize(("values", "text"), [
    ((), ""), (tuple(range(12)), "0 1 2 3 4 5 6 7 8 9 10 11"),
    (tuple(range(13)), "0 1 2 3 4 5 6 7 … 10 11 12 (13 in all)"),
])
def test_abbreviate_keeps_short_lists_whole(values, text):
    assert abbreviate(values) == text


def test_the_table_declares_only_known_slots():
    from kvviz.core.expect import SLOTS
    for kind in EXPECT_KINDS.values():
        assert set(kind.slots) <= set(SLOTS)
        assert kind.usage.startswith("expect ")


# -- expects and narration for one cache kind -------------------------------

BOTH_KINDS = """
cache trie pages=6 tokens_per_page=4
> r1: 11 tokens, 3 pages, on either cache.
acquire r1 "You are a helpful assistant write a poem" "about a cat"
expect pages r1 0 1 2
publish r1
[trie] expect cached 2
[base] expect cached 0
[trie] > The trie matches r1's two full pages.
[base] > The base cache has no lookup: r2 takes three new pages.
acquire r2 "You are a helpful assistant write a poem" "about a dog"
[trie] expect hit r2 8
[trie] expect pages r2 0 1 3
[base] expect hit r2 0
[base] expect free 0
acquire r3 "You are a helpful assistant write a poem" "about paris"
[trie] expect ok
[base] expect fail alloc
release r3
[trie] expect free 2
[base] expect fail invalid
"""


def run_for(kind: str) -> Session:
    """What the session is to do for a run on ``kind``: each step's narration and expects for it."""
    from kvviz.core.scenario import CacheConfig

    scenario = parse_scenario(BOTH_KINDS)
    config = scenario.config
    session = Session(CacheConfig(kind, config.pages, config.tokens_per_page), vocab=scenario.vocab)
    for step in scenario.steps:
        session.apply(step.op, step.narration_for(kind), step.expects_for(kind))
    return session


@pytest.mark.parametrize("kind", ["trie", "base"])
def test_one_script_checks_the_truth_of_both_kinds(kind):
    session = run_for(kind)
    results = [r for i in range(len(session)) for r in session.frame(i).expects]
    assert results and all(r.ok for r in results), [(r.expect.text, r.message) for r in results if not r.ok]
    assert all(r.expect.applies_to(kind) for r in results)


def test_each_kind_shows_only_its_own_narration():
    trie, base = run_for("trie").frame(3).story, run_for("base").frame(3).story
    assert trie == "The trie matches r1's two full pages."
    assert base == "The base cache has no lookup: r2 takes three new pages."


def test_a_scoped_expect_run_on_the_other_kind_would_fail():
    # The scope matters: the trie's claims are false of the base cache (so checking every
    # expect on every kind, as an unscoped script does, would fail there).
    scenario = parse_scenario(BOTH_KINDS)
    frame = run_for("base").frame(3)
    trie_only = [x for x in scenario.steps[2].expects if not x.applies_to("base")]
    assert trie_only and not any(evaluate(x, frame).ok for x in trie_only)


# -- A failed list expect shows where the lists differ ---------------------------


def _fresh_frame(pages: int):
    session = Session.from_scenario(parse_scenario(f"cache trie pages={pages} tokens_per_page=2\nacquire a 1\n"))
    return session.frame(1)  # free list 1..pages-1


def test_a_failed_queue_expect_shows_the_part_of_both_lists_that_differs():
    frame = _fresh_frame(40)
    wanted = list(range(1, 40))
    wanted[19], wanted[20] = wanted[20], wanted[19]  # positions 19 and 20 swapped: 21 20 instead of 20 21
    result = evaluate(expect_of("expect queue " + " ".join(map(str, wanted))), frame)
    assert not result.ok
    expected_part, got_part = result.message.split(", got ")
    assert "19 21 20 22" in expected_part
    assert "19 20 21 22" in got_part
    assert "position 19" in result.message


def test_a_failed_queue_expect_on_a_longer_queue_shows_where_it_goes_on():
    frame = _fresh_frame(40)
    result = evaluate(expect_of("expect queue " + " ".join(map(str, range(1, 30)))), frame)
    assert not result.ok
    got = result.message.split(", got ")[1]
    assert "29 30 …" in got and "in all" not in got  # the first page not listed shows; the queue goes on


def test_a_failed_pages_expect_differing_late_shows_that_place():
    session = Session.from_scenario(parse_scenario("cache trie pages=40 tokens_per_page=1\nacquire a 1..30\n"))
    frame = session.frame(1)
    wanted = list(range(30))
    wanted[25] = 35
    result = evaluate(expect_of("expect pages a " + " ".join(map(str, wanted))), frame)
    expected_part, got_part = result.message.split(", got ")
    assert "24 35 26" in expected_part and "24 25 26" in got_part


# -- One word per page state: cached = referenced + evictable ----------------------


def test_expect_cached_and_evictable_say_the_pool_legend_s_words():
    cached, evictable = EXPECT_KINDS["cached"].meaning, EXPECT_KINDS["evictable"].meaning
    assert "referenced" in cached and "evictable" in cached  # the legend's `cached N: ■referenced □evictable`
    assert "ref 0" in evictable


def test_the_scenario_help_names_the_page_states_once():
    from kvviz.core.scenario import SCENARIO_HELP

    assert "free, owned or cached; a cached page is referenced (ref > 0) or evictable (ref 0)" in " ".join(
        SCENARIO_HELP.split())


@pytest.mark.parametrize("name", ["lru", "hash-vs-trie", "eviction-cascade", "dedup"])
def test_at_every_step_expect_cached_counts_the_referenced_and_the_evictable_pages(name):
    from kvviz.core.demos import load_demo

    session = Session.from_scenario(load_demo(name))
    for i in range(len(session)):
        frame = session.frame(i)
        pages = [p for p in frame.snapshot.pages if p.state == "cached"]
        referenced = sum(1 for p in pages if p.ref)
        evictable = sum(1 for p in pages if not p.ref)
        count = referenced + evictable
        assert evaluate(expect_of(f"expect cached {count}"), frame).ok, (name, i)
        assert evaluate(expect_of(f"expect evictable {evictable}"), frame).ok, (name, i)
