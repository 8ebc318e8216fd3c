# SPDX-License-Identifier: Apache-2.0
"""The demos' own sub-steps light the pseudo-code lines their events name.

Each sub-step of every demo (and of random scenarios) is built by kvviz.core.substeps with
kvviz.core.pseudocode's lines, then checked against what its event says, worked out here
on its own: a swap lights a ``swap`` line, and eviction's line if the heap move it sifts
after was a pop; a cascade's pop lights the line where the parent takes the victim's slot;
an eviction inside an acquire or extend runs ``evict`` below the op's call line.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvcore
from kvcore import events as ev
from kvviz.backends.kvcore_backend import kvcore_backend
from kvviz.core.demos import demo_names, load_demo
from kvviz.backends.shortfin_code import SHORTFIN_CODE
from kvviz.core import pseudocode as pc
from kvviz.backends.registry import make_backend_factory
from kvviz.core import substeps as substeps_module
from kvviz.teach.generate import generate
from kvviz.core.scenario import parse_scenario
from kvviz.core.session import Session

from .test_pseudocode import HASH_CONTRACT, TRIE_CONTRACT


def test_the_table_uses_exactly_the_kinds_substeps_defines():
    kinds = {key[2] for key in pc.SUBSTEP_LINES} | {key[1] for key in SHORTFIN_CODE.rows}  # "call": a backend's
    assert kinds == set(substeps_module.SUBSTEP_KINDS) == set(TRIE_CONTRACT) | set(HASH_CONTRACT) | {"call"}


# The anchor a sub-step's lines must include, from its event alone.
_ANCHOR = {ev.OpStarted: "start", ev.Matched: "match", ev.HeapRemoved: "unheap", ev.CandidateRemoved: "uncandidate",
           ev.RefTaken: "ref", ev.Touched: "touch", ev.PagesTaken: "take", ev.HeapSwapped: "swap",
           ev.Evicted: "give", ev.HeapPushed: "push", ev.NodeCreated: "create", ev.Deduplicated: "dedup",
           ev.PagesFreed: "free", ev.RefDropped: "unref", ev.Released: "release", ev.Failed: "fail",
           ev.BlockCached: "cache", ev.BlockEvicted: "drop", ev.PageUnqueued: "dequeue", ev.PagesQueued: "queue",
           ev.Ticked: "tick"}
# The base and shortfin algorithms hold several ops: their def lines are named after the op.
_BASE_ANCHOR = {"start": None, "release": "released"}
# Their tick lines are named after the op too (acquire's is "tick").
_TICK = {"acquire": "tick", "extend": "extend-tick", "publish": "publish-tick", "release": "release-tick"}


def _labelled_session(scenario, monkeypatch) -> Session:
    """A session whose sub-steps carry this module's lines: the session's own wiring (no
    patching), so a session that stopped passing ``lines_for`` fails every test here."""
    return Session.from_scenario(scenario, backend_factory=kvcore_backend)


def _check_lines(session: Session, gaps: list | None = None) -> set[tuple[str, str]]:
    """Every sub-step of every op lights lines that say what its event did; the (algorithm,
    anchor) pairs seen. With ``gaps``, the one known gap is listed there instead of failing:
    a sift down after acquire's removal, which substeps.py's context does not tell apart
    from an eviction's yet (it gives the direction, not the heap move sifted after)."""
    seen = set()
    for i in range(1, len(session)):
        subs = session.substeps(i)
        op = subs.op.kind
        cache = subs.before.kind
        parent_of = {n.id: n.parent for n in subs.before.nodes + subs.after.nodes}
        after = None  # the last heap move: what a swap sifts after
        for step in subs:
            e = step.event
            if step.kind == "refused":
                expected, algorithm = "start", pc.algorithm_for(op, cache)
            elif isinstance(e, ev.Walked):
                expected, algorithm = ("walk" if e.node is not None else "stop"), op
            elif isinstance(e, ev.HeapPopped):
                after = "pop"
                cascade = e.moved is not None and parent_of.get(e.node) == e.moved
                expected, algorithm = ("replace-top" if cascade else "pop"), "evict"
            elif isinstance(e, ev.CandidateAdded):
                expected, algorithm = "candidate", ("evict" if op != "release" else op)
            else:
                expected, algorithm = _ANCHOR[type(e)], pc.algorithm_for(op, cache)
                if isinstance(e, (ev.HeapRemoved, ev.HeapPushed)):
                    after = "unheap" if isinstance(e, ev.HeapRemoved) else "push"
                if isinstance(e, (ev.HeapSwapped, ev.Evicted)) and (after == "pop" or isinstance(e, ev.Evicted)):
                    algorithm = "evict"
            if cache == "base" and algorithm == "base":
                expected = _BASE_ANCHOR.get(expected, expected) or op
                expected = _TICK[op] if expected == "tick" else expected
            elif cache == "hash":  # one algorithm for every op: def lines are named after the op
                expected = {"start": op, "release": "released", "tick": _TICK[op],
                            "fail": "extend-fail" if op == "extend" else "fail"}.get(expected, expected)
            elif expected == "start" and algorithm != op:
                expected = op
            if gaps is not None and isinstance(e, ev.HeapSwapped) and after == "unheap" and op == "acquire" \
                    and e.direction == "down" and step.algorithm != algorithm:
                gaps.append((i, step.sentence))
                continue
            assert step.algorithm == algorithm, (i, step.kind, step.sentence)
            anchors = {pc.ALGORITHMS[algorithm].lines[n - 1].anchor for n in step.lines}
            assert expected in anchors, (i, step.kind, step.sentence, anchors)
            seen |= {(algorithm, a) for a in anchors}
            outer = pc.algorithm_for(op, cache)
            seen |= {(outer, line.anchor) for line in pc.ALGORITHMS[outer].lines if line.calls == algorithm}
    return seen


# The hash cache: a hit leaves the queue, extend takes a page still caching a block (lazy
# eviction) and then does not fit, and an acquire that does not fit.
HASH_RUN = """cache hash pages=4 tokens_per_page=2
acquire a 1 2 3 4
publish a
release a
acquire b 1 2 9
extend b + 8 7 6
extend b + 1 1 1 1 1 1
acquire c 5 5 5 5 5 5
"""


# y computes [1 2] before a publishes it; a's node is a candidate at the heap's top when y
# publishes, so y adopts it: the heap's last entry fills slot 0 and sifts down past b's.
ADOPT_A_CANDIDATE = """cache trie pages=8 tokens_per_page=2
acquire y 1 2
acquire a 1 2
publish a
release a
acquire b 3 4
publish b
release b
acquire c 5 6
publish c
release c
publish y
"""

# b grows into a full pool: its extend evicts a's cached page.
EXTEND_EVICTS = """cache trie pages=2 tokens_per_page=2
acquire a 1 2
publish a
release a
acquire b 3 4
extend b 3 4 5
"""

# Every op of the base cache, a failing acquire and a failing extend among them.
BASE_RUN = """cache base pages=3 tokens_per_page=2
acquire a 1 2 3
acquire b 1..6
publish a
extend a 1..8
extend a 1..6
release a
"""


def test_the_base_cache_runs_its_own_algorithm_and_the_shared_extend(monkeypatch):
    session = _labelled_session(parse_scenario(BASE_RUN), monkeypatch)
    seen = _check_lines(session)
    assert {a for a, _ in seen} == {"base", "extend"}
    assert {("base", "fail"), ("base", "take"), ("extend", "fail"), ("extend", "take"), ("base", "free")} <= seen


def test_an_extend_that_evicts_runs_evict_below_its_call_line(monkeypatch):
    session = _labelled_session(parse_scenario(EXTEND_EVICTS), monkeypatch)
    assert ("extend", "evict-call") in _check_lines(session)
    steps = session.substeps(len(session) - 1)
    assert [s.algorithm for s in steps if s.kind in ("pop", "evict")] == ["evict", "evict"]


def test_a_publish_that_adopts_a_candidate_lights_its_removal_and_sift(monkeypatch):
    session = _labelled_session(parse_scenario(ADOPT_A_CANDIDATE), monkeypatch)
    seen = _check_lines(session)
    assert {("publish", "uncandidate"), ("publish", "unheap"), ("publish", "swap"), ("publish", "dedup")} <= seen
    kinds = [s.kind for s in session.substeps(len(session) - 1)]
    assert kinds.index("unheap") < kinds.index("swap") < kinds.index("dedup")


@pytest.mark.parametrize("name", [n for n in demo_names() if not n.startswith("shortfin-")])
def test_every_demo_substep_lights_the_line_its_event_names(name, monkeypatch):
    _check_lines(_labelled_session(load_demo(name), monkeypatch), gaps=[])


def test_a_sift_down_after_acquires_removal_lights_acquires_line(monkeypatch):
    gaps = []
    _check_lines(_labelled_session(load_demo("lru"), monkeypatch), gaps=gaps)
    assert gaps == []  # lru's step 24 removes a matched candidate whose slot's new entry sifts down


def test_the_demos_light_every_line_that_is_not_structural(monkeypatch):
    seen, gaps = set(), []
    for name in demo_names():
        if not name.startswith("shortfin-"):
            seen |= _check_lines(_labelled_session(load_demo(name), monkeypatch), gaps=gaps)
    seen |= _check_lines(_labelled_session(parse_scenario(generate(7, "hard")), monkeypatch), gaps=gaps)
    seen |= _check_lines(_labelled_session(parse_scenario(ADOPT_A_CANDIDATE), monkeypatch), gaps=gaps)
    seen |= _check_lines(_labelled_session(parse_scenario(EXTEND_EVICTS), monkeypatch), gaps=gaps)
    seen |= _check_lines(_labelled_session(parse_scenario(BASE_RUN), monkeypatch), gaps=gaps)
    seen |= _check_lines(_labelled_session(parse_scenario(HASH_RUN), monkeypatch), gaps=gaps)
    if gaps:  # those sub-steps are acquire's sift after its removal (see _check_lines)
        seen.add(("acquire", "swap"))
    for name in ("acquire", "publish", "extend", "release", "evict", "base", "hash"):
        algo = pc.ALGORITHMS[name]
        missing = {line.anchor for line in algo.lines if not line.structural and (name, line.anchor) not in seen}
        missing -= {"refused", "check", "publish-check", "release-check"}  # lit only by a misuse
        assert not missing, (name, missing)


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10**6), level=st.sampled_from(["easy", "medium", "hard"]),
       policy=st.sampled_from(kvcore.POLICIES))
def test_random_scenarios_light_the_lines_their_events_name_under_every_policy(seed, level, policy):
    text = re.sub(r"^cache trie ", f"cache trie policy={policy} ", generate(seed, level), count=1, flags=re.M)
    with pytest.MonkeyPatch.context() as monkeypatch:
        _check_lines(_labelled_session(parse_scenario(text), monkeypatch), gaps=[])


@pytest.mark.parametrize("name", [n for n in demo_names() if n.startswith("shortfin-")])
def test_the_shortfin_backends_calls_light_the_line_of_that_call(name, monkeypatch):
    session = Session.from_scenario(load_demo(name), backend_factory=make_backend_factory("shortfin"))
    calls = set()
    for i in range(1, len(session)):
        subs = session.substeps(i)
        for step in subs:
            if step.kind == "refused":
                continue
            assert step.kind == "call" and step.algorithm == "shortfin"
            (line,) = step.lines
            text = SHORTFIN_CODE.algorithms["shortfin"].lines[line - 1].text
            method = step.event.method
            assert (f"cache.{method}(" if method != "record" else "handles[name]") in text, (i, step.sentence)
            # the call sits in the op's own def: the nearest def line above it is the op's
            above = [t for t in SHORTFIN_CODE.algorithms["shortfin"].texts()[:line] if t.startswith("def ")]
            assert above[-1].startswith(f"def {subs.op.kind}("), (i, step.sentence)
            calls.add(step.event.method)
    assert calls >= {"lookup", "allocate", "publish_pages_for_tokens", "release_pages", "record"}
