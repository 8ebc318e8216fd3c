# SPDX-License-Identifier: Apache-2.0
"""Served in a browser (``kvviz serve``), the watch titles the terminal with its step (xterm's
OSC 2), as the main app does, so the page's tab title and ``role=status`` copy can say it: the
canvas holds no text. Headless (``run_test``), with the app told it runs on the web driver
(``is_web``) and the headless driver's ``write`` recording what the app wrote to the terminal."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("msgspec", reason="the watch extra is not installed")  # the CI installs it

from textual.drivers.headless_driver import HeadlessDriver  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from foreign_recordings import write_recording  # noqa: E402

from kvviz.watch.recording import read_recording  # noqa: E402
from kvviz.watch.timeline import WatchTimeline  # noqa: E402
from kvviz.ui.terminal_title import step_title  # noqa: E402
from kvviz.watch.app import WatchApp, make_watch_app  # noqa: E402

SIZE = (140, 40)
OSC_TITLE = re.compile("\x1b\\]2;([^\x07\x1b]*)\x07")


@pytest.fixture
def terminal(monkeypatch):
    """What apps write to the (headless) terminal, as one list of strings."""
    written: list[str] = []
    monkeypatch.setattr(HeadlessDriver, "write", lambda driver, data: written.append(data))
    return written


def titles(written: list[str]) -> list[str]:
    """The terminal titles (OSC 2) in what was written, in order."""
    return [m.group(1) for m in OSC_TITLE.finditer("".join(written))]


def recording(tmp_path):
    """A vLLM recording's path and its messages."""
    path = write_recording(tmp_path, "vllm_current")
    return path, list(read_recording(path))


def run(app, then):
    async def scenario():
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            await then(app, pilot)
    asyncio.run(scenario())


def test_served_the_watch_titles_the_terminal_with_each_step_shown(tmp_path, terminal, monkeypatch):
    monkeypatch.setattr(WatchApp, "is_web", property(lambda app: True))
    path, messages = recording(tmp_path)
    assert len(messages) >= 3
    timeline = WatchTimeline(str(path))
    for message in messages[:-1]:
        timeline.add(message)
    last = timeline.last_step
    app = make_watch_app(timeline, step=0)

    async def step_through(app, pilot):
        assert titles(terminal)[-1] == f"kvviz watch {path.name} · step 0 of {last} · paused"
        app.action_next_step()
        await pilot.pause()
        assert titles(terminal)[-1] == f"kvviz watch {path.name} · step 1 of {last} · paused"
        app.action_live()
        await pilot.pause()
        assert titles(terminal)[-1] == f"kvviz watch {path.name} · step {last} of {last} · live"
        app.receive_messages(messages[-1:])  # live: the new batch is shown, and titled
        await pilot.pause()
        assert titles(terminal)[-1] == f"kvviz watch {path.name} · step {last + 1} of {last + 1} · live"
        before = len(titles(terminal))
        app.go_to(app.step)  # the same step drawn again: the title is not written again
        await pilot.pause()
        assert len(titles(terminal)) == before

    run(app, step_through)


def test_in_a_terminal_of_ones_own_the_watch_leaves_the_title_alone(tmp_path, terminal):
    path, messages = recording(tmp_path)
    app = make_watch_app(WatchTimeline.from_messages(messages, str(path)), step=0)

    async def step(app, pilot):
        app.action_next_step()
        await pilot.pause()
        assert app.step == 1

    run(app, step)
    assert titles(terminal) == []


def test_the_main_app_and_the_watch_title_a_step_in_one_wording(tmp_path, terminal, monkeypatch):
    from kvviz.core.demos import load_demo
    from kvviz.core.session import Session
    from kvviz.explore.app import KvvizApp, make_app

    monkeypatch.setattr(KvvizApp, "is_web", property(lambda app: True))
    session = Session.from_scenario(load_demo("lru"))
    app = make_app(session, 3, animations=False, cursor_blink=False, export_dir=tmp_path, play_timer=False)

    async def step_in(app, pilot):
        app.action_next_step()
        await pilot.pause()
        app.show_substep(4, 1)
        await pilot.pause()

    run(app, step_in)
    last = len(session) - 1
    assert titles(terminal)[-2:] == [step_title(session.title, 4, last), step_title(session.title, 4, last, 1)]
    assert titles(terminal)[-1] == f"kvviz {session.title} · step 4 of {last} · sub-step 2"


def test_a_title_never_carries_a_control_character_into_the_terminal(terminal, monkeypatch):
    from textual.app import App

    from kvviz.ui.terminal_title import title_the_terminal

    monkeypatch.setattr(App, "is_web", property(lambda app: True))

    async def scenario():
        app = App()
        async with app.run_test(size=SIZE):
            title_the_terminal(app, step_title("a\x07b\x1b]2;evil\nc", 1, 2))
    asyncio.run(scenario())
    assert titles(terminal) == ["kvviz ab]2;evilc · step 1 of 2"]
