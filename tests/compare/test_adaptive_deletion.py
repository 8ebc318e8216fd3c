# SPDX-License-Identifier: Apache-2.0
"""Shrinking reaches a small minimum, not a local one: ops that only fill the pool leave with
the pages they fill (the pool lowered by k pages with k ops removed, as Hypothesis's adaptive
deletion does), and the result is 1-minimal for the configuration too."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvcore import TriePagedAttentionCache
from kvviz.compare.failure import first_failure
from kvviz.core.scenario import parse_scenario
from kvviz.compare.shrink import ShrinkBudget, shrink

from .helpers import assert_one_minimal, padded, removals

# An acquire that must evict a cached page, after five one-token fillers take the rest of the pool.
FILLED = """cache trie pages=6 tokens_per_page=2
acquire b 2 3
publish b
release b
acquire f1 500
acquire f2 502
acquire f3 504
acquire f4 506
acquire f5 508
acquire g 2 3 8
"""
BUDGET = ShrinkBudget(max_runs=4_000)


# kvcore: a hit on b's page, then an eviction (of c's page) for the rest of the request, once
# four one-token fillers took the free pages.
FILLED_KVCORE = """cache trie pages=6 tokens_per_page=2
acquire b 2 3
publish b
release b
acquire c 60 61
publish c
release c
acquire f1 500
acquire f2 502
acquire f3 504
acquire f4 506
acquire g 2 3 8
"""


def plant_crash_on_eviction_after_a_hit(monkeypatch) -> None:
    """A kvcore trie that crashes when it must evict for a request whose lookup hit: with a
    smaller pool a filler evicts first (no hit: no crash) and the request then fails to
    allocate, a different failure; without a filler nothing is evicted at all."""
    original = TriePagedAttentionCache._evict

    def crash_after_a_hit(self, count, allocation_id):
        if self.allocations[allocation_id].hit_tokens:
            raise RuntimeError("planted: eviction after a hit crashes")
        return original(self, count, allocation_id)

    monkeypatch.setattr(TriePagedAttentionCache, "_evict", crash_after_a_hit)


def assert_one_minimal_with_its_configuration(text: str, mode: str, identity, sources=None) -> None:
    """No op can go, nor a page of the pool or of the page size, nor a page with any one op."""
    assert_one_minimal(text, mode, identity, sources)
    scenario = parse_scenario(text)
    config = scenario.config
    smaller = [replace(scenario, config=replace(config, pages=config.pages - 1)),
               replace(scenario, config=replace(config, tokens_per_page=config.tokens_per_page - 1))]
    smaller += [replace(s, config=replace(config, pages=config.pages - 1)) for _, s in removals(text) if s and s.steps]
    for candidate in smaller:
        if candidate.config.pages < 1 or candidate.config.tokens_per_page < 1:
            continue
        try:
            verdict = first_failure(candidate, mode, sources=sources)
        except ValueError:  # a configuration the cache refuses: not this failure
            continue
        assert verdict.failure is None or verdict.failure.identity != identity, (candidate.config, text)


def test_fillers_leave_with_the_pages_they_fill_on_a_kvcore_planted_to_crash_evicting_after_a_hit(monkeypatch):
    plant_crash_on_eviction_after_a_hit(monkeypatch)
    scenario = padded(parse_scenario(FILLED_KVCORE), 0)
    wanted = first_failure(scenario, "kvcore").failure
    assert wanted.identity.source == "crash" and wanted.text == "acquire g 2 3 8"
    result = shrink(scenario, "kvcore", budget=BUDGET)
    assert not result.stopped and result.identity == wanted.identity
    assert (result.after.ops, result.after.pool_pages) == (6, 2), result.text
    assert_one_minimal_with_its_configuration(result.text, "kvcore", wanted.identity)


def test_the_padded_b9_scenario_shrinks_to_four_ops_on_a_one_page_pool_on_shortfin():
    pytest.importorskip("shortfin_apps", reason='shortfin is not installed (pip install -e ".[shortfin]")')
    scenario = padded(parse_scenario(FILLED), 0)  # 34 ops on 6 pages; shrank to 9 ops on 6 before
    wanted = first_failure(scenario, "shortfin", sources=("violation",)).failure
    assert (wanted.identity.detail, wanted.identity.cause) == ("5", "B9")
    result = shrink(scenario, "shortfin", budget=BUDGET, sources=("violation",))
    assert not result.stopped and result.identity == wanted.identity
    assert (result.after.ops, result.after.pool_pages) == (4, 1), result.text
    assert_one_minimal_with_its_configuration(result.text, "shortfin", wanted.identity, ("violation",))
