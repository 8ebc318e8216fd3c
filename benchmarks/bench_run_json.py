# SPDX-License-Identifier: Apache-2.0
"""What ``kvviz run --json`` of a real trace slice costs.

Run:  python benchmarks/bench_run_json.py                  (both designs: about a minute on an idle machine)
      python benchmarks/bench_run_json.py --design hash      (vLLM's hash blocks only; --design trie, the trie)
      python benchmarks/bench_run_json.py --trace PATH --first 200

For each design of ``--design`` (default ``trie,hash``):

1. Makes the slice inside the script, as benchmarks/bench_check.py does: ``kvviz trace TRACE
   --first N --design D --to-kvs`` (200 requests of the Mooncake conversation trace: 600
   steps on 5,537 pages), in a temporary folder.
2. CPU seconds (user + system, of the child process) of ``kvviz run SLICE --json`` (the first
   state whole, each later one as its changes: schema kvviz.timeline/3), its exit code and the
   bytes it printed, against the 3 s target; and, for scale, what ``--json --snapshots``
   (every state whole) would print: 601 x the whole state's bytes, refused by
   MAX_STEP_STATE_PAGES on this slice.
3. The curve: the slice's ops on pools of 1k, 10k and 100k pages, each step applied to a kvviz
   session and written as its JSON line (kvviz.report.timeline_json.TimelineWriter): CPU ms
   per step between the first and the last lines, the JSON bytes and the state-digest
   elements hashed per step after the first, and the 100k / 1k ratio (flat: near 1). The
   first and the last lines are timed apart: they carry the whole state's sha256 digest
   (and the first the state whole and its state digest made from every row), O(the pool)
   by definition, once each. Then the same for reading the output back (read_states: every
   state rebuilt and its state_digest verified, none handed out, ``states=False``).

Prints ``os.getloadavg()`` before and after: the machine is shared, CPU time is what a busy
machine disturbs least.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout

from bench_check import DESIGNS, TRACE, child_cpu, designs, make_slice, run_each_design, with_pool  # noqa: E402  (the same slice, measured the same way)

POOLS = (1_000, 10_000, 100_000)
TARGET_CPU_SECONDS = 3.0


def per_step(text: str) -> dict[str, float]:
    """A session applying scenario ``text`` and writing each step's JSON line as it goes
    (as ``kvviz run --json`` streams them), then the lines read back (``read_states``, every
    state rebuilt and verified, none handed out). CPU ms per step between the first and the
    last lines (``step``, ``read``); the first and last lines apart (``first``, ``last``,
    ``first_read``, ``last_read``: the whole state, its sha256 digest, and on the first its
    state digest, O(the pool) by definition); mean bytes and state-digest elements hashed per
    line after the first."""
    from kvviz.core.scenario import parse_scenario
    from kvviz.core.session import Session
    from kvviz.report.timeline_json import TimelineWriter, read_states

    scenario = parse_scenario(text)
    steps = len(scenario.steps)
    lines: list[str] = []
    writers: list[TimelineWriter] = []
    marks: list[float] = []  # CPU time after each line written
    hashed: list[int] = []

    def write(frame) -> None:
        if frame.index == steps:
            marks.append(time.process_time())  # the last op applied, its line not yet written
        lines.extend(writers[0].lines(frame))
        marks.append(time.process_time())
        hashed.append(writers[0]._writer.digest_work.hashed)

    def start(session) -> None:
        writers.append(TimelineWriter(session, last=steps))
        write(session.frame(0))

    begin = time.process_time()
    Session.from_scenario(scenario, on_start=start, on_frame=write)
    reading = read_states(lines, states=False)
    read = [time.process_time()]
    for _ in reading:
        read.append(time.process_time())
    middle = steps - 1  # steps 1 .. steps-1 (the last op itself is timed with the middle ones)
    return {"first": 1000 * (marks[0] - begin), "step": 1000 * (marks[-2] - marks[0]) / middle,
            "last": 1000 * (marks[-1] - marks[-2]),
            "bytes": sum(map(len, lines[1:])) / max(len(lines) - 1, 1), "hashed": (hashed[-1] - hashed[0]) / steps,
            "first_read": 1000 * (read[1] - read[0]), "read": 1000 * (read[-2] - read[1]) / middle,
            "last_read": 1000 * (read[-1] - read[-2])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, default=TRACE, help=f"the trace (default {TRACE})")
    parser.add_argument("--first", type=int, default=200, help="requests in the slice (default 200: 600 steps)")
    parser.add_argument("--design", type=designs, default=list(DESIGNS),
                        help="trie, hash or trie,hash (the default: both, one after the other)")
    run_each_design(parser.parse_args(), bench_design, "bench_run_json")


def bench_design(args, design: str) -> None:
    """Print one design's figures: the slice's run --json CPU and the curve."""
    with tempfile.TemporaryDirectory() as tmp:
        slice_path, cpu = make_slice(args.trace, args.first, design, tmp, "bench_run_json")
        text = slice_path.read_text()
        from kvviz.core.scenario import parse_scenario

        scenario = parse_scenario(text)
        steps, pages = len(scenario.steps), scenario.config.pages
        print(f"slice: {args.trace.name} --first {args.first} --design {design}: {steps} steps, {pages:,} pages "
              f"(made in {cpu:.2f} s CPU)")
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
        print(f"Per step, the slice's {steps} ops applied and written as JSON lines (in this process):")
        curve = []
        for pool in POOLS:
            got = per_step(with_pool(text, pool))
            curve.append(got)
            print(f"  {pool:>7,} pages  written: {got['step']:6.3f} ms CPU per step, {got['bytes']:6,.0f} bytes and "
                  f"{got['hashed']:5.1f} digest elements hashed per line; first line {got['first']:7.1f} ms, "
                  f"last {got['last']:6.1f} ms")
            print(f"  {'':>7}        read back: {got['read']:6.3f} ms CPU per step (read_states, each state_digest "
                  f"verified); first line {got['first_read']:7.1f} ms, last {got['last_read']:6.1f} ms")
        print(f"  100k / 1k: {curve[-1]['step'] / curve[0]['step']:.2f}x per step written, "
              f"{curve[-1]['read'] / curve[0]['read']:.2f}x per step read (flat: about 1)")


if __name__ == "__main__":
    main()
