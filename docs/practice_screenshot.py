# SPDX-License-Identifier: Apache-2.0
"""Draw docs/kvviz-practice.svg: `kvviz practice lru --step 29` mid-op, at the first heap swap
after the first victim, with a wrong swap just answered (run from the checkout: python
docs/practice_screenshot.py)."""

import asyncio
from pathlib import Path

from kvviz.core.demos import load_demo
from kvviz.teach.exercise import build_exercise
from kvviz.core.session import Session
from kvviz.teach.exercise_screen import make_exercise_app

ROOT = Path(__file__).resolve().parents[1]
STEP = 29


async def main() -> None:
    session = Session.from_scenario(load_demo("lru"))
    app = make_exercise_app(session, build_exercise(session, seed=0, steps=[STEP]), animations=False)
    async with app.run_test(size=(140, 42)) as pilot:
        screen = app.screen_
        while screen.play.move.kind != "swap":  # the walk's stop and the victim, played right
            screen.action_choose(screen.play.move.answer.letter)
        wrong = next(c for c in screen.play.move.choices if c.mistake == "larger-child")
        screen.action_choose(wrong.letter)
        await pilot.pause()
        svg = app.export_screenshot(title=f"kvviz practice lru --step {STEP}")
    (ROOT / "docs" / "kvviz-practice.svg").write_text(svg, encoding="utf-8")


if __name__ == "__main__":
    asyncio.run(main())
