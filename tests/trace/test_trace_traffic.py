# SPDX-License-Identifier: Apache-2.0
"""``kvviz trace`` on your own traffic: requests by ``tokens`` (or ``text`` with --tokenizer),
``timestamp`` and ``output_length`` optional; full blocks become chained hash ids, a partial
tail and a prompt under one block are never cached, and the miss breakdown says so."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from kvviz.trace.command import trace
from kvviz.trace.misses import miss_breakdown, trace_misses
from kvviz.core.mooncake import TraceFormatError, read_trace
from kvviz.trace.replay import ReplayConfig, TraceSource, replay

LINES = [
    {"timestamp": 0, "tokens": list(range(1, 21)), "output_length": 3},  # one block of 16 and a tail of 4
    {"tokens": list(range(1, 17)) + list(range(30, 47))},  # the same first block, then a new one, a tail of 1
    {"timestamp": 5, "tokens": [1, 2, 3]},  # under one block
]


def write(tmp_path, lines, name="traffic.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_tokens_become_chained_block_ids_and_the_defaults_fill_in(tmp_path):
    requests = read_trace(write(tmp_path, LINES), block_tokens=16).requests
    assert [r.hash_ids for r in requests] == [(0,), (0, 1), ()]
    assert [r.input_length for r in requests] == [20, 33, 3]
    assert [(r.timestamp, r.output_length) for r in requests] == [(0, 3), (0, 0), (5, 0)]


def test_the_replay_hits_the_shared_block_and_the_breakdown_names_the_tail_and_the_floor(tmp_path):
    requests = read_trace(write(tmp_path, LINES), block_tokens=16).requests
    result = replay(requests, ReplayConfig(capacity_tokens=None, page_tokens=16))
    assert result.hit_tokens == 16
    misses = miss_breakdown(trace_misses(requests, 16), result.hit_tokens)
    assert (misses.compulsory, misses.capacity, misses.partial_tail, misses.below_floor) == (32, 0, 5, 3)
    assert misses.missed_tokens == 56 - 16


def test_text_needs_a_tokenizer_and_a_bad_line_is_named(tmp_path):
    path = write(tmp_path, [{"text": "the cat"}])
    with pytest.raises(TraceFormatError, match=r"traffic.jsonl:1: .*'text' needs a tokenizer"):
        read_trace(path, block_tokens=2)
    bad = write(tmp_path, [{"tokens": [1, -2]}], name="bad.jsonl")
    result = CliRunner().invoke(trace, [str(bad), "--page-tokens", "2"])
    assert result.exit_code == 2 and "bad.jsonl:1" in result.output and "'tokens' item 1" in result.output


def test_text_is_cut_by_the_tokenizer_also_when_a_sweep_worker_reads_it_again(tmp_path):
    pytest.importorskip("tokenizers", reason="the watch extra is not installed")
    from tests.watch.tiny_tokenizer import ids, write_tokenizer

    tokenizer = tmp_path / "tokenizer.json"
    write_tokenizer(tokenizer)
    path = write(tmp_path, [{"text": "the cat sat on the mat"}, {"text": "the cat sat on a red hat"}])
    result = CliRunner().invoke(trace, [str(path), "--page-tokens", "2", "--tokenizer", str(tokenizer), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)["result"]
    assert data["hit_tokens"] == 4 and data["misses"]["diverged"]["tokens"] == 2  # "a red" leaves "on the"
    from kvviz.core.tokenizer_file import load_tokenizer

    requests = read_trace(path, block_tokens=2, tokenize=load_tokenizer(str(tokenizer)).encode).requests
    assert requests[0].input_length == len(ids("the cat sat on the mat"))
    source = TraceSource.of(path, requests, block_tokens=2, tokenizer=str(tokenizer))
    assert source.read() == requests


def _sweep_rows(path, *extra):
    result = CliRunner().invoke(trace, [str(path), "--page-tokens", "16", "--sweep", "--workers", "1", "--json",
                                        *extra])
    assert result.exit_code == 0, result.output
    return [(row["capacity_tokens"], row["hit_tokens"], row["misses"]) for row in json.loads(result.output)["sweep"]]


def test_a_sweep_of_your_own_traffic_reads_the_one_pass_rows_as_the_replays_give_them(tmp_path):
    # Tails past the last full block once made the one-pass rows count hits beyond the replay's
    # (and the miss breakdown refused them: a traceback).
    path = write(tmp_path, LINES + LINES)
    assert _sweep_rows(path) == _sweep_rows(path, "--replay-all")
