# SPDX-License-Identifier: Apache-2.0
"""SGLang 0.5.23's own RadixCache against kvcore's trie (`kvviz diff --backend sglang`): the
split-refresh defect at `acquire D`, `kvviz run --backend sglang`, and random scenarios whose
every divergence is a known SGLang issue."""

from __future__ import annotations

import json
import random

from click.testing import CliRunner
from engine_guard import require_engine

require_engine("sglang")

from kvviz.cli import cli  # noqa: E402
from kvviz.core.demos import load_demo  # noqa: E402
from kvviz.compare.engine import compare_dict, format_compare, run_diff  # noqa: E402
from kvviz.core.scenario import CacheConfig, Op, Scenario, Step, format_scenario  # noqa: E402

SPLIT_DEMO = "sglang-split-refresh"


def test_the_split_refresh_demo_diverges_at_acquire_d_named_as_the_known_issue():
    run = run_diff(load_demo(SPLIT_DEMO), "sglang")
    d = run.divergence
    assert d is not None and d.op_text == "acquire D 300..303" and d.step == len(run.scenario.steps)
    assert d.fields == ("cached",) and d.known == ("SG2",) and d.explained
    kvcore, sglang = d.left.cached, d.right.cached
    assert (1, 2, 3, 4, 5, 6, 7, 8) in sglang and (1, 2, 3, 4, 5, 6, 7, 8) not in kvcore  # A's idle tail kept
    assert (100, 101, 102, 103) in kvcore and (100, 101, 102, 103) not in sglang  # B, newer, evicted
    assert "SG2" in format_compare(run)


def test_the_split_refresh_diff_json_names_the_issue_and_both_sides():
    report = compare_dict(run_diff(load_demo(SPLIT_DEMO), "sglang"))
    assert report["schema"] == "kvviz.compare/2" and report["sides"]["right"]["version"] == "0.5.23"
    assert (report["sides"]["left"]["backend"], report["sides"]["right"]["backend"]) == ("kvcore", "sglang")
    assert report["first_divergence"]["known"] == ["SG2"] and set(report["first_divergence"]) >= {"left", "right"}


def test_kvviz_diff_backend_sglang_exits_1_at_the_divergence():
    result = CliRunner().invoke(cli, ["diff", SPLIT_DEMO, "--backend", "sglang"])
    assert result.exit_code == 1, result.output
    assert "first divergence at step 10" in result.output and "SG2" in result.output


def test_kvviz_run_lru_on_sglang_prints_every_expect_held_with_sglangs_own_refs():
    result = CliRunner().invoke(cli, ["run", "lru", "--backend", "sglang", "--print"])
    assert result.exit_code == 0, result.output
    assert "ok" in result.output and "VIOLATION" not in result.output


def test_kvviz_run_lru_on_sglang_as_json_names_the_backend():
    result = CliRunner().invoke(cli, ["run", "lru", "--backend", "sglang", "--json"])
    assert result.exit_code == 0, result.output
    head = json.loads(result.output.splitlines()[0])
    assert head["backend"] == "sglang" and head["kind"] == "trie"


def test_sglang_agrees_with_kvcores_trie_on_the_lru_demo():
    run = run_diff(load_demo("lru"), "sglang")
    assert run.divergence is None, format_compare(run)


def random_scenario(rng: random.Random) -> Scenario:
    tpp, pages = rng.choice((1, 2, 4)), rng.randint(2, 7)
    stems = ((1, 2, 3, 5) * 4, (1, 2, 1, 2) * 4)
    live: dict[str, tuple] = {}
    steps = []
    for _ in range(rng.randint(3, 40)):
        kind = rng.choice(("acquire", "acquire", "publish", "release"))
        if kind == "acquire" or not live:
            free = [n for n in "abcd" if n not in live]
            if not free:
                continue
            name = rng.choice(free)
            tokens = rng.choice(stems)[:rng.randint(1, 3 * tpp)] + tuple(rng.choice((7, 8, 9))
                                                                         for _ in range(rng.randint(0, tpp)))
            steps.append(Step(Op("acquire", name, tokens, 0)))
            live[name] = tokens
        else:
            name = rng.choice(sorted(live))
            if kind == "publish":
                steps.append(Step(Op("publish", name, None)))
            else:
                steps.append(Step(Op("release", name, None)))
                del live[name]
    return Scenario(config=CacheConfig("trie", pages, tpp), steps=tuple(steps))


def test_every_divergence_on_random_scenarios_is_a_known_sglang_issue():
    rng = random.Random(3523)
    agreed = explained = ops = 0
    for _ in range(200):
        scenario = random_scenario(rng)
        ops += len(scenario.steps)
        run = run_diff(scenario, "sglang")
        if run.divergence is None:
            agreed += 1
            continue
        assert run.divergence.explained, format_scenario(scenario) + "\n" + format_compare(run)
        explained += 1
    assert ops >= 2000 and explained >= 1, (ops, explained)  # real scenarios, some diverging
    assert agreed >= 100, (agreed, explained)  # most agree: the comparison is not vacuous either way


def test_a_refused_acquire_that_matched_nothing_changes_nothing_on_sglang():
    from kvviz.backends.registry import make_backend_factory
    from kvviz.core.scenario import parse_scenario
    from kvviz.core.session import Session

    scenario = parse_scenario("cache trie pages=1 tokens_per_page=1\nacquire a 1 extra=1\n")
    session = Session.from_scenario(scenario, backend_factory=make_backend_factory("sglang"))
    frame = session.frame(1)
    assert frame.error is not None and frame.error.kind == "CacheAllocationFailure"
    assert not frame.violations and frame.snapshot == session.frame(0).snapshot


def test_a_refused_acquire_whose_lookup_matched_is_reported_as_the_known_lru_touch():
    from kvviz.core.scenario import parse_scenario

    scenario = parse_scenario("cache trie pages=1 tokens_per_page=1\nacquire a 1\npublish a\nacquire b 1 1\n")
    run = run_diff(scenario, "sglang")
    assert [f.code for f in run.right.findings[3]] == ["SG3"]
    assert run.right.session.frame(3).error is not None


def test_sglangs_whole_leaf_eviction_is_named_where_it_decides_a_difference():
    run = run_diff(load_demo("heap-ties"), "sglang")
    d = run.divergence
    assert d is not None and "SG1" in d.known and d.explained
    assert "SG1 (design" in format_compare(run)
