# SPDX-License-Identifier: Apache-2.0
"""SVG screenshots of the UI, rendered headless: what ``kvviz export -o x.svg`` writes."""

from __future__ import annotations

import asyncio
import threading

from kvviz.core.session import Session
from kvviz.explore.app import make_app
from kvviz.ui.exporting import portable_svg


def screenshot_svg(session: Session, step: int, size: tuple[int, int] = (120, 40), substep: int | None = None) -> str:
    """SVG of the UI at ``step``, rendered headless at ``size`` (columns, rows); inside the
    step's op at ``substep`` (0-based), titled with it, when given."""

    async def shoot() -> str:
        inside = {} if substep is None else {"substep": substep}
        app = make_app(session, step, animations=False, cursor_blink=False, **inside)
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            if substep is not None:
                return app.views_svg()  # "step 5 · sub-step 3/7 pop", as the app's own export titles it
            return portable_svg(app.export_screenshot(title=f"kvviz · {session.title or 'session'} · step {step}"))

    return _run(shoot())


def _run(coroutine):
    """Run ``coroutine`` to completion, also when called from inside a running event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    result: dict = {}

    def target() -> None:
        try:
            result["value"] = asyncio.run(coroutine)
        except BaseException as error:  # pragma: no cover - re-raised below
            result["error"] = error

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["value"]
