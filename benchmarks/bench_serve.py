# SPDX-License-Identifier: Apache-2.0
"""How fast ``kvviz serve`` answers a browser: first frame and per-step latency,
measured in a real headless Chromium (the system's, driven by Playwright).

Run:  python benchmarks/bench_serve.py                 (about a minute)
      python benchmarks/bench_serve.py --tabs 2 --steps 10
      python benchmarks/bench_serve.py --screenshot docs/kvviz-serve-lru.png

Figures (``kvviz serve lru`` on 127.0.0.1, one browser, a 1400×900 viewport):

* **first frame**: from ``page.goto`` of a fresh tab to the moment the page shows the app's
  first frame: the tab's title says step 0 (the app's OSC 2 title, copied by the page) and
  the terminal has drawn bytes (textual.js's ``-first-byte``). This is a new app process
  per tab: Python's start, kvviz's imports, parsing and running the demo, the first paint.
  Median and worst of ``--tabs`` tabs, opened one after the other.
* **step**: one → (ArrowRight) pressed in the browser, timed from the key press to the
  moment the tab's title names the next step (the app has drawn it and said so), and to
  the last byte of the frame that followed (the frame is complete once no byte has come
  for 150 ms; that quiet time is not counted). Median and 90th percentile of ``--steps``
  steps per tab.

Also printed: the load average at the start and the end (figures on a shared machine are
the machine's as much as kvviz's).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ADDRESS = re.compile(r"kvviz serve: (http://127\.0\.0\.1:\d+)/ serves")
QUIET_MS = 150


def start_server(folder: Path, demo: str) -> tuple[subprocess.Popen, str]:
    output = folder / "serve.txt"
    with output.open("w") as sink:
        process = subprocess.Popen([sys.executable, "-m", "kvviz", "serve", demo, "--port", "0"], cwd=folder,
                                   stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    deadline = time.monotonic() + 120
    while not (match := ADDRESS.search(output.read_text(errors="replace"))):
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"kvviz serve did not start: {output.read_text()}")
        time.sleep(0.05)
    return process, match.group(1)


def stop_server(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=20)


def title_step(page) -> int:
    match = re.search(r"· step (\d+) of", page.title())
    return int(match.group(1)) if match else -1


def frame_settled(page) -> float:
    """Wait until no byte came for QUIET_MS; the page's time of the last byte (ms)."""
    page.wait_for_function(f"performance.now() - window.kvvizStream.bytesAt > {QUIET_MS}", timeout=30_000,
                           polling=20)
    return page.evaluate("window.kvvizStream.bytesAt")


def one_tab(context, url: str, steps: int, screenshot: Path | None) -> tuple[float, list[float], list[float]]:
    page = context.new_page()
    started = time.perf_counter()
    page.goto(url)
    page.wait_for_function("/· step 0 of/.test(document.title)", timeout=120_000, polling=10)
    page.wait_for_selector("body.-first-byte", timeout=120_000)
    first_frame = time.perf_counter() - started
    page.focus(".xterm-helper-textarea")
    frame_settled(page)
    to_title, to_frame = [], []
    for _ in range(steps):
        step = title_step(page)
        pressed = page.evaluate("performance.now()")
        page.keyboard.press("ArrowRight")
        page.wait_for_function(f"/· step {step + 1} of/.test(document.title)", timeout=30_000, polling="raf")
        titled = page.evaluate("window.kvvizStream.titleAt")
        to_title.append(titled - pressed)
        to_frame.append(frame_settled(page) - pressed)
    if screenshot is not None:
        page.wait_for_timeout(400)  # textual.js fades the terminal in; a picture, not a measurement
        page.screenshot(path=str(screenshot))
    page.close()
    return first_frame, to_title, to_frame


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--demo", default="lru")
    parser.add_argument("--tabs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--screenshot", type=Path, default=None,
                        help="save a PNG of the last tab (after its steps) here")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as folder:
        process, url = start_server(Path(folder), args.demo)
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=chromium, headless=True)
                context = browser.new_context(viewport={"width": 1400, "height": 900})
                firsts, titles, frames = [], [], []
                for tab in range(args.tabs):
                    shot = args.screenshot if tab == args.tabs - 1 else None
                    first, to_title, to_frame = one_tab(context, url + "/", args.steps, shot)
                    firsts.append(first)
                    titles += to_title
                    frames += to_frame
                browser.close()
        finally:
            stop_server(process)
    load_after = os.getloadavg()

    def p90(values):
        return sorted(values)[max(0, int(round(0.9 * len(values))) - 1)]

    print(f"kvviz serve {args.demo}, headless Chromium {chromium}, 1400x900, {args.tabs} tabs x {args.steps} steps")
    print(f"first frame (goto -> step 0 drawn):   median {statistics.median(firsts):.2f} s, "
          f"worst {max(firsts):.2f} s")
    print(f"step, key -> title names the step:    median {statistics.median(titles):.0f} ms, "
          f"p90 {p90(titles):.0f} ms")
    print(f"step, key -> frame's last byte:       median {statistics.median(frames):.0f} ms, "
          f"p90 {p90(frames):.0f} ms")
    print(f"load average (1 min): {load_before[0]:.2f} before, {load_after[0]:.2f} after; {os.cpu_count()} cores")
    if args.screenshot is not None:
        print(f"screenshot: {args.screenshot}")


if __name__ == "__main__":
    main()
