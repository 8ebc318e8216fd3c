# SPDX-License-Identifier: Apache-2.0
"""What ``kvviz run --json`` of a real trace slice costs (issue 21: "check / run --json of
the 600-step slice: <= 3 s CPU each, and the per-step cost flat from a 1k-page to a
100k-page pool").

Run:  python benchmarks/bench_run_json.py                  (about half a minute on an idle machine)
      python benchmarks/bench_run_json.py --trace PATH --first 200

1. Makes the slice inside the script, as benchmarks/bench_check.py does: ``kvviz trace TRACE
   --first N --to-kvs`` (200 requests of the Mooncake conversation trace: 600 steps on 5,537
   pages), in a temporary folder.
2. CPU seconds (user + system, of the child process) of ``kvviz run SLICE --json`` (the first
   state whole, each later one as its changes: schema kvviz.timeline/2), its exit code and the
   bytes it printed, against the 3 s target; and, for scale, what ``--json --snapshots``
   (every state whole) would print: 601 x the whole state's bytes, refused by
   MAX_STEP_STATE_PAGES on this slice.
3. The curve: the slice's ops on pools of 1k, 10k and 100k pages, each step applied to a kvviz
   session and written as its JSON line (kvviz.model.timeline_json.TimelineWriter): CPU ms
   per step, the JSON bytes per step after the first, and the 100k / 1k ratio (flat: near 1).

Prints ``os.getloadavg()`` before and after: the machine is shared, CPU time is what a busy
machine disturbs least.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout

from bench_check import TRACE, child_cpu, with_pool  # noqa: E402  (the same slice, measured the same way)

POOLS = (1_000, 10_000, 100_000)
TARGET_CPU_SECONDS = 3.0


def per_step(text: str) -> tuple[float, float]:
    """CPU ms per step of a session applying scenario ``text`` and writing each step's JSON
    line as it goes, and the mean bytes of the lines after the first."""
    from kvviz.model.scenario import parse_scenario
    from kvviz.model.session import Session
    from kvviz.model.timeline_json import TimelineWriter

    scenario = parse_scenario(text)
    sizes: list[int] = []
    writers: list[TimelineWriter] = []

    def start(session) -> None:
        writers.append(TimelineWriter(session))
        sizes.extend(map(len, writers[0].lines(session.frame(0))))

    def write(frame) -> None:
        sizes.extend(map(len, writers[0].lines(frame)))

    begin = time.process_time()
    Session.from_scenario(scenario, on_start=start, on_frame=write)
    ms = 1000 * (time.process_time() - begin) / len(scenario.steps)
    return ms, sum(sizes[1:]) / max(len(sizes) - 1, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, default=TRACE, help=f"the trace (default {TRACE})")
    parser.add_argument("--first", type=int, default=200, help="requests in the slice (default 200: 600 steps)")
    args = parser.parse_args()
    if not args.trace.is_file():
        sys.exit(f"bench_run_json: {args.trace}: no such file (pass --trace)")

    print(f"load average before: {os.getloadavg()}")
    with tempfile.TemporaryDirectory() as tmp:
        slice_path = Path(tmp) / "slice.kvs"
        cpu, code = child_cpu(["trace", str(args.trace), "--first", str(args.first), "--to-kvs", str(slice_path)])
        if code:
            sys.exit(f"bench_run_json: kvviz trace exited {code}")
        text = slice_path.read_text()
        from kvviz.model.scenario import parse_scenario

        scenario = parse_scenario(text)
        steps, pages = len(scenario.steps), scenario.config.pages
        print(f"slice: {args.trace.name} --first {args.first}: {steps} steps, {pages:,} pages (made in {cpu:.2f} s CPU)")
        print()
        out_path = Path(tmp) / "run.jsonl"
        with out_path.open("wb") as out:
            cpu, code = child_cpu(["run", str(slice_path), "--json"], stdout=out)
        size = out_path.stat().st_size
        verdict = "met" if cpu <= TARGET_CPU_SECONDS and code == 0 else "MISSED"
        print(f"kvviz run --json: {cpu:.2f} s CPU, exit {code}, {size / 1e6:.2f} MB printed   "
              f"target <= {TARGET_CPU_SECONDS:.0f} s: {verdict}")
        with out_path.open("rb") as lines:
            next(lines)
            whole = len(next(lines))  # step 0: the one state written whole
        print(f"  every state whole (--snapshots) would print more than {(steps + 1) * whole / 1e6:.0f} MB "
              f"({steps + 1} x step 0's {whole / 1e3:.0f} KB)")
        print()
        print(f"Per step, the slice's {steps} ops applied and written as JSON lines (in this process):")
        curve = []
        for pool in POOLS:
            ms, mean = per_step(with_pool(text, pool))
            curve.append(ms)
            print(f"  {pool:>7,} pages  {ms:7.3f} ms CPU per step, {mean:8,.0f} bytes per line after the first")
        print(f"  100k / 1k: {curve[-1] / curve[0]:.2f}x (flat: about 1)")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
