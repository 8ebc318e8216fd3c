# SPDX-License-Identifier: Apache-2.0
"""The real data ships with kvviz: each sample is the shared data it was made from, byte for
byte once decompressed; every command that reads a trace or a recording takes its name; the
readers take gzip as they take plain text, and a damaged gzip file is one line of bad input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvviz.watch.recording import RecordingError, read_recording
from kvviz.cli import cli
from kvviz.samples import SAMPLES, UnknownSample, open_data, resolve, sample_names
from kvviz.core.mooncake import read_trace

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data"  # what the samples were made from, beside the checkout
SOURCES = {
    "conversation": SHARED / "mooncake" / "conversation_trace.jsonl",
    "synthetic": SHARED / "mooncake" / "synthetic_trace.jsonl",
    "vllm-conversation": SHARED / "kv-events" / "vllm-0.33.0-conversation-400.jsonl",
    "sglang-conversation": SHARED / "kv-events" / "sglang-0.5.23-conversation-400.jsonl",
}


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), prog_name="kvviz")


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.name)
def test_each_sample_is_its_source_file_compressed_with_a_readme_and_a_notice(sample):
    assert sample.path.is_file() and sample.path.name.endswith(".jsonl.gz")
    source = SOURCES[sample.name]
    if not source.is_file():
        pytest.skip(f"{source} is not beside the checkout")
    assert gzip.decompress(sample.path.read_bytes()) == source.read_bytes()
    folder = sample.path.parent
    assert (folder / "README.md").is_file()
    notice = (folder / "NOTICE").read_text(encoding="utf-8")
    assert "Apache License" in notice and "Mooncake" in notice


def test_a_path_that_exists_wins_over_a_sample_of_the_same_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve("conversation", "trace").endswith("conversation_trace.jsonl.gz")
    Path("conversation").write_text("mine\n")
    assert resolve("conversation", "trace") == "conversation"


def test_a_name_that_is_neither_a_file_nor_a_sample_of_that_kind_names_the_samples(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UnknownSample, match="conversation, synthetic"):
        resolve("vllm-conversation", "trace")  # a recording is not a trace
    assert sample_names("recording") == ("vllm-conversation", "sglang-conversation")


def test_the_trace_reader_reads_gzip_and_plain_text_to_the_same_requests(tmp_path):
    lines = [json.dumps({"timestamp": i, "input_length": 1024, "output_length": 3, "hash_ids": [1, 2 + i]})
             for i in range(3)]
    plain = tmp_path / "t.jsonl"
    plain.write_text("\n".join(lines) + "\n")
    packed = tmp_path / "t.data"  # known by its first bytes, not its name
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert read_trace(packed).requests == read_trace(plain).requests and len(read_trace(plain).requests) == 3


def test_a_cut_off_gzip_file_is_an_os_error_naming_the_damage(tmp_path):
    whole = gzip.compress(b'{"topic": "kv", "seq": 0, "payload": ""}\n' * 1000)
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(RecordingError, match="not a whole gzip file"):
        read_recording(cut)
    with pytest.raises(OSError, match="not a whole gzip file"):
        with open_data(cut) as stream:
            stream.read()


def test_kvviz_trace_takes_a_sample_name_and_refuses_an_unknown_one_in_one_line():
    result = invoke("trace", "synthetic", "--first", "50", "--json", "--no-progress")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["trace"]["requests"] == 50
    bad = invoke("trace", "no-such-sample")
    assert bad.exit_code == 2 and "conversation, synthetic" in bad.output and "Traceback" not in bad.output


def test_kvviz_watch_replays_a_sample_and_judges_it_against_a_sample_trace():
    pytest.importorskip("msgspec")
    summary = invoke("watch", "--replay-file", "vllm-conversation", "--print")
    assert summary.exit_code == 0, summary.output
    assert "400 messages" in summary.output and "2,998 blocks" in summary.output
    against = invoke("watch", "--replay-file", "vllm-conversation", "--against-trace", "conversation")
    assert against.exit_code == 0, against.output
    assert "hit tokens: kvcore 7,520, the recording 7,520" in against.output
    unknown = invoke("watch", "--replay-file", "conversation", "--print")  # a trace is not a recording
    assert unknown.exit_code == 2 and "vllm-conversation, sglang-conversation" in unknown.output


def test_kvviz_help_samples_lists_every_sample():
    result = invoke("help", "samples")
    assert result.exit_code == 0
    assert all(f"  {s.name} " in result.output for s in SAMPLES)


def test_kvviz_serve_watch_runs_the_sample_file_whatever_folder_its_apps_start_in(tmp_path, monkeypatch):
    from kvviz.serve.command import served_command

    monkeypatch.chdir(tmp_path)
    words, title = served_command(("watch", "--replay-file", "vllm-conversation"), cli)
    assert words == ("watch", "--replay-file", str(Path(resolve("vllm-conversation", "recording")).resolve()))
    assert title == "watch vllm-conversation"


def test_kvviz_trace_on_a_cut_off_gzip_trace_is_one_line_of_bad_input(tmp_path):
    from kvviz.samples import SAMPLES

    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(SAMPLES[1].path.read_bytes()[:100_000])
    result = invoke("trace", str(cut), "--no-progress")
    assert result.exit_code == 2 and "not a whole gzip file" in result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output
