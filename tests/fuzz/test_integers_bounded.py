# SPDX-License-Identifier: Apache-2.0
"""Every integer read from a file is bounded before use: an integer of thousands of digits in a
recording, a watch bundle, a scenario bundle or a trace, a sub-step index past its op's
sub-steps, a progress count past int64: each is one located line and exit 2, never a
traceback (Python's own int-string limit is itself a crash)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvviz.cli import cli
from kvviz.core.jsonread import JsonNumberTooLong, loads
from kvviz.core.limits import MAX_JSON_INT_DIGITS

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "kv-events"
VLLM = DATA / "vllm-0.33.0-conversation-400.jsonl"
HUGE = "7" * 4_301


def invoke(*args: str, env: dict | None = None):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False, env=env)


def one_line_exit_2(result, *words: str) -> None:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line]
    assert len(lines) == 1 and all(w in lines[0] for w in words), result.output


def test_the_reader_takes_the_longest_integer_allowed_and_locates_the_first_longer_one():
    edge = "9" * MAX_JSON_INT_DIGITS
    assert loads(f'{{"a": -{edge}}}') == {"a": -int(edge)}
    with pytest.raises(JsonNumberTooLong) as caught:
        loads('{"digits in a string": "' + HUGE + '",\n "n": [1, ' + edge + '0]}')
    assert (caught.value.lineno, caught.value.colno, caught.value.digits) == (2, 11, MAX_JSON_INT_DIGITS + 1)


def test_a_recording_whose_seq_has_4301_digits_is_one_located_line(tmp_path):
    lines = VLLM.read_text().splitlines()[:5]
    record = json.loads(lines[3])
    lines[3] = json.dumps(record).replace(f'"seq": {record["seq"]}', f'"seq": {HUGE}')
    recording = tmp_path / "r.jsonl"
    recording.write_text("\n".join(lines) + "\n")
    one_line_exit_2(invoke("watch", "--replay-file", str(recording), "--print"),
                    f"{recording}:4:", "an integer of 4,301 digits")


def test_a_watch_bundle_holding_a_4301_digit_integer_is_one_located_line(tmp_path):
    pytest.importorskip("msgspec", reason="the watch extra is not installed")
    bundle = tmp_path / "b.json"
    assert invoke("watch", "--replay-file", str(VLLM), "--export-step", "3", "-o", str(bundle)).exit_code == 0
    bundle.write_text(bundle.read_text().replace('"step": 3', f'"step": {HUGE}'))
    one_line_exit_2(invoke("open", str(bundle), "--print"), f"{bundle}:", "an integer of 4,301 digits")


def test_a_scenario_bundle_holding_a_4301_digit_integer_is_one_located_line(tmp_path):
    bundle = tmp_path / "b.json"
    assert invoke("export", "lru", "--step", "3", "-o", str(bundle)).exit_code == 0
    text = bundle.read_text()
    bundle.write_text(text.replace('"step": 3', f'"step": {HUGE}', 1))
    one_line_exit_2(invoke("open", str(bundle), "--print"), f"{bundle}:", "an integer of 4,301 digits")


def test_a_bundle_whose_substep_index_is_past_the_ops_substeps_is_one_line(tmp_path):
    bundle = tmp_path / "b.json"
    assert invoke("export", "eviction-cascade", "--step", "7", "--substep", "5", "-o", str(bundle)).exit_code == 0
    data = json.loads(bundle.read_text())
    for index in (99, -1):
        data["substep"]["index"] = index
        bundle.write_text(json.dumps(data))
        one_line_exit_2(invoke("open", str(bundle), "--print"), f"{bundle}: field 'substep': sub-step {index} "
                        "does not exist")


def test_a_trace_line_holding_a_4301_digit_integer_is_one_located_line(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text(f'{{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1, {HUGE}]}}\n')
    result = invoke("trace", str(trace))
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"{trace}:1:" in result.output and "an integer of 4,301 digits" in result.output, result.output


def test_a_progress_file_with_a_huge_moves_count_is_one_line(tmp_path):
    folder = tmp_path / "kvviz"
    folder.mkdir()
    (folder / "progress.json").write_text(json.dumps({
        "schema": "kvviz.progress/1", "reviews": {},
        "rounds": [{"lesson": "lru", "stage": "demo", "seed": 0, "moves": 10**400, "right": 1, "misses": {}}]}))
    result = invoke("progress", env={**os.environ, "XDG_DATA_HOME": str(tmp_path)})
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert "moves is not a whole number from 0 to 2^63 - 1" in result.output
