# SPDX-License-Identifier: Apache-2.0
"""Random practice scenarios: ordinary .kvs text, the same per seed, harder by level."""

from __future__ import annotations

import random
import subprocess
import sys
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcore import events as ev
from kvviz.teach.generate import LEVELS, generate
from kvviz.core.scenario import format_scenario, parse_scenario
from kvviz.core.session import Session

SEEDS = range(60)


def _facts(level):
    """What the level's scenarios contain, summed over ``SEEDS``."""
    facts = Counter()
    pages = []
    for seed in SEEDS:
        session = Session.from_scenario(parse_scenario(generate(seed, level)))
        pages.append(session.config.pages)
        for i in range(1, len(session)):
            frame = session.frame(i)
            facts["ops"] += 1
            facts["failures"] += frame.failed
            facts["evictions"] += len(frame.evictions)
            facts["cascades"] += sum(e.parent_became_candidate is not None for e in frame.evictions)
            facts["dedups"] += sum(isinstance(e, ev.Deduplicated) for e in frame.events)
            facts["violations"] += len(frame.violations)
            facts["depth"] = max(facts["depth"], _depth(frame.snapshot))
    return facts, pages


def _depth(snap):
    depth = {0: 0}
    for n in sorted(snap.nodes, key=lambda n: n.id):
        if n.parent is not None:
            depth[n.id] = depth[n.parent] + 1
    return max(depth.values())


@pytest.fixture(scope="module")
def facts():
    return {level: _facts(level) for level in LEVELS}


@given(st.integers(min_value=0, max_value=2**63 - 1), st.sampled_from(tuple(LEVELS)))
@settings(max_examples=40, deadline=None)
def test_the_same_seed_and_level_give_the_same_text_and_it_parses(seed, level):
    text = generate(seed, level)
    assert generate(seed, level) == text
    scenario = parse_scenario(text)
    assert scenario.steps
    # Ordinary text: formatting the parsed scenario and parsing it back gives the same ops.
    again = parse_scenario(format_scenario(scenario))
    assert [s.op for s in again.steps] == [s.op for s in scenario.steps]


def test_different_seeds_give_different_scenarios():
    texts = {generate(seed, "medium") for seed in range(20)}
    assert len(texts) == 20


def test_generation_uses_no_global_random_state():
    random.seed(1)
    first = generate(5, "hard")
    random.seed(2)
    random.random()
    assert generate(5, "hard") == first


def test_generation_is_the_same_in_another_process():
    code = "from kvviz.teach.generate import generate; print(generate(42, 'hard'), end='')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "123", "PATH": ""}).stdout
    assert out == generate(42, "hard")


def test_an_unknown_level_names_the_levels():
    with pytest.raises(KeyError, match="easy, medium, hard"):
        generate(1, "expert")


def test_no_generated_scenario_breaks_an_invariant(facts):
    for level, (f, _) in facts.items():
        assert f["violations"] == 0, level


def test_difficulty_grows_with_the_level(facts):
    easy, medium, hard = (facts[level][0] for level in ("easy", "medium", "hard"))
    pages = {level: facts[level][1] for level in LEVELS}
    assert max(pages["easy"]) < min(pages["hard"])  # bigger pools
    assert easy["ops"] < medium["ops"] < hard["ops"]  # longer stories
    assert easy["depth"] < hard["depth"]  # branching: deeper tries
    assert easy["failures"] == medium["failures"] == 0 < hard["failures"]  # only hard says no
    assert hard["dedups"] > medium["dedups"]  # two requests computing one prefix
    assert hard["cascades"] > 0 and medium["cascades"] > 0  # chains peeled by eviction
    assert easy["evictions"] > 0  # even easy fills its pool


def test_the_text_says_how_to_get_it_again():
    text = generate(42, "medium")
    assert "seed 42" in text and "--level medium" in text
