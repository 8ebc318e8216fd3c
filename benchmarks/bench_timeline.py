# SPDX-License-Identifier: Apache-2.0
"""Long timelines: build time, time to reach any frame, and memory, per keyframe interval.

Run:  python benchmarks/bench_timeline.py                 (50,000 ops; K = 16, 32, 64)
      python benchmarks/bench_timeline.py --quick         (5,000 ops, a smoke run)
      python benchmarks/bench_timeline.py --keyframe-every 32 --profile   (one K, profiled)

Workload (seeded, deterministic): ``--ops`` random ops on a trie cache of 512 pages x 4
tokens. Token sequences of 8..64 tokens are drawn from an alphabet of 3 token ids, so first
and second pages collide often (prefix sharing, dedup on publish) while longer prefixes
rarely do; up to 56 allocations are live at once, which keeps the pool full: acquires and
extends evict, and a few fail. Op mix: acquire 35%, publish 25%, extend (append) 15%,
release 25% (ops are generated only for live names).

Figures for each ``keyframe_every`` (K) in 16, 32, 64, each K in its own process so the
resident-set figure is that K's alone:

* **build**: wall time of ``Session.apply`` for every op (frames recorded, invariants
  checked after each op, as the UI and ``kvviz check`` do), and how much of it the garbage
  collector's full collections took;
* **reach a frame, cold**: 200 random frame indices, each dropped from the session's frame
  cache first, so ``session.frame(i)`` restores the nearest keyframe and replays up to
  K - 1 ops; median, 90th percentile and max. Target: <= 100 ms;
* **memory**: the process's peak resident set (``resource.getrusage``) after the build and
  the accesses, and the tracemalloc peak of a second, traced build. Target: <= 300 MB.
  tracemalloc makes the build about 6x slower, so by default it is measured for K = 16
  only, the K that keeps the most keyframes (``--tracemalloc-all`` measures every K);
* **every frame in order**: the cost per frame over 300 consecutive uncached frames, and
  that cost times the timeline's length; and **every digest, quiet replay** (what
  ``kvviz export`` and ``kvviz open`` do to list or verify a digest per step:
  ``Session.snapshots()``, no narration, diffs or checks) over the first 2,000 frames;
* **the garbage collector**: how many objects it tracks once the timeline is built and how
  long one full collection of them takes: a cold access that happens to trigger one waits
  that long (a full collection runs after every ~25% growth of the tracked objects);
* **diagnostics** for the misses: the same 200 cold accesses again with the frame cache
  cut to 32 frames, and again after ``gc.freeze()`` (the built timeline moved out of the
  collector's reach).

Timing is ``time.perf_counter``, wall time: on a loaded machine it includes waiting for a
CPU, so the CPU time of the build is printed too.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import pstats
import random
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc
from dataclasses import replace
from pathlib import Path
from typing import Self

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from kvviz.core.scenario import CacheConfig, Op, format_op
from kvviz.core.session import Session

PAGES = 512
TOKENS_PER_PAGE = 4
ALPHABET = 3
MAX_LIVE = 56
ACCESSES = 200
IN_ORDER = 300
KEYFRAME_INTERVALS = (16, 32, 64)
DIAGNOSTIC_CACHE = 32

TARGET_FRAME_MS = 100.0
TARGET_MEMORY_MB = 300.0


# -- workload ---------------------------------------------------------------------------------


def random_op(rng: random.Random, live: set[str], next_name: int) -> Op:
    """One op: an acquire of a new name, or an op on one of the ``live`` names."""
    roll = rng.random()
    if not live or (roll < 0.35 and len(live) < MAX_LIVE):
        tokens = tuple(rng.randrange(ALPHABET) for _ in range(rng.randint(8, 64)))
        op = Op("acquire", f"r{next_name}", tokens, extra=rng.choice((0, 0, 2, 4)))
    else:
        name = rng.choice(sorted(live))
        if roll < 0.60:
            op = Op("publish", name, None)
        elif roll < 0.75:
            tokens = tuple(rng.randrange(ALPHABET) for _ in range(rng.randint(1, 8)))
            op = Op("extend", name, tokens, extra=rng.choice((0, 2)), append=True)
        else:
            op = Op("release", name, None)
    return replace(op, text=format_op(op))


def build(ops: int, keyframe_every: int, seed: int) -> tuple[Session, float, float]:
    """A session of ``ops`` random ops, and the wall and CPU seconds ``Session.apply`` took."""
    rng = random.Random(seed)
    session = Session(CacheConfig("trie", PAGES, TOKENS_PER_PAGE), title="bench", keyframe_every=keyframe_every)
    live: set[str] = set()
    next_name = 0
    wall = cpu = 0.0
    for _ in range(ops):
        op = random_op(rng, live, next_name)
        t0, c0 = time.perf_counter(), time.process_time()
        frame = session.apply(op)
        wall += time.perf_counter() - t0
        cpu += time.process_time() - c0
        if op.kind == "acquire":
            next_name += 1
            if not frame.failed:
                live.add(op.name)
        elif op.kind == "release" and not frame.failed:
            live.discard(op.name)
    return session, wall, cpu


# -- measuring --------------------------------------------------------------------------------


class GcPauses:
    """Wall time of the garbage collector's full (generation 2) collections while active."""

    def __init__(self) -> None:
        self.pauses: list[float] = []
        self._start = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.pauses.append(time.perf_counter() - self._start)

    def __enter__(self) -> Self:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc) -> None:
        gc.callbacks.remove(self)


def reach_frames(session: Session, seed: int) -> tuple[list[float], list[float]]:
    """Seconds to reach each of ``ACCESSES`` random frames, none of them cached, and the
    full-collection pauses of the garbage collector during those accesses."""
    rng = random.Random(seed)
    times = []
    with GcPauses() as pauses:
        for _ in range(ACCESSES):
            index = rng.randrange(len(session))
            session._frames.pop(index, None)  # cold: force a rebuild from the nearest keyframe
            t0 = time.perf_counter()
            session.frame(index)
            times.append(time.perf_counter() - t0)
    return times, pauses.pauses


def in_order(session: Session, seed: int) -> float:
    """Seconds per frame to visit ``IN_ORDER`` consecutive uncached frames and digest each."""
    start = random.Random(seed).randrange(len(session) - IN_ORDER)
    for index in range(start, start + IN_ORDER):
        session._frames.pop(index, None)
    t0 = time.perf_counter()
    for index in range(start, start + IN_ORDER):
        session.frame(index).snapshot.digest()
    return (time.perf_counter() - t0) / IN_ORDER


def quiet_digests(session: Session, count: int = 2_000) -> float:
    """Seconds per frame of :meth:`Session.snapshots` plus a digest each, over the first
    ``count`` frames (the replay starts at frame 0, as a bundle's does)."""
    snapshots = session.snapshots()
    t0 = time.perf_counter()
    done = 0
    for snapshot in snapshots:
        snapshot.digest()
        done += 1
        if done == count:
            break
    return (time.perf_counter() - t0) / done


def shrink_frame_cache(session: Session, size: int) -> None:
    """What ``Session(cached_frames=size)`` would hold (diagnostic: reaches into the session)."""
    session._cache_size = size
    while len(session._frames) > size:
        session._frames.popitem(last=False)


def access_line(label: str, times: list[float], pauses: list[float]) -> str:
    ms = sorted(t * 1e3 for t in times)
    p90 = ms[int(len(ms) * 0.9) - 1]
    slow = sum(1 for t in ms if t > TARGET_FRAME_MS)
    return (f"  {label:<26} median {statistics.median(ms):6.1f} ms  p90 {p90:6.1f} ms  max {ms[-1]:6.1f} ms  "
            f"({slow} of {len(ms)} over {TARGET_FRAME_MS:.0f} ms; {len(pauses)} full GCs, "
            f"longest {max(pauses, default=0) * 1e3:.0f} ms)")


def memory_breakdown(session: Session) -> str:
    """What grows with the timeline."""
    return (f"{len(session._keyframes):,} keyframes, {len(session._frames)} cached frames, "
            f"{len(session.steps):,} steps")


def ok(good: bool) -> str:
    return "ok" if good else "MISSED"


def run_one(ops: int, keyframe_every: int, seed: int, traced: bool, profile: bool) -> None:
    """Every figure for one keyframe interval, printed as it is measured."""
    gc.collect()
    with GcPauses() as build_pauses:
        session, wall, cpu = build(ops, keyframe_every, seed)
    frames = len(session)
    print(f"K={keyframe_every}: {frames - 1:,} ops, {sum(s.failed for s in session.summaries):,} failed, "
          f"{sum(s.evictions for s in session.summaries):,} evictions, "
          f"{sum(s.violations for s in session.summaries)} violations; {memory_breakdown(session)}")
    print(f"  build                      {wall:7.1f} s wall, {cpu:.1f} s CPU ({cpu / (frames - 1) * 1e3:.2f} ms/op); "
          f"{len(build_pauses.pauses)} full GCs took {sum(build_pauses.pauses):.1f} s")
    sys.stdout.flush()

    times, pauses = reach_frames(session, seed + 1)
    tracked = len(gc.get_objects())
    print(access_line("reach a frame, cold", times, pauses)
          + f"  target: {ok(max(times) * 1e3 <= TARGET_FRAME_MS)}")
    t0 = time.perf_counter()
    gc.collect()
    full_gc_ms = (time.perf_counter() - t0) * 1e3
    print(f"  {'':<26} {tracked:,} objects tracked by the garbage collector; one full collection of them "
          f"takes {full_gc_ms:.0f} ms, the pause any access may hit")
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(f"  peak resident set          {rss_mb:7.1f} MB  target: {ok(rss_mb <= TARGET_MEMORY_MB)}")
    per_frame = in_order(session, seed + 2)
    print(f"  every frame in order       {per_frame * 1e3:6.1f} ms/frame -> {per_frame * frames:,.0f} s for all "
          f"{frames:,} (frames with narration, diffs and checks)")
    per_digest = quiet_digests(session)
    print(f"  every digest, quiet replay {per_digest * 1e3:6.1f} ms/frame -> {per_digest * frames:,.0f} s for all "
          f"{frames:,} (what kvviz export and open do for a bundle's digests)")
    sys.stdout.flush()

    if profile:
        profiler = cProfile.Profile()
        profiler.enable()
        reach_frames(session, seed + 3)
        profiler.disable()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(15)
        print(out.getvalue())

    shrink_frame_cache(session, DIAGNOSTIC_CACHE)
    gc.collect()
    times, pauses = reach_frames(session, seed + 4)
    print(access_line(f"diagnostic: cache {DIAGNOSTIC_CACHE} frames", times, pauses)
          + f"  {len(gc.get_objects()):,} objects tracked")
    gc.freeze()
    times, pauses = reach_frames(session, seed + 5)
    print(access_line("diagnostic: + gc.freeze()", times, pauses))
    gc.unfreeze()
    del session
    sys.stdout.flush()

    if traced:
        gc.collect()
        tracemalloc.start()
        session, _, _ = build(ops, keyframe_every, seed)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        del session
        print(f"  tracemalloc peak (build)   {peak / 1e6:7.1f} MB  target: {ok(peak / 1e6 <= TARGET_MEMORY_MB)}")
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=50_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="5,000 ops")
    parser.add_argument("--keyframe-every", type=int, default=None, help="one K, in this process")
    parser.add_argument("--tracemalloc", action="store_true", help="with --keyframe-every: also the traced build")
    parser.add_argument("--tracemalloc-all", action="store_true", help="the traced build for every K (slow)")
    parser.add_argument("--profile", action="store_true", help="profile the cold frame accesses (cProfile)")
    args = parser.parse_args()
    ops = 5_000 if args.quick else args.ops
    if args.keyframe_every is not None:
        run_one(ops, args.keyframe_every, args.seed, args.tracemalloc, args.profile)
        return
    print(f"timeline benchmark: {ops:,} ops, trie cache {PAGES} pages x {TOKENS_PER_PAGE} tokens, "
          f"alphabet {ALPHABET}, seed {args.seed}; Python {sys.version.split()[0]}")
    sys.stdout.flush()
    for keyframe_every in KEYFRAME_INTERVALS:
        command = [sys.executable, __file__, "--ops", str(ops), "--seed", str(args.seed),
                   "--keyframe-every", str(keyframe_every)]
        if args.tracemalloc_all or keyframe_every == min(KEYFRAME_INTERVALS):
            command.append("--tracemalloc")
        if args.profile:
            command.append("--profile")
        subprocess.run(command, check=True)


if __name__ == "__main__":
    main()
