# SPDX-License-Identifier: Apache-2.0
"""Every sentence about an eviction names the policy's key and says why that victim under
that policy; lru's sentences stay as they were.

One script, run under each policy: three released leaves whose creation order, recency, hits
and priority disagree, then a request that evicts two of them. lru evicts page 1 first; every
other policy evicts another page, so lru's wording ("last used at tick 9, the oldest
unreferenced leaf") would be wrong for each of them.
"""

from __future__ import annotations

import dataclasses
import random

import pytest

import kvcore
from kvcore import events as ev
from kvviz.report.markdown import frame_markdown
from kvviz.report.text import frame_text
from kvviz.core.narrate import describe_event
from kvviz.core.policy_words import WORDS, key_fields, key_phrase, words_for
from kvviz.teach.quiz import KINDS, StepView, questions_at
from kvviz.core.scenario import parse_scenario
from kvviz.core.session import Session
from kvviz.core.why import page_status, why_evicted, why_short_match

# Leaves p (created first, used last, 1 hit), q (created second, used least recently, 2 hits,
# priority 1) and r (created last, 0 hits); then z needs both pages of two of them.
RACE = """\
cache trie pages=3 tokens_per_page=4 policy={policy}
acquire p 1..4
publish p
release p
acquire q 11..14 priority=1
publish q
release q
acquire q2 11..14 priority=1
release q2
acquire q3 11..14 priority=1
release q3
acquire r 21..24
publish r
release r
acquire p2 1..4
release p2
acquire z 31..38
"""
EVICTING = 16  # the step of `acquire z`

# policy -> (the pages evicted, in order; the victim's key; what the first victim is called)
EXPECTED = {
    "fifo": ((0, 1), (1,), "the first-created unreferenced leaf"),
    "lfu": ((2, 0), (0, 12, 3), "the unreferenced leaf with the fewest hits"),
    "mru": ((0, 2), (-14, 1), "the most recently used unreferenced leaf"),
    "filo": ((2, 1), (-3,), "the last-created unreferenced leaf"),
    "slru": ((2, 0), (0, 12, 3), "the least recently used probationary leaf (fewer than 2 hits)"),
    "priority": ((2, 0), (0, 12, 3), "the unreferenced leaf of lowest priority"),
}
LRU_TEXT = ("evicted page 1 [11 12 13 14], last used at tick 9, the oldest unreferenced leaf; "
            "evicted page 2 [21 22 23 24], last used at tick 12, the next oldest.")


def race(policy: str) -> Session:
    return Session.from_scenario(parse_scenario(RACE.format(policy=policy)))


def test_every_kvcore_policy_has_its_words():
    assert set(WORDS) == set(kvcore.POLICIES)
    assert all(w.rule for name, w in WORDS.items() if name != "lru")


def test_under_lru_the_race_is_worded_as_it_always_was():
    session = race("lru")
    assert session.frame(EVICTING).explanation.endswith(LRU_TEXT)
    assert why_evicted(session, EVICTING, 1).lines[:2] == (
        "Step 16: `acquire z 31..38` needed pages; the free list had 0, so the cache evicted the least recently "
        "used unreferenced leaf.",
        "Page 1 held node 2 [11 12 13 14] with key (9, 2) (last used at tick 9; seq 2, its creation order, "
        "breaks ties).")


@pytest.mark.parametrize("policy", sorted(EXPECTED))
def test_the_race_evicts_something_else_than_lru_so_lrus_words_would_be_wrong(policy):
    victims = [e.page for e in race(policy).frame(EVICTING).evictions]
    assert tuple(victims) == EXPECTED[policy][0]
    assert victims[0] != [e.page for e in race("lru").frame(EVICTING).evictions][0]


@pytest.mark.parametrize("policy", sorted(EXPECTED))
def test_the_narration_names_the_policys_key_and_why_that_victim(policy):
    session = race(policy)
    frame = session.frame(EVICTING)
    pages, key, first = EXPECTED[policy]
    fields = "(" + ", ".join(kvcore.KEY_FIELDS[policy]) + ")"
    victim = frame.evictions[0]
    assert (f"evicted page {pages[0]} [{session.label_tokens(victim.tokens)}], key {fields} = "
            f"({', '.join(map(str, key))}), {first}") in frame.explanation
    assert f", {WORDS[policy].next}." in frame.explanation
    for lru_words in ("last used at tick", "the oldest unreferenced leaf", "the next oldest"):
        assert lru_words not in frame.explanation


@pytest.mark.parametrize("policy", sorted(EXPECTED))
def test_why_evicted_says_the_policys_rule_and_lists_candidates_by_its_key(policy):
    session = race(policy)
    pages, key, first = EXPECTED[policy]
    lines = why_evicted(session, EVICTING, pages[0]).lines
    assert lines[0].endswith(f"so the cache evicted {first} ({policy}: {WORDS[policy].rule}).")
    assert "least recently used unreferenced leaf" not in lines[0]
    before = session.frame(EVICTING - 1).snapshot
    assert f"with key {key_phrase(before, key)} ({WORDS[policy].gloss(key)})." in lines[1]
    assert lines[2] == "Candidates at that moment (childless, ref 0), smallest key first:"
    listed = [int(line.split(" page ")[1].split()[0]) for line in lines[3:6]]
    by_policy = sorted(before.heap, key=lambda n: before.node_key(before.node(n)))
    assert listed == [before.node(n).page for n in by_policy]
    assert listed[0] == pages[0] and lines[3].endswith("<- evicted")


def test_the_glosses_say_what_each_policys_key_means():
    assert WORDS["lfu"].gloss((0, 12, 3)) == "0 hits, then last used at tick 12; seq 3, its creation order, breaks ties"
    assert WORDS["fifo"].gloss((1,)) == "seq 1: its creation order, all fifo compares"
    assert WORDS["mru"].gloss((-14, 1)).startswith("last used at tick 14, negated so the most recent is smallest")
    assert WORDS["filo"].gloss((-3,)) == "seq 3, its creation order, negated so the newest is smallest"
    assert WORDS["slru"].gloss((1, 9, 2)).startswith("tier 1, protected: 2 hits or more")
    assert WORDS["priority"].gloss((1, 9, 2)).startswith("priority 1, then last used at tick 9")


def test_slru_says_when_it_had_to_take_a_protected_leaf():
    assert WORDS["slru"].first((1, 9, 2)) == "the least recently used protected leaf (no probationary leaf was left)"
    assert WORDS["slru"].first((0, 9, 2)) == "the least recently used probationary leaf (fewer than 2 hits)"


@pytest.mark.parametrize("policy", sorted(EXPECTED))
def test_a_pages_status_ranks_it_by_the_policys_key(policy):
    session = race(policy)
    pages, key, _ = EXPECTED[policy]
    before = session.frame(EVICTING - 1).snapshot
    lines = page_status(session, EVICTING - 1, pages[0]).lines
    assert lines[0].endswith(f"with key {key_phrase(before, key)} ({WORDS[policy].gloss(key)}).")
    assert lines[1].startswith(f"It is evictable and the next victim: the smallest key of the 3 eviction candidates "
                               f"in the heap ({policy}: ")
    second = page_status(session, EVICTING - 1, pages[1]).lines[1]
    assert "smallest key first" in second and "oldest key" not in second


@pytest.mark.parametrize("policy", sorted(EXPECTED))
def test_a_match_cut_short_by_an_eviction_says_which_policy_chose_it(policy):
    session = race(policy)
    victim = session.frame(EVICTING).evictions[0]
    session.apply(parse_scenario(f"acquire w {' '.join(map(str, victim.tokens))}\n").steps[0].op)
    lines = why_short_match(session, len(session) - 1, "w").lines
    said = next(line for line in lines if line.startswith("It was evicted at step 16"))
    assert f"the unreferenced leaf with the smallest key {key_fields(session.last.snapshot)} ({policy}: " in said
    assert "least recently used unreferenced leaf" not in said


@pytest.mark.parametrize("policy", sorted(EXPECTED))
def test_the_victim_question_hints_the_policys_key_and_models_the_lru_mistake(policy):
    session = race(policy)
    view = StepView(session, EVICTING, session.frame(EVICTING - 1), session.frame(EVICTING))
    fields = key_fields(view.snap0)
    assert fields in KINDS["victim"].hint(view) and fields in KINDS["victims"].hint(view)
    answer = KINDS["victim"].answer(view)
    mistakes = {m.value: m.mistake for m in KINDS["victim"].distractors(view, answer)}
    lru_victim = race("lru").frame(EVICTING).evictions[0].page
    assert mistakes[lru_victim].startswith("the least recently used leaf: that is lru's choice")
    assert all("LRU evicts" not in m for m in mistakes.values())
    for question in questions_at(view, random.Random(0)):
        text = " ".join([question.hint, question.why] + [c.mistake or "" for c in question.choices])
        assert "(last_access, seq)" not in text and "oldest key" not in text, text


@pytest.mark.parametrize("policy", sorted(EXPECTED))
def test_the_text_and_markdown_exports_name_the_policys_heap_and_key(policy):
    session = race(policy)
    frame = session.frame(EVICTING - 1)
    fields = key_fields(frame.snapshot)
    name = words_for(frame.snapshot).policy
    text = frame_text(frame, session)
    heap = f"{name.upper() if len(name) <= 4 else name.capitalize()} heap"
    assert f"{heap} (array order, key {fields}):" in text and "\nLRU heap" not in text
    markdown = frame_markdown(frame, session, "", "summary")
    assert f"## {heap} (array order, key {fields}; next victim first)" in markdown
    first = frame.snapshot.node(frame.snapshot.heap[0])
    values = ", ".join(map(str, frame.snapshot.node_key(first)))
    assert f"0: node {first.id} page {first.page} key ({values})  <- next victim" in text
    assert f"1. node {first.id} (page {first.page}), key ({values})" in markdown
    assert f"key ({values.replace(' ', '')})" in text.split(heap)[0]  # the trie's labels show the key too
    evicted = frame_text(session.frame(EVICTING), session)
    assert f"(key {fields} = " in evicted


def test_the_lru_exports_keep_their_headings():
    session = race("lru")
    frame = session.frame(EVICTING - 1)
    assert "LRU heap (array order):\n  0: node 2 page 1 key (9, 2)  <- next victim" in frame_text(frame, session)
    assert "## LRU heap (array order; next victim first)" in frame_markdown(frame, session, "", "summary")
    assert "├── [1 2 3 4] page 0 ref 0 t14 (evictable)" in frame_text(frame, session)  # no key: t<tick> is lru's


def test_a_base_cache_is_worded_as_lru():
    scenario = parse_scenario(RACE.format(policy="lfu"))
    base = dataclasses.replace(scenario, config=dataclasses.replace(scenario.config, kind="base", pages=8))
    assert words_for(Session.from_scenario(base).last.snapshot).lru


def test_the_event_log_writes_a_one_field_key_without_a_trailing_comma():
    session = race("fifo")
    evicted = session.frame(EVICTING).evictions[0]
    assert describe_event(evicted).endswith("[1 2 3 4] key (1)")
    added = next(e for e in session.frame(3).events if isinstance(e, ev.CandidateAdded))
    assert describe_event(added) == "heap + node 1 (page 0) key (1)"
