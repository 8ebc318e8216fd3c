# SPDX-License-Identifier: Apache-2.0
"""Ctrl-C: ``kvviz fuzz --out DIR`` stops cleanly and keeps the classes found (a class whose
shrink it cut is written as found); any command exits 130 with one line, never click's
"Aborted!" and exit 1 (which means "a check failed")."""

from __future__ import annotations

from click.testing import CliRunner

from kvviz.cli import cli
from kvviz.compare import shrink as shrink_module
from kvviz.compare.failure import first_failure
from kvviz.core.scenario import parse_scenario
from kvviz.core.session import Session

from .helpers import plant_tail_leak


def kvviz(*args):
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def interrupt_after(monkeypatch, module, calls: int) -> None:
    """``module.first_failure`` raises KeyboardInterrupt (Ctrl-C) on its ``calls``-th call."""
    original, seen = module.first_failure, []

    def counted(*args, **kwargs):
        seen.append(1)
        if len(seen) == calls:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    monkeypatch.setattr(module, "first_failure", counted)


def test_ctrl_c_inside_a_shrink_stops_fuzz_cleanly_and_keeps_the_class_as_found(monkeypatch, tmp_path):
    plant_tail_leak(monkeypatch)  # kvcore with BUGS.md B6: random runs fail
    interrupt_after(monkeypatch, shrink_module, 4)  # the first class's shrink, a few runs in
    out = tmp_path / "found"
    code, stdout, stderr = kvviz("fuzz", "--runs", "50", "--out", str(out), "--max-seconds", "600")
    assert code == 130, (stdout, stderr)
    assert "Aborted!" not in stdout + stderr and "Traceback" not in stdout + stderr
    assert "interrupted (Ctrl-C) after" in stdout and "1 class" in stdout
    kept = sorted(out.iterdir())
    assert [p.suffix for p in kept] == [".json", ".kvs"]
    assert "(as found, not shrunk: interrupted)" in stdout
    found = parse_scenario(kept[1].read_text())
    verdict = first_failure(found, "kvcore")
    assert verdict.failure is not None and verdict.failure.identity.failure_class == kept[1].stem


def test_ctrl_c_between_runs_keeps_every_class_shrunk_so_far(monkeypatch, tmp_path):
    from kvviz.compare import fuzz as fuzz_module

    plant_tail_leak(monkeypatch)
    interrupt_after(monkeypatch, fuzz_module, 30)
    out = tmp_path / "found"
    code, stdout, _ = kvviz("fuzz", "--runs", "50", "--out", str(out), "--max-seconds", "600")
    assert code == 130 and "interrupted (Ctrl-C) after 29 of 50 runs" in stdout
    assert (out.exists() and len(list(out.glob("*.kvs"))) >= 1), stdout
    assert "not shrunk" not in stdout  # every class found was shrunk before Ctrl-C


def test_ctrl_c_in_any_command_exits_130_with_one_line(monkeypatch):
    def pressed(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(Session, "apply", pressed)
    code, stdout, stderr = kvviz("run", "lru", "--print")
    assert code == 130 and stderr == "kvviz: interrupted (Ctrl-C)\n"
    assert "Aborted!" not in stdout
