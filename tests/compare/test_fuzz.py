# SPDX-License-Identifier: Apache-2.0
"""``fuzz``: nothing on kvcore, shortfin's known classes, and a planted bug as a new class."""

from __future__ import annotations

import inspect
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kvviz.compare.failure import DIFF, first_failure
from kvviz.compare.fuzz import fuzz, random_scenario, run_rng
from kvviz.core.scenario import parse_scenario

from .helpers import plant_tail_leak, require_shortfin

ROOT = Path(__file__).resolve().parents[2]
KNOWN = {"B4b", "B9", "B10", "SF1", "SF2", "SF3"}  # the defects the differential test knows
RUNS = 60  # a bound for the test, below the default budget (asserted)


def test_the_generator_is_deterministic_per_seed_and_run():
    assert random_scenario(run_rng(3, 17), 30) == random_scenario(run_rng(3, 17), 30)
    assert random_scenario(run_rng(3, 17), 30) != random_scenario(run_rng(3, 18), 30)


def test_fuzz_on_kvcore_alone_finds_nothing():
    report = fuzz("kvcore", seed=0, runs=RUNS)
    assert report.runs == report.passed == RUNS and not report.classes


@pytest.mark.parametrize("mode", ["shortfin", DIFF])
def test_fuzz_on_shortfin_rediscovers_the_known_classes_and_shrinks_each(mode):
    require_shortfin()
    assert RUNS <= inspect.signature(fuzz).parameters["runs"].default
    report = fuzz(mode, seed=0, runs=RUNS)
    assert KNOWN <= set(report.classes), sorted(report.classes)
    for name in KNOWN:
        found = report.classes[name]
        shrunk = found.shrunk
        assert shrunk is not None and shrunk.identity.cause == name and not shrunk.stopped
        assert shrunk.after.ops <= 8, shrunk.text
        again = first_failure(parse_scenario(shrunk.text), mode).failure
        assert again.identity == shrunk.identity  # what is written is what fails
    assert sum(c.count for c in report.classes.values()) == report.runs - report.passed


def test_fuzz_finds_and_shrinks_a_new_class_planted_in_kvcore(monkeypatch):
    plant_tail_leak(monkeypatch)
    report = fuzz("kvcore", seed=0, runs=RUNS)
    assert "violation-1" in report.classes, sorted(report.classes)  # a page in no place: leaked
    shrunk = report.classes["violation-1"].shrunk
    assert shrunk.after.ops <= 3, shrunk.text  # acquire, release (maybe one op more)
    monkeypatch.undo()  # the real kvcore: the same scenario is fine
    assert first_failure(parse_scenario(shrunk.text), "kvcore").failure is None


def _planted_bugs():
    import importlib.util

    spec = importlib.util.spec_from_file_location("planted_bugs_for_fuzz", ROOT / "benchmarks" / "planted_bugs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_fuzz_finds_a_bug_planted_in_a_copy_of_kvcore(tmp_path):
    """The planted-bugs benchmark's dedup bug, in a copy of kvcore that a subprocess imports
    first; its own process group, killed on timeout or failure."""
    bugs = _planted_bugs()
    bug = next(b for b in bugs.BUGS if b.name == "dedup_touched")
    shutil.copytree(ROOT / "kvcore", tmp_path / "kvcore", ignore=shutil.ignore_patterns("__pycache__"))
    target = tmp_path / bug.path
    text = target.read_text()
    assert text.count(bug.old) == 1
    target.write_text(text.replace(bug.old, bug.new))
    code = ("import json, kvcore\nfrom kvviz.compare.fuzz import fuzz\nr = fuzz('kvcore', seed=0, runs=200)\n"
            "print(json.dumps({'kvcore': kvcore.__file__, 'classes': {k: c.shrunk.text for k, c in "
            "r.classes.items()}}))\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path), PYTHONDONTWRITEBYTECODE="1")
    process = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 0, err
    found = json.loads(out)
    assert found["kvcore"].startswith(str(tmp_path))  # the planted copy ran, not the checkout's
    assert found["classes"], "the planted bug was not found"
    for text in found["classes"].values():
        scenario = parse_scenario(text)
        assert len(scenario.steps) <= 8, text
        assert first_failure(scenario, "kvcore").failure is None  # the real kvcore is fine


@pytest.mark.parametrize("kind", ["base", "hash"])
def test_fuzz_on_kvcores_other_designs_finds_nothing(kind):
    report = fuzz("kvcore", seed=2, runs=25, kind=kind)
    assert report.passed == 25 and not report.classes
