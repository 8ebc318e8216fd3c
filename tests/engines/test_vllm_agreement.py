# SPDX-License-Identifier: Apache-2.0
"""vLLM 0.33.0's own KVCacheManager against kvcore's hash design (`kvviz diff --backend vllm`):
every demo, and a few hundred random op sequences, agree at every step."""

from __future__ import annotations

import random

import pytest
from engine_guard import require_engine

require_engine("vllm")

from kvviz.core.demos import demo_names, load_demo  # noqa: E402
from kvviz.compare.engine import format_compare, run_diff  # noqa: E402
from kvviz.core.scenario import CacheConfig, Op, Scenario, Step, format_scenario  # noqa: E402

NAMES = ("a", "b", "c", "d")
ALPHABET = (1, 2, 3, 5)
STEMS = ((1, 2, 3, 5) * 3, (1, 2, 1, 2) * 3)
RANDOM_SCENARIOS = 300


def expressible(name: str) -> bool:
    """A demo vLLM's API can run: no eviction priorities (vLLM has none)."""
    return not any(step.op.kind == "acquire" and step.op.priority for step in load_demo(name).steps)


DEMOS = [name for name in demo_names() if expressible(name)]


def test_most_demos_are_expressible_on_vllm():
    assert len(DEMOS) >= 0.8 * len(demo_names()), sorted(set(demo_names()) - set(DEMOS))


@pytest.mark.parametrize("name", DEMOS)
def test_vllm_agrees_with_kvcores_hash_design_on_the_demo(name):
    run = run_diff(load_demo(name), "vllm")
    assert run.divergence is None, format_compare(run)
    vllm = run.right.session
    assert not [str(v) for i in range(len(vllm)) for v in vllm.frame(i).violations]


def random_scenario(rng: random.Random) -> Scenario:
    """A small cache and ~30 ops over a tiny alphabet, so prefixes are shared, pages run out
    and eviction happens often (the shape of tests/shortfin's random ops)."""
    tpp = rng.randint(1, 4)
    pages = rng.randint(1, 7)
    live: dict[str, tuple] = {}
    steps = []

    def word() -> tuple:
        stem = rng.choice(STEMS)[:rng.randint(0, 3 * tpp)]
        return stem + tuple(rng.choice(ALPHABET) for _ in range(rng.randint(0, tpp)))

    for _ in range(rng.randint(3, 40)):
        kind = rng.choice(("acquire", "acquire", "publish", "extend", "release"))
        if kind == "acquire" or not live:
            free = [n for n in NAMES if n not in live]
            if not free:
                continue
            name, tokens = rng.choice(free), word() or (1,)
            op = Op("acquire", name, tokens, rng.choice((0, 0, 1, tpp)))
            live[name] = tokens
        else:
            name = rng.choice(sorted(live))
            if kind == "publish":
                cut = rng.choice((None, rng.randint(0, len(live[name]))))
                op = Op("publish", name, None if cut is None else live[name][:cut])
            elif kind == "extend":
                more = tuple(rng.choice(ALPHABET) for _ in range(rng.randint(0, 2 * tpp)))
                op = Op("extend", name, more, rng.choice((0, 0, 1)), True)
                live[name] += more
            else:
                op = Op("release", name, None)
                del live[name]
        steps.append(Step(op))
    recompute = rng.random() < 0.5
    return Scenario(config=CacheConfig("hash", pages, tpp, recompute_last_token=recompute), steps=tuple(steps))


@pytest.mark.parametrize("chunk", range(6))
def test_vllm_agrees_with_kvcores_hash_design_on_random_scenarios(chunk):
    rng = random.Random(35_000 + chunk)
    ops = 0
    for _ in range(RANDOM_SCENARIOS // 6):
        scenario = random_scenario(rng)
        ops += len(scenario.steps)
        run = run_diff(scenario, "vllm")
        assert run.divergence is None, format_scenario(scenario) + "\n" + format_compare(run)
        vllm = run.right.session
        assert not [str(v) for i in range(len(vllm)) for v in vllm.frame(i).violations], format_scenario(scenario)
    assert ops >= 10 * (RANDOM_SCENARIOS // 6)  # the scenarios hold ops (~20 each), not just a config


def test_the_comparison_flags_a_vllm_run_whose_hit_rule_is_deliberately_the_other_one(monkeypatch):
    """A control: with vLLM's last-token rule flipped against kvcore's, demos diverge, so the
    agreement above is not a comparison that cannot fail."""
    from kvviz.backends import vllm_backend

    real = vllm_backend.VllmBackend.__init__

    def flipped(self, pages, tokens_per_page, recompute_last_token=False):
        real(self, pages, tokens_per_page, recompute_last_token=not recompute_last_token)

    monkeypatch.setattr(vllm_backend.VllmBackend, "__init__", flipped)
    flagged = [name for name in DEMOS if run_diff(load_demo(name), "vllm").divergence is not None]
    assert len(flagged) >= 10, flagged
