# SPDX-License-Identifier: Apache-2.0
"""`expect candidates N` and `expect victim P`: assertions about the LRU heap."""

from kvviz.core.scenario import parse_scenario
from kvviz.core.session import Session

SCRIPT = """
cache trie pages=6 tokens_per_page=2
acquire a 1..4
publish a
release a
expect candidates {candidates}
expect victim {victim}
acquire b 1 2 9 9
publish b
release b
expect candidates 2
"""


def _results(candidates, victim):
    session = Session.from_scenario(parse_scenario(SCRIPT.format(candidates=candidates, victim=victim)))
    return [(r.expect.kind, r.ok, r.message) for i in range(len(session)) for r in session.frame(i).expects]


def test_candidates_and_victim_hold_when_right():
    assert all(ok for _kind, ok, _msg in _results(1, 1))


def test_candidates_and_victim_fail_with_the_actual_value_when_wrong():
    first_candidates, victim, last_candidates = _results(2, 0)
    assert first_candidates == ("candidates", False, "expected candidates 2, got candidates 1")
    assert victim == ("victim", False, "expected victim 0, got victim 1")
    assert last_candidates[1] is True
