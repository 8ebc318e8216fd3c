# SPDX-License-Identifier: Apache-2.0
"""`kvviz diff`: the first divergence on each bug scenario, none on shortfin's own suite."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner
from shortfin_guard import require_shortfin

require_shortfin()

from kvviz.compare.diff_command import diff  # noqa: E402
from kvviz.backends.registry import make_backend_factory  # noqa: E402
from kvviz.core.demos import demo_dir  # noqa: E402
from kvviz.compare.engine import Observation, compare_dict, format_compare, observe, run_diff  # noqa: E402
from kvviz.core.scenario import parse_scenario, parse_scenario_file  # noqa: E402
from kvviz.core.session import Session  # noqa: E402

BUG_DEMOS = {
    # demo: (step flagged on shortfin, first divergence step, fields that differ, known issue)
    "shortfin-b4b-root-ref": (4, 4, ("free",), "B4b"),
    "shortfin-b9-lookup-no-ref": (5, 5, ("outcome", "cached", "block_tables"), "B9"),
    "shortfin-b10-zero-page-ref": (3, 5, ("outcome", "free", "cached", "block_tables"), "B10"),
}


def demo(name: str):
    return parse_scenario_file(demo_dir() / f"{name}.kvs")


# -- the bug museum, live -------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(BUG_DEMOS))
def test_the_bug_demo_runs_clean_on_kvcore_and_is_flagged_on_shortfin_at_the_bug(name):
    flagged_at, _, _, _ = BUG_DEMOS[name]
    scenario = demo(name)
    kvcore = Session.from_scenario(scenario)
    assert all(not kvcore.frame(i).violations and not kvcore.frame(i).expect_failures for i in range(len(kvcore)))
    shortfin = Session.from_scenario(scenario, backend_factory=make_backend_factory("shortfin"))
    first = next(i for i in range(len(shortfin)) if shortfin.frame(i).violations)
    assert first == flagged_at, [str(v) for v in shortfin.frame(first).violations]


@pytest.mark.parametrize("name", sorted(BUG_DEMOS))
def test_diff_finds_the_first_divergence_of_each_bug_demo_and_names_the_bug(name):
    _, step, fields, code = BUG_DEMOS[name]
    run = run_diff(demo(name))
    d = run.divergence
    assert (d.step, d.fields) == (step, fields)
    assert code in d.known and d.explained
    for i in range(step):  # everything before agrees
        kv, sf = run.observations[i]
        assert kv == sf


def test_b4b_diverges_first_on_free_pages_because_shortfin_defers_the_duplicate():
    d = run_diff(demo("shortfin-b4b-root-ref")).divergence
    assert (d.left.free, d.right.free) == (1, 0)
    assert d.known == ("D1", "B4b")
    # Structurally the block tables agree: X and Y share the cached block's page.
    assert d.left.block_tables == d.right.block_tables == (
        ("X", ((0, (1, 2, 3, 4)), (1, None))), ("Y", ((0, (1, 2, 3, 4)), (2, None))))


def test_b9_shows_one_page_twice_in_shortfins_block_table():
    d = run_diff(demo("shortfin-b9-lookup-no-ref")).divergence
    assert (d.left.outcome, d.right.outcome) == ("CacheAllocationFailure", "ok")
    assert dict(d.right.block_tables)["R"] == ((1, None), (1, None))  # the same page twice, no node
    assert "R" not in dict(d.left.block_tables)


def test_b10_hands_the_owners_page_to_a_stranger_on_shortfin():
    d = run_diff(demo("shortfin-b10-zero-page-ref")).divergence
    shortfin = dict(d.right.block_tables)
    assert shortfin["owner"][0][0] in {alias for alias, _ in shortfin["X"]}  # owner's page is X's too
    assert dict(d.left.block_tables)["owner"] == ((0, (1, 2, 3, 4)),)


# -- shortfin's own suite, re-expressed as scenarios: both caches agree ---------------------

P, POOL = 16, 10  # shortfin's TEST_PAGE_SIZE and TEST_POOL_CAPACITY
HEADER = f"cache trie pages={POOL} tokens_per_page={P}\n"


def tokens(start: int, count: int) -> str:
    return f"{start}..{start + count - 1}" if count else '""'


def basic_allocation(count: int) -> str:
    return HEADER + f"acquire a {tokens(0, count)}\npublish a\nrelease a\n"


def page_reuse(initial: str, reuse: str) -> str:
    return HEADER + (f"acquire first {initial}\npublish first\nrelease first\n"
                     f"acquire again {reuse}\npublish again\nrelease again\n")


def lru_eviction(access_count: int) -> str:
    lines = []
    for i in range(3):
        lines += [f"acquire held{i} {tokens(i * 100, P)}", f"publish held{i}"]
    for i in range(3, POOL):
        lines += [f"acquire s{i} {tokens(i * 100, P)}", f"publish s{i}", f"release s{i}"]
    for i in range(access_count):
        lines += [f"acquire refresh{i} {tokens(i * 100, P)}", f"release refresh{i}"]
    lines += [f"acquire new {tokens(1000, P)}", "release new"]
    for i in range(max(access_count, 3)):
        lines += [f"acquire recheck{i} {tokens(i * 100, P)}", f"release recheck{i}"]
    return HEADER + "\n".join(lines) + "\n"


def progressive_publish(steps: int) -> str:
    lines = [f"acquire a {tokens(0, 3 * P)}"]
    for step in range(1, steps + 1):
        lines += [f"publish a {tokens(0, step * P)}", f"acquire reuse{step} {tokens(0, step * P)}",
                  f"release reuse{step}"]
    return HEADER + "\n".join(lines + ["release a"]) + "\n"


def reference_counting(ref_count: int) -> str:
    lines = [f"acquire first {tokens(0, P)}", "publish first"]
    lines += [f"acquire ref{i} {tokens(0, P)}" for i in range(ref_count - 1)]
    for i in range(POOL - 1):
        lines += [f"acquire fill{i} {tokens(100 + i * P, P)}", f"publish fill{i}"]
    lines += [f"acquire new {tokens(1000, P)}", "expect fail alloc"]
    lines += ["release first"] + [f"release ref{i}" for i in range(ref_count - 1)]
    lines += [f"release fill{i}" for i in range(POOL - 1)]
    return HEADER + "\n".join(lines) + "\n"


SUITE = {
    **{f"basic_allocation[{n}]": basic_allocation(n) for n in (0, P // 2, P, P + 1, 2 * P)},
    "page_reuse[exact_match]": page_reuse(tokens(0, P), tokens(0, P)),
    "page_reuse[multi_page_match]": page_reuse(tokens(0, 2 * P), tokens(0, 2 * P)),
    "page_reuse[prefix_match]": page_reuse(tokens(0, 2 * P), f"{tokens(0, P)} {tokens(100, P)}"),
    "page_reuse[no_match]": page_reuse(tokens(0, P), tokens(50, P)),
    **{f"lru_eviction[{n}]": lru_eviction(n) for n in (1, POOL // 2, POOL - 1)},
    **{f"progressive_publish[{n}]": progressive_publish(n) for n in (1, 2, 3)},
    **{f"reference_counting[{n}]": reference_counting(n) for n in (1, 2, 5)},
}


@pytest.mark.parametrize("name", sorted(SUITE))
def test_diff_finds_no_divergence_on_shortfins_own_suite(name):
    run = run_diff(parse_scenario(SUITE[name], path=name))
    assert run.divergence is None, format_compare(run)
    assert "no divergence" in format_compare(run)


def test_the_suite_scenarios_do_what_shortfins_tests_check():
    lru = run_diff(parse_scenario(lru_eviction(POOL // 2)))
    frames = [lru.right.session.frame(i) for i in range(len(lru))]
    new = next(f for f in frames if f.op is not None and f.op.text.startswith("acquire new"))
    assert len(new.diff.nodes_evicted) == 1  # the least recently used released sequence
    evicted = lru.right.session.frame(new.index - 1).snapshot.node(new.diff.nodes_evicted[0])
    assert evicted.tokens == tuple(range(500, 500 + P))
    rechecks = [f for f in frames if f.op is not None and f.op.name.startswith("recheck") and f.op.kind == "acquire"]
    assert [f.snapshot.allocation_named(f.op.name).hit_tokens for f in rechecks] == [P] * 5
    refs = run_diff(parse_scenario(reference_counting(5)))
    failed = [i for i in range(len(refs)) if refs.right.session.frame(i).failed]
    assert [refs.right.session.frame(i).op.name for i in failed] == ["new"]


# -- observations, reports, the command -----------------------------------------------------


def test_observations_ignore_page_numbers_but_not_which_pages_alias():
    text = "cache trie pages=4 tokens_per_page=2\nacquire a 1 2 3\npublish a\nacquire b 1 2 5\n"
    run = run_diff(parse_scenario(text))
    kv, sf = run.frames(3)
    assert [a.pages for a in kv.snapshot.allocations] != [a.pages for a in sf.snapshot.allocations]
    assert observe(kv) == observe(sf) == Observation(
        "ok", 1, ((1, 2),), (("a", ((0, (1, 2)), (1, None))), ("b", ((0, (1, 2)), (2, None)))))
    assert run.divergence is None


def test_diff_command_prints_both_states_at_the_divergence_and_exits_1():
    result = CliRunner().invoke(diff, [str(demo_dir() / "shortfin-b9-lookup-no-ref.kvs")])
    assert result.exit_code == 1, result.output
    out = result.output
    assert "first divergence at step 5 (line " in out and "acquire R 1..8" in out
    assert "success or failure: kvcore CacheAllocationFailure, shortfin ok" in out
    assert "left trie:lru at step 5:" in out and "right shortfin trie:lru at step 5:" in out
    assert "R: [1 (1)] published 1, 8 tokens" in out  # shortfin's real page numbers
    assert "B9 (defect, docs/bugs.md#b9)" in out


def test_diff_command_accepts_a_demo_name_and_emits_json():
    result = CliRunner().invoke(diff, ["shortfin-b10-zero-page-ref", "--json"])
    assert result.exit_code == 1, result.output
    report = json.loads(result.output)
    d = report["first_divergence"]
    assert (report["schema"], d["step"], d["known"], d["explained"]) == ("kvviz.compare/2", 5, ["B10"], True)
    assert [f["code"] for f in report["findings"]] == ["B10"]
    assert d["right"]["violations"] and not d["left"]["violations"]
    assert d["left"]["observation"]["outcome"] == "CacheAllocationFailure"


@pytest.mark.parametrize("name", ["lru", "shortfin-b9-lookup-no-ref"])
def test_diff_prints_what_compare_with_shortfin_on_the_right_prints_text_and_json(name):
    from kvviz.cli import cli

    runner = CliRunner()
    for flag in ("--print", "--json"):
        diffed = runner.invoke(cli, ["diff", name, *([flag] if flag == "--json" else [])])
        compared = runner.invoke(cli, ["compare", name, "--right", "trie", "--right-backend", "shortfin", flag])
        assert diffed.exit_code == compared.exit_code == (1 if "b9" in name else 0), diffed.output
        assert diffed.stdout == compared.stdout
    header = runner.invoke(cli, ["diff", name]).stdout.splitlines()[0]
    assert re.fullmatch(rf".*{name}\.kvs: kvcore trie:lru vs shortfin 3\.9\.0 trie:lru \(TriePagedAttentionCache\), "
                        r"\d+ steps, \d+ pages of \d+ tokens", header), header


def test_diff_command_exits_0_when_both_agree(tmp_path):
    path = tmp_path / "agree.kvs"
    path.write_text(basic_allocation(P + 1), encoding="utf-8")
    result = CliRunner().invoke(diff, [str(path)])
    assert result.exit_code == 0 and "no divergence" in result.output


def test_diff_of_a_base_cache_scenario_is_bad_input(tmp_path):
    path = tmp_path / "base.kvs"
    path.write_text("cache base pages=2 tokens_per_page=2\nacquire a 1\n", encoding="utf-8")
    result = CliRunner().invoke(diff, [str(path)])
    assert result.exit_code == 2
    assert "compares kvcore's trie cache with shortfin's" in result.output


def test_compare_dict_is_json_and_has_both_snapshots():
    report = compare_dict(run_diff(demo("shortfin-b4b-root-ref")))
    json.dumps(report)
    assert report["first_divergence"]["fields"] == ["free"]
    assert report["first_divergence"]["right"]["snapshot"]["schema"] == "kvcore.snapshot/1"
