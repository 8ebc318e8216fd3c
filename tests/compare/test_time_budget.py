# SPDX-License-Identifier: Apache-2.0
"""``shrink``'s time budget covers everything: the first run (stopped mid-way, and the scenario
called too big), every candidate run, and the runs after the search (the check of the result,
a bundle). Tested with a clock that counts the ops the cache applied: no wall time, no
flakiness; one generous subprocess check for the CLI."""

from __future__ import annotations

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
