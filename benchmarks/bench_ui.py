# SPDX-License-Identifier: Apache-2.0
"""How fast the terminal UI steps and starts.

Run:  python benchmarks/bench_ui.py            (about a minute)
      python benchmarks/bench_ui.py --quick    (fewer samples)
      python benchmarks/bench_ui.py --profile  (cProfile of each timed loop: where the time goes)

Figures:

* **step forward**: a seeded random session on a 2,048-page trie cache (4 tokens per page)
  whose trie holds ~1,000 nodes; the app runs headless (``run_test``) at 120×40 and the time
  is measured from calling the step action to the moment the screen has composed the new
  frame (Textual hands the compositor's update to the driver; headless, the driver only
  drops it). Median over ``--steps`` consecutive steps, each frame not seen before.
  Target ≤ 16 ms.
* **sub-step**: stepped into one op (``i``), the time of one → (one sub-step) on a
  2,048-page trie cache filled with cached chains (256 chains of 8 pages, all released),
  where one acquire needs 500 pages and so evicts ~500 pages, a sub-step each for every
  pop, sift swap, eviction and new candidate. Measured as the step forward is (action to
  composed frame), ``--substeps`` consecutive sub-steps from the op's start and as many
  from its middle, 50 ms apart (states are built 16 at a time by re-running the op, the
  next window while the app is idle between presses). Also printed: the step-in itself
  (the sub-steps built and the first window of states: one run of the op; the median of
  ``--intos`` step-ins, each the first into the op, on a fresh app) and where a sub-step's
  time goes (kvcore's states, the diff, the views).
  Targets: a sub-step ≤ 16 ms median, the step-in ≤ 100 ms.
* **startup**: wall time from launching ``python`` to the first painted frame of
  ``kvviz demo lru`` (the same app factory, headless, in a fresh interpreter: imports,
  parsing and running the demo, composing and painting). Median of ``--starts`` launches.
  Target ≤ 0.8 s.

The timed apps run on a settled heap, as ``kvviz`` runs its app (:func:`settle_heap`): the
session built before the app starts is frozen out of the cyclic garbage collector's walks.
``--profile`` profiles each timed span up to its frame, as the figures are measured.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import os
import pstats
import platform
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout

from kvviz.explore.app import make_app  # noqa: E402
from kvviz.core.scenario import CacheConfig, Op  # noqa: E402
from kvviz.core.session import Session  # noqa: E402

PAGES = 2048
TOKENS_PER_PAGE = 4
TARGET_NODES = 1000
TARGET_STEP_MS = 16.0
TARGET_INTO_MS = 100.0
TARGET_START_S = 0.8
SIZE = (120, 40)


def big_session(seed: int = 7, extra_steps: int = 400) -> tuple[Session, int]:
    """A session whose trie grows to ~1,000 nodes, then ``extra_steps`` more ops.

    Requests share one of 24 prompts (2..8 pages) and add 1..6 pages of their own; each is
    acquired, published and (mostly) released, so the trie keeps growing and, once the pool
    is full, evicts. Returns the session and the first step where the trie had 1,000 nodes.
    """
    rng = random.Random(seed)
    session = Session(CacheConfig("trie", PAGES, TOKENS_PER_PAGE), title="bench: 2,048 pages, ~1,000 nodes",
                      check=False)
    prompts = [tuple(range(p * 1000, p * 1000 + TOKENS_PER_PAGE * rng.randint(2, 8))) for p in range(24)]
    live: list[str] = []
    counter = 0
    reached = None

    def apply(kind: str, name: str, tokens=None) -> None:
        session.apply(Op(kind, name, tokens, text=f"{kind} {name}"))

    while True:
        nodes = len(session.last.snapshot.nodes) - 1
        if reached is None and nodes >= TARGET_NODES:
            reached = len(session) - 1
        if reached is not None and len(session) - 1 >= reached + extra_steps:
            return session, reached
        if live and (len(live) > 12 or rng.random() < 0.45):
            apply("release", live.pop(rng.randrange(len(live))))
            continue
        counter += 1
        name = f"r{counter}"
        own = tuple(rng.randrange(100_000, 900_000) for _ in range(TOKENS_PER_PAGE * rng.randint(1, 6)))
        apply("acquire", name, rng.choice(prompts) + own)
        apply("publish", name)
        live.append(name)


def _painted_signal(app) -> asyncio.Event:
    """An event set whenever the app hands a composed frame to its driver, with the moment
    (``painted.at``: wall and CPU clocks) it did: what the app runs after the paint (a
    prefetch when idle) is not the wait for that frame, though it runs before the event's
    waiter resumes."""
    painted = asyncio.Event()
    painted.at = (0.0, 0.0)
    original = app._display

    def display(screen, renderable):
        result = original(screen, renderable)
        if not painted.is_set():
            painted.at = (time.perf_counter(), time.process_time())
            if PROFILER is not None:  # the profile, like the figure, ends with the frame
                PROFILER.disable()
        painted.set()
        return result

    app._display = display
    return painted


PROFILER: cProfile.Profile | None = None
"""Set by ``--profile``: every timed span runs under it (the figures are then slower)."""


async def _timed(painted: asyncio.Event, action, wall: list[float], cpu: list[float]) -> None:
    """Call ``action`` and add the milliseconds until the next composed frame to ``wall``
    (and this process's CPU time over that span to ``cpu``)."""
    painted.clear()
    if PROFILER is not None:
        PROFILER.enable()
    begin, begin_cpu = time.perf_counter(), time.process_time()
    action()
    await asyncio.wait_for(painted.wait(), 30)
    end, end_cpu = painted.at
    wall.append((end - begin) * 1000)
    cpu.append((end_cpu - begin_cpu) * 1000)


def print_profile(title: str, lines: int = 25) -> None:
    """The profile gathered since the last call, by own time then by cumulative time, and a
    fresh profiler for the next loop (``--profile`` only)."""
    global PROFILER
    if PROFILER is None:
        return
    for order in ("tottime", "cumulative"):
        out = io.StringIO()
        pstats.Stats(PROFILER, stream=out).sort_stats(order).print_stats(lines)
        text = out.getvalue()
        print(f"--- profile of {title}, by {order} ---")
        print(text[text.find("   ncalls"):].rstrip())
    PROFILER = cProfile.Profile()


async def time_steps(session: Session, start: int, steps: int) -> tuple[list[float], list[float]]:
    """Milliseconds from the step action to the composed frame, for ``steps`` steps: wall
    time, and this process's CPU time over the same span (what an idle machine would take)."""
    app = make_app(session, start, animations=False, cursor_blink=False)
    painted = _painted_signal(app)
    wall, cpu = [], []
    settle_heap()  # as the CLI does before it runs the app
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        for _ in range(steps):
            await pilot.pause()
            await _timed(painted, app.action_next_step, wall, cpu)
    return wall, cpu


def settle_heap() -> None:
    """What the CLI does before it runs the app (``kvviz.commands.settle_heap``): the
    session built so far moved out of the cyclic garbage collector's sight. Without it a full
    collection walking the bench's whole session (60-90 ms) lands inside a timed step, which
    a person running ``kvviz`` never waits for. (Not imported: the bench needs no CLI.)"""
    gc.collect()
    gc.freeze()


SUBSTEP_GAP_S = 0.05
"""The pause between two timed sub-steps: a person's quick succession of → presses (a held
key repeats every 33-50 ms). The app uses it as a person's idle time: it builds the states of
the window the next presses reach then (prefetch), so a sub-step into a new window does not
pay for its run of the op."""

SUBSTEP_CHAINS = 256
SUBSTEP_CHAIN_PAGES = 8
SUBSTEP_NEEDED = 500


def evicting_session() -> Session:
    """A 2,048-page trie whose pages are all cached in 256 released chains of 8 pages, then
    one acquire that needs 500 pages (its last step): it evicts ~500 of them."""
    session = Session(CacheConfig("trie", PAGES, TOKENS_PER_PAGE), title="bench: one acquire evicting 500 pages",
                      check=False)
    chain = SUBSTEP_CHAIN_PAGES * TOKENS_PER_PAGE
    for c in range(SUBSTEP_CHAINS):
        tokens = tuple(range(c * chain, (c + 1) * chain))
        for kind in ("acquire", "publish", "release"):
            session.apply(Op(kind, f"c{c}", tokens if kind == "acquire" else None, text=f"{kind} c{c}"))
    big = tuple(range(10_000_000, 10_000_000 + SUBSTEP_NEEDED * TOKENS_PER_PAGE))
    session.apply(Op("acquire", "big", big, text="acquire big (500 pages)"))
    return session


async def time_substeps(session: Session, steps: int) -> dict[str, list[float]]:
    """Stepped into the session's last op: the step-in's milliseconds, then ``steps``
    sub-steps from the op's start and ``steps`` from its middle (wall and CPU each)."""
    app = make_app(session, len(session) - 1, animations=False, cursor_blink=False)
    painted = _painted_signal(app)
    times: dict[str, list[float]] = {name: [] for name in
                                     ("into", "into_cpu", "start", "start_cpu", "middle", "middle_cpu")}
    settle_heap()  # as the CLI does before it runs the app
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await _timed(painted, app.action_step_into, times["into"], times["into_cpu"])
        for _ in range(steps):
            await pilot.pause(SUBSTEP_GAP_S)
            await _timed(painted, app.action_next_step, times["start"], times["start_cpu"])
        count = len(session.substeps(len(session) - 1))
        await pilot.pause()
        app.show_substep(app.step, count // 2)
        for _ in range(steps):
            await pilot.pause(SUBSTEP_GAP_S)
            await _timed(painted, app.action_next_step, times["middle"], times["middle_cpu"])
    return times


async def time_step_in() -> tuple[float, float]:
    """One more step into the evicting op, on a fresh session and app (a step-in builds the
    op's sub-steps once: only a fresh one is the first time): (wall, CPU) milliseconds."""
    session = evicting_session()
    app = make_app(session, len(session) - 1, animations=False, cursor_blink=False)
    painted = _painted_signal(app)
    wall, cpu = [], []
    settle_heap()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await _timed(painted, app.action_step_into, wall, cpu)
    return wall[0], cpu[0]


def substep_profile(session: Session, steps: int) -> dict[str, float]:
    """Where a sub-step's time goes outside the views, per sub-step from the op's middle, in
    ms: kvcore's states (re-runs of the op on a restored copy, 16 states a run) and the diff
    of two neighbouring states that the views mark."""
    from kvviz.core.snapshot_diff import diff_snapshots

    index = len(session) - 1
    subs = session.substeps(index)
    middle = len(subs) // 2
    begin = time.perf_counter()
    fresh = type(subs)(subs.frame_index, subs.op, subs.before, subs.after, subs.steps, subs.source, subs.note,
                       subs._start)
    states = [fresh.state(k) for k in range(middle, middle + steps)]
    state_ms = (time.perf_counter() - begin) * 1000 / steps
    begin = time.perf_counter()
    for a, b in zip(states, states[1:]):
        diff_snapshots(a, b)
    diff_ms = (time.perf_counter() - begin) * 1000 / max(1, len(states) - 1)
    begin = time.perf_counter()
    fresh._start()
    restore_ms = (time.perf_counter() - begin) * 1000
    return {"state": state_ms, "diff": diff_ms, "restore": restore_ms, "count": len(subs)}


STARTUP_CHILD = """
import sys
from kvviz.explore.app import make_app
from kvviz.core.demos import load_demo
from kvviz.core.session import Session

app = make_app(Session.from_scenario(load_demo("lru")), animations=False, cursor_blink=False)
original = app._display

def display(screen, renderable):
    original(screen, renderable)
    if renderable is not None and not getattr(app, "_painted", False):
        app._painted = True
        print("painted", flush=True)
        app.call_later(app.exit)

app._display = display
app.run(headless=True, size=(120, 40))
"""


def time_startup() -> tuple[float, float]:
    """Seconds from launching a fresh interpreter to its first painted frame of the lru demo:
    wall time, and the child's CPU time (user + system; it exits right after painting)."""
    begin = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", STARTUP_CHILD], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    line = child.stdout.readline()
    elapsed = time.perf_counter() - begin
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if line.strip() != "painted":
        raise RuntimeError(f"the startup child did not paint (exit {child.returncode})")
    return elapsed, usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer samples")
    parser.add_argument("--steps", type=int, default=None, help="steps to time (default 200, quick 40)")
    parser.add_argument("--starts", type=int, default=None, help="startups to time (default 7, quick 3)")
    parser.add_argument("--substeps", type=int, default=None, help="sub-steps to time, twice (default 100, quick 30)")
    parser.add_argument("--intos", type=int, default=None, help="steps into the op to time, each on a fresh app "
                        "(default 5, quick 3)")
    parser.add_argument("--only-substeps", action="store_true", help="time the sub-steps only")
    parser.add_argument("--profile", action="store_true", help="print a cProfile of each timed loop")
    args = parser.parse_args()
    if args.profile:
        global PROFILER
        PROFILER = cProfile.Profile()
    steps = args.steps or (40 if args.quick else 200)
    starts = args.starts or (3 if args.quick else 7)
    substeps = args.substeps or (30 if args.quick else 100)

    intos = args.intos or (3 if args.quick else 5)
    substep_ms = report_substeps(substeps, intos)
    if args.only_substeps:
        return 0 if substep_ms <= TARGET_STEP_MS else 1

    built = time.perf_counter()
    session, reached = big_session(extra_steps=steps + 10)
    built = time.perf_counter() - built
    snap = session.frame(reached).snapshot
    print(f"session: {len(session) - 1} ops, {PAGES} pages, trie of {len(snap.nodes) - 1} nodes at step {reached} "
          f"(built in {built:.1f} s)")
    wall, cpu = asyncio.run(time_steps(session, reached, steps))
    print_profile("the steps forward")
    last = session.frame(reached + steps).snapshot
    step_ms = statistics.median(wall)
    print(f"step forward: median {step_ms:.1f} ms wall (p90 {statistics.quantiles(wall, n=10)[-1]:.1f}), "
          f"{statistics.median(cpu):.1f} ms CPU, over {len(wall)} steps ({len(last.nodes) - 1} nodes at the end)"
          f"   target <= {TARGET_STEP_MS:.0f} ms  {'OK' if step_ms <= TARGET_STEP_MS else 'MISSED'}")
    time_startup()  # warm the file cache: the figure is a warm start, as a person sees it the second time
    runs = [time_startup() for _ in range(starts)]
    startup = statistics.median(wall for wall, _ in runs)
    print(f"startup to first painted frame of `kvviz demo lru`: median {startup:.2f} s wall, "
          f"{statistics.median(cpu for _, cpu in runs):.2f} s CPU, over {starts} launches   "
          f"target <= {TARGET_START_S} s  {'OK' if startup <= TARGET_START_S else 'MISSED'}")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} CPUs, "
          f"load average {load:.1f} (wall times grow with load; CPU times much less)")
    return 0 if step_ms <= TARGET_STEP_MS and startup <= TARGET_START_S and substep_ms <= TARGET_STEP_MS else 1


def report_substeps(steps: int, intos: int = 1) -> float:
    """Print the sub-step figures (``intos``: step-ins timed, the first in the sub-steps' own
    app, each other on a fresh one); returns the median ms per sub-step (the worse half)."""
    built = time.perf_counter()
    session = evicting_session()
    built = time.perf_counter() - built
    frame = session.last
    print(f"sub-step session: {PAGES} pages in {SUBSTEP_CHAINS} cached chains of {SUBSTEP_CHAIN_PAGES}, then "
          f"`{frame.op.text}`: {len(frame.evictions)} pages evicted (built in {built:.1f} s)")
    times = asyncio.run(time_substeps(session, steps))
    for _ in range(intos - 1):
        wall, cpu = asyncio.run(time_step_in())
        times["into"].append(wall)
        times["into_cpu"].append(cpu)
    print_profile("the steps into the op and the sub-steps")
    profile = substep_profile(session, min(steps, 64))
    start, middle = statistics.median(times["start"]), statistics.median(times["middle"])
    worse = max(start, middle)
    into = statistics.median(times["into"])
    print(f"step into the op: median {into:.0f} ms wall ({statistics.median(times['into_cpu']):.0f} ms CPU; "
          f"slowest {max(times['into']):.0f}, {max(times['into_cpu']):.0f} CPU) over {len(times['into'])} step-ins, "
          f"each the first into it: {profile['count']:,} sub-steps built   target <= {TARGET_INTO_MS:.0f} ms  "
          f"{'OK' if into <= TARGET_INTO_MS else 'MISSED'}")
    print(f"sub-step forward: median {start:.1f} ms wall from the op's start "
          f"({statistics.median(times['start_cpu']):.1f} ms CPU), {middle:.1f} ms from its middle "
          f"({statistics.median(times['middle_cpu']):.1f} ms CPU; p90 "
          f"{statistics.quantiles(times['middle'], n=10)[-1]:.1f}), over {steps} sub-steps each"
          f"   target <= {TARGET_STEP_MS:.0f} ms  {'OK' if worse <= TARGET_STEP_MS else 'MISSED'}")
    print(f"  of which, per sub-step from the middle: kvcore's state {profile['state']:.1f} ms (a restore, "
          f"{profile['restore']:.1f} ms, and a re-run of the op per 16 states), the diff of two states "
          f"{profile['diff']:.1f} ms; the rest is the views")
    return worse


if __name__ == "__main__":
    sys.exit(main())
