# SPDX-License-Identifier: Apache-2.0
"""Served in a browser, the UI's files are downloads: e, ctrl+s and the palette's Screenshot
hand their text to Textual's ``deliver_text`` and write nothing on the server's disk.

Headless (``run_test``), with the app told it runs on the web driver (``is_web``) and
``deliver_text`` recording what it was handed: the browser half is
tests/serve/test_serve_browser.py's.
"""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from kvviz.core.demos import load_demo
from kvviz.report.bundle import open_bundle
from kvviz.core.session import Session
from kvviz.explore.app import KvvizApp, make_app

SIZE = (120, 40)


@pytest.fixture
def served_app(tmp_path, monkeypatch):
    """The lru demo's app at step 3, as served (``is_web``), in an empty folder; its
    deliveries are collected as (file name, text)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(KvvizApp, "is_web", property(lambda app: True))
    delivered: list[tuple[str, str]] = []

    def deliver_text(app, file, *, save_filename=None, **_options):
        delivered.append((save_filename, file.read()))

    monkeypatch.setattr(KvvizApp, "deliver_text", deliver_text)
    app = make_app(Session.from_scenario(load_demo("lru")), 3, animations=False, cursor_blink=False)
    return app, delivered


def run(app, then):
    async def scenario():
        async with app.run_test(size=SIZE) as pilot:
            await then(app, pilot)
    asyncio.run(scenario())


def test_e_offers_the_bundle_and_writes_nothing(served_app, tmp_path):
    app, delivered = served_app

    async def export(app, pilot):
        assert app.export_step()[0].name.endswith("-step3.json")

    run(app, export)
    ((name, text),) = delivered
    assert name.endswith("-step3.json") and json.loads(text)["step"] == 3
    (tmp_path / "offered.json").write_text(text)
    opened = open_bundle(tmp_path / "offered.json")
    assert opened.divergence is None and opened.step == 3
    assert sorted(os.listdir(tmp_path)) == ["offered.json"]  # the export itself wrote nothing


def test_a_typed_server_path_only_names_the_scripts_download(served_app, tmp_path):
    app, delivered = served_app
    target = tmp_path / "existing.kvs"
    target.write_text("precious")

    async def save(app, pilot):
        app.action_save_script()
        await pilot.pause()
        prompt = app.screen
        prompt.confirm(str(target))  # exists on the server: served, that is neither asked nor replaced
        await pilot.pause()
        app.action_save_script()
        await pilot.pause()
        app.screen.confirm("/etc/passwd")
        await pilot.pause()

    run(app, save)
    assert [name for name, _ in delivered] == ["existing.kvs", "passwd.kvs"]
    assert all("cache trie" in text for _, text in delivered)
    assert target.read_text() == "precious"


def test_the_palettes_screenshot_offers_the_svg(served_app, tmp_path):
    app, delivered = served_app

    async def shoot(app, pilot):
        app.deliver_screenshot()
        await pilot.pause()
        await pilot.pause()

    run(app, shoot)
    ((name, text),) = delivered
    assert name.endswith("-step3-screen.svg") and text.startswith("<svg")
    assert os.listdir(tmp_path) == []
