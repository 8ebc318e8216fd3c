# SPDX-License-Identifier: Apache-2.0
"""`kvviz trace --sweep` over several policies and designs: one table, one curve per choice,
every figure the single replay's; lists of names, designs and the sweep's bound."""

from __future__ import annotations

import importlib
import json
import random

import pytest
from click.testing import CliRunner

from kvviz.trace.command import trace
from kvviz.core.mooncake import prefix_reuse, read_trace
from kvviz.trace.plot import CURVE_MARKS, Curve, hit_rate_curves, percent
from kvviz.trace.replay import (
    ReplayConfig,
    ReplayResult,
    ReplayTooLarge,
    check_sweep_size,
    sweep_capacities,
    sweep_choices,
)

POLICIES = ("lru", "lfu", "fifo")
replay_module = importlib.import_module("kvviz.trace.replay")  # the package exports a function of that name


def run(*args):
    return CliRunner().invoke(trace, [str(a) for a in args], prog_name="kvviz trace")


@pytest.fixture(scope="module")
def chats(tmp_path_factory):
    """400 requests of 60 conversations with Pareto-skewed popularity, each turn one block
    longer, all behind one two-block system prompt: at the sweep's smallest capacities (19
    and 61 pages) the policies keep different blocks."""
    rng = random.Random(14)
    turns = [0] * 60
    lines = []
    for i in range(400):
        conversation = min(int(rng.paretovariate(1.0)) - 1, 59)
        turns[conversation] += 1
        ids = [1, 2] + [1000 * (conversation + 1) + k for k in range(min(2 + turns[conversation], 12))]
        lines.append(json.dumps({"timestamp": 10 * i, "input_length": 512 * len(ids) - 100, "output_length": 10,
                                 "hash_ids": ids}))
    path = tmp_path_factory.mktemp("trace") / "chats.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def single(path, capacity, *options) -> dict:
    result = run(path, "--capacity-tokens", capacity, "--json", *options)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["result"]


def table_rows(text: str) -> dict[str, list[str]]:
    """The sweep table's rows: capacity label -> its hit-rate cells."""
    rows = {}
    for line in text.splitlines():
        cells = line.split()
        if cells and (cells[0].replace(",", "").isdigit() or cells[0] == "unlimited") and cells[-1].endswith("%"):
            rows[cells[0]] = cells[1:]
    return rows


def test_a_policy_sweep_prints_the_figures_of_single_policy_replays(chats):
    result = run(chats, "--sweep", "--policy", ",".join(POLICIES))
    assert result.exit_code == 0, result.output
    rows = table_rows(result.stdout)
    largest = max(len(r.hash_ids) for r in read_trace(chats).requests)
    capacities = [*sweep_capacities(), None]
    assert len(rows) == len(capacities)
    columns = {p: [] for p in POLICIES}
    for capacity in capacities:
        label = "unlimited" if capacity is None else f"{capacity:,}"
        for policy, cell in zip(POLICIES, rows[label]):
            rate = single(chats, "unlimited" if capacity is None else capacity, "--policy", policy)["token_hit_rate"]
            # lru's rows from the largest request up are read off the one-pass curve, marked *.
            one_pass = policy == "lru" and (capacity is None or capacity // 512 >= largest)
            assert cell == percent(rate) + "*" * one_pass, (label, policy)
            columns[policy].append(cell)
    assert len({tuple(c) for c in columns.values()}) == len(POLICIES)  # the columns can be told apart
    assert "one curve per choice" in result.stdout
    legend = result.stdout.strip().splitlines()[-1]
    assert legend.split() == [CURVE_MARKS[0], "trie", "lru", CURVE_MARKS[1], "trie", "lfu", CURVE_MARKS[2], "trie",
                              "fifo"]


def test_a_policy_sweeps_json_equals_single_replays_figure_for_figure(chats):
    data = json.loads(run(chats, "--sweep", "--policy", "lru,slru", "--json").stdout)
    assert [c["label"] for c in data["choices"]] == ["trie lru", "trie slru"]
    for choice in data["choices"]:
        for measured in choice["sweep"][:3]:
            alone = single(chats, measured["capacity_tokens"], "--policy", choice["policy"])
            for name in ("hit_tokens", "pages_evicted", "failed_to_fit", "peak_pages_held", "page_count"):
                assert measured[name] == alone[name], (choice["label"], name)


def test_one_policy_sweeps_as_before(chats):
    data = json.loads(run(chats, "--sweep", "--policy", "fifo", "--json").stdout)
    assert set(data) == {"trace", "sweep", "unlimited"}
    assert {r["policy"] for r in data["sweep"]} == {"fifo"}


def test_designs_sweep_side_by_side_and_agree_at_unlimited_capacity(chats):
    data = json.loads(run(chats, "--sweep", "--design", "trie,hash", "--json").stdout)
    assert [(c["design"], c["label"]) for c in data["choices"]] == [("trie", "trie lru"), ("hash", "hash")]
    reuse = prefix_reuse(read_trace(chats).requests).ratio
    for choice in data["choices"]:
        assert choice["unlimited"]["token_hit_rate"] == pytest.approx(reuse)
        assert choice["unlimited"]["pages_evicted"] == 0


def test_one_hash_replay_names_its_design(chats):
    result = run(chats, "--design", "hash", "--capacity-tokens", "31623")
    assert result.exit_code == 0, result.output
    assert "hash, free-queue" in result.stdout
    assert single(chats, 31623, "--design", "hash")["cache"] == "hash"


@pytest.mark.parametrize("args, words", [
    (["--sweep", "--policy", "lru,nope"], "--policy: unknown policy 'nope' in 'lru,nope'"),
    (["--policy", "nope"], "--policy: unknown policy 'nope'"),
    (["--sweep", "--design", "trie,radix"], "--design: unknown design 'radix'"),
    (["--policy", "lru,fifo"], "add --sweep"),
    (["--design", "hash", "--policy", "lfu"], "--policy orders the trie's evictions"),
    (["--base", "--design", "hash"], "--base and --design exclude each other"),
])
def test_bad_lists_are_one_line_and_exit_2(chats, args, words):
    result = run(chats, *args)
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and words in lines[0], result.stderr
    assert result.stdout == ""


def test_a_policy_given_twice_sweeps_once(chats):
    data = json.loads(run(chats, "--sweep", "--policy", "lru,LRU,fifo", "--json").stdout)
    assert [c["policy"] for c in data["choices"]] == ["lru", "fifo"]


# -- the bound ---------------------------------------------------------------------------------


def test_the_sweep_bound_is_checked_at_its_edge(chats, monkeypatch):
    requests = read_trace(chats).requests
    configs = [ReplayConfig(policy=p) for p in POLICIES]
    capacities = sweep_capacities()
    total = sum(len(r.hash_ids) for r in requests) * len(configs) * (len(capacities) + 1)
    monkeypatch.setattr(replay_module, "MAX_SWEEP_BLOCKS", total)
    assert check_sweep_size(requests, configs, capacities) == total
    monkeypatch.setattr(replay_module, "MAX_SWEEP_BLOCKS", total - 1)
    with pytest.raises(ReplayTooLarge, match="kvviz sweeps at most"):
        check_sweep_size(requests, configs, capacities)
    with pytest.raises(ReplayTooLarge):
        sweep_choices(requests, configs, capacities)  # refused before the first replay


def test_a_sweep_beyond_the_bound_is_refused_before_any_replay(chats, monkeypatch):
    monkeypatch.setattr(replay_module, "MAX_SWEEP_BLOCKS", 1)
    calls = []
    monkeypatch.setattr(replay_module, "replay", lambda *a, **k: calls.append(a))
    result = run(chats, "--sweep", "--policy", "lru,fifo")
    assert result.exit_code == 2 and calls == []
    assert "kvviz sweeps at most 1" in result.stderr and len(result.stderr.splitlines()) == 1


# -- the plot ----------------------------------------------------------------------------------


def fake(capacity, rate, policy="lru"):
    return ReplayResult("trie", capacity, 0, 512, False, False, 1, 1, 0, 1000, round(rate * 1000), 0, 0, 1, 0.1,
                        policy=policy)


def test_curves_never_hide_each_other_and_carry_a_legend():
    capacities = (10**4, 10**5, 10**6)
    same = Curve("trie lru", [fake(c, 0.2) for c in capacities], fake(None, 0.3))
    other = Curve("trie fifo", [fake(c, 0.2 if c == 10**4 else 0.1, "fifo") for c in capacities], fake(None, 0.3))
    plot = hit_rate_curves([same, other])
    assert plot.isascii()
    lines = plot.splitlines()
    row_20 = next(line for line in lines if line.startswith(" 20.0%"))
    assert row_20.count("*") == 3 and row_20.count("o") == 1  # equal rates: both marks, side by side
    lower = [line for line in lines[lines.index(row_20) + 1:] if "|" in line and "o" in line.split("|")[-1]]
    assert len(lower) == 1 and lower[0].count("o") == 2 and "*" not in lower[0]  # fifo's 10% row
    assert "unlimited 30.0%" in plot
    assert lines[-1].split() == ["*", "trie", "lru", "o", "trie", "fifo"]


def test_too_many_curves_are_refused():
    curve = Curve("x", [fake(10**4, 0.1)])
    with pytest.raises(ValueError, match="at most"):
        hit_rate_curves([curve] * (len(CURVE_MARKS) + 1))


def test_a_one_policy_sweep_plot_names_that_policy(chats):
    """The plot's title said "LRU eviction" whatever --policy was."""
    result = run(chats, "--sweep", "--policy", "fifo")
    assert "token hit rate vs cache capacity (trie cache, FIFO eviction)" in result.stdout
    assert "(hash cache, free-queue eviction)" in run(chats, "--sweep", "--design", "hash").stdout
