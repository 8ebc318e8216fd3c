# SPDX-License-Identifier: Apache-2.0
"""Without the engine venv, `--backend vllm|sglang` is one line naming the install command, exit 2.

Runs in every venv: the engines' absence is made here (their import fails), so it holds in
the engine venv as well."""

from __future__ import annotations

import sys

import pytest
from click.testing import CliRunner

from kvviz.backends import BackendUnavailable
from kvviz.backends.registry import INSTALL_ENGINES, make_backend_factory
from kvviz.cli import cli


@pytest.fixture
def no_torch(monkeypatch):
    """torch (and so vLLM) cannot be imported; the backend module is imported afresh."""
    monkeypatch.setitem(sys.modules, "torch", None)
    monkeypatch.delitem(sys.modules, "kvviz.backends.vllm_backend", raising=False)
    monkeypatch.delitem(sys.modules, "kvviz.backends.sglang_backend", raising=False)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_an_engine_backend_without_torch_is_unavailable_and_says_how_to_install_it(no_torch, engine):
    with pytest.raises(BackendUnavailable) as caught:
        make_backend_factory(engine)
    message = str(caught.value)
    assert INSTALL_ENGINES in message and "torch" in message and "\n" not in message


def test_kvviz_run_with_backend_vllm_without_the_engines_exits_2_with_one_line(no_torch):
    result = CliRunner().invoke(cli, ["run", "hash-vs-trie", "--backend", "vllm", "--print"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and INSTALL_ENGINES in lines[0] and "Traceback" not in result.output


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_kvviz_diff_with_an_engine_backend_without_the_engines_exits_2_with_one_line(no_torch, engine):
    result = CliRunner().invoke(cli, ["diff", "lru", "--backend", engine])
    assert result.exit_code == 2, result.output
    assert INSTALL_ENGINES in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("command", [["shrink", "sglang-split-refresh"], ["fuzz", "--runs", "3"]])
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_shrink_and_fuzz_diffed_against_an_engine_without_the_engines_exit_2_with_one_line(no_torch, engine,
                                                                                          command):
    result = CliRunner().invoke(cli, [*command, "--diff", "--backend", engine])
    assert result.exit_code == 2, result.output
    assert result.stdout == "" and result.stderr.count("\n") == 1, result.output
    assert INSTALL_ENGINES in result.stderr and f"the {engine} backend needs" in result.stderr
