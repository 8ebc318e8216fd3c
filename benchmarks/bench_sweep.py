# SPDX-License-Identifier: Apache-2.0
"""The sweep on a process pool against the serial sweep, and the one-pass LRU curve against
the per-capacity replays it replaces.

    python benchmarks/bench_sweep.py [TRACE] [--policy lru,lfu] [--design trie,hash]
        [--first N] [--workers K] [--rounds R] [--baseline DIR] [--skip-serial] [--skip-sweeps]
        [--skip-curve]

Sweeps: ``kvviz trace TRACE --sweep --policy ... --design ... --no-progress`` in a fresh
process, serial (``--workers 1``) and pooled (``--workers K``, default every core), taken in
turns R times (default 1) so that both see the same machine load. With ``--baseline DIR`` (a
checkout of an earlier commit, e.g. ``git archive <commit> | tar -x -C DIR``) that checkout's
sweep runs in turn too, with ``PYTHONPATH=DIR`` and no ``--workers``: "today's" sweep. For
each run: wall time, CPU (user + system of the process and its workers, from ``wait4``), the
peak RSS of the process tree's largest process (``wait4``'s ``ru_maxrss``) and of each
worker (``VmHWM`` sampled from ``/proc`` every 0.1 s, Linux only), and the load average
before and after. The outputs of the serial and pooled runs must be equal once their wall
times are masked (the multi-choice table shows none). ``--skip-serial`` leaves the serial run
out (baseline against pooled only, in turns). Since the sweep reads the rows of trie lru and
hash from the largest request up off the one-pass curve (``--replay-all`` replays them), the
baseline's output differs from ours only by those rows' ``*`` marks and footnote.

Curve: in this process, :func:`kvviz.trace.stack_distance.lru_curve` (one pass) against one
``replay`` per sweep capacity for trie lru and hash, each checked equal at every capacity
where the pass is exact (from the largest request); wall and CPU time of both.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvviz.core.mooncake import read_trace  # noqa: E402
from kvviz.trace.replay import ReplayConfig, replay, sweep_capacities, sweep_workers  # noqa: E402
from kvviz.trace.stack_distance import lru_curve  # noqa: E402

DEFAULT_TRACE = ROOT / "kvviz" / "samples" / "mooncake" / "conversation_trace.jsonl.gz"  # the shipped sample `conversation`
TARGET_RATIO = 0.6
_TIME_CELL = re.compile(r"\b[0-9]+\.[0-9]{2} s\b")
_ONE_PASS_NOTE = re.compile(r"\n *\* one-pass LRU curve, not replayed *")


def without_one_pass_marks(output: str) -> str:
    """The output with the one-pass rows' ``*`` and their footnote taken out, and every run of
    spaces made one (the marks widen columns): what the baseline, which replayed them, prints."""
    return re.sub(r" +", " ", re.sub(r"(?<=%)\*", "", _ONE_PASS_NOTE.sub("", output)))


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _descendants(pid: int) -> list[int]:
    found, queue = [], [pid]
    while queue:
        parent = queue.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{parent}/task/{task}/children") as file:
                    children = [int(c) for c in file.read().split()]
            except OSError:
                continue
            found += children
            queue += children
    return found


def _is_resource_tracker(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            return b"resource_tracker" in file.read()
    except OSError:
        return False


def _peak_kb(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as file:
            for line in file:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def run_sweep(label: str, command: list[str], env: dict) -> dict:
    """One sweep in a fresh process: its figures and its output.

    It runs in the first directory of its PYTHONPATH (the checkout under test): ``python -m``
    puts the working directory before PYTHONPATH on sys.path, so a baseline started from
    inside another checkout would import that checkout's kvviz and kvcore instead."""
    before = load()
    started = time.perf_counter()
    cwd = env["PYTHONPATH"].split(os.pathsep)[0]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True, cwd=cwd)
    peaks: dict[int, int] = {}
    done = threading.Event()

    def sample() -> None:  # VmHWM only grows: the last sample before a worker exits is its peak so far
        while not done.wait(0.1):
            for pid in _descendants(process.pid):
                if _is_resource_tracker(pid):  # multiprocessing's helper process, not a worker
                    continue
                kb = _peak_kb(pid)
                if kb is not None:
                    peaks[pid] = max(kb, peaks.get(pid, 0))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out_chunks: list[str] = []
    reader = threading.Thread(target=lambda: out_chunks.append(process.stdout.read()), daemon=True)
    reader.start()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    done.set()
    sampler.join()
    reader.join()
    stderr = process.stderr.read()
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"{label}: exit {process.returncode}: {stderr.strip()[-500:]}")
    return {"label": label, "wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "max_rss_mb": usage.ru_maxrss / 1024,
            "workers_mb": sorted(kb / 1024 for kb in peaks.values()), "load_before": before, "load_after": load(),
            "output": _TIME_CELL.sub("#.## s", out_chunks[0] if out_chunks else "")}


def print_run(run: dict) -> None:
    workers = ", ".join(f"{mb:.0f}" for mb in run["workers_mb"]) or "none"
    print(f"  {run['label']:<9} wall {run['wall']:7.1f} s   CPU {run['cpu']:6.1f} s   peak RSS {run['max_rss_mb']:4.0f} MB "
          f"(workers, sampled: {workers} MB)   load {run['load_before']} -> {run['load_after']}")


def sweeps(args) -> None:
    base = [sys.executable, "-m", "kvviz", "trace", str(args.trace.resolve()), "--sweep", "--policy", args.policy,
            "--design", args.design, "--no-progress"] + (["--first", str(args.first)] if args.first else [])
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    kinds = [("serial", base + ["--workers", "1"], env), (f"pool x{args.workers}", base + ["--workers", str(args.workers)], env)]
    if args.skip_serial:
        kinds = kinds[1:]
    if args.baseline:
        old_env = dict(os.environ)
        old_env["PYTHONPATH"] = str(Path(args.baseline).resolve())
        kinds.insert(0, ("baseline", base, old_env))
    print(f"sweep: {args.trace.name} --policy {args.policy} --design {args.design}"
          + (f" --first {args.first}" if args.first else "") + f"; {os.cpu_count()} cores; load {load()}")
    runs: dict[str, list[dict]] = {label: [] for label, _, _ in kinds}
    for round_ in range(args.rounds):
        order = kinds if round_ % 2 == 0 else kinds[::-1]  # alternate who goes first
        for label, command, environment in order:
            run = run_sweep(label, command, environment)
            runs[label].append(run)
            print_run(run)
    pooled = runs[kinds[-1][0]]
    if "serial" in runs:
        serial = runs["serial"]
        same = all(r["output"] == serial[0]["output"] for r in serial + pooled)
        print(f"  serial and pooled outputs {'identical' if same else 'DIFFER'} (wall times masked)")
    if "baseline" in runs:
        unmarked = [without_one_pass_marks(r["output"]) for r in runs["baseline"] + pooled]
        same = all(o == unmarked[0] for o in unmarked)
        print(f"  baseline and pooled outputs {'identical' if same else 'DIFFER'} (wall times, one-pass marks "
              f"and footnote masked)")
    for label, their in runs.items():
        if label == kinds[-1][0]:
            continue
        ratios = [p["wall"] / s["wall"] for p, s in zip(pooled, their)]
        verdict = "meets" if max(ratios) <= TARGET_RATIO else "misses"
        print(f"  pooled / {label} wall: " + ", ".join(f"{r:.2f}" for r in ratios)
              + f"  ({verdict} the {TARGET_RATIO} target in every round)")


def curve(args) -> None:
    requests = read_trace(args.trace, first=args.first).requests
    print(f"one-pass LRU curve: {args.trace.name}, {len(requests):,} requests; load {load()}")
    wall, cpu = time.perf_counter(), time.process_time()
    line = lru_curve(requests)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print(f"  one pass         wall {wall:6.2f} s  CPU {cpu:6.2f} s  (exact from {line.exact_from_pages:,} pages = "
          f"{line.exact_from_tokens:,} tokens; {line.distinct_blocks:,} distinct blocks)")
    capacities = sweep_capacities()
    for design in ("trie", "hash"):
        wall, cpu = time.perf_counter(), time.process_time()
        exact = equal = 0
        for capacity in capacities:
            result = replay(requests, ReplayConfig(capacity_tokens=capacity, cache=design))
            pages = capacity // 512
            if line.is_exact(pages):
                exact += 1
                equal += (result.hit_tokens, result.pages_evicted) == (line.hit_tokens(pages),
                                                                       line.pages_evicted(pages))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        print(f"  {len(capacities)} replays {design:<4}  wall {wall:6.2f} s  CPU {cpu:6.2f} s  "
              f"(equal to the pass at {equal} of the {exact} capacities where it is exact)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--policy", default="lru,lfu")
    parser.add_argument("--design", default="trie,hash")
    parser.add_argument("--first", type=int, default=None)
    parser.add_argument("--workers", type=int, default=sweep_workers())
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--baseline", default=None, help="an earlier checkout whose sweep is today's")
    parser.add_argument("--skip-serial", action="store_true", help="no --workers 1 run (baseline against pool)")
    parser.add_argument("--skip-sweeps", action="store_true")
    parser.add_argument("--skip-curve", action="store_true")
    args = parser.parse_args()
    if not args.skip_sweeps:
        sweeps(args)
    if not args.skip_curve:
        curve(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
