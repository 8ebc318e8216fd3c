# SPDX-License-Identifier: Apache-2.0
"""`kvviz trace --sweep` reads the rows of trie lru and hash where the one-pass LRU curve is
exact (from the largest request up, and unlimited) off that curve instead of replaying them:
the same figures as the replays row by row (``--replay-all`` runs them, so this stays
checkable), the replays really skipped, and every such row marked as such (``source``, ``*``)."""

from __future__ import annotations

import importlib
import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvviz.trace.command import trace
from kvviz.core.mooncake import TraceRequest, read_trace
from kvviz.trace.replay import (
    ONE_PASS,
    ReplayConfig,
    capacity_pages,
    from_one_pass,
    sweep_capacities,
    sweep_choices,
    sweep_replay_count,
)
from kvviz.trace.stack_distance import lru_curve

replay_module = importlib.import_module("kvviz.trace.replay")  # the package exports a function of that name

DATA = Path(__file__).parents[2].parent / "shared" / "data" / "mooncake"
CONVERSATION = DATA / "conversation_trace.jsonl"
needs_data = pytest.mark.skipif(not CONVERSATION.exists(), reason=f"Mooncake traces not found in {DATA}")
CHOICES = (ReplayConfig(), ReplayConfig(policy="lfu"), ReplayConfig(cache="hash"))


def figures(result) -> dict:
    """Every field of a result but the two a one-pass row may differ in: its time and its source."""
    return {k: v for k, v in asdict(result).items() if k not in ("wall_seconds", "source")}


def rows(curves):
    return [(c.config, r) for c in curves for r in (*c.results, c.unlimited)]


def counting_replays(monkeypatch) -> list:
    """Count the replays a sweep runs in this process (workers=1), each still replayed
    (``monkeypatch``: a pytest MonkeyPatch, undone when it is)."""
    calls = []
    real = replay_module.replay

    def counted(requests, config, **kwargs):
        calls.append(config)
        return real(requests, config, **kwargs)

    monkeypatch.setattr(replay_module, "replay", counted)
    return calls


@pytest.fixture(scope="module")
def conversation():
    """The first 400 conversation requests: the largest is 236 blocks, so the sweep's 10^4 to
    10^5 tokens are replayed and 3.2x10^5 to 10^9 (and unlimited) read off the curve, with
    pages evicted at the first three of those."""
    return read_trace(CONVERSATION, first=400).requests


@dataclass(frozen=True)
class Sweeps:
    """The default sweep of the conversation slice and its ``--replay-all`` sweep, with the
    replays each ran."""

    default: tuple
    replayed: tuple
    default_replays: tuple[ReplayConfig, ...]
    replayed_replays: tuple[ReplayConfig, ...]


@pytest.fixture(scope="module")
def conversation_sweeps(conversation) -> Sweeps:
    """Both sweeps run once for the tests that read them (the replays, counted, run as ever):
    two tests ran the same 54 replays each."""
    capacities = sweep_capacities()
    with pytest.MonkeyPatch.context() as patch:
        calls = counting_replays(patch)
        default = sweep_choices(conversation, CHOICES, capacities, workers=1)
        default_replays = tuple(calls)
        calls.clear()
        replayed = sweep_choices(conversation, CHOICES, capacities, workers=1, replay_all=True)
        return Sweeps(default, replayed, default_replays, tuple(calls))


@needs_data
def test_every_one_pass_row_is_the_replay_of_its_capacity_figure_for_figure(conversation, conversation_sweeps):
    default, replayed = conversation_sweeps.default, conversation_sweeps.replayed
    largest = max(len(r.hash_ids) for r in conversation)
    one_pass_rows = evicting = 0
    for (config, fast), (same_config, slow) in zip(rows(default), rows(replayed), strict=True):
        assert config == same_config
        assert slow.source == "replay"
        assert figures(fast) == figures(slow), (config.cache, config.policy, fast.capacity_tokens)
        exact = fast.capacity_tokens is None or capacity_pages(fast.capacity_tokens) >= largest
        assert (fast.source == ONE_PASS) == (config.policy == "lru" and exact), (config, fast.capacity_tokens)
        if fast.source == ONE_PASS:
            one_pass_rows += 1
            evicting += fast.pages_evicted > 0
            assert fast.wall_seconds == 0.0
    # Several exact capacities on both designs, some of them evicting: not a trivial agreement.
    assert one_pass_rows == 2 * 9 and evicting >= 2 * 3


@needs_data
def test_the_default_sweep_skips_the_replays_the_curve_stands_for(conversation, conversation_sweeps):
    capacities = sweep_capacities()
    calls = conversation_sweeps.default_replays
    # lfu's 12 rows, and trie lru's and hash's 3 below the largest request: 18 of 36.
    assert len(calls) == sweep_replay_count(conversation, CHOICES, capacities) == 12 + 3 + 3
    assert {(c.cache, c.policy) for c in calls if c.capacity_tokens is None} == {("trie", "lfu")}
    assert all(c.policy == "lfu" or c.capacity_tokens < 236 * 512 for c in calls)
    calls = conversation_sweeps.replayed_replays
    assert len(calls) == sweep_replay_count(conversation, CHOICES, capacities, replay_all=True) == 3 * 12


@needs_data
def test_the_replays_progress_counts_up_to_the_replays_it_runs(conversation):
    seen = []
    capacities = sweep_capacities(10**5, 10**7)
    sweep_choices(conversation, CHOICES, capacities, workers=1, progress=seen.append)
    assert seen[-1] == sweep_replay_count(conversation, CHOICES, capacities) * len(conversation)


def chains(largest=40, requests=120) -> list[TraceRequest]:
    """Requests sharing prefixes, the largest of ``largest`` blocks, each last block partial."""
    out = []
    for i in range(requests):
        length = 1 + (i * 7) % largest if i else largest
        ids = tuple([1, 2] + [100 * (i % 9) + k for k in range(length - 2)])[:length]
        out.append(TraceRequest(i, i + 1, i, 512 * len(ids) - 37, 5, ids))
    return out


def test_a_row_below_the_largest_request_or_of_another_policy_is_not_read_off_the_curve():
    requests = chains()
    line = lru_curve(requests)
    with pytest.raises(ValueError, match="exact from 40 pages"):
        from_one_pass(line, requests, ReplayConfig(capacity_tokens=39 * 512))
    with pytest.raises(ValueError, match="does not describe"):
        from_one_pass(line, requests, ReplayConfig(capacity_tokens=40 * 512, policy="lfu"))
    with pytest.raises(ValueError, match="does not describe"):
        from_one_pass(line, requests, ReplayConfig(capacity_tokens=40 * 512, with_output=True))
    with pytest.raises(ValueError, match="other requests"):
        from_one_pass(line, requests[:-1], ReplayConfig(capacity_tokens=40 * 512))
    at_bound = from_one_pass(line, requests, ReplayConfig(capacity_tokens=40 * 512, cache="hash"))
    assert at_bound.source == ONE_PASS and at_bound.cache == "hash" and at_bound.peak_pages_held == 40


@pytest.mark.parametrize("design", ["trie", "hash"])
def test_from_the_largest_request_up_the_curve_is_each_replay_at_every_page_count(design):
    requests = chains()
    line = lru_curve(requests)
    for pages in range(40, 200, 7):
        config = ReplayConfig(capacity_tokens=pages * 512, cache=design)
        assert figures(from_one_pass(line, requests, config)) == figures(replay_module.replay(requests, config))
    unlimited = replace(ReplayConfig(cache=design), capacity_tokens=None)
    assert figures(from_one_pass(line, requests, unlimited)) == figures(replay_module.replay(requests, unlimited))


@pytest.fixture(scope="module")
def chain_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("one_pass") / "chains.jsonl"
    path.write_text("".join(json.dumps({"timestamp": r.timestamp, "input_length": r.input_length,
                                        "output_length": r.output_length, "hash_ids": list(r.hash_ids)}) + "\n"
                            for r in chains(largest=300, requests=200)), encoding="utf-8")
    return path


def test_the_json_marks_each_rows_source_and_replay_all_gives_the_same_figures(chain_trace):
    args = [str(chain_trace), "--sweep", "--policy", "lru,fifo", "--design", "trie,hash", "--json", "--workers", "1"]
    fast = CliRunner().invoke(trace, args)
    slow = CliRunner().invoke(trace, [*args, "--replay-all"])
    assert fast.exit_code == slow.exit_code == 0, fast.output + slow.output
    fast_choices, slow_choices = json.loads(fast.stdout)["choices"], json.loads(slow.stdout)["choices"]
    sources = {}
    for mine, theirs in zip(fast_choices, slow_choices, strict=True):
        for row, same in zip((*mine["sweep"], mine["unlimited"]), (*theirs["sweep"], theirs["unlimited"]), strict=True):
            assert same["source"] == "replay"
            assert {k: v for k, v in row.items() if k not in ("wall_seconds", "source")} == \
                   {k: v for k, v in same.items() if k not in ("wall_seconds", "source")}
            sources.setdefault(mine["label"], []).append(row["source"])
    # 300 blocks = 153,600 tokens: 10^4, 3.2x10^4 and 10^5 replayed, the 8 capacities above and unlimited not.
    assert sources["trie lru"] == sources["hash"] == ["replay"] * 3 + [ONE_PASS] * 9
    assert sources["trie fifo"] == ["replay"] * 12


def test_the_table_marks_the_one_pass_rows_and_replay_all_marks_none(chain_trace):
    fast = CliRunner().invoke(trace, [str(chain_trace), "--sweep", "--workers", "1"])
    slow = CliRunner().invoke(trace, [str(chain_trace), "--sweep", "--workers", "1", "--replay-all"])
    assert fast.exit_code == slow.exit_code == 0, fast.output + slow.output
    marked = [line for line in fast.stdout.splitlines() if "%* " in line]
    assert len(marked) == 9 and all(line.split()[1].replace(",", "").isdigit() for line in marked[:-1])
    assert "* one-pass LRU curve, not replayed" in fast.stdout
    assert "%*" not in slow.stdout and "one-pass" not in slow.stdout
    # The figures, the time column aside, are the same.

    def figures_of(text):
        return [[cell.strip().rstrip("*") for cell in line.split("│")[1:-2]]
                for line in text.splitlines() if "%" in line]
    assert figures_of(fast.stdout) == figures_of(slow.stdout)


def test_replay_all_without_a_sweep_is_bad_input(chain_trace):
    result = CliRunner().invoke(trace, [str(chain_trace), "--replay-all"])
    assert result.exit_code == 2 and "--replay-all replays every row of a sweep" in result.output
