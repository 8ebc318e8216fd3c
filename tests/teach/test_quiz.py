# SPDX-License-Identifier: Apache-2.0
"""Quiz questions: deterministic, answered right, with distractors that are really wrong and
whose mistake labels are right.

Every correct answer and every distractor's value is recomputed by the tests' own oracle
(tests/teach/quiz_oracle.py) from the snapshots before and after the step: the quiz reads
events, kvcore's counters and its own simulations, the oracle reads block tables and parent
links, so a quiz that computed an answer or labelled a mistake wrongly fails here.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter

import pytest

from kvviz.core.demos import LESSONS, load_demo
from kvviz.teach import quiz as quiz_module
from kvviz.teach.quiz import KINDS, MISTAKES, AnswerError, StepView, Tally, feedback, questions, questions_at
from kvviz.core.scenario import parse_scenario
from kvviz.core.session import Session

from . import quiz_oracle as oracle

#: Scenarios per configuration (7 trie policies, base, hash): 24 x 9 = 216 random scenarios in CI,
#: 56 x 9 = 504 under ``pytest --soak`` (the CI share still asks every kind and every mistake).
PER_CONFIG = 56 if oracle.SOAK else 24


def _views(session):
    for index in range(1, len(session)):
        yield StepView(session, index, session.frame(index - 1), session.frame(index))


def check_session(label, session, seen: Counter, tags: Counter | None = None) -> None:
    """Every question that could be asked at every step: the oracle's answer, distinct wrong
    distractors, and each distractor's mistake re-derived from its tag."""
    rng = random.Random(label)
    for view in _views(session):
        for q in questions_at(view, rng):
            seen[q.kind] += 1
            want = oracle.answer(view, q)
            where = f"{label} step {q.step} {q.kind}: {q.text}"
            assert q.answer == want, where
            assert q.read(q.correct_line).right, where
            values = [c.value for c in q.choices]
            assert len(set(values)) == len(values), where
            assert values.count(want) == 1, where
            assert [c.label for c in q.choices] == list("abcdefghijklmnopqrstuvwxyz"[:len(q.choices)]), where
            assert len(q.hints) == 3 and all(q.hints), where
            for choice in q.choices:
                assert (choice.mistake is None) == (choice.value == want), where
                assert q.read(choice.label).right == (choice.value == want), where
                assert q.read(choice.label.upper()).value == choice.value, where
                if choice.tag is not None:
                    assert choice.tag in MISTAKES, where
                    redo = oracle.mistake_value(view, q, choice.tag)
                    assert redo == choice.value, f"{where}: {choice.tag} gives {redo}, the quiz {choice.value}"
                    if tags is not None:
                        tags[choice.tag] += 1


def test_every_question_on_every_demo_is_answered_right_with_rightly_labelled_distractors():
    seen = Counter()
    for label, session in oracle.demo_sessions():
        check_session(label, session, seen)
    assert seen["victim"] and seen["victims"] and seen["next_swap"] and seen["dedup_blocks"], seen
    assert seen["queue_drop"] or seen["hash_table"], "the hash demo gave no hash question"


def test_every_question_on_random_scenarios_of_every_policy_base_and_hash_is_graded_by_the_oracle():
    seen, tags = Counter(), Counter()
    for label, session in [*oracle.random_sessions(PER_CONFIG), *oracle.demo_sessions()]:
        check_session(label, session, seen, tags)
    # Every kind and every mistake tag was checked many times: none is dead code.
    assert set(seen) == set(KINDS), f"kinds never asked: {set(KINDS) - set(seen)}"
    assert min(seen.values()) >= 20, seen
    rare = {t for t in MISTAKES if tags[t] == 0}
    assert rare <= {"referenced-evictable", "grandparent"}, f"mistakes never offered: {rare}"


def test_wherever_three_distinct_mistakes_exist_the_question_offers_at_least_three_choices():
    few = Counter()
    for label, session in oracle.random_sessions(6):
        rng = random.Random(label)
        for view in _views(session):
            for q in questions_at(view, rng):
                distinct = {m.value for m in q.spec.distractors(view, q.answer)
                            if (m.value if q.spec.form != "set" else tuple(sorted(set(m.value)))) != q.answer}
                if len(distinct) >= 2:
                    assert len(q.choices) >= 3, (label, q.step, q.kind)
                few[len(q.choices) < 3] += 1
    # Two choices remain only where the mistakes collapse onto one value (a count clamped at 0).
    assert few[True] < few[False] / 3, few


# -- determinism, the timeline, the lesson -----------------------------------------------------


def test_questions_are_deterministic_per_scenario_and_seed():
    scenario = load_demo("lru")
    first = questions(Session.from_scenario(scenario), seed=7)
    again = questions(Session.from_scenario(scenario), seed=7)
    assert first and first == again
    other = [questions(Session.from_scenario(scenario), seed=s) for s in range(1, 6)]
    assert any(o != first for o in other), "the seed changes nothing"


def test_asking_questions_never_changes_the_timeline():
    session = Session.from_scenario(load_demo("eviction-cascade"))
    before = [session.frame(i).snapshot.digest() for i in range(len(session))]
    steps = list(session.steps)
    for q in questions(session, seed=3):
        for c in q.choices:
            q.divergence(c.value)  # reruns ops on copies, never on the session
    assert list(session.steps) == steps
    assert [session.frame(i).snapshot.digest() for i in range(len(session))] == before


def test_questions_come_only_at_interesting_steps_and_one_per_step():
    session = Session.from_scenario(load_demo("lru"))
    steps = [q.step for q in questions(session)]
    assert len(steps) == len(set(steps))
    assert 1 not in steps  # the first acquire into an empty cache has nothing to predict


@pytest.mark.parametrize("seed", range(4))
def test_the_lru_lesson_asks_the_victim_or_the_next_swap_at_each_eviction_step_never_one_kind_twice_running(seed):
    session = Session.from_scenario(load_demo("lru"))
    evicting = {i for i in range(1, len(session)) if session.frame(i).evictions}
    asked = questions(session, seed)
    assert [q.step for q in asked] == sorted(evicting), asked
    assert {q.kind for q in asked} == {"victim", "next_swap"}
    assert [q.kind for q in asked].count("victim") >= 2
    assert all(a.kind != b.kind for a, b in zip(asked, asked[1:]))


@pytest.mark.parametrize("lesson", LESSONS)
def test_no_demos_quiz_asks_one_kind_twice_in_a_row(lesson):
    kinds = [q.kind for q in questions(Session.from_scenario(load_demo(lesson)), 0)]
    assert kinds and all(a != b for a, b in zip(kinds, kinds[1:])), kinds


@pytest.mark.parametrize("seed", range(4))
def test_the_eviction_cascade_lesson_asks_the_order_of_a_cascade(seed):
    session = Session.from_scenario(load_demo("eviction-cascade"))
    cascades = {i for i in range(1, len(session)) if len(session.frame(i).evictions) >= 2
                and any(e.parent_became_candidate is not None for e in session.frame(i).evictions[:-1])}
    asked = {q.step: q.kind for q in questions(session, seed)}
    assert cascades and all(asked.get(step) == "victims" for step in cascades), asked


# -- the reproduced whys ---------------------------------------------------------------


def _at(seed, level, step, kind, kind_of_cache="trie"):
    session = oracle.random_session(seed, level, kind_of_cache)
    view = StepView(session, step, session.frame(step - 1), session.frame(step))
    found = [q for q in questions_at(view, random.Random(0)) if q.kind == kind]
    assert found, f"no {kind} question at seed {seed} {level} step {step}"
    return found[0]


def test_the_hit_why_keeps_the_eviction_that_explains_the_miss():
    # kvviz quiz --random --seed 3 --level hard --plain --no-state, step 34
    q = _at(3, "hard", 34, "hits")
    assert "was cached as node 15 under node 8 at step 11" in q.why
    assert "It was evicted at step 29" in q.why


def test_a_block_cached_after_the_same_prefix_under_an_evicted_node_was_seen_after_it():
    # kvviz quiz --random --seed 28 --level hard --plain --no-state, step 36: the prefix's node was
    # evicted and created again, so the block's earlier node hangs under another id.
    q = _at(28, "hard", 36, "hits")
    assert "never seen after this prefix" not in q.why
    assert "was cached as node 6 under node 5 (an earlier node for this same prefix, evicted since)" in q.why


def test_a_learner_who_forgot_the_cascade_is_told_so_not_that_they_sorted_newest_first():
    # kvviz quiz --random --seed 0 --level medium --plain --no-state, step 13
    q = _at(0, "medium", 13, "victims")
    reverse = next(c for c in q.choices if c.value == tuple(reversed(q.answer)))
    assert reverse.tag == "cascade-early" and "cascade" in reverse.mistake
    assert "newest first" not in reverse.mistake


def test_the_largest_key_label_is_given_only_to_the_largest_key_order():
    for label, session in oracle.random_sessions(10):
        for view in _views(session):
            for q in questions_at(view, random.Random(label)):
                for c in q.choices:
                    if c.tag == "largest-key" and q.kind == "victims":
                        s0 = view.before.snapshot
                        keys = [oracle.KEYS[s0.policy](s0.node_for_page(p)) for p in c.value]
                        assert keys == sorted(keys, reverse=True) or any(
                            e.parent_became_candidate for e in view.after.evictions), (label, q.step)


def test_base_cache_whys_and_hints_state_the_base_rules_not_the_tries():
    checked = 0
    for seed in range(30):
        session = oracle.random_session(seed, oracle.LEVELS[seed % 3], "base")
        for q in questions(session, seed):
            text = " ".join([q.why, *q.hints])
            assert "published pages stay cached" not in text, (seed, q.step, text)
            assert "hit pages are shared" not in text and "trie" not in text.replace("the trie's rule", ""), text
            checked += 1
    assert checked > 100


def test_no_why_says_page_it_hads_or_the_partial_page_fact_twice():
    for label, session in [*oracle.demo_sessions(), *oracle.random_sessions(8)]:
        for view in _views(session):
            for q in questions_at(view, random.Random(0)):
                assert "page it hads" not in q.why and "page it had)" not in q.why, (label, q.step)
                assert q.why.count("partial page") + q.why.count("part of a page") <= 1, (label, q.step, q.why)


def test_the_victim_hint_names_the_acquires_own_match_only_on_acquires():
    seen = Counter()
    for label, session in [*oracle.demo_sessions(), *oracle.random_sessions(10)]:
        for view in _views(session):
            if KINDS["victim"].applies(view):
                hint = KINDS["victim"].hint(view)
                seen[view.op.kind] += 1
                assert ("acquire's own match" in hint) == (view.op.kind == "acquire"), (label, view.index)
    assert seen["acquire"] and seen["extend"], seen


# -- diagnostic feedback -----------------------------------------------------------------------


def test_a_wrong_victim_names_the_first_sub_step_where_it_parts_from_the_cache():
    q = _at(0, "medium", 13, "victims")
    wrong = next(c for c in q.choices if c.tag == "cascade-early")
    parted = q.divergence(wrong.value)
    steps = Session.substeps(q.view.session, q.step)
    assert steps[parted.substep].kind == "evict" and parted.step == 13
    assert parted.sentence == ("your eviction 1 was page 4: at sub-step 11 the cache evicted node 10 (page 3, key "
                               "(9, 10)); node 9 (page 4) was not a candidate yet: it had a child.")
    lines = feedback(q, q.read(wrong.label))
    assert any(line.startswith("Where it parted: your eviction 1 was page 4") for line in lines)


def test_every_wrong_choice_parts_at_a_real_sub_step_of_its_step():
    parted = Counter()
    for label, session in [*oracle.demo_sessions(), *oracle.random_sessions(4)]:
        for view in _views(session):
            for q in questions_at(view, random.Random(0)):
                for c in q.choices:
                    d = q.divergence(c.value)
                    if c.mistake is None:
                        assert d is None
                        continue
                    assert d is not None and d.step == q.step, (label, q.step, q.kind)
                    if d.substep is not None:
                        assert 0 <= d.substep < len(session.substeps(q.step)), (label, q.step, q.kind)
                    parted[q.kind] += 1
    assert set(parted) == set(KINDS), set(KINDS) - set(parted)


def test_hints_go_from_the_rule_to_this_states_numbers():
    q = _at(0, "medium", 13, "victims")
    rule, where, numbers = q.hints
    assert "smallest key" in rule and "node 10 page 3 key (9, 10)" in numbers
    assert "node 10" not in rule and "node 10" not in where


# -- reading answer lines ------------------------------------------------------------------------


def _question(demo, text, kind):
    session = Session.from_scenario(load_demo(demo))
    step = next(i + 1 for i, s in enumerate(load_demo(demo).steps) if s.op.text == text)
    view = StepView(session, step, session.frame(step - 1), session.frame(step))
    found = [q for q in questions_at(view, random.Random(0)) if q.kind == kind]
    assert found, f"no {kind} question at {demo} step {step}"
    return found[0]


def test_answer_lines_take_a_choice_letter_or_the_answer_typed_in_full():
    q = _question("lru", "acquire big 9000..9011", "victims")
    right = q.correct_choice
    assert q.read(right.label).right and q.read(right.label.upper()).right
    assert q.read("pages 4 5 6").right and q.read("4, 5, 6").right and q.read("4 5 6").right
    assert q.read("   ") is None  # a skip
    for bad in ("banana", "4 5 600", "z", "ab"):
        with pytest.raises(AnswerError):
            q.read(bad)


def test_a_lone_number_is_a_one_page_answer_never_a_choice():
    text = "cache trie pages=4 tokens_per_page=4\nacquire a 1..4\npublish a\nrelease a\nacquire b 1..4\n"
    session = Session.from_scenario(parse_scenario(text))
    view = StepView(session, 4, session.frame(3), session.frame(4))
    q = next(q for q in questions_at(view, random.Random(0)) if q.kind == "block_table")
    assert q.answer == (0,) and q.correct_line == "0" and q.read("0").right and q.read("page 0").right


def test_feedback_says_right_or_wrong_the_answer_the_mistake_where_it_parted_and_why():
    q = _question("dedup", "publish y", "block_table")
    wrong = next(c for c in q.choices if c.mistake)
    lines = feedback(q, q.read(wrong.label))
    assert lines[0].startswith("Wrong") and f"{q.correct_choice.label}) pages 0 1 5" in lines[0]
    said, _, reason = wrong.mistake.partition(": ")
    assert lines[1] == f"Your choice ({said}) is the mistake: {reason}." and lines[-1].startswith("Why: ")
    assert any(line.startswith("Where it parted: ") for line in lines)
    assert feedback(q, q.read(q.correct_line))[0].startswith("Right")
    assert feedback(q, None)[0].startswith("Skipped")


def test_tally_counts_skips_as_asked_and_ends_the_streak():
    q = _question("dedup", "publish y", "block_table")
    t = Tally().add(q.read(q.correct_line)).add(q.read(q.correct_line))
    assert (t.right, t.asked, t.streak) == (2, 2, 2)
    t = t.add(None)
    assert (t.right, t.asked, t.streak) == (2, 3, 0)


def test_a_refused_answer_never_shows_the_answer_as_its_example():
    for label, session in [*oracle.demo_sessions(), *oracle.random_sessions(6)]:
        for q in questions(session):
            if q.spec.form == "number" or not q.answer:
                continue
            with pytest.raises(AnswerError) as refused:
                q.read("banana")
            assert f"`{q.correct_line}`" not in str(refused.value), (label, q.step)


# -- the checks above can fail: each kind with a plausible wrong evaluation is caught --------

WRONG_EVALUATIONS = {
    "victim": lambda v: v.victims[-1].page,  # the last victim instead of the first
    "victims": lambda v: tuple(sorted(e.page for e in v.victims[:3])),  # page order
    "hits": lambda v: quiz_module.partial_hit(v),  # a partial page counted
    "block_table": lambda v: tuple(sorted(v.mine(v.snap1).pages)),  # sorted block table
    "ref": lambda v: v.snap0.node(quiz_module.ref_node(v)).ref,  # the ref before the op
    "fail": lambda v: max(0, quiz_module.room(v).needed - quiz_module.room(v).free),  # eviction forgotten
    "free": lambda v: v.snap0.free_count,  # the free count before the op
    "evictable": lambda v: tuple(p for p in quiz_module.shown_pages(v)
                                 if v.snap1.node_for_page(p).id in v.snap1.heap),  # candidates only
    "next_swap": lambda v: _pop(v).moved,  # "it stays" always
    "new_candidates": lambda v: tuple(sorted(v.snap0.node_for_page(p).page
                                             for p in v.mine(v.snap0).pages[:v.mine(v.snap0).published]
                                             if v.snap0.node_for_page(p).ref == 1)),  # interior ones too
    "dedup_blocks": lambda v: tuple(range(v.mine(v.snap0).published,
                                          len(v.mine(v.snap0).tokens) // v.snap0.tokens_per_page)),  # every block
    "base_free": lambda v: v.snap0.free_count,
    "base_table": lambda v: tuple(sorted(v.mine(v.snap1).pages, reverse=True)),
    "base_fail": lambda v: max(0, quiz_module.room(v).needed - v.snap0.free_count - 1),
    "queue_drop": lambda v: next(e.page for e in reversed(v.after.events) if type(e).__name__ == "BlockEvicted"),
    "hash_hits": lambda v: len(v.op.tokens) // v.snap0.tokens_per_page * v.snap0.tokens_per_page,
    "hash_table": lambda v: tuple(sorted(v.mine(v.snap1).pages)),
}


def _pop(view):
    from kvcore import events as ev

    return next(s.event for s in view.substeps() if isinstance(s.event, ev.HeapPopped))


@pytest.mark.parametrize("kind", sorted(WRONG_EVALUATIONS))
def test_a_wrong_evaluation_of_each_kind_is_caught(kind, monkeypatch):
    assert set(WRONG_EVALUATIONS) == set(KINDS)
    wrong = dataclasses.replace(KINDS[kind], answer=WRONG_EVALUATIONS[kind])
    monkeypatch.setitem(quiz_module.KINDS, kind, wrong)
    with pytest.raises(AssertionError):
        for label, session in [*oracle.random_sessions(8), *oracle.demo_sessions()]:
            check_session(label, session, Counter())


def test_a_wrong_mistake_label_is_caught(monkeypatch):
    spec = KINDS["victims"]

    def swapped(view, answer):  # the old bug: every reversed order called "largest key first"
        out = spec.distractors(view, answer)
        return [dataclasses.replace(m, tag="largest-key") if m.tag == "cascade-early" else m for m in out]

    monkeypatch.setitem(quiz_module.KINDS, "victims", dataclasses.replace(spec, distractors=swapped))
    with pytest.raises(AssertionError, match="largest-key"):
        for label, session in [*oracle.random_sessions(8), *oracle.demo_sessions()]:
            check_session(label, session, Counter())


def test_the_quiz_counts_room_as_the_cache_does_so_no_fail_question_is_dropped():
    checked = 0
    for label, session in [*oracle.demo_sessions(), *oracle.random_sessions(20)]:
        for view in _views(session):
            if not view.tree:
                continue
            room = quiz_module.room(view)
            error = view.after.error
            if room is None or (error is not None and error.kind != "CacheAllocationFailure"):
                continue
            checked += 1
            assert (room.short > 0) == (error is not None), (label, view.index)
    assert checked > 1000


def test_a_hit_on_unpublished_pages_is_explained_by_who_holds_them():
    q = _question("dedup", "acquire y 1..8 10", "hits")
    assert q.answer == 0
    assert any(c.value == 8 and c.tag == "unpublished" for c in q.choices if c.mistake)
    assert "x holds the next page's tokens but has not published them" in q.why


def test_the_free_pages_question_is_asked_answered_and_worded_alike_on_a_trie_and_a_base_cache():
    from kvviz.core.words import there_are

    asked = Counter()
    for _, session in oracle.random_sessions(8):
        for view in _views(session):
            for kind in ("free", "base_free"):
                spec = KINDS[kind]
                if not spec.applies(view):
                    continue
                asked[kind] += 1
                assert (spec.title, spec.form, spec.noun) == ("free pages", "number", "page")
                assert spec.ask(view) == (f"{view.text()} How many pages are free after it "
                                          f"({there_are(view.snap0.free_count)} now)?")
                assert spec.answer(view) == view.snap1.free_count and spec.bound(view) == view.snap0.page_count
                assert spec.describe(1) == "1 free page" and spec.describe(3) == "3 free pages"
    assert asked["free"] and asked["base_free"]


def test_the_block_table_question_is_asked_answered_and_worded_alike_on_every_design():
    asked = Counter()
    for _, session in oracle.random_sessions(8):
        for view in _views(session):
            for kind in ("block_table", "base_table", "hash_table"):
                spec = KINDS[kind]
                if not spec.applies(view):
                    continue
                asked[kind] += 1
                assert (spec.title, spec.form, spec.noun) == ("block table", "list", "page")
                assert spec.ask(view) == f"{view.text()} What is {view.op.name}'s block table after it?"
                assert spec.answer(view) == tuple(view.mine(view.snap1).pages)
                assert spec.bound(view) == view.snap0.page_count - 1
                assert spec.describe((3,)) == "page 3" and spec.describe((3, 5)) == "pages 3 5"
    assert asked["block_table"] and asked["base_table"] and asked["hash_table"]


def test_a_run_of_cached_pages_counts_whole_pages_from_the_start_wherever_each_is_cached():
    from kvviz.teach.quiz.core import cached_pages_run

    cached = {(1, 2), (3, 4), (7, 8)}
    assert cached_pages_run((3, 4, 1, 2, 5, 6, 7, 8), 2, cached) == 4  # stops at the first page not cached
    assert cached_pages_run((3, 4, 1), 2, cached) == 2  # a partial last page never counts
    assert cached_pages_run((5, 6, 1, 2), 2, cached) == 0
    assert cached_pages_run((), 2, cached) == 0
