# SPDX-License-Identifier: Apache-2.0
"""UI test setup: deterministic apps (no animations, no cursor blink, colours on)."""

from __future__ import annotations

import asyncio
import inspect
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from ui_fixtures import lru_session, small_session, violation_session  # noqa: E402

from kvviz.explore.app import make_app  # noqa: E402
from tests.textual_pacing import pace_the_pilot  # noqa: E402

pace_the_pilot()  # the UI tests here drive App.run_test (tests/textual_pacing.py says why)


@pytest.fixture(autouse=True)
def _colour_and_calm(monkeypatch, tmp_path):
    """Colours on (NO_COLOR would turn snapshots monochrome) and a scratch working directory,
    so nothing a test exports lands in the checkout."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def app_on(tmp_path):
    """``app_on(session, step=None)``: a deterministic app that exports into ``tmp_path``."""

    def build(session, step=None, **opts):
        opts.setdefault("export_dir", tmp_path)
        opts.setdefault("play_timer", False)  # no clock: tests call play_tick() themselves
        return make_app(session, step, animations=False, cursor_blink=False, **opts)

    return build


@pytest.fixture
def small():
    return small_session()


@pytest.fixture
def lru():
    return lru_session()


@pytest.fixture
def leaky():
    return violation_session()


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """Run ``async def`` tests in a fresh event loop (no async plugin needed)."""
    if inspect.iscoroutinefunction(pyfuncitem.obj):
        arguments = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
        asyncio.run(pyfuncitem.obj(**arguments))
        return True
    return None
