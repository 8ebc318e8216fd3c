# SPDX-License-Identifier: Apache-2.0
"""`kvviz export … --backend vllm`: the bundle names vLLM and re-opens and verifies with `kvviz open`."""

from __future__ import annotations

import json

from click.testing import CliRunner
from engine_guard import require_engine

require_engine("vllm")

from kvviz.cli import cli  # noqa: E402


def test_a_vllm_bundle_reopens_and_verifies_with_kvviz_open(tmp_path):
    bundle = tmp_path / "hash.json"
    runner = CliRunner()
    exported = runner.invoke(cli, ["export", "hash-vs-trie", "--backend", "vllm", "-o", str(bundle)])
    assert exported.exit_code == 0, exported.output
    assert json.loads(bundle.read_text())["backend"]["name"] == "vllm"
    opened = runner.invoke(cli, ["open", str(bundle), "--print"])
    assert opened.exit_code == 0, opened.output


def test_kvviz_run_backend_vllm_prints_vllms_own_state(tmp_path):
    result = CliRunner().invoke(cli, ["run", "hash-vs-trie", "--backend", "vllm", "--print"])
    assert result.exit_code == 0, result.output
    assert "vllm" in result.output.lower()


def test_kvviz_diff_backend_vllm_json_is_the_compare_schema_with_vllms_version():
    result = CliRunner().invoke(cli, ["diff", "lru", "--backend", "vllm", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["schema"] == "kvviz.compare/2" and report["sides"]["right"]["version"] == "0.33.0"
    assert report["first_divergence"] is None and report["findings"] == []
