# SPDX-License-Identifier: Apache-2.0
"""How fast ``kvviz trace TRACE --ui`` opens a real trace and jumps about it.

Run:  python benchmarks/bench_trace_ui.py            (the Mooncake conversation trace: 1,000
                                                      requests, 3,000 steps, 10,757 pages)
      python benchmarks/bench_trace_ui.py --runs 3   (the median of three launches)
      python benchmarks/bench_trace_ui.py --trace FILE --first N

Each launch is a fresh interpreter running the command's own code (``kvviz.cli.main`` with
``trace FILE --ui``: reading, converting, the session, the app) with only the terminal
replaced: the app runs headless at 160×50 (Textual hands each composed frame to its driver,
which drops it). Figures:

* **open**: wall time from starting the interpreter to the first painted frame of step 0
  (imports included, as a person waits for them), and the child's CPU time to then.
* **jump**: ``g N`` (the go-to prompt's answer, ``go_to(N)``) to the frame painted, for
  steps far apart, forwards and backwards (each lands in a stretch of the timeline not
  built before: a keyframe restored and at most ``keyframe_every`` ops replayed), then the
  step after one of them (→). Wall and CPU time of the child each, and the cyclic garbage
  collector's pauses inside it. The first, ``g 2999 at once``, is asked for as soon as the
  first frame is painted, before the session's idle work (its keyframes' invariant checks,
  deferred past the first paint) ran: with ~90 keyframes unchecked up to it, that jump checks
  its own frame whole rather than trust its keyframe. The others start once
  the idle work is done and the heap settled after it (``idle work done``: how long after the
  first frame, the first jump included), as a person typing ``g 2500`` would.

Targets: open ≤ 2 s, a jump ≤ 200 ms. The machine's load average is printed with them:
wall times grow with it, CPU times much less.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "kvviz" / "samples" / "mooncake" / "conversation_trace.jsonl.gz"  # the shipped sample `conversation`
AT_ONCE = 2999  # jumped to as soon as the first frame is painted: before any idle work
JUMPS = (2500, 1200, 2999, 40, 1700, 600)
TARGET_OPEN_S = 2.0
TARGET_JUMP_MS = 200.0

CHILD = r"""
import gc, json, sys, time
import kvviz.commands as common

TARGETS = json.loads(sys.argv[2])
figures = {"jumps": []}
collecting = {"since": 0.0, "total": 0.0}


def collector_timed(phase, info):  # the cyclic collector's pauses, summed (wall)
    if phase == "start":
        collecting["since"] = time.perf_counter()
    else:
        collecting["total"] += time.perf_counter() - collecting["since"]


gc.callbacks.append(collector_timed)


def deferred_checks(app):  # 0 once the session's idle work is done (a model without it has none)
    return getattr(app.session, "deferred_checks", 0)


settled = {"done": False}
settle_heap = common.settle_heap


def settle_heap_noted():  # what the app calls once its idle work is done (the CLI's settle_heap)
    settle_heap()
    settled["done"] = True


common.settle_heap = settle_heap_noted


def run_headless(app):
    # What the real _run_app does before app.run(): kvviz's app settles the heap itself, once
    # its first frame is painted and its idle work done (the collector paused until then).
    if getattr(app, "after_idle_work", None) is None:
        settle_heap_noted()
    else:
        gc.disable()
    original = app._display
    state = {"painted": False, "pending": None}

    def display(screen, renderable):
        original(screen, renderable)
        if renderable is None:
            return
        if not state["painted"]:
            state["painted"] = True
            figures["open_cpu"] = time.process_time()
            state["painted_at"] = (time.perf_counter(), time.process_time())
            print("painted", flush=True)
            app.call_later(next_jump)
            return
        pending = state["pending"]
        if pending is not None:
            target, wall, cpu, collected = pending
            state["pending"] = None
            figures["jumps"].append([target, (time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000,
                                     (collecting["total"] - collected) * 1000])
            app.set_timer(0.05, next_jump)  # let the screen settle: each jump is timed alone

    def checks_done():
        # The first jump was at once; the others wait, as a person typing does, for the
        # session's deferred checks and the heap settled after them (polled, at most 20 s).
        if (deferred_checks(app) or not settled["done"]) and time.perf_counter() - state["painted_at"][0] < 20:
            app.set_timer(0.01, checks_done)
            return
        wall, cpu = state["painted_at"]
        figures["checked"] = [(time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000,
                              deferred_checks(app)]
        next_jump()

    def next_jump():
        done = len(figures["jumps"])
        if done == len(TARGETS):
            print(json.dumps(figures), flush=True)
            app.exit()
            return
        if done == 1 and "checked" not in figures:
            checks_done()
            return
        target = TARGETS[done]
        state["pending"] = (target, time.perf_counter(), time.process_time(), collecting["total"])
        if target == "next":
            app.action_next_step()
        else:
            app.go_to(target)

    app._display = display
    app.run(headless=True, size=(160, 50))


common._run_app = run_headless
common.require_terminal = lambda: None
import kvviz.trace.command as trace_command
trace_command.require_terminal = lambda: None
sys.argv = ["kvviz", "trace", sys.argv[1], "--ui", *sys.argv[3:]]
from kvviz.cli import main
main()
"""


def launch(trace: Path, targets: list, extra: list[str]) -> dict:
    """One launch: the figures of the child (open wall time measured here)."""
    begin = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(trace), json.dumps(targets), *extra],
                             stdout=subprocess.PIPE, text=True, cwd=ROOT, start_new_session=True)
    try:
        line = child.stdout.readline()
        opened = time.perf_counter() - begin
        if line.strip() != "painted":
            raise RuntimeError(f"the child did not paint (it printed {line!r})")
        figures = json.loads(child.stdout.readline())
        child.wait(timeout=120)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, 9)
            child.wait()
    figures["open_wall"] = opened
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=TRACE, help="a Mooncake JSONL trace")
    parser.add_argument("--first", type=int, default=None, help="requests to open (the UI's default: 1,000)")
    parser.add_argument("--runs", type=int, default=1, help="launches (the median is printed)")
    args = parser.parse_args()
    extra = ["--first", str(args.first)] if args.first is not None else []
    targets = [AT_ONCE, *JUMPS[:2], "next", *JUMPS[2:]]
    runs = [launch(args.trace, targets, extra) for _ in range(args.runs)]
    opened = statistics.median(r["open_wall"] for r in runs)
    open_cpu = statistics.median(r["open_cpu"] for r in runs)
    print(f"trace --ui {args.trace.name}{' --first ' + str(args.first) if args.first else ''}: "
          f"open to the first painted frame {opened:.2f} s wall, {open_cpu:.2f} s CPU (median of {len(runs)})"
          f"   target <= {TARGET_OPEN_S:.0f} s  {'OK' if opened <= TARGET_OPEN_S else 'MISSED'}")
    worst = 0.0
    for i, target in enumerate(targets):
        wall = statistics.median(r["jumps"][i][1] for r in runs)
        cpu = statistics.median(r["jumps"][i][2] for r in runs)
        collected = statistics.median(r["jumps"][i][3] for r in runs)
        what = "→ (the step after)" if target == "next" else f"g {target}" + (" at once" if i == 0 else "")
        if target != "next":
            worst = max(worst, wall)
        print(f"  {what:<20} {wall:7.1f} ms wall {cpu:7.1f} ms CPU  (collector {collected:5.1f} ms)")
        if i == 0:
            checked = statistics.median(r["checked"][0] for r in runs)
            checked_cpu = statistics.median(r["checked"][1] for r in runs)
            left = max(r["checked"][2] for r in runs)
            print(f"  {'idle work done':<20} {checked:7.1f} ms wall {checked_cpu:7.1f} ms CPU after the first frame"
                  + (f"  ({left} keyframe checks still left!)" if left else ""))
    print(f"jumps: the slowest {worst:.0f} ms wall   target <= {TARGET_JUMP_MS:.0f} ms  "
          f"{'OK' if worst <= TARGET_JUMP_MS else 'MISSED'}")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs, "
          f"load average {load:.1f} (wall times grow with load; CPU times much less)")
    return 0 if opened <= TARGET_OPEN_S and worst <= TARGET_JUMP_MS else 1


if __name__ == "__main__":
    sys.exit(main())
