# SPDX-License-Identifier: Apache-2.0
"""`kvviz compare`: one scenario on two cache configurations (kvviz/compare/engine.py and
kvviz/compare/compare_command.py). kvcore on both sides: no optional backend needed."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from kvviz.backends.kvcore_backend import KvcoreBackend
from kvviz.cli import cli
from kvviz.compare import engine as compare
from kvviz.core.demos import demo_path
from kvviz.compare.engine import (
    COMPARE_KINDS,
    CompareRun,
    Counters,
    DiffError,
    SideSpec,
    compare_dict,
    format_compare,
    parse_side,
    run_compare,
)
from kvviz.core.scenario import CacheConfig, POLICIES, parse_scenario, parse_scenario_file
from kvviz.core.session import Session

TRIE_LRU = CacheConfig("trie", 8, 4, "lru")

# tokens_per_page=2, 4 pages. a computes 2 pages and publishes them; b matches both (4 hit
# tokens) and computes 1; extending b by 2 tokens computes 1 more; c cannot get a page.
COUNTED = """\
cache trie pages=4 tokens_per_page=2
acquire a 1 2 3 4
publish a
release a
acquire b 1 2 3 4 5
extend b + 6 7
acquire c 9
"""


def lru_demo():
    return parse_scenario_file(demo_path("lru"))


def invoke(*args):
    return CliRunner().invoke(cli, ["compare", *map(str, args)], prog_name="kvviz")


# -- side specs -------------------------------------------------------------------------------


def test_a_side_names_a_kind_and_a_policy():
    assert parse_side("trie:lfu", TRIE_LRU) == SideSpec("trie", "lfu", "kvcore")
    assert parse_side("base", TRIE_LRU) == SideSpec("base", "lru", "kvcore")
    assert parse_side("hash", TRIE_LRU) == SideSpec("hash", "lru", "kvcore")
    assert parse_side("TRIE:FIFO", TRIE_LRU, "shortfin") == SideSpec("trie", "fifo", "shortfin")


def test_a_trie_without_a_policy_takes_the_scripts_own():
    assert parse_side("trie", CacheConfig("trie", 8, 4, "slru")).policy == "slru"
    assert parse_side("trie", CacheConfig("base", 8, 4)).policy == "lru"


@pytest.mark.parametrize("text, words", [
    ("trie:nope", "unknown policy 'nope'"),
    ("x", "'x' is not a cache configuration"),
    ("base:lfu", "takes no policy"),
    ("hash:lru", "takes no policy"),
    ("", "is not a cache configuration"),
])
def test_a_bad_side_is_one_line_naming_what_was_expected(text, words):
    with pytest.raises(DiffError) as caught:
        parse_side(text, TRIE_LRU)
    assert words in str(caught.value) and "\n" not in str(caught.value)


@given(st.text(max_size=20))
def test_any_text_is_a_side_or_a_diff_error(text):
    try:
        spec = parse_side(text, TRIE_LRU)
    except DiffError:
        return
    assert spec.kind in COMPARE_KINDS and spec.policy in POLICIES


def test_labels_say_kind_policy_and_a_foreign_backend():
    assert SideSpec("trie", "lfu").label == "trie:lfu"
    assert SideSpec("base").label == "base"
    assert SideSpec("trie", "lru", "shortfin").label == "shortfin trie:lru"


# -- runs ------------------------------------------------------------------------------------


def test_the_same_configuration_on_both_sides_never_differs():
    scenario = lru_demo()
    run = run_compare(scenario, SideSpec("trie", "lru"), SideSpec("trie", "lru"))
    assert run.divergence is None
    assert all(left == right for left, right in run.observations)
    assert run.left.counters == run.right.counters
    assert (run.left.name, run.right.name) == ("left", "right")  # equal labels: named by side


def test_lru_and_fifo_first_differ_where_they_pick_different_victims():
    """The demo's refreshed s1 survives LRU at `acquire n` (s2 goes); FIFO takes s1, the first
    created of the idle leaves, whatever its refresh."""
    scenario = lru_demo()
    run = run_compare(scenario, SideSpec("trie", "lru"), SideSpec("trie", "fifo"))
    d = run.divergence
    assert d.op_text == "acquire n 8000..8003" and d.fields == ("cached",)
    left_only = set(d.left.cached) - set(d.right.cached)
    right_only = set(d.right.cached) - set(d.left.cached)
    assert left_only == {(100, 101, 102, 103)} and right_only == {(200, 201, 202, 203)}
    assert all(left == right for left, right in run.observations[:d.step])


def test_each_side_is_the_session_its_configuration_makes_alone():
    scenario = lru_demo()
    run = run_compare(scenario, SideSpec("trie", "lru"), SideSpec("trie", "mru"))
    import dataclasses

    alone = Session.from_scenario(dataclasses.replace(scenario, config=dataclasses.replace(scenario.config,
                                                                                          policy="mru")))
    assert [run.right.session.frame(i).snapshot.digest() for i in range(len(run))] == \
           [alone.frame(i).snapshot.digest() for i in range(len(alone))]


def test_counters_count_hits_computed_and_reused_pages_evictions_and_failures():
    run = run_compare(parse_scenario(COUNTED), SideSpec("trie"), SideSpec("base"))
    assert run.left.counters[-1] == Counters(hit_tokens=4, pages_computed=4, pages_reused=2, evictions=0, failures=1)
    assert run.right.counters[-1] == Counters(hit_tokens=0, pages_computed=6, pages_reused=0, evictions=0, failures=1)
    # Running totals: b's acquire (step 4) is where the trie's reuse appears.
    assert [c.pages_reused for c in run.left.counters] == [0, 0, 0, 0, 2, 2, 2]
    assert [c.failures for c in run.right.counters] == [0, 0, 0, 0, 0, 0, 1]


def test_evictions_are_the_caches_own_count():
    run = run_compare(lru_demo(), SideSpec("trie", "lru"), SideSpec("trie", "fifo"))
    for side in run.sides:
        session = side.session
        evicted = sum(len(session.frame(i).evictions) for i in range(len(session)))
        assert side.counters[-1].evictions == evicted > 0


def test_expects_are_checked_on_the_side_that_runs_the_scripts_header():
    scenario = lru_demo()
    written = sum(len(step.expects_for("trie")) for step in scenario.steps)
    run = run_compare(scenario, SideSpec("trie", "lru"), SideSpec("trie", "fifo"))
    assert (run.left.expects_checked, run.left.expects_unchecked) == (written, 0)
    assert (run.right.expects_checked, run.right.expects_unchecked) == (0, written)
    assert "evicting by lru" in run.right.session.frame(0).narration
    assert all(not run.right.session.frame(i).expects for i in range(len(run)))
    assert all(not run.left.session.frame(i).expect_failures for i in range(len(run)))


def test_another_kind_checks_only_the_lines_tagged_for_it_as_run_base_does():
    scenario = parse_scenario_file(demo_path("base-vs-trie"))
    tagged = sum(1 for step in scenario.steps for x in step.expects if x.kinds and "base" in x.kinds)
    run = run_compare(scenario, SideSpec("trie"), SideSpec("base"))
    assert run.right.expects_checked == tagged > 0
    assert all(not run.right.session.frame(i).expect_failures for i in range(len(run)))


def test_the_printed_report_has_a_row_per_step_and_says_which_expects_ran():
    run = run_compare(lru_demo(), SideSpec("trie", "lru"), SideSpec("trie", "fifo"))
    text = format_compare(run)
    assert text.isascii()
    assert "first divergence at step 28 (line " in text
    assert "expects: left (trie:lru) checked" in text and "expects: right (trie:fifo) checked 0" in text
    rows = [line for line in text.splitlines() if line[:4].strip().isdigit()]
    assert len(rows) == len(run)
    last = rows[-1].split("|")
    assert last[1].split()[1:] == [str(v) for v in run.left.counters[-1].to_dict().values()]
    assert last[2].split()[1:] == [str(v) for v in run.right.counters[-1].to_dict().values()]


def test_the_json_report_has_one_record_per_step_per_side_with_the_counters():
    run = run_compare(parse_scenario(COUNTED), SideSpec("trie"), SideSpec("base"))
    data = json.loads(json.dumps(compare_dict(run)))
    records = data["records"]
    assert len(records) == 2 * len(run)
    assert [(r["step"], r["side"]) for r in records[:4]] == [(0, "left"), (0, "right"), (1, "left"), (1, "right")]
    for r in records:
        side = run.left if r["side"] == "left" else run.right
        assert {k: r[k] for k in Counters.__slots__} == side.counters[r["step"]].to_dict()
        assert r["digest"] == side.session.frame(r["step"]).snapshot.digest()
    assert data["sides"]["right"]["label"] == "base"
    assert data["first_divergence"]["step"] == run.divergence.step


# -- the command -----------------------------------------------------------------------------


def test_compare_print_exits_1_at_a_divergence():
    result = invoke("lru", "--left", "trie:lru", "--right", "trie:fifo", "--print")
    assert result.exit_code == 1, result.output
    assert "first divergence at step 28" in result.stdout


def test_compare_exits_0_when_both_sides_agree(tmp_path):
    path = tmp_path / "agree.kvs"
    path.write_text("cache trie pages=4 tokens_per_page=2\nacquire a 1 2\nrelease a\n", encoding="utf-8")
    result = invoke(path, "--right", "trie:fifo", "--print")  # nothing is evicted: no policy shows
    assert result.exit_code == 0, result.output
    assert "no divergence" in result.stdout


def test_compare_json_is_one_document():
    result = invoke("lru", "--right", "trie:lfu", "--json")
    data = json.loads(result.stdout)
    assert data["schema"] == "kvviz.compare/2"
    assert data["sides"]["left"]["label"] == "trie:lru"  # --left defaults to the script's cache line


@pytest.mark.parametrize("args, words", [
    (["--left", "trie:nope", "--right", "base"], "--left: 'trie:nope': unknown policy 'nope'"),
    (["--left", "x", "--right", "base"], "--left: 'x' is not a cache configuration"),
    (["--right", "base:fifo"], "--right: 'base:fifo'"),
    (["--right", "base", "--print", "--json"], "--print and --json exclude each other"),
])
def test_bad_input_is_one_line_and_exit_2(args, words):
    result = invoke("lru", *args)
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and words in lines[0], result.stderr
    assert result.stdout == ""


def test_without_print_or_json_compare_opens_the_side_by_side_app(monkeypatch):
    import kvviz.compare.compare_command

    calls = []
    monkeypatch.setattr(kvviz.compare.compare_command, "launch_diff_ui", lambda run, step: calls.append((run, step)))
    result = invoke("lru", "--right", "trie:fifo")
    assert result.exit_code == 1, result.output
    assert len(calls) == 1 and isinstance(calls[0][0], CompareRun) and calls[0][0].command == "compare"
    assert calls[0][1] is None  # the app opens at the first divergence
    assert result.stdout == ""
    result = invoke("lru", "--right", "trie:fifo", "--step", "5")
    assert calls[-1][1] == 5
    for bad in (["--step", "999"], ["--step", "3", "--print"]):
        result = invoke("lru", "--right", "trie:fifo", *bad)
        assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1, result.stderr


# -- the hash design ------------------------------------------------------------------------------


def test_the_hash_design_is_compared_on_pages_that_hold_nothing():
    """After `release a` the hash design's free queue holds all 4 pages, 2 of them still caching
    a's blocks (eviction is lazy); the trie has 2 free pages and 2 evictable nodes. Compared on
    pages that hold nothing, both have 2."""
    run = run_compare(parse_scenario(COUNTED), SideSpec("trie"), SideSpec("hash"))
    trie, hash_ = run.frames(3)
    assert (trie.snapshot.free_count, hash_.snapshot.free_count) == (2, 4)
    assert run.observations[3][0] == run.observations[3][1]
    assert run.observations[3][1].free == 2 and run.observations[3][1].cached == ((1, 2), (1, 2, 3, 4))


def test_a_hash_block_whose_parent_is_gone_is_unreachable_and_keeps_its_own_tokens():
    import kvcore
    from kvcore import Snapshot

    from kvviz.compare.engine import cached_blocks

    cache = kvcore.make_cache("hash", 4, 2)
    a = cache.acquire_pages_for_tokens([1, 2, 3, 4])
    a.publish_pages_for_tokens()
    a.release_pages()
    data = cache.snapshot().to_dict()
    assert [row[4] for row in data["blocks"]] == [[1, 2], [3, 4]]
    assert [(b.path, b.reachable) for b in cached_blocks(Snapshot.from_dict(data))] == [((1, 2), True),
                                                                                       ((1, 2, 3, 4), True)]
    data["blocks"] = [data["blocks"][1][:5] + [False]]  # the parent [1 2] evicted, the child kept
    (child,) = cached_blocks(Snapshot.from_dict(data))
    assert (child.path, child.reachable, child.name) == ((3, 4), False, "block 2")


# -- No empty section, no "no divergence" beside failures it hides, did-you-mean --

TWICE_COMPUTED = """\
cache trie pages=4 tokens_per_page=4
acquire a 1..4
acquire b 1..4
publish a
publish b
"""


def _report(script: str, right: str) -> str:
    run = run_compare(parse_scenario(script), parse_side("trie", TRIE_LRU), parse_side(right, TRIE_LRU))
    return format_compare(run)


def _sections(text: str) -> list[tuple[str, list[str]]]:
    """Each heading line (ending in ':') and the indented lines under it."""
    out = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.rstrip().endswith(":"):
            indent = len(line) - len(line.lstrip())
            body = []
            for after in lines[i + 1:]:
                if not after.strip() or len(after) - len(after.lstrip()) <= indent:
                    break
                body.append(after)
            out.append((line, body))
    return out


def test_a_block_cached_twice_on_one_side_is_said_not_left_as_an_empty_section():
    text = _report(TWICE_COMPUTED, "hash")  # vLLM keeps both copies; the trie dedups
    for heading, body in _sections(text):
        assert body, f"empty section {heading!r} in:\n{text}"
    assert "twice" in text


@given(seed=st.integers(0, 200), right=st.sampled_from(["base", "hash", "trie:fifo", "trie:mru"]))
def test_no_report_of_a_generated_scenario_has_an_empty_section(seed, right):
    from kvviz.teach.generate import generate

    text = _report(generate(seed, "hard"), right)
    for heading, body in _sections(text):
        assert body, f"empty section {heading!r}"


FAILING_EXPECT = """\
cache trie pages=4 tokens_per_page=4
acquire a 1..4
expect free 1
publish a
"""


def test_no_divergence_with_failed_expects_lists_the_failures_beside_it():
    text = _report(FAILING_EXPECT, "trie:fifo")
    assert "no divergence: outcomes, free pages, cached blocks and block tables agree at every step" in text
    assert "line 3" in text and "expected free 1, got free 3" in text


def test_a_misspelt_policy_gets_a_did_you_mean():
    with pytest.raises(DiffError, match=r"unknown policy 'lruu'; did you mean 'lru'\?"):
        parse_side("trie:lruu", TRIE_LRU)
    with pytest.raises(DiffError, match=r"\(e.g. trie:lfu\); did you mean 'hash'\?$"):
        parse_side("hsah", TRIE_LRU)
    result = CliRunner().invoke(cli, ["compare", "lru", "--right", "trie:lruu", "--print"])
    assert result.exit_code == 2 and "did you mean 'lru'?" in result.stderr


# -- kvviz diff against a backend of the test's own: its words are its backend's ---------------


@dataclass(frozen=True)
class ToyIssue:
    code: str
    kind: str
    title: str
    source: str


class ToyBackend(KvcoreBackend):
    """kvcore's trie under another name, one page short when ``short``, which reports one
    finding on its first op: a foreign backend that is not shortfin."""

    name = "toy"
    version = "0.1"
    cache_name = "ToyCache"
    known_issues = {"T1": ToyIssue("T1", "defect", "the toy's pool is one page short", "TOY.md T1")}

    def __init__(self, cache):
        super().__init__(cache)
        self._findings: list = []
        self._ops = 0

    def apply(self, op):
        super().apply(op)
        self._ops += 1
        if self._ops == 1:
            self._findings.append(SimpleNamespace(code="T1", message="a page went missing", issue=self.known_issues["T1"]))

    def take_findings(self) -> tuple:
        found, self._findings = tuple(self._findings), []
        return found


def toy_factory(short: bool):
    def factory(config, snapshot):
        if snapshot is not None:
            return ToyBackend.from_snapshot(snapshot, verify=False)
        return ToyBackend.fresh(config.kind, config.pages - short, config.tokens_per_page, config.policy)
    return factory


@pytest.fixture
def toy(monkeypatch):
    """Let the registry's factory lookup (as compare uses it) know the toy backend too."""
    real = compare.make_backend_factory
    made = {"toy": toy_factory(True), "toy-whole": toy_factory(False)}
    monkeypatch.setattr(compare, "make_backend_factory", lambda name: made.get(name) or real(name))


TOY_SCRIPT = "cache trie pages=2 tokens_per_page=2\nacquire a 1 2\nrelease a\n"


def test_a_diff_against_any_backend_names_and_words_each_side_by_its_backend(toy):
    run = compare.run_diff(parse_scenario(TOY_SCRIPT, path="toy.kvs"), "toy")
    assert [(s.key, s.name, s.title) for s in run.sides] == [("left", "kvcore", "kvcore trie"),
                                                             ("right", "toy", "toy 0.1")]
    assert run.right.session.backend.name == "toy" and (run.left.version, run.right.version) == (None, "0.1")
    text = compare.format_compare(run)
    lines = text.splitlines()
    assert lines[0] == "toy.kvs: kvcore trie:lru vs toy 0.1 trie:lru (ToyCache), 2 steps, 2 pages of 2 tokens"
    assert lines[3] == "first divergence at step 1 (line 2): acquire a 1 2"
    assert "  free pages: kvcore 1, toy 0" in lines
    assert "left trie:lru at step 1:" in lines and "right toy trie:lru at step 1:" in lines
    known = lines.index("known toy issues seen up to this step (the likely explanation):")
    assert lines[known + 1:known + 3] == ["  step 1: T1 (defect, TOY.md T1): a page went missing",
                                          "  T1: the toy's pool is one page short"]
    report = compare.compare_dict(run)
    assert report["sides"]["right"]["version"] == "0.1" and sorted(report["first_divergence"]) == [
        "explained", "fields", "known", "left", "line", "op", "right", "step"]
    assert report["sides"]["right"]["cache_class"] == "ToyCache" and report["sides"]["left"]["cache_class"] is None
    assert report["findings"] == [{"step": 1, "side": "right", "code": "T1", "kind": "defect",
                                   "message": "a page went missing"}]
    assert report["first_divergence"]["right"]["observation"]["free"] == 0
    assert "shortfin" not in text + json.dumps(report)


def test_a_diff_that_agrees_lists_the_backends_findings_in_its_words(toy):
    run = compare.run_diff(parse_scenario(TOY_SCRIPT, path="toy.kvs"), "toy-whole")
    assert run.divergence is None
    lines = compare.format_compare(run).splitlines()
    agree = lines.index("no divergence: outcomes, free pages, cached blocks and block tables agree at every step")
    assert lines[agree + 1:agree + 4] == [
        "",
        "toy showed known issues that did not change what is compared here:",
        "  step 1: T1: a page went missing"]


def test_a_diff_is_the_compare_of_the_reference_against_the_backend_one_report_one_json(toy):
    """`kvviz diff FILE --backend B` and `kvviz compare FILE --right-backend B` make one run:
    the same report, word for word, and the same JSON."""
    scenario = parse_scenario(TOY_SCRIPT, path="toy.kvs")
    diffed = compare.run_diff(scenario, "toy")
    compared = run_compare(scenario, SideSpec("trie", "lru"), SideSpec("trie", "lru", "toy"))
    assert compare.format_compare(diffed) == compare.format_compare(compared)
    assert compare.compare_dict(diffed) == compare.compare_dict(compared)
    assert (diffed.command, compared.command) == ("diff", "compare")


SIDES = [("kvcore", "trie:lru"), ("kvcore", "trie:lfu"), ("kvcore", "base"), ("kvcore", "hash"), ("toy-whole", "trie")]


@pytest.mark.parametrize("left", SIDES, ids="-".join)
@pytest.mark.parametrize("right", SIDES, ids="-".join)
def test_the_header_names_each_side_once_and_never_says_a_word_twice_in_a_row(toy, left, right):
    """No "shortfin shortfin trie:lru": a side is its backend, a foreign one's version, its
    setting and a foreign one's cache class, each once."""
    left, right = (dataclasses.replace(parse_side(text, TRIE_LRU), backend=backend) for backend, text in (left, right))
    run = run_compare(parse_scenario(TOY_SCRIPT, path="toy.kvs"), left, right)
    header = compare.format_compare(run).splitlines()[0]
    words = header.replace(",", "").split()
    assert all(a != b for a, b in zip(words, words[1:])), header
    assert header.startswith(f"toy.kvs: {run.left.description} vs {run.right.description}, 2 steps"), header
    for side in run.sides:
        expected = ([side.session.backend.name] + ([side.version] if side.foreign else []) + [side.spec.setting]
                    + ([f"({side.cache_class})"] if side.foreign else []))
        assert side.description.split() == expected


def test_a_diff_of_the_reference_with_itself_or_of_a_cache_that_is_no_trie_is_refused_in_one_line(toy):
    with pytest.raises(DiffError, match=r"^a diff compares kvcore with another backend, not with itself "
                                        r"\(expected one of: shortfin, vllm, sglang\)$"):
        compare.run_diff(parse_scenario(TOY_SCRIPT), "kvcore")
    with pytest.raises(DiffError, match=r"^a diff compares kvcore's trie cache with toy's; this scenario runs a "
                                        r"'base' cache"):
        compare.run_diff(parse_scenario(TOY_SCRIPT.replace("trie", "base")), "toy")
