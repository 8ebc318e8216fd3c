# SPDX-License-Identifier: Apache-2.0
"""`kvviz trace --sweep` on a process pool: the same output as the serial sweep byte for byte
(but the time columns), workers that read the trace themselves and refuse a changed one, the
one-pass LRU line in the plot, and the --workers option."""

from __future__ import annotations

import json
import os
import pickle
import random
import signal
import subprocess
import sys
from dataclasses import asdict

import pytest
from click.testing import CliRunner

from kvviz.trace.command import trace
from kvviz.core.mooncake import read_trace
from kvviz.trace.plot import LINE_MARK
from kvviz.trace.replay import ReplayConfig, TraceChanged, TraceSource, sweep_capacities, sweep_choices

SUBPROCESS_SECONDS = 240  # a small sweep takes a few seconds; under heavy load, far more


def write_chats(path, seed=21, requests=300):
    """Conversations with skewed popularity behind a shared system prompt: the choices keep
    different blocks at the sweep's small capacities."""
    rng = random.Random(seed)
    turns = [0] * 40
    lines = []
    for i in range(requests):
        conversation = min(int(rng.paretovariate(1.0)) - 1, 39)
        turns[conversation] += 1
        ids = [1, 2] + [1000 * (conversation + 1) + k for k in range(min(2 + turns[conversation], 14))]
        lines.append(json.dumps({"timestamp": 10 * i, "input_length": 512 * len(ids) - 100, "output_length": 10,
                                 "hash_ids": ids}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def chats(tmp_path_factory):
    return write_chats(tmp_path_factory.mktemp("pool") / "chats.jsonl")


def kvviz_trace(*args) -> subprocess.CompletedProcess:
    """`python -m kvviz trace ARGS` in its own process group, bounded in time, the group
    killed whatever happens (the sweep's workers with it)."""
    process = subprocess.Popen([sys.executable, "-m", "kvviz", "trace", *map(str, args)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=SUBPROCESS_SECONDS)
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def without_times(data):
    """JSON with every wall time taken out (the only figure a pool may change)."""
    if isinstance(data, dict):
        return {k: without_times(v) for k, v in data.items() if k != "wall_seconds"}
    if isinstance(data, list):
        return [without_times(v) for v in data]
    return data


def test_a_pooled_sweep_prints_the_serial_sweeps_bytes(chats):
    choices = ("--sweep", "--policy", "lru,lfu", "--design", "trie,hash")
    serial = kvviz_trace(chats, *choices, "--workers", "1")
    pooled = kvviz_trace(chats, *choices, "--workers", "2")
    assert serial.returncode == pooled.returncode == 0, serial.stderr + pooled.stderr
    assert pooled.stdout == serial.stdout
    assert "trie lru" in pooled.stdout and "hash" in pooled.stdout and LINE_MARK in pooled.stdout


def test_a_pooled_sweeps_json_is_the_serial_ones_but_for_wall_times(chats):
    choices = ("--sweep", "--policy", "lru,fifo", "--json")
    serial = kvviz_trace(chats, *choices, "--workers", "1")
    pooled = kvviz_trace(chats, *choices, "--workers", "3")
    assert serial.returncode == pooled.returncode == 0, serial.stderr + pooled.stderr
    serial_data, pooled_data = json.loads(serial.stdout), json.loads(pooled.stdout)
    assert without_times(pooled_data) == without_times(serial_data)
    assert [c["policy"] for c in pooled_data["choices"]] == ["lru", "fifo"]


def test_pooled_curves_hold_the_serial_figures_in_the_serial_order(chats):
    loaded = read_trace(chats)
    source = TraceSource.of(chats, loaded.requests)
    configs = (ReplayConfig(policy="lfu"), ReplayConfig(cache="hash"), ReplayConfig())
    capacities = sweep_capacities(10**4, 10**6)
    serial = sweep_choices(loaded.requests, configs, capacities, workers=1, lines=True)
    pooled = sweep_choices(loaded.requests, configs, capacities, source=source, workers=2, lines=True)

    def figures(curves):
        return [(c.config, [{**asdict(r), "wall_seconds": 0} for r in (*c.results, c.unlimited)], c.line)
                for c in curves]

    assert figures(pooled) == figures(serial)
    assert [c.config.policy for c in pooled] == ["lfu", "lru", "lru"]
    assert pooled[0].line is None and pooled[1].line.design == "hash" and pooled[2].line.design == "trie"


def test_workers_read_the_trace_themselves_and_refuse_one_that_changed(tmp_path):
    path = write_chats(tmp_path / "t.jsonl")
    requests = read_trace(path).requests
    source = TraceSource.of(path, requests)
    # What crosses to a worker is the path and a digest, not the requests.
    assert len(pickle.dumps(source)) < 400 < len(pickle.dumps(requests))
    write_chats(path, seed=22)  # replaced after the caller read it
    with pytest.raises(TraceChanged, match="changed while the sweep ran"):
        sweep_choices(requests, (ReplayConfig(),), (10**5,), source=source, workers=2)


def test_a_trace_removed_or_broken_during_the_sweep_is_one_line_not_a_traceback(tmp_path):
    path = write_chats(tmp_path / "t.jsonl")
    requests = read_trace(path).requests
    source = TraceSource.of(path, requests)
    path.write_text("{not json\n", encoding="utf-8")
    with pytest.raises(TraceChanged, match="changed while the sweep ran: .*t.jsonl:1"):
        source.read()
    path.unlink()
    with pytest.raises(TraceChanged, match="cannot be read again while the sweep runs"):
        source.read()


def test_the_fingerprint_tells_requests_apart(tmp_path):
    path = write_chats(tmp_path / "t.jsonl")
    requests = read_trace(path).requests
    assert TraceSource.of(path, requests).fingerprint == TraceSource.of(path, list(requests)).fingerprint
    assert TraceSource.of(path, requests).fingerprint != TraceSource.of(path, requests[:-1]).fingerprint
    assert TraceSource.of(path, requests).fingerprint != TraceSource.of(path, requests[::-1]).fingerprint


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_is_not_read_again_by_workers(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert not TraceSource(str(fifo), 512, "stop", None, "").rereadable()
    assert TraceSource.of(write_chats(tmp_path / "t.jsonl"), ()).rereadable()


def test_the_lru_plot_draws_the_one_pass_line_and_lfu_alone_does_not(chats):
    lru = CliRunner().invoke(trace, [str(chats), "--sweep"])
    lfu = CliRunner().invoke(trace, [str(chats), "--sweep", "--policy", "lfu"])
    assert lru.exit_code == lfu.exit_code == 0, lru.output + lfu.output
    plot = lru.stdout.split("token hit rate vs cache capacity")[1]
    largest = max(len(r.hash_ids) for r in read_trace(chats).requests) * 512
    assert f"{LINE_MARK} every capacity from {largest:,} tokens (the largest request)" in plot
    assert sum(row.count(LINE_MARK) for row in plot.splitlines()[1:-4]) > 10
    assert "stack distances" not in lfu.stdout


def test_workers_without_a_sweep_or_below_one_are_bad_input(chats):
    alone = CliRunner().invoke(trace, [str(chats), "--workers", "2"])
    assert alone.exit_code == 2 and "--workers sets the processes of a sweep" in alone.output
    zero = CliRunner().invoke(trace, [str(chats), "--sweep", "--workers", "0"])
    assert zero.exit_code == 2
