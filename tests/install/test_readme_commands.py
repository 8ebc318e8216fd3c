# SPDX-License-Identifier: Apache-2.0
"""The README's two commands are what a newcomer pastes, and what CI runs.

A fresh Debian machine refuses ``pip install`` outside a venv (PEP 668), so each command
makes its venv first; ``.ci/run`` reads the test command out of the README instead of keeping
a copy that could drift; plain ``pytest`` ends with the count of tests that ran; and the
README counts the demos there are.
"""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def two_commands() -> list[str]:
    """The command lines of the README's "Two commands" block, comments cut off."""
    block = README.split("## Two commands", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [line.split("  #", 1)[0].strip() for line in block.strip().splitlines()]


def test_each_readme_command_makes_and_uses_a_venv_before_installing():
    demo, tests = two_commands()
    for command in (demo, tests):
        steps = [s.strip() for s in command.split("&&")]
        assert steps[0] == "python3 -m venv .venv" and steps[1] == ". .venv/bin/activate", command
        assert steps[2].startswith("pip install -e ")
    assert demo.endswith("&& kvviz demo lru")
    assert tests.endswith("&& pytest") and "watch" in tests and "shortfin" in tests and "test" in tests


def test_ci_runs_exactly_the_readme_test_command():
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    (expression,) = re.findall(r"sed -n '([^']+)' README\.md", script)
    out = subprocess.run(["sed", "-n", expression, "README.md"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == two_commands()[1]
    assert 'bash -c "$command"' in script


def test_plain_pytest_prints_how_many_tests_passed():
    options = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"]["ini_options"]
    # "-q" in addopts plus a "-q" on the command line is -qq, which drops the "N passed" line.
    assert "-q" not in options.get("addopts", "").split()


def test_the_readme_counts_the_demos_there_are():
    demos = len(list((ROOT / "demos").glob("*.kvs")))
    counts = re.findall(r"(\d+) narrated (?:demos|scenarios)", README)
    assert counts and all(int(c) == demos for c in counts), (counts, demos)
