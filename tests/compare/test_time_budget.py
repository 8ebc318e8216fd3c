# SPDX-License-Identifier: Apache-2.0
"""``shrink``'s time budget covers everything: the first run (stopped mid-way, and the scenario
called too big), every candidate run, and the runs after the search (the check of the result,
a bundle). The search's own clock is tested with a clock that counts the ops the cache applied:
no wall time, no flakiness. The command's hard deadline (a worker process killed at it) is
tested in subprocesses whose work takes 10x the budget or more, or never ends, against a bound
measured from the command's own start-up with a generous margin."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from kvviz.compare import failure
from kvviz.core.scenario import parse_scenario
from kvviz.compare.shrink import ShrinkBudget, TooBigToShrink, shrink


def long_story(pairs: int) -> str:
    """``pairs`` unrelated acquire/release pairs, then an expect that fails (the trie shares the
    first page, so one page is left free, not none)."""
    lines = ["cache trie pages=4 tokens_per_page=2"]
    for i in range(pairs):
        lines += [f"acquire p{i} {1000 + 2 * i} {1001 + 2 * i}", f"release p{i}"]
    lines += ["acquire a 1 2 3 4", "publish a", "acquire b 1 2 5 6", "expect free 0"]
    return "\n".join(lines) + "\n"


class OpClock:
    """A clock whose time is the number of ops the cache has applied: a run of n ops costs n."""

    def __init__(self, monkeypatch) -> None:
        self.ops = 0
        original = failure.Session.apply

        def counted(session, *args, **kwargs):
            self.ops += 1
            return original(session, *args, **kwargs)

        monkeypatch.setattr(failure.Session, "apply", counted)

    def __call__(self) -> float:
        return float(self.ops)


def test_a_first_run_longer_than_the_budget_is_stopped_mid_way_and_called_too_big(monkeypatch):
    clock = OpClock(monkeypatch)
    scenario = parse_scenario(long_story(100), path="long.kvs")  # 203 ops
    with pytest.raises(TooBigToShrink, match=r"long.kvs: too big to shrink in 50 s: its first run alone was "
                                             r"stopped after 50 of 203 ops"):
        shrink(scenario, "kvcore", budget=ShrinkBudget(seconds=50, clock=clock))
    assert clock.ops == 50  # stopped when the time ran out, not at the end of the run


def test_a_first_run_that_leaves_no_time_to_check_a_result_is_called_too_big(monkeypatch):
    clock = OpClock(monkeypatch)
    scenario = parse_scenario(long_story(100), path="long.kvs")
    with pytest.raises(TooBigToShrink, match="its first run took 203 s, and checking a result takes as long"):
        shrink(scenario, "kvcore", budget=ShrinkBudget(seconds=300, clock=clock))
    assert clock.ops == 203


@pytest.mark.parametrize("runs_after, seconds", [(1, 500), (2, 700)])
def test_the_search_stops_in_time_for_the_runs_after_it_and_the_whole_shrink_fits(monkeypatch, runs_after, seconds):
    clock = OpClock(monkeypatch)
    scenario = parse_scenario(long_story(100))  # a first run of 203 ops: the search gets about 90
    result = shrink(scenario, "kvcore", budget=ShrinkBudget(seconds=seconds, clock=clock, runs_after=runs_after))
    assert "the time budget ran out" in result.stopped
    # The result's check has run (inside shrink); a bundle would cost at most one run more.
    assert clock.ops + (runs_after - 1) * 203 <= seconds


def test_without_a_clock_the_search_runs_to_its_end():
    result = shrink(parse_scenario(long_story(3)), "kvcore", budget=ShrinkBudget(seconds=0.001))
    assert result.stopped == "" and result.after.ops < result.before.ops


def test_shrink_of_a_big_scenario_with_one_second_ends_in_time_and_says_it_is_too_big(tmp_path):
    big = tmp_path / "big.kvs"
    big.write_text(long_story(10_000))  # 20,004 ops: a first run of several seconds
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "kvviz", "shrink", str(big), "--max-seconds", "1"],
                          capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - started
    assert done.returncode == 2, done.stderr
    assert "too big to shrink in 1 s" in done.stderr and len(done.stderr.splitlines()) == 1
    assert elapsed < 60  # generous for a loaded machine: the bound itself is the clock test's above


# -- the hard deadline: the work runs in a worker process killed at --max-seconds ----------------
#
# Each test measures the start-up of `kvviz shrink` on a scenario that passes (python, imports,
# the worker's fork), then checks that a command whose work would take 10x its budget or more
# (or forever) ends within start-up + budget + a generous margin, and says why it stopped.

MARGIN = 3.0
"""Seconds allowed past start-up and the budget: a loaded machine's scheduling, the kill."""

# A cache that hangs on an acquire of fewer than 8 tokens: the shrinker's first token cut.
HANG_ON_SHORT_ACQUIRE = """
import sys
from kvcore import TriePagedAttentionCache
from kvviz.cli import cli

original = TriePagedAttentionCache.acquire_pages_for_tokens

def hanging(self, tokens, *args, **kwargs):
    while len(tokens) < 8:  # a cache bug that never returns
        pass
    return original(self, tokens, *args, **kwargs)

TriePagedAttentionCache.acquire_pages_for_tokens = hanging
cli(args=sys.argv[1:], prog_name="kvviz")
"""


def timed(args, *, code=None, tmp=None) -> tuple[subprocess.CompletedProcess, float]:
    """Run ``python -m kvviz ARGS`` (or ``python -c CODE ARGS``) and time it; ``tmp``: its
    temporary folder (TMPDIR)."""
    head = [sys.executable, "-c", code, *args] if code else [sys.executable, "-m", "kvviz", *args]
    env = {**os.environ, "TMPDIR": str(tmp)} if tmp is not None else None
    started = time.monotonic()
    done = subprocess.run(head, capture_output=True, text=True, timeout=60, env=env)  # one never ending fails here
    return done, time.monotonic() - started


def start_up() -> float:
    """Seconds `kvviz shrink` takes on a demo that passes: what every command below pays first."""
    done, seconds = timed(["shrink", "lru"])
    assert done.returncode == 0, done.stderr
    return seconds


@pytest.mark.slow
def test_one_op_that_alone_outlasts_the_budget_is_stopped_at_the_deadline(tmp_path):
    huge = tmp_path / "huge.kvs"  # one acquire of a million tokens: 14-18 s on a loaded core
    huge.write_text("cache hash pages=1000000 tokens_per_page=1\nacquire a 1..1000000\nexpect free 1\n")
    bound = start_up() + 1 + MARGIN
    done, seconds = timed(["shrink", str(huge), "--max-seconds", "1", "-o", str(tmp_path / "min.kvs")])
    assert seconds < bound, (seconds, bound)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (f"kvviz: error: {huge}: too big to shrink in 1 s: its first run did not end in that "
                           f"time (give --max-seconds more)\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["huge.kvs"]  # nothing written, nothing half-written


@pytest.mark.slow
def test_a_scenario_whose_reading_alone_outlasts_the_budget_is_stopped_at_the_deadline(tmp_path):
    big = tmp_path / "big.kvs"  # 4.8 MB of short lines: 6-13 s to parse on a loaded core
    big.write_text("cache trie pages=4 tokens_per_page=2\nacquire a 1\n" + "publish a\nexpect ok\n" * 240_000)
    bound = start_up() + 0.5 + MARGIN
    done, seconds = timed(["shrink", str(big), "--max-seconds", "0.5"])
    assert seconds < bound, (seconds, bound)
    assert done.returncode == 2 and done.stderr == (f"kvviz: error: {big}: too big to shrink in 0.5 s: reading it did "
                                                    f"not end in that time (give --max-seconds more)\n")


@pytest.mark.slow
def test_a_diff_run_that_outlasts_the_budget_is_stopped_at_the_deadline(tmp_path):
    from .helpers import require_shortfin

    require_shortfin()
    big = tmp_path / "big.kvs"  # one acquire of 60,000 pages: shortfin's trie takes 15-30 s
    big.write_text("cache trie pages=60000 tokens_per_page=1\nacquire a 1..60000\nexpect free 1\n")
    bound = start_up() + 1 + MARGIN
    done, seconds = timed(["shrink", str(big), "--diff", "--max-seconds", "1"])
    assert seconds < bound, (seconds, bound)
    assert done.returncode == 2 and "too big to shrink in 1 s: its first run did not end" in done.stderr


@pytest.mark.slow
def test_a_candidate_run_that_never_ends_is_cut_and_the_best_scenario_so_far_printed(tmp_path):
    scenario, out, bundle = tmp_path / "s.kvs", tmp_path / "min.kvs", tmp_path / "min.json"
    scenario.write_text("cache trie pages=8 tokens_per_page=2\nacquire a 1..8\nexpect free 1\n")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    bound = start_up() + 2 + MARGIN
    args = ["shrink", str(scenario), "--max-seconds", "2", "-o", str(out), "--bundle", str(bundle)]
    done, seconds = timed(args, code=HANG_ON_SHORT_ACQUIRE, tmp=scratch)
    assert seconds < bound, (seconds, bound)
    assert done.returncode == 1, done.stderr
    assert "# stopped early: the time budget ran out in the middle of a run; this is the smallest failing " \
           "scenario found so far" in done.stdout
    assert f"# {bundle} not written: the time budget ran out before the bundle was made" in done.stdout
    best = parse_scenario(out.read_text())  # written whole by the parent, and failing as the input does
    assert done.stdout.startswith(out.read_text())
    assert [s.op.text for s in best.steps] == ["acquire a 1..8"]
    verdict = failure.first_failure(best, "kvcore").failure
    assert verdict.identity.describe() == "an `expect free` line fails" and f"at step 1 (line {verdict.line})" \
        in done.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["min.kvs", "s.kvs", "tmp"]
    assert list(scratch.iterdir()) == []  # the worker's scratch folder is gone with it


@pytest.mark.slow
def test_fuzz_stops_at_the_deadline_inside_a_run_that_never_ends(tmp_path):
    out = tmp_path / "found"
    bound = start_up() + 1 + MARGIN
    # The scenarios' short acquires hang (the generator drives kvcore too): run 0 never ends.
    done, seconds = timed(["fuzz", "--runs", "5", "--max-seconds", "1", "--out", str(out)],
                          code=HANG_ON_SHORT_ACQUIRE)
    assert seconds < bound, (seconds, bound)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-2:] == ["no failure: no run ended in the time budget",
                                             "stopped early: the time budget ran out after 0 of 5 runs"]


# kvcore with BUGS.md B6 planted (random runs fail), and a shrink whose runs never end after its
# first two: the first class found is being shrunk when the deadline comes.
LEAK_AND_HANG_IN_SHRINK = """
import sys
from kvcore import TriePagedAttentionCache
from kvviz.cli import cli
from kvviz.compare import shrink

release = TriePagedAttentionCache._release

def leaky(self, allocation):
    if self.allocations.get(allocation.id) is allocation:
        del allocation._pages[len(allocation._nodes):]
    release(self, allocation)

original, calls = shrink.first_failure, []

def hanging(*args, **kwargs):
    calls.append(1)
    while len(calls) > 2:  # a candidate run that never ends
        pass
    return original(*args, **kwargs)

TriePagedAttentionCache._release = leaky
shrink.first_failure = hanging
cli(args=sys.argv[1:], prog_name="kvviz")
"""


@pytest.mark.slow
def test_fuzz_keeps_a_class_whose_shrink_the_deadline_cut_as_found(tmp_path, monkeypatch):
    from .helpers import plant_tail_leak

    out = tmp_path / "found"
    bound = start_up() + 2 + MARGIN
    done, seconds = timed(["fuzz", "--runs", "50", "--max-seconds", "2", "--out", str(out)],
                          code=LEAK_AND_HANG_IN_SHRINK)
    assert seconds < bound, (seconds, bound)
    assert done.returncode == 1, done.stderr
    kept = sorted(out.iterdir())
    assert [p.suffix for p in kept] == [".kvs"]  # its bundle was never made: nothing half-written
    assert f"wrote {kept[0]} (as found, not shrunk: the time budget ran out)" in done.stdout
    assert f"{out / kept[0].stem}.json not written: the time budget ran out before the bundle was made" in done.stdout
    assert "stopped early: the time budget ran out after" in done.stdout
    plant_tail_leak(monkeypatch)
    verdict = failure.first_failure(parse_scenario(kept[0].read_text()), "kvcore")
    assert verdict.failure is not None and verdict.failure.identity.failure_class == kept[0].stem
