# SPDX-License-Identifier: Apache-2.0
"""Quiz questions: deterministic, answered right, with distractors that are really wrong.

Every correct answer is recomputed here from the snapshots before and after the step, with
code of its own (a trie walk, an eviction simulation, ref counts counted from block tables,
the cache's own error message): the quiz reads events and the kvcore's counters, the oracle
reads neither, so a quiz that computed an answer wrongly fails here.
"""

from __future__ import annotations

import dataclasses
import random
import re
from collections import Counter

import pytest

from kvviz.demos import demo_names, load_demo
from kvviz.model import quiz as quiz_module
from kvviz.model.generate import LEVELS, generate
from kvviz.model.quiz import KINDS, AnswerError, StepView, Tally, feedback, questions, questions_at
from kvviz.model.scenario import POLICIES, parse_scenario
from kvviz.model.session import Session


# -- the oracle: separate code, from snapshots only -----------------------------------------


def _walk(snap, tokens):
    """Nodes of ``snap`` matched by the full pages of ``tokens`` (the test's own walk)."""
    tpp = snap.tokens_per_page
    path, parent = [], 0
    for i in range(len(tokens) // tpp):
        block = tuple(tokens[i * tpp:(i + 1) * tpp])
        match = [n for n in snap.nodes if n.parent == parent and n.tokens == block]
        if not match:
            break
        path.append(match[0])
        parent = match[0].id
    return path


def _refs(snap, node):
    """A node's ref counted from the block tables: live allocations whose published pages hold it."""
    return sum(1 for a in snap.allocations if not a.released and node.page in a.pages[:a.published])


def _ceil(a, b):
    return (a + b - 1) // b


def _demand(snap, op):
    """(new pages needed, nodes protected by the op's own match) for an acquire or extend."""
    tpp = snap.tokens_per_page
    if op.kind == "acquire":
        path = _walk(snap, op.tokens) if snap.kind == "trie" else []
        return _ceil(len(op.tokens) - len(path) * tpp + op.extra, tpp), {n.id for n in path}
    mine = snap.allocation_named(op.name)
    tokens = mine.tokens + op.tokens if op.append else op.tokens
    return max(0, _ceil(len(tokens) + op.extra, tpp) - len(mine.pages)), set()


#: Each policy's key, written here from DESIGN.md's table (not kvcore's code).
_KEYS = {
    "lru": lambda n: (n.last_access, n.seq),
    "fifo": lambda n: (n.seq,),
    "lfu": lambda n: (n.hits, n.last_access, n.seq),
    "mru": lambda n: (-n.last_access, n.seq),
    "filo": lambda n: (-n.seq,),
    "slru": lambda n: (0 if n.hits < 2 else 1, n.last_access, n.seq),
    "priority": lambda n: (n.priority, n.last_access, n.seq),
}


def _eviction_order(snap, protected, count):
    """The first ``count`` victims, by simulating the snapshot's policy on ``snap`` (LRU:
    pop the smallest (last_access, seq)) among childless ref-0 nodes, a parent joining when
    left childless."""
    alive = {n.id: n for n in snap.nodes if n.parent is not None}
    kids = Counter(n.parent for n in alive.values())
    order = []
    for _ in range(count):
        candidates = [n for n in alive.values() if kids[n.id] == 0 and _refs(snap, n) == 0
                      and n.id not in protected]
        victim = min(candidates, key=_KEYS[snap.policy])
        order.append(victim)
        del alive[victim.id]
        kids[victim.parent] -= 1
    return order


def oracle(view: StepView, question) -> object:
    """The correct answer to ``question`` at ``view``, recomputed without the quiz's code."""
    s0, s1, op = view.before.snapshot, view.after.snapshot, view.after.op
    kind = question.kind
    if kind in ("victim", "victims"):
        needed, protected = _demand(s0, op)
        evicted = needed - len(s0.free)
        order = _eviction_order(s0, protected, evicted)
        for node in order:  # the simulation agrees with what the cache left behind
            assert s1.node(node.id) is None
        if kind == "victim":
            return order[0].page
        return tuple(n.page for n in order[:min(3, evicted)])
    if kind == "hits":
        hit = len(_walk(s0, op.tokens)) * s0.tokens_per_page
        assert s1.allocation_named(op.name).hit_tokens == hit
        return hit
    if kind == "block_table":
        if op.kind == "publish":
            mine = s0.allocation_named(op.name)
            path = _walk(s1, s1.allocation_named(op.name).tokens)
            return tuple(n.page for n in path) + tuple(mine.pages[len(path):])
        needed, protected = _demand(s0, op)
        mine = s0.allocation_named(op.name)
        start = tuple(n.page for n in _walk(s0, op.tokens)) if op.kind == "acquire" else mine.pages
        taken = min(needed, len(s0.free))
        victims = _eviction_order(s0, protected, needed - taken)
        return tuple(start) + tuple(s0.free[:taken]) + tuple(n.page for n in victims)
    if kind == "ref":
        node = s1.node(int(re.search(r"node (\d+)", question.text).group(1)))
        return _refs(s1, node)
    if kind == "fail":
        if view.after.error is None:
            return 0
        need, free, evictable = map(int, re.search(r"need (\d+) pages?: (\d+) free, (\d+) evictable",
                                                   view.after.error.message).groups())
        return need - free - evictable
    if kind == "free":
        return sum(1 for p in s1.pages if p.state == "free")
    if kind == "evictable":
        listed = [int(p) for p in re.findall(r"page (\d+) \(node", question.text)]
        return tuple(sorted(p for p in listed if _refs(s1, s1.node_for_page(p)) == 0))
    raise AssertionError(f"the oracle does not know the kind {kind!r}: add it")


# -- sessions to check ------------------------------------------------------------------------


def _demo_sessions():
    for name in demo_names():
        scenario = load_demo(name)
        yield name, Session.from_scenario(scenario)


def _random_sessions(n, policy="lru"):
    levels = tuple(LEVELS)
    for i in range(n):
        level = levels[i % len(levels)]
        scenario = parse_scenario(generate(i, level))
        if policy != scenario.config.policy:
            scenario = dataclasses.replace(scenario, config=dataclasses.replace(scenario.config, policy=policy))
        yield f"{level}/{i}" + ("" if policy == "lru" else f"/{policy}"), Session.from_scenario(scenario)


def _check_session(label, session, seen: Counter) -> None:
    """Every question that could be asked at every step: right answer, wrong distractors."""
    rng = random.Random(label)
    for view in _views(session):
        for q in questions_at(view, rng):
            seen[q.kind] += 1
            want = oracle(view, q)
            where = f"{label} step {q.step} {q.kind}: {q.text}"
            assert q.answer == want, where
            assert q.read(q.correct_line).right, where
            values = [c.value for c in q.choices]
            assert len(set(values)) == len(values), where
            assert values.count(want) == 1, where
            for choice in q.choices:
                assert (choice.mistake is None) == (choice.value == want), where
                assert q.read(str(choice.label)).right == (choice.value == want), where


def _views(session):
    for index in range(1, len(session)):
        yield StepView(session, index, session.frame(index - 1), session.frame(index))


def test_every_question_on_every_demo_is_answered_right_with_wrong_distractors():
    seen = Counter()
    for label, session in _demo_sessions():
        _check_session(label, session, seen)
    assert seen, "the demos gave no question at all"


@pytest.mark.parametrize("policy", [p for p in POLICIES if p != "lru"])
def test_every_question_under_every_policy_is_answered_right_with_wrong_distractors(policy):
    """The random scenarios again, each under another eviction policy: the victims, block
    tables and distractors follow the policy's key, not lru's."""
    seen = Counter()
    for label, session in _random_sessions(60, policy):
        _check_session(label, session, seen)
    assert seen["victim"] >= 5 and seen["victims"] >= 1, seen


def test_every_question_on_500_random_scenarios_is_answered_right_with_wrong_distractors():
    seen = Counter()
    for label, session in _random_sessions(500):
        _check_session(label, session, seen)
    # Each kind was checked against the oracle many times: none is dead code.
    assert set(seen) == set(KINDS), f"kinds never asked: {set(KINDS) - set(seen)}"
    assert min(seen.values()) >= 20, seen


# -- determinism and the timeline -------------------------------------------------------------


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
    questions(session, seed=3)
    assert list(session.steps) == steps
    assert [session.frame(i).snapshot.digest() for i in range(len(session))] == before


def test_questions_come_only_at_interesting_steps_and_one_per_step():
    session = Session.from_scenario(load_demo("lru"))
    asked = questions(session)
    steps = [q.step for q in asked]
    assert len(steps) == len(set(steps))
    # The first acquire into an empty cache has nothing to predict: no hit, no eviction, no pressure.
    assert 1 not in steps


# -- each kind, on a step whose answer is known from the demo's own expect lines ---------------


def _question(demo, step, kind):
    session = Session.from_scenario(load_demo(demo))
    view = StepView(session, step, session.frame(step - 1), session.frame(step))
    found = [q for q in questions_at(view, random.Random(0)) if q.kind == kind]
    assert found, f"no {kind} question at {demo} step {step}"
    return found[0]


def _step_of(demo, text):
    scenario = load_demo(demo)
    return next(i + 1 for i, s in enumerate(scenario.steps) if s.op.text == text)


def test_victim_is_the_least_recently_used_unreferenced_leaf():
    q = _question("lru", _step_of("lru", "acquire n 8000..8003"), "victim")
    assert q.answer == 2  # the demo's `expect evicted 2`
    mistakes = {c.value: c.mistake for c in q.choices if c.mistake}
    assert 0 not in mistakes or "referenced" in mistakes[0]  # page 0 is held by s0


def test_victims_in_order_follow_the_heap():
    q = _question("lru", _step_of("lru", "acquire big 9000..9011"), "victims")
    assert q.answer == (4, 5, 6)  # `expect evicted 4 5 6`, oldest first
    assert q.read("4 5 6").right and not q.read("6 5 4").right


def test_hits_count_only_whole_pages():
    text = "cache trie pages=8 tokens_per_page=4\nacquire a 1..8\npublish a\nacquire b 1..6\n"
    session = Session.from_scenario(parse_scenario(text))
    view = StepView(session, 3, session.frame(2), session.frame(3))
    q = next(q for q in questions_at(view, random.Random(0)) if q.kind == "hits")
    assert q.answer == 4
    partial = [c for c in q.choices if c.mistake and "partial page" in c.mistake]
    assert [c.value for c in partial] == [6]  # 4 whole tokens of page [5 6 7 8] would make 6
    assert not q.read("6").right and q.read("4").right


def test_block_table_after_a_dedup_publish_adopts_the_cached_pages():
    q = _question("dedup", _step_of("dedup", "publish y"), "block_table")
    assert q.answer == (0, 1, 5)  # `expect pages y 0 1 5`
    assert q.read("0 1 5").right and not q.read("3 4 5").right


def test_ref_counts_every_live_allocation_on_the_path():
    q = _question("dedup", _step_of("dedup", "publish z"), "ref")
    assert q.answer == 3  # `expect ref 0 3`: x, y and z share [1 2 3 4]


def test_fail_counts_the_pages_short():
    q = _question("extend", _step_of("extend", "extend r1 + 21"), "fail")
    assert q.answer == 1  # the first `extend r1 + 21`: one page, none free, none evictable
    assert q.correct_line == "1"


def test_free_pages_after_a_release_count_only_the_unpublished_tail():
    q = _question("dedup", _step_of("dedup", "release x"), "free")
    assert q.answer == 4  # `expect free 4`


def test_evictable_pages_are_those_whose_node_has_ref_zero():
    q = _question("lru", _step_of("lru", "release s7"), "evictable")
    s1 = Session.from_scenario(load_demo("lru")).frame(q.step).snapshot
    shown = [int(p) for p in re.findall(r"page (\d+) \(node", q.text)]
    assert q.answer == tuple(p for p in shown if s1.node_for_page(p).ref == 0)
    assert 0 in shown and 0 not in q.answer  # s0 holds page 0 (node 1)


# -- reading answer lines ------------------------------------------------------------------------


def test_answer_lines_take_a_choice_number_or_the_answer_itself():
    q = _question("lru", _step_of("lru", "acquire big 9000..9011"), "victims")
    right = next(c for c in q.choices if c.mistake is None)
    assert q.read(str(right.label)).right
    assert q.read("pages 4 5 6").right and q.read("4, 5, 6").right
    assert q.read("   ") is None  # a skip
    for bad in ("banana", "9", "4 5 600", "0"):
        with pytest.raises(AnswerError):
            q.read(bad)


def test_number_questions_number_their_choices_by_value():
    q = _question("lru", _step_of("lru", "acquire n 8000..8003"), "victim")
    assert [c.label for c in q.choices] == [c.value for c in q.choices]
    with pytest.raises(AnswerError, match="out of range"):
        q.read("99")


def test_a_one_page_answer_is_written_so_that_it_reads_back_as_the_answer():
    text = "cache trie pages=4 tokens_per_page=4\nacquire a 1..4\npublish a\nrelease a\nacquire b 1..4\n"
    session = Session.from_scenario(parse_scenario(text))
    view = StepView(session, 4, session.frame(3), session.frame(4))
    q = next(q for q in questions_at(view, random.Random(0)) if q.kind == "block_table")
    assert q.answer == (0,) and q.correct_line == "page 0" and q.read(q.correct_line).right


def test_feedback_says_right_or_wrong_the_answer_the_mistake_and_why():
    q = _question("dedup", _step_of("dedup", "publish y"), "block_table")
    wrong = next(c for c in q.choices if c.mistake)
    lines = feedback(q, q.read(str(wrong.label)))
    assert lines[0].startswith("Wrong") and "0 1 5" in lines[0]
    assert wrong.mistake in lines[1] and lines[-1].startswith("Why: ")
    assert feedback(q, q.read(q.correct_line))[0].startswith("Right")
    assert feedback(q, None)[0].startswith("Skipped")


def test_tally_counts_skips_as_asked_and_ends_the_streak():
    q = _question("dedup", _step_of("dedup", "publish y"), "block_table")
    t = Tally().add(q.read(q.correct_line)).add(q.read(q.correct_line))
    assert (t.right, t.asked, t.streak) == (2, 2, 2)
    t = t.add(None)
    assert (t.right, t.asked, t.streak) == (2, 3, 0)


def test_a_refused_answer_never_shows_the_answer_as_its_example():
    for label, session in [*_demo_sessions(), *_random_sessions(60)]:
        for q in questions(session):
            if q.spec.form == "number" or not q.answer:
                continue  # a number question's refusal gives no example; `none` is always listed
            with pytest.raises(AnswerError) as refused:
                q.read("banana")
            assert q.correct_line not in str(refused.value), (label, q.step)


# -- the checks above can fail: each kind with a plausible wrong evaluation is caught --------

WRONG_EVALUATIONS = {
    # each is a mistake a careless implementation could make
    "victim": lambda v: v.victims[-1].page,  # the last victim instead of the first
    "victims": lambda v: tuple(sorted(e.page for e in v.victims[:3])),  # page order
    "hits": lambda v: quiz_module._partial_hit(v),  # a partial page counted
    "block_table": lambda v: tuple(sorted(v.mine(v.snap1).pages)),  # sorted block table
    "ref": lambda v: v.snap0.node(quiz_module._ref_node(v)).ref,  # the ref before the op
    "fail": lambda v: max(0, quiz_module._room(v).needed - quiz_module._room(v).free),  # eviction forgotten
    "free": lambda v: v.snap0.free_count,  # the free count before the op
    "evictable": lambda v: tuple(p for p in quiz_module._shown_pages(v)
                                 if v.snap1.node_for_page(p).id in v.snap1.heap),  # candidates only
}


@pytest.mark.parametrize("kind", sorted(WRONG_EVALUATIONS))
def test_a_wrong_evaluation_of_each_kind_is_caught(kind, monkeypatch):
    assert set(WRONG_EVALUATIONS) == set(KINDS)
    wrong = dataclasses.replace(KINDS[kind], answer=WRONG_EVALUATIONS[kind])
    monkeypatch.setitem(quiz_module.KINDS, kind, wrong)
    with pytest.raises(AssertionError):
        for label, session in [*_demo_sessions(), *_random_sessions(60)]:
            _check_session(label, session, Counter())


def test_the_quiz_counts_room_as_the_cache_does_so_no_fail_question_is_dropped():
    # FAIL only applies where its count agrees with the cache's verdict; it must always agree.
    checked = 0
    for label, session in [*_demo_sessions(), *_random_sessions(150)]:
        for view in _views(session):
            room = quiz_module._room(view)
            error = view.after.error
            if room is None or (error is not None and error.kind != "CacheAllocationFailure"):
                continue
            checked += 1
            assert (room.short > 0) == (error is not None), (label, view.index)
    assert checked > 1000


def test_a_hit_on_unpublished_pages_is_explained_by_who_holds_them():
    q = _question("dedup", _step_of("dedup", "acquire y 1..8 10"), "hits")
    assert q.answer == 0
    assert any(c.value == 8 and "unpublished" in c.mistake for c in q.choices if c.mistake)
    assert "x holds the next page's tokens but has not published them" in q.why
