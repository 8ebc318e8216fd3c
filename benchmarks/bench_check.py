# SPDX-License-Identifier: Apache-2.0
"""What checking a real trace slice costs, and whether a step's cost depends on the pool.

Run:  python benchmarks/bench_check.py                 (both designs: a few minutes on an idle machine)
      python benchmarks/bench_check.py --design hash     (vLLM's hash blocks only; --design trie, the trie)
      python benchmarks/bench_check.py --trace PATH --first 200

For each design of ``--design`` (default ``trie,hash``: both, one after the other):

1. Makes the slice inside the script: ``kvviz trace TRACE --first N --design D --to-kvs`` (200
   requests of the Mooncake conversation trace: 600 steps on 5,537 pages; the same requests
   on both designs, only the ``cache`` line differs), in a temporary folder.
2. CPU seconds (user + system, of the child process) of ``kvviz check`` on it, of
   ``kvviz check --full`` (every step's invariants checked whole: the oracle), of
   ``kvviz run --json`` (schema kvviz.timeline/3: the first state whole, then each step's
   changes; ``benchmarks/bench_run_json.py`` measures it alone; should it be refused, exit 2,
   the script falls back to ``run --json --step LAST`` and ``run --json`` on the longest
   prefix of the slice the bound lets through).
3. The curve: the same ops (the slice's first ``--curve-steps`` steps) on pools of 1k, 10k and
   100k pages, each step applied to a kvviz session (snapshot, incremental check, diff,
   narration, expects): CPU milliseconds per step, and the 100k / 1k ratio (flat: near 1).

Prints ``os.getloadavg()`` before and after: the machine is shared, CPU time is what a busy
machine disturbs least.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout

TRACE = ROOT / "kvviz" / "samples" / "mooncake" / "conversation_trace.jsonl.gz"  # the shipped sample `conversation`
POOLS = (1_000, 10_000, 100_000)
TARGET_CPU_SECONDS = 3.0


def child_cpu(args: list[str], stdout=subprocess.DEVNULL) -> tuple[float, int]:
    """CPU seconds (user + system) of ``python -m kvviz ARGS`` and its exit code."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "kvviz", *args], stdout=stdout, stderr=subprocess.PIPE, env=env,
                          cwd=ROOT, timeout=1800)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), done.returncode


def make_slice(trace: Path, first: int, design: str, folder: str | Path, bench: str) -> tuple[Path, float]:
    """``kvviz trace TRACE --first N --design D --to-kvs FOLDER/slice.kvs`` (the slice every
    timeline bench measures): its path and the CPU seconds it took; exits naming ``bench``
    if kvviz trace fails."""
    slice_path = Path(folder) / "slice.kvs"
    cpu, code = child_cpu(["trace", str(trace), "--first", str(first), "--design", design, "--to-kvs", str(slice_path)])
    if code:
        sys.exit(f"{bench}: kvviz trace exited {code}")
    return slice_path, cpu


def with_pool(text: str, pages: int) -> str:
    """The scenario ``text`` with its cache header's pool set to ``pages``."""
    out = []
    for line in text.splitlines():
        if line.startswith("cache "):
            line = " ".join(f"pages={pages}" if w.startswith("pages=") else w for w in line.split())
        out.append(line)
    return "\n".join(out) + "\n"


def per_step_ms(text: str, steps: int) -> float:
    """CPU ms per step of a session applying the first ``steps`` steps of scenario ``text``."""
    from kvviz.core.scenario import parse_scenario
    from kvviz.core.session import Session

    scenario = parse_scenario(text)
    ops = scenario.steps[:steps]
    session = Session(scenario.config, title=scenario.title)
    start = time.process_time()
    for step in ops:
        frame = session.apply(step.op, step.narration, step.expects)
        assert not frame.violations, frame.violations
    return 1000 * (time.process_time() - start) / len(ops)


DESIGNS = ("trie", "hash")


def designs(text: str) -> list[str]:
    """``--design``'s value: designs separated by commas, each named once."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in DESIGNS]
    if unknown or not names or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"expected {' or '.join(DESIGNS)} (comma-separated, each once), not {text!r}")
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, default=TRACE, help=f"the trace (default {TRACE})")
    parser.add_argument("--first", type=int, default=200, help="requests in the slice (default 200: 600 steps)")
    parser.add_argument("--curve-steps", type=int, default=600, help="steps per point of the curve (default 600)")
    parser.add_argument("--design", type=designs, default=list(DESIGNS),
                        help="trie, hash or trie,hash (the default: both, one after the other)")
    run_each_design(parser.parse_args(), bench_design, "bench_check")


def run_each_design(args, bench_design, bench: str) -> None:
    """The benches' frame: refuse a missing trace, then each design's figures between the
    load averages before and after."""
    if not args.trace.is_file():
        sys.exit(f"{bench}: {args.trace}: no such file (pass --trace)")
    print(f"load average before: {os.getloadavg()}")
    for design in args.design:
        print()
        print(f"== design {design} ==")
        bench_design(args, design)
    print(f"load average after: {os.getloadavg()}")


def bench_design(args, design: str) -> None:
    """Print one design's figures: the slice's check and run --json CPU, and the curve."""
    from kvviz.core import limits

    with tempfile.TemporaryDirectory() as tmp:
        slice_path, cpu = make_slice(args.trace, args.first, design, tmp, "bench_check")
        text = slice_path.read_text()
        from kvviz.core.scenario import parse_scenario

        scenario = parse_scenario(text)
        steps, pages = len(scenario.steps), scenario.config.pages
        print(f"slice: {args.trace.name} --first {args.first} --design {design}: {steps} steps, {pages:,} pages "
              f"(made in {cpu:.2f} s CPU)")
        print()
        print("CPU seconds (user + system of the kvviz process):")
        for label, cmd in (("kvviz check", ["check", str(slice_path)]),
                           ("kvviz check --full (the oracle)", ["check", "--full", str(slice_path)])):
            cpu, code = child_cpu(cmd)
            print(f"  {label:<40} {cpu:6.2f} s  exit {code}" + (
                f"   target <= {TARGET_CPU_SECONDS:.0f} s: {'met' if cpu <= TARGET_CPU_SECONDS else 'MISSED'}"
                if "--full" not in cmd else ""))
        cpu, code = child_cpu(["run", str(slice_path), "--json"])
        print(f"  {'kvviz run --json':<40} {cpu:6.2f} s  exit {code}"
              + ("  (refused: step snapshots x pages above MAX_STEP_STATE_PAGES)" if code == 2 else ""))
        if code == 2:
            cpu, code = child_cpu(["run", str(slice_path), "--json", "--step", str(steps)])
            print(f"  {f'kvviz run --json --step {steps}':<40} {cpu:6.2f} s  exit {code}")
            fits = limits.MAX_STEP_STATE_PAGES // pages - 10  # steps whose snapshots fit, with a margin
            prefix = Path(tmp) / "prefix.kvs"
            lines, kept = [], 0
            body = text.splitlines()
            for line in body:  # the slice's first requests, up to the bound (each request is 3 ops)
                if line.startswith("acquire "):
                    if kept + 3 > fits:
                        break
                    kept += 3
                lines.append(line)
            prefix.write_text("\n".join(lines) + "\n")
            cpu, code = child_cpu(["run", str(prefix), "--json"])
            print(f"  {f'kvviz run --json (first {kept} steps)':<40} {cpu:6.2f} s  exit {code}")
        print()
        n = min(args.curve_steps, steps)
        print(f"Per-step CPU of a session (snapshot, check, diff, narration, expects), the slice's first {n} ops:")
        curve = []
        for pool in POOLS:
            ms = per_step_ms(with_pool(text, pool), n)
            curve.append(ms)
            print(f"  {pool:>7,} pages  {ms:7.3f} ms per step")
        print(f"  100k / 1k: {curve[-1] / curve[0]:.2f}x (flat: about 1)")


if __name__ == "__main__":
    main()
