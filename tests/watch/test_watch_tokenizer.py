# SPDX-License-Identifier: Apache-2.0
"""``kvviz watch --tokenizer PATH``: a tokenizer.json built here (never downloaded) turns a text
prompt into token ids for --explain and shows blocks as text in --explain, the Markdown export
and the UI's forest."""

from __future__ import annotations

import json

import pytest

msgspec = pytest.importorskip("msgspec", reason="the watch extra is not installed")
tokenizers = pytest.importorskip("tokenizers", reason="the watch extra is not installed")

from click.testing import CliRunner  # noqa: E402

from kvviz.cli import cli  # noqa: E402
from kvviz.core.tokenizer_file import TokenizerError, load_tokenizer  # noqa: E402

from tests.watch.tiny_tokenizer import write_recording, write_tokenizer  # noqa: E402


@pytest.fixture
def tokenizer_file(tmp_path):
    path = tmp_path / "tokenizer.json"
    write_tokenizer(path)
    return path


@pytest.fixture
def recording(tmp_path):
    path = tmp_path / "r.jsonl"
    write_recording(path)
    return path


def test_a_text_prompt_is_tokenized_and_the_diverged_block_is_shown_as_text(tokenizer_file, recording, tmp_path):
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("the cat sat on the mat a big hat")
    result = CliRunner().invoke(cli, ["watch", "--replay-file", str(recording), "--explain", str(prompt),
                                      "--tokenizer", str(tokenizer_file), "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    found = json.loads(result.output)
    assert (found["cause"], found["block"], found["diverged_at_token"]) == ("diverged", 1, 7)
    assert found["text"] == "the mat a big"
    assert "big" in found["context"]["prompt_text"] and "red" in found["context"]["cached_text"]


def test_the_markdown_report_shows_each_blocks_text(tokenizer_file, recording, tmp_path):
    out = tmp_path / "step.md"
    result = CliRunner().invoke(cli, ["watch", "--replay-file", str(recording), "-o", str(out),
                                      "--tokenizer", str(tokenizer_file)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = out.read_text()
    assert "the cat sat on" in report and "the mat a red" in report


def test_a_file_that_is_not_a_tokenizer_is_one_line_of_bad_input(tmp_path, recording):
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{}")
    with pytest.raises(TokenizerError, match=r"tokenizer.json: not a tokenizer.json"):
        load_tokenizer(str(bad))
    result = CliRunner().invoke(cli, ["watch", "--replay-file", str(recording), "--explain", "-",
                                      "--tokenizer", str(bad), "--json"], input="the cat")
    assert result.exit_code == 2 and "not a tokenizer.json" in result.output and "Traceback" not in result.output
    result = CliRunner().invoke(cli, ["watch", "--replay-file", str(recording), "--explain", "-",
                                      "--tokenizer", str(tmp_path / "missing.json"), "--json"], input="x")
    assert result.exit_code == 2 and "missing.json: no such file" in result.output
