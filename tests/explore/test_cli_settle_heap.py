# SPDX-License-Identifier: Apache-2.0
"""How the CLI starts a UI on a settled heap (kvviz/commands.py): kvviz's app settles it
itself once its first frame is painted and its idle work done, with the
collector paused until then; any other app (diff, watch) on a heap settled before it runs."""

from __future__ import annotations

import gc

import pytest

import kvviz.commands as common
from kvviz.explore.launch import launch_ui


class FakeApp:
    """Records, when run, whether the collector ran and what had been settled by then."""

    def __init__(self, settled: list, *, settles_itself: bool):
        self.settled = settled
        if settles_itself:
            self.after_idle_work = lambda: settled.append("by the app")
        self.seen = None

    def run(self):
        self.seen = (gc.isenabled(), list(self.settled))


@pytest.fixture
def settled(monkeypatch):
    record = []
    monkeypatch.setattr(common, "require_terminal", lambda: None)
    monkeypatch.setattr(common, "settle_heap", lambda: record.append("settle_heap"))  # no gc.freeze() in tests
    return record


def test_an_app_that_settles_the_heap_itself_runs_with_the_collector_paused_until_it_does(settled):
    app = FakeApp(settled, settles_itself=True)
    assert gc.isenabled()
    common.run_app(app)
    assert app.seen == (False, [])  # paused, and nothing settled before the app ran
    assert gc.isenabled()  # back as it was once the app returned


def test_any_other_app_runs_on_a_heap_settled_before_it_starts(settled):
    app = FakeApp(settled, settles_itself=False)
    common.run_app(app)
    assert app.seen == (True, ["settle_heap"])


def test_launch_ui_hands_the_app_the_heap_settling_for_when_it_is_idle(settled, monkeypatch):
    from kvviz.explore.app import KvvizApp

    started = []
    monkeypatch.setattr(common, "run_app", started.append)
    session = common.make_session(common.load_scenario("lru", demo=True), None)
    launch_ui(session)
    (app,) = started
    assert isinstance(app, KvvizApp)
    app.after_idle_work()
    assert settled == ["settle_heap"]  # the (stand-in) settle_heap itself, called by the app


def test_settle_heap_freezes_what_was_built_and_runs_the_collector_with_rarer_full_passes():
    # Run in a child: gc.freeze() and the thresholds are for the kvviz process, not pytest's.
    import subprocess
    import sys
    from pathlib import Path

    code = ("import gc, kvviz.commands as c\n"
            "gc.disable(); built = [[i] for i in range(1000)]\n"
            "c.settle_heap()\n"
            "print(gc.isenabled(), gc.get_freeze_count() >= 1000, gc.get_threshold())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         check=True, cwd=Path(__file__).resolve().parents[2])
    assert out.stdout.split("\n")[0] == "True True (700, 10, 100)"
