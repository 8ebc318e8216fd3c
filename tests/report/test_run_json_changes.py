# SPDX-License-Identifier: Apache-2.0
"""`kvviz run --json` writes a step as what it changed: the first state whole,
every later one as its changes, each with its digest.

The oracle: the states rebuilt from the JSON, step for step, are the session's own
snapshots (and their digests) on demos, the hash design, random scenarios and a trace-like
slice; ``--snapshots`` writes the same states whole. The count: a step's changes are the
same bytes on a 1,000-page and a 100,000-page pool, and never more values than the bound
counted before the first line.
"""

from __future__ import annotations

import dataclasses
import json
import random

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcore import Snapshot
from kvviz.core import limits
from kvviz.cli import cli
from kvviz.core.demos import demo_names, load_demo
from kvviz.core.scenario import parse_scenario
from kvviz.core.session import Session
from kvviz.report.state_changes import StateWriter, apply_list_edits, list_edits
from kvviz.report.timeline_json import read_states, state_items_bound

HASH = """\
cache hash pages=6 tokens_per_page=2
acquire a 1 1 2 2 3 3
publish a
release a
acquire b 1 1 2 2 9 9 9
publish b
acquire c 5 5 6 6 7 7
release b
acquire d 1 1 2 2 3 3 4 4
release c
release d
"""


def kvviz(*args: str):
    return CliRunner().invoke(cli, [str(a) for a in args], prog_name="kvviz", catch_exceptions=False)


def run_json(path, *flags) -> list[dict]:
    result = kvviz("run", path, "--json", *flags)
    assert result.exit_code in (0, 1), result.output
    return [json.loads(line) for line in result.stdout.splitlines()]


def trie_script(seed: int, pages: int, requests: int, kind: str = "trie") -> str:
    """Requests sharing prompts on a small pool: acquire, publish, sometimes extend, release;
    the pool fills, so later acquires evict (or fail to fit)."""
    rng = random.Random(seed)
    prompts = [[p * 1000 + i for i in range(rng.randint(2, 12))] for p in range(5)]
    lines = [f"cache {kind} pages={pages} tokens_per_page=2"]
    fresh = 500_000
    live = []
    for r in range(requests):
        own = rng.randint(0, 7)
        tokens = rng.choice(prompts) + list(range(fresh, fresh + own))
        fresh += own
        lines += [f"acquire r{r} {' '.join(map(str, tokens))}", f"publish r{r}"]
        if rng.random() < 0.3:
            lines.append(f"extend r{r} + {fresh} {fresh + 1} {fresh + 2}")
            fresh += 3
        live.append(f"r{r}")
        if rng.random() < 0.7 or len(live) > 3:
            lines.append(f"release {live.pop(rng.randrange(len(live)))}")
    return "\n".join(lines) + "\n"


def assert_states_rebuild_the_sessions(path, text: str, *, as_dicts: bool = False,
                                       oracle_every_step: bool = True) -> list[dict]:
    objects = run_json(path)
    session = Session.from_scenario(parse_scenario(text))
    # read_states also checks each rebuilt state against its line's state digest (and digest).
    rebuilt = list(read_states(objects, snapshots=not as_dicts))
    assert [obj["step"] for obj, _ in rebuilt] == list(range(len(session)))
    last = len(session) - 1
    for obj, state in rebuilt:
        frame = session.frame(obj["step"])
        assert state == (frame.snapshot.to_dict() if as_dicts else frame.snapshot), obj["step"]
        # The oracle: kvcore's full computation, of the session's own snapshot (about 1 s a
        # state at 66,000 pages: there, the first, a middle and the last step; the reader has
        # checked every step's digest from the changes against the writer's).
        if oracle_every_step or obj["step"] in (0, last // 2, last):
            assert obj["state_digest"] == frame.snapshot.state_digest(), obj["step"]
        # sha256 of the whole state on the first and the last line only (it costs the state).
        assert obj["digest"] == (frame.snapshot.digest() if obj["step"] in (0, last) else None), obj["step"]
    return objects


# -- the oracle: rebuilt states are the session's ---------------------------------------------


@pytest.mark.parametrize("name", demo_names())
def test_every_demos_states_rebuild_from_its_changes_step_for_step(name):
    assert_states_rebuild_the_sessions(name, load_demo(name).source)


def test_a_hash_caches_states_rebuild_from_its_changes(tmp_path):
    path = tmp_path / "hash.kvs"
    path.write_text(HASH)
    objects = assert_states_rebuild_the_sessions(path, HASH)
    assert "blocks" in objects[1]["snapshot"] and "blocks" in objects[2]["changes"]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), pages=st.integers(4, 40), kind=st.sampled_from(["trie", "base", "hash"]))
def test_random_scenarios_states_rebuild_from_their_changes(tmp_path_factory, seed, pages, kind):
    text = trie_script(seed, pages, 12, kind)
    path = tmp_path_factory.mktemp("s") / "s.kvs"
    path.write_text(text)
    assert_states_rebuild_the_sessions(path, text)


def test_a_trace_like_slice_rebuilds_and_writes_little_after_the_first_state(tmp_path):
    text = trie_script(7, 600, 120)  # 1 token a request's block, as trace slices are; no eviction
    path = tmp_path / "slice.kvs"
    path.write_text(text)
    objects = assert_states_rebuild_the_sessions(path, text)
    first, later = len(json.dumps(objects[1]["snapshot"])), [len(json.dumps(o["changes"])) for o in objects[2:]]
    assert max(later) < first / 4


@pytest.mark.parametrize("kind", ["trie", "hash"])
def test_a_pool_above_65536_pages_whose_lists_are_lazy_rebuilds_from_its_changes(tmp_path, kind):
    # Above 65,536 pages kvcore's free list is lazy (FreePages, the hash cache's QueuedPages):
    # the writer reads what it stores, and must still write the same states.
    text = trie_script(9, 66_000, 2, kind)
    path = tmp_path / "big.kvs"
    path.write_text(text)
    assert_states_rebuild_the_sessions(path, text, as_dicts=True, oracle_every_step=False)


def test_substeps_between_the_step_lines_leave_the_changes_right():
    # --substeps without --states streams: each op's sub-steps are built (on a restored copy)
    # between two step lines, and the next step's changes are still from the step before.
    objects = run_json("eviction-cascade", "--substeps")
    session = Session.from_scenario(load_demo("eviction-cascade"))
    assert any(o["type"] == "substep" for o in objects)
    rebuilt = list(read_states(objects))
    assert len(rebuilt) == len(session)
    for obj, snap in rebuilt:
        assert snap == session.frame(obj["step"]).snapshot, obj["step"]


def test_snapshots_writes_every_state_whole_with_the_same_digests(tmp_path):
    path = tmp_path / "s.kvs"
    path.write_text(trie_script(3, 12, 10))
    changes, whole = run_json(path), run_json(path, "--snapshots")
    assert whole[0]["changes"] is None and changes[0]["changes"] == "changes/1"
    assert all(o["snapshot"] is not None and o["changes"] is None for o in whole[1:])
    assert [o["state_digest"] for o in whole[1:]] == [o["state_digest"] for o in changes[1:]]
    assert all(o["digest"] == Snapshot.from_dict(o["snapshot"]).digest() for o in whole[1:])  # every whole state
    for (obj, snap), full in zip(read_states(changes), whole[1:]):
        assert snap.to_dict() == full["snapshot"]


def test_the_cache_account_and_the_full_comparison_write_the_same_changes():
    # Copies made with dataclasses.replace carry no SnapshotChanges: the writer compares rows.
    session = Session.from_scenario(parse_scenario(trie_script(11, 16, 14)))
    told, compared = StateWriter(), StateWriter()
    for i in range(len(session)):
        snap = session.frame(i).snapshot
        bare = dataclasses.replace(snap)
        assert bare._changes is None
        assert told.write(snap) == compared.write(bare), i


# -- the count: a step's JSON grows with what it changed, not the pool --------------------------


def test_a_steps_changes_are_the_same_on_a_small_and_a_huge_pool(tmp_path):
    text = trie_script(5, 1000, 30)
    small, huge = tmp_path / "small.kvs", tmp_path / "huge.kvs"
    small.write_text(text)
    huge.write_text(text.replace("pages=1000", "pages=100000"))
    a, b = run_json(small), run_json(huge)
    assert len(a) == len(b) > 60
    assert len(json.dumps(b[1]["snapshot"])) > 50 * len(json.dumps(a[1]["snapshot"]))  # the first state: the pool
    for x, y in zip(a[2:], b[2:]):
        # Every later one: what the op changed, the same rows and as many values. Only where
        # the free list's edits start differs (pages given back go after the pool's free ones).
        assert values(x["changes"]) == values(y["changes"]), x["step"]
        assert {**x["changes"], "free": None} == {**y["changes"], "free": None}, x["step"]
        assert [e[1:] for e in x["changes"]["free"]] == [e[1:] for e in y["changes"]["free"]], x["step"]


def values(obj) -> int:
    """JSON values (numbers, strings, booleans, nulls) in ``obj``."""
    if isinstance(obj, dict):
        return sum(values(v) for v in obj.values())
    if isinstance(obj, list):
        return sum(values(v) for v in obj)
    return 1


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), pages=st.integers(4, 40), kind=st.sampled_from(["trie", "base", "hash"]))
def test_the_values_written_stay_under_the_bound_counted_before_the_first_line(tmp_path_factory, seed, pages, kind):
    text = trie_script(seed, pages, 12, kind)
    path = tmp_path_factory.mktemp("s") / "s.kvs"
    path.write_text(text)
    objects = run_json(path)
    scenario = parse_scenario(text)
    ops = [s.op for s in scenario.steps]
    written = 0
    for obj in objects[1:]:
        written += values(obj["snapshot"] if obj["snapshot"] is not None else obj["changes"])
        written += 0 if obj["op"] is None else 2 * len(obj["op"]["tokens"] or ())
        # Every prefix stays under the bound of its ops: no op writes more than it was counted for.
        assert written <= state_items_bound(scenario.config, ops[:obj["step"]]), obj["step"]


def test_a_failed_op_writes_no_rows():
    text = "cache trie pages=2 tokens_per_page=2\nacquire a 1 2 3 4\nacquire b 5 6 7 8\n"
    writer = StateWriter()
    session = Session.from_scenario(parse_scenario(text))
    writer.write(session.frame(1).snapshot)
    rows = json.loads(writer.write(session.frame(2).snapshot).changes)
    assert session.frame(2).error is not None
    assert {k: v for k, v in rows.items() if isinstance(v, list) and v} == {}


# -- list edits ---------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(old=st.lists(st.integers(0, 60), unique=True, max_size=40),
       new=st.lists(st.integers(0, 60), unique=True, max_size=40))
def test_list_edits_turn_any_list_into_any_other(old, new):
    assert apply_list_edits(list(old), list_edits(old, new)) == new


@settings(max_examples=200, deadline=None)
@given(size=st.integers(0, 3000), taken=st.integers(0, 50), given_back=st.integers(0, 50), seed=st.integers(0, 99))
def test_a_fifo_free_list_and_a_heap_sift_cost_what_moved(size, taken, given_back, seed):
    free = list(range(size))
    after = free[min(taken, size):] + list(range(10_000, 10_000 + given_back))
    edits = list_edits(free, after)
    assert apply_list_edits(list(free), edits) == after
    assert sum(3 + len(e[2]) for e in edits) <= 6 + given_back  # what left the front is a count
    heap = list(range(size))
    rng = random.Random(seed)
    moved = list(heap)
    for _ in range(min(taken, size // 2)):  # swaps along a path, as a sift makes
        i = rng.randrange(max(size, 1))
        moved[i], moved[i // 2] = moved[i // 2], moved[i]
    edits = list_edits(heap, moved)
    assert apply_list_edits(list(heap), edits) == moved
    assert sum(3 + len(e[2]) for e in edits) <= 8 * min(taken, size // 2) + 3


@settings(max_examples=200, deadline=None)
@given(size=st.integers(20, 400), picks=st.lists(st.integers(0, 10**6), min_size=1, max_size=4),
       insert=st.booleans())
def test_a_few_pages_leaving_or_joining_a_queue_anywhere_cost_what_moved(size, picks, insert):
    # A hash cache's free queue: matched pages leave it from anywhere, released ones join it.
    queue = list(range(size))
    changed = list(queue)
    if insert:
        for k, pick in enumerate(picks):
            changed.insert(pick % (len(changed) + 1), 10_000 + k)
    else:
        for pick in sorted({p % size for p in picks}, reverse=True):
            del changed[pick]
    edits = list_edits(queue, changed)
    assert apply_list_edits(list(queue), edits) == changed
    assert sum(3 + len(e[2]) for e in edits) <= 4 * len(picks) + 3


# -- the limit ----------------------------------------------------------------------------------


def test_the_state_bound_refuses_before_the_first_line_at_its_edge(tmp_path, monkeypatch):
    text = trie_script(2, 10, 6)
    path = tmp_path / "s.kvs"
    path.write_text(text)
    scenario = parse_scenario(text)
    bound = state_items_bound(scenario.config, [s.op for s in scenario.steps])
    monkeypatch.setattr(limits, "MAX_TIMELINE_JSON_ITEMS", bound)
    assert kvviz("run", path, "--json").exit_code == 0
    monkeypatch.setattr(limits, "MAX_TIMELINE_JSON_ITEMS", bound - 1)
    refused = CliRunner().invoke(cli, ["run", str(path), "--json"], prog_name="kvviz")
    assert (refused.exit_code, refused.stdout) == (2, "")
    assert refused.stderr.count("\n") == 1 and "MAX_TIMELINE_JSON_ITEMS" in refused.stderr
    assert f"{bound:,} values" in refused.stderr and "--step N" in refused.stderr


def test_a_600_step_slice_of_5537_pages_fits_the_bound_that_snapshots_of_every_step_exceed():
    # The Mooncake slice's shape (benchmarks/bench_run_json.py): 200 requests, 600 ops, 5,537
    # pages of one token. Whole snapshots: 601 x 5,537 pages > MAX_STEP_STATE_PAGES.
    text = trie_script(1, 5537, 200).replace("tokens_per_page=2", "tokens_per_page=1")
    scenario = parse_scenario(text)
    assert len(scenario.steps) * 5537 > limits.MAX_STEP_STATE_PAGES
    assert state_items_bound(scenario.config, [s.op for s in scenario.steps]) < limits.MAX_TIMELINE_JSON_ITEMS


def test_snapshots_are_bounded_by_the_step_state_limit_and_say_how_to_fit(tmp_path, monkeypatch):
    path = tmp_path / "s.kvs"
    path.write_text("cache trie pages=8 tokens_per_page=4\nacquire a 1..8\npublish a\nrelease a\n")
    monkeypatch.setattr(limits, "MAX_STEP_STATE_PAGES", 31)  # 4 snapshots x 8 pages is 32
    refused = CliRunner().invoke(cli, ["run", str(path), "--json", "--snapshots"], prog_name="kvviz")
    assert (refused.exit_code, refused.stdout) == (2, "")
    assert "MAX_STEP_STATE_PAGES" in refused.stderr and "drop --snapshots" in refused.stderr
    assert kvviz("run", path, "--json").exit_code == 0  # as changes it fits


def test_snapshots_without_json_is_bad_input():
    result = CliRunner().invoke(cli, ["run", "lru", "--snapshots"], prog_name="kvviz")
    assert (result.exit_code, result.stdout) == (2, "")
    assert "--snapshots needs --json" in result.stderr
