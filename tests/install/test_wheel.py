# SPDX-License-Identifier: Apache-2.0
"""A non-editable install ships the demos: `kvviz demo lru` works from any directory."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_contains_every_demo_and_runs_the_lru_demo_from_elsewhere(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(wheels), str(ROOT)],
                   check=True, capture_output=True)
    (wheel,) = wheels.glob("kvviz-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    demos = sorted(p.name for p in (ROOT / "demos").glob("*.kvs"))
    assert demos and all(f"kvviz/demos/{d}" in names for d in demos)
    assert not any(n.startswith(("tests/", "benchmarks/")) for n in names)

    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target", str(target),
                    str(wheel)], check=True, capture_output=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # Only the installed copy may be importable: not the source tree.
    env = dict(os.environ, PYTHONPATH=str(target), PYTHONSAFEPATH="1")
    out = subprocess.run([sys.executable, "-m", "kvviz", "demo", "lru", "--print"], cwd=elsewhere, env=env,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    probe = subprocess.run([sys.executable, "-c", "import kvviz; print(kvviz.__file__)"], cwd=elsewhere, env=env,
                           capture_output=True, text=True, check=True)
    assert probe.stdout.startswith(str(target))
    assert "step 1/" in out.stdout
    where = subprocess.run([sys.executable, "-m", "kvviz", "demo", "--path", "lru"], cwd=elsewhere, env=env,
                           capture_output=True, text=True, check=True)
    # the installed copy, not the source tree's
    assert Path(where.stdout.strip()) == (target / "kvviz" / "demos" / "lru.kvs").resolve()
    by_name = subprocess.run([sys.executable, "-m", "kvviz", "run", "lru", "--print", "--step", "1"], cwd=elsewhere,
                             env=env, capture_output=True, text=True)
    assert by_name.returncode == 0, by_name.stderr
    assert by_name.stdout.startswith("step 1/")
