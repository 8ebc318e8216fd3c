# SPDX-License-Identifier: Apache-2.0
"""Draw docs/kvviz-watch.svg: `kvviz watch` on the shared vLLM 0.33 recording at step 266,
a stored block selected (run from the checkout: python docs/watch_screenshot.py)."""

import asyncio
from pathlib import Path

from kvviz.watch.recording import read_recording
from kvviz.watch.timeline import WatchTimeline
from kvviz.watch.app import make_watch_app

ROOT = Path(__file__).resolve().parents[1]
REC = ROOT.parent / "shared" / "data" / "kv-events" / "vllm-0.33.0-conversation-400.jsonl"
STEP = 266


async def main() -> None:
    timeline = WatchTimeline.from_messages(read_recording(REC), source=REC.name)
    app = make_watch_app(timeline, step=STEP)
    async with app.run_test(size=(150, 44)) as pilot:
        await pilot.pause()
        block = timeline.frame(STEP).effect.stored[2]
        app.forest.move_cursor((block.key, block.medium))
        await pilot.pause()
        svg = app.export_screenshot(title=f"kvviz watch --replay-file {REC.name}, step {STEP}")
    (ROOT / "docs" / "kvviz-watch.svg").write_text(svg, encoding="utf-8")


if __name__ == "__main__":
    asyncio.run(main())
