# SPDX-License-Identifier: Apache-2.0
"""A non-editable install ships the demos and the samples: `kvviz demo lru`, `kvviz trace
conversation --sweep` and `kvviz watch --replay-file vllm-conversation` work from any directory,
with no checkout beside them."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from kvviz.samples import SAMPLES

pytestmark = pytest.mark.slow  # builds and installs a wheel

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The wheel built from this checkout, its file names, and how to run the installed copy
    (``run(*args)``) from an empty folder outside the checkout."""
    tmp_path = tmp_path_factory.mktemp("wheel")
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(wheels), str(ROOT)],
                   check=True, capture_output=True)
    (wheel,) = wheels.glob("kvviz-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target", str(target),
                    str(wheel)], check=True, capture_output=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # Only the installed copy may be importable: not the source tree.
    env = dict(os.environ, PYTHONPATH=str(target), PYTHONSAFEPATH="1")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, *args], cwd=elsewhere, env=env, capture_output=True, text=True)

    probe = run("-c", "import kvviz; print(kvviz.__file__)")
    assert probe.stdout.startswith(str(target)), probe
    return names, target, run


def test_wheel_contains_every_demo_and_runs_the_lru_demo_from_elsewhere(installed):
    names, target, run = installed
    demos = sorted(p.name for p in (ROOT / "demos").glob("*.kvs"))
    assert demos and all(f"kvviz/demos/{d}" in names for d in demos)
    assert not any(n.startswith(("tests/", "benchmarks/", "docs/", "site/")) for n in names)

    out = run("-m", "kvviz", "demo", "lru", "--print")
    assert out.returncode == 0, out.stderr
    assert "step 1/" in out.stdout
    where = run("-m", "kvviz", "demo", "--path", "lru")
    # the installed copy, not the source tree's
    assert Path(where.stdout.strip()) == (target / "kvviz" / "demos" / "lru.kvs").resolve()
    by_name = run("-m", "kvviz", "run", "lru", "--print", "--step", "1")
    assert by_name.returncode == 0, by_name.stderr
    assert by_name.stdout.startswith("step 1/")


def test_wheel_ships_the_samples_and_the_trace_and_watch_tours_run_from_elsewhere(installed):
    names, target, run = installed
    for sample in SAMPLES:
        folder = sample.path.parent.name
        assert {f"kvviz/samples/{sample.file}", f"kvviz/samples/{folder}/README.md",
                f"kvviz/samples/{folder}/NOTICE"} <= names
    sweep = run("-m", "kvviz", "trace", "conversation", "--sweep", "--no-progress")
    assert sweep.returncode == 0, sweep.stderr
    assert "Hit rate vs capacity: conversation_trace.jsonl.gz" in sweep.stdout and "37.4%" in sweep.stdout
    assert str(target) in run("-m", "kvviz", "trace", "conversation", "--first", "1", "--json").stdout
    pytest.importorskip("msgspec")
    watch = run("-m", "kvviz", "watch", "--replay-file", "vllm-conversation", "--print")
    assert watch.returncode == 0, watch.stderr
    assert "400 messages" in watch.stdout and "cached at the end: 2,998 blocks" in watch.stdout
