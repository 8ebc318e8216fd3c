# SPDX-License-Identifier: Apache-2.0
"""The hash design (vLLM's, ``cache hash``) in every command: check, run (--print, --json,
--substeps), export (.json, .md, .txt) and open; the header's policy refusal; and what each
expect kind means on a hash snapshot, each with a case that fails if it is read the trie's way.

The script: two overlapping requests, so the hash cache caches a duplicate where the trie
would deduplicate, then releases that fill the free queue, and a lazy eviction.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from click.testing import CliRunner

import kvcore
from kvcore import HashBlockPagedAttentionCache, Snapshot
from kvviz.cli import cli
from kvviz.core.demos import demo_names, load_demo
from kvviz.report import render_export
from kvviz.core.snapshot_diff import diff_snapshots
from kvviz.core.expect import EXPECT_KINDS, evaluate
from kvviz.core.free_queue import free_page_count, next_victim, queue_text, unreachable_blocks
from kvviz.teach.quiz import questions, refusal
from kvviz.core.scenario import ScenarioError, parse_command, parse_scenario
from kvviz.core.session import Session
from kvviz.core.why import page_status, why_evicted, why_short_match

# Pages 0..4, 2 tokens each; P = 1 1, C = 2 2. Free queue after each step (head first):
#  1 acquire a P        a: [0]                      queue 1..4
#  2 acquire b P C      b: [1 2] (P not cached yet)  queue 3 4
#  3 publish a          P cached on page 0
#  4 publish b          P again on page 1 (a duplicate), C on page 2: 3 cached pages
#  5 release a          queue 3 4 0*
#  6 release b          queue 3 4 0* 2* 1* (last block first)
#  7 acquire d (3 pages) takes 3 4 0: P's first copy evicted lazily; its key stays on page 1
#  8 acquire e P C      matches page 1 (the duplicate) and page 2: hit 4, queue empty
SCRIPT = """\
title: hash in every command
description: overlapping requests on vLLM's design
cache hash pages=5 tokens_per_page=2
acquire a 1 1
acquire b 1 1 2 2
publish a
publish b
release a
release b
expect queue 3 4 0 2 1
acquire d 5..10
expect evictions 1
acquire e 1 1 2 2
expect hit e 4
expect violations 0
"""


@pytest.fixture(scope="module")
def session() -> Session:
    return Session.from_scenario(parse_scenario(SCRIPT))


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "hash.kvs"
    path.write_text(SCRIPT, encoding="utf-8")
    return path


def invoke(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], prog_name="kvviz")


def one_line_error(result, code: int = 2) -> str:
    assert result.exit_code == code, (result.output, result.exception)
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


# -- the header ----------------------------------------------------------------------------------


def test_a_hash_header_parses_and_runs_on_the_hash_cache(session):
    assert session.config.kind == "hash" and session.frame(-1).snapshot.kind == "hash"


@pytest.mark.parametrize("policy", ["lfu", "fifo", "priority"])
def test_a_hash_header_with_another_policy_is_one_located_line(tmp_path, policy):
    path = tmp_path / "bad.kvs"
    path.write_text(f"# a comment\ncache hash pages=4 policy={policy}\nacquire a 1\n", encoding="utf-8")
    line = one_line_error(invoke("check", path))
    assert f"{path}:2:27:" in line and f"policy must be lru, not '{policy}'" in line
    assert "free queue" in line  # says why: the queue is the order


def test_policy_lru_is_accepted_on_a_hash_header_and_kept_off_its_canonical_line():
    scenario = parse_scenario("cache hash pages=4 tokens_per_page=2 policy=lru\nacquire a 1\n")
    assert scenario.config.policy == "lru"


def test_hash_scope_tags_parse_and_a_misspelt_kind_is_suggested():
    scenario = parse_scenario("cache hash\nacquire a 1\n[hash] expect ok\n[trie hash] > both\n[hash] > one\n"
                              "release a\n")
    assert scenario.steps[0].expects[0].kinds == ("hash",)
    assert scenario.steps[1].narration_for("hash") == "both\none" and scenario.steps[1].narration_for("trie") == "both"
    with pytest.raises(ScenarioError) as caught:
        parse_scenario("acquire a 1\n[hsh] expect ok\n")
    assert "did you mean 'hash'" in str(caught.value) and ":2:2:" in str(caught.value)


# -- check, run ------------------------------------------------------------------------------------


def test_check_passes_on_a_hash_scenario_and_fails_on_a_broken_expect(script, tmp_path):
    result = invoke("check", script)
    assert result.exit_code == 0, result.output
    assert "invariants hold" in result.output
    broken = tmp_path / "broken.kvs"
    broken.write_text(SCRIPT.replace("expect hit e 4", "expect hit e 2"), encoding="utf-8")
    result = invoke("check", broken)
    assert result.exit_code == 1 and "expected hit 2, got hit 4" in result.output


def test_run_print_shows_blocks_the_free_queue_and_lazy_evictions_in_hash_words(script):
    result = invoke("run", "--print", script)
    assert result.exit_code == 0, result.output
    out = result.output
    flat = " ".join(out.split())  # the console wraps long lines
    assert "blocks (vLLM's hash map: chained keys, no tree)" in out
    assert "free queue (head first, * holds a cached block): 3..4 0* 2* 1*" in out
    assert "a duplicate: lookups use page 0" in flat
    assert "x evicted block 1 [1 1] page 0 (lazily" in flat
    assert "free 2 | cached 3 (evictable 3) | owned 0 | free queue 5" in flat
    for trie_word in ("leaf", "heap", "trie node", "root\n"):
        assert trie_word not in out, trie_word


def test_run_json_round_trips_every_snapshot(script, session):
    result = invoke("run", "--json", script)
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.output.splitlines()]
    assert lines[0]["kind"] == "hash" and lines[0]["steps"] == len(session) - 1
    from kvviz.report.timeline_json import read_states

    states = list(read_states(lines))  # the first state whole, then each step's changes
    assert len(states) == len(session)
    for i, (line, snap) in enumerate(states):
        assert snap == session.frame(i).snapshot and snap.state_digest() == line["state_digest"]


def test_run_substeps_replays_each_hash_op_to_its_next_frame(script, session):
    result = invoke("run", "--print", "--substeps", script)
    assert result.exit_code == 0, result.output
    for i in range(1, len(session)):
        subs = session.substeps(i)
        assert subs.state(-1) == session.frame(i - 1).snapshot
        assert subs.state(len(subs) - 1) == session.frame(i).snapshot


# -- export and open -------------------------------------------------------------------------------


def test_a_hash_bundle_opens_with_every_digest_matching_and_tampering_is_caught(script, tmp_path):
    bundle = tmp_path / "b.json"
    assert invoke("export", script, "-o", bundle, "--step", 7).exit_code == 0
    result = invoke("open", bundle, "--print")
    assert result.exit_code == 0, (result.output, result.stderr)
    assert "every digest matches" in result.stderr
    data = json.loads(bundle.read_text(encoding="utf-8"))
    assert data["config"]["kind"] == "hash" and data["snapshot"]["blocks"]
    data["snapshot"]["free"] = data["snapshot"]["free"][::-1]  # another free queue order, same pages
    tampered = tmp_path / "t.json"
    tampered.write_text(json.dumps(data), encoding="utf-8")
    result = invoke("open", tampered, "--print")
    assert result.exit_code != 0 and "every digest matches" not in result.stderr


@pytest.mark.parametrize("suffix", [".md", ".txt"])
def test_markdown_and_text_exports_open_from_their_bundle_and_list_the_blocks_and_queue(script, tmp_path, suffix):
    out = tmp_path / f"r{suffix}"
    result = invoke("export", script, "-o", out, "--step", 6)
    assert result.exit_code == 0, result.output
    text = " ".join(out.read_text(encoding="utf-8").split())
    assert "3..4 0* 2* 1*" in text
    assert "queued q2 of 5" in text and "a duplicate: lookups use page 0" in text
    if suffix == ".md":
        assert "## Blocks" in text and "## Free queue" in text and "| page | state | block |" in text
        assert "mermaid" not in text and "heap" not in text.lower()


def test_the_markdown_export_names_the_blocks_a_step_evicted(session):
    text = render_export(session, 7, ".md")
    assert "Evicted by this step (lazily: their pages were taken from the free queue's head): block 1 [1 1] " \
           "on page 0" in text


def _unreachable_child():
    """A hash snapshot holding an unreachable block: chain P C cached and released, the queue
    reordered so P's page is taken first (the ops never do this; a restored snapshot can)."""
    c = kvcore.make_cache("hash", 5, 2)
    a = c.acquire_pages_for_tokens([1, 1, 2, 2])
    a.publish_pages_for_tokens()
    pages = a.pages
    a.release_pages()
    d = c.snapshot().to_dict()
    d["free"] = [pages[0]] + [p for p in d["free"] if p not in pages] + [pages[1]]
    restored = HashBlockPagedAttentionCache.restore(Snapshot.from_dict(d))
    restored.acquire_pages_for_tokens([7, 7])  # takes P's page: C stays, unreachable
    return restored.snapshot(), pages


def test_exports_mark_an_unreachable_block(session):
    snap, (_, child_page) = _unreachable_child()
    frame = dataclasses.replace(session.frame(0), snapshot=snap, diff=diff_snapshots(None, snap), events=())
    assert [b.page for b in unreachable_blocks(snap)] == [child_page]
    from kvviz.report.markdown import hash_sections
    from kvviz.report.text import frame_text

    text = frame_text(frame, session)
    assert "UNREACHABLE" in text and "(unreachable)" in text
    assert any("**unreachable**" in line and f"page {child_page} " in line for line in hash_sections(frame, session))


# -- each expect kind on a hash snapshot -----------------------------------------------------------


def check(session, step: int, line: str):
    """(ok, message) of ``line`` (as the command bar parses it) against frame ``step``."""
    result = evaluate(parse_command(line), session.frame(step))
    return result.ok, result.message


# (step, a line that holds on the hash cache, one that would hold if it were read the trie's
# way or the free list's, the message of that one)
HASH_CASES = [
    (6, "expect free 2", "expect free 5", "expected free 5, got free 2"),  # queued cached pages are not free
    (4, "expect cached 3", "expect cached 2", "expected cached 2, got cached 3"),  # the duplicate is cached too
    (6, "expect evictable 3", "expect evictable 0", "expected evictable 0, got evictable 3"),
    (2, "expect owned 3", "expect owned 0", "expected owned 0, got owned 3"),
    (6, "expect victim 0", "expect victim 2", "expected victim 2, got victim 0"),  # the queue's first cached page
    (6, "expect queue 3 4 0 2 1", "expect queue 3 4 0 1 2", "expected queue [3 4 0 1 2], got queue [3 4 0 2 1]"),
    (8, "expect hit e 4", "expect hit e 0", "expected hit 0, got hit 4"),
    (8, "expect pages e 1 2", "expect pages e 0 2", "expected pages [0 2], got pages [1 2]"),  # the surviving copy
    (4, "expect published b 2", "expect published b 1", "expected published 1, got published 2"),
    (7, "expect evicted 0", "expect evicted 3", "expected evicted [3], got evicted [0]"),
    (7, "expect evictions 1", "expect evictions 0", "expected evictions 0, got evictions 1"),
    (7, "expect unreachable 0", "expect unreachable 1", "expected unreachable 1, got unreachable 0"),
    (4, "expect ref 0 1", "expect ref 0 2", "expected ref 2, got ref 1"),  # the page's own count, no shared node
    (5, "expect ref 0 0", "expect ref 0 1", "expected ref 1, got ref 0"),
    (5, "expect live b", "expect live a b", "expected live [a b], got live [b]"),
    (8, "expect violations 0", "expect violations 1", "expected violations 1, got violations 0"),
    (1, "expect ok", "expect fail", "expected any failure, got success"),
]


@pytest.mark.parametrize(("step", "right", "wrong", "message"), HASH_CASES, ids=[c[1] for c in HASH_CASES])
def test_each_expect_kind_means_the_hash_cache_truth(session, step, right, wrong, message):
    assert check(session, step, right) == (True, "ok")
    assert check(session, step, wrong) == (False, message)


def test_every_expect_kind_is_either_checked_on_hash_or_refused_for_it():
    covered = {parse_command(c[1]).kind for c in HASH_CASES} | {"fail"}
    refused = {name for name, kind in EXPECT_KINDS.items() if "hash" in kind.not_for}
    assert covered | refused == set(EXPECT_KINDS) and refused == {"candidates"}


def test_fail_on_a_hash_cache_is_checked_as_on_any_cache():
    scenario = parse_scenario("cache hash pages=2 tokens_per_page=2\nacquire a 1..6\nexpect fail alloc\n"
                              "expect violations 0\n")
    (result, _) = Session.from_scenario(scenario).frame(1).expects
    assert result.ok


def test_expect_ref_of_a_page_holding_no_block_says_what_it_is(session):
    assert check(session, 2, "expect ref 1 1") == (False, "expected page 1 to hold a cached block, but it is owned")


def test_expect_victim_with_no_cached_page_queued_is_none(session):
    assert check(session, 8, "expect victim 1") == (False, "expected victim 1, got no victim (nothing is evictable)")


def test_expect_unreachable_counts_an_unreachable_block(session):
    snap, _ = _unreachable_child()
    frame = dataclasses.replace(session.frame(0), snapshot=snap, diff=diff_snapshots(None, snap), events=())
    assert evaluate(parse_command("expect unreachable 1"), frame).ok
    assert not evaluate(parse_command("expect unreachable 0"), frame).ok


@pytest.mark.parametrize("text,column", [
    ("cache hash\nacquire a 1\nexpect candidates 0\n", 8),
    ("cache trie\nacquire a 1\n[hash] expect candidates 0\n", 15),
    ("cache hash\nacquire a 1\n[trie hash] expect candidates 0\n", 20),
])
def test_expect_candidates_checked_on_a_hash_cache_is_refused_where_it_is_written(text, column):
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(text)
    message = str(caught.value)
    assert f":3:{column}:" in message and "expect candidates on a hash cache" in message
    assert "no heap" in message and "\n" not in message


def test_expect_candidates_for_the_trie_only_is_fine_in_a_hash_script():
    (step,) = parse_scenario("cache hash\nacquire a 1\n[trie] expect candidates 0\n").steps
    assert step.expects[0].kinds == ("trie",)


def test_expect_candidates_typed_against_a_hash_frame_fails_with_the_reason(session):
    ok, message = check(session, 6, "expect candidates 0")
    assert not ok and message.startswith("expect candidates means nothing on a hash cache: a hash cache has no heap")
    with pytest.raises(ScenarioError):
        parse_command("[hash] expect candidates 0")


# -- the model's words and values ------------------------------------------------------------------


def test_the_free_queue_helpers_read_the_queue(session):
    snap = session.frame(6).snapshot
    assert free_page_count(snap) == 2 and snap.free_count == 5
    assert next_victim(snap).page == 0 and queue_text(snap) == "3..4 0* 2* 1*"
    assert queue_text(session.frame(8).snapshot) == "(empty)" and next_victim(session.frame(8).snapshot) is None


def test_the_diff_lists_blocks_in_the_node_fields(session):
    assert session.frame(4).diff.nodes_added == (2, 3)
    diff = session.frame(7).diff
    assert (diff.nodes_evicted, diff.pages_evicted) == ((1,), (0,)) and 0 in diff.pages_taken
    assert session.frame(5).diff.ref_changes == ((1, 1, 0),)


def test_hash_narration_names_duplicates_the_queue_and_lazy_eviction_never_trie_words(session):
    told = [session.frame(i).explanation for i in range(len(session))]
    assert "vLLM caches this copy too" in told[4]
    assert "pages 2, 1 joined the free queue's tail, last block first" in told[6]
    assert "it left the cache now, lazily" in told[7] and "another page still caches its key" in told[7]
    assert "left the free queue" in told[8]
    for text in told:
        for word in ("leaf", "node", "heap", "trie", "free list"):
            assert word not in text, (word, text)


def test_why_answers_speak_of_the_queue_and_lazy_eviction(session):
    evicted = why_evicted(session, 8, 0).text()
    assert "Step 7" in evicted and "still held block 1 [1 1]" in evicted and "3..4 0* 2* 1*" in evicted
    status = page_status(session, 6, 0).text()
    assert "q2 of 5 in the free queue" in status and "the next block to go" in status
    assert "a duplicate" in page_status(session, 6, 1).text()
    assert "is not cached" in why_short_match(session, 7, "d").text()
    for text in (evicted, status):
        assert "leaf" not in text and "heap" not in text


def test_the_quiz_asks_a_hash_session_the_hash_caches_own_questions(session):
    from kvviz.core.designs import design

    assert refusal(session) is None  # the hash design brings its own question kinds
    assert {q.kind for q in questions(session)} <= set(design("hash").questions)
    assert refusal(Session.from_scenario(parse_scenario("acquire a 1\n"))) is None


# -- the demo ------------------------------------------------------------------------------------


def test_the_hash_vs_trie_demo_follows_base_vs_trie_in_the_course():
    names = demo_names()
    assert names.index("hash-vs-trie") == names.index("base-vs-trie") + 1


def test_the_hash_vs_trie_demo_is_checked_on_both_designs():
    scenario = load_demo("hash-vs-trie")
    assert scenario.config.kind == "hash"
    for kind in ("hash", "trie"):
        run = Session.from_scenario(scenario, kind=kind)
        results = [r for i in range(1, len(run)) for r in run.frame(i).expects]
        assert len(results) > 25 and all(r.ok for r in results), [r.message for r in results if not r.ok]
        assert all(run.frame(i).story for i in range(1, len(run)))  # every step narrated on both
    untagged = [x for step in scenario.steps for x in step.expects if x.kinds is None]
    assert untagged == []  # every line says which design it is true of


def test_the_demo_runs_in_demo_and_compare_checks_both_sides():
    result = invoke("demo", "hash-vs-trie", "--print")
    assert result.exit_code == 0, result.output
    flat = " ".join(result.output.split())
    assert "vLLM caches b's copy too" in flat and "free queue (head first" in flat
    result = invoke("compare", "hash-vs-trie", "--left", "hash", "--right", "trie:lru", "--print")
    assert result.exit_code == 1, result.output  # 1: the designs differ, first at b's publish
    assert "first divergence at step 4" in result.output
    assert "left (hash) checked 39 expect lines, 0 failed" in result.output
    assert "right (trie:lru) checked 33 expect lines, 0 failed" in result.output
