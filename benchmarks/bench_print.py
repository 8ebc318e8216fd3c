# SPDX-License-Identifier: Apache-2.0
"""How fast ``kvviz run --print`` prints a long scenario, and how soon its first step shows.

Run:  python benchmarks/bench_print.py              (writes the scenario to a temp folder)
      python benchmarks/bench_print.py --steps 300  (a shorter run)
      python benchmarks/bench_print.py --write s.kvs (only write the scenario, then stop)
      python benchmarks/bench_print.py --slice      (``kvviz run SLICE
                                                    --print --step 600`` of the Mooncake slice)

The workload: ``cache trie pages=2048 tokens_per_page=16``; requests share one of 24 prompts
(2..12 pages) and add 4..24 pages of their own; each is acquired, published and released (three
steps), so the trie grows until the pool is full and then every acquire evicts. The printed
figures come from one ``kvviz run FILE --print`` in a fresh interpreter, stdout a pipe read
here: wall seconds, the child's CPU seconds, seconds until the first ``step 1/`` line came
through the pipe, and the bytes printed, with the machine's load (``os.getloadavg``) before
and after. A pipe has no colour, so this measures the plain-text path (``export.text.plain_text``:
the same bytes Rich prints, built as strings).
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = 2048
TOKENS_PER_PAGE = 16
TARGET_S = 15.0


def scenario_text(steps: int = 1000, seed: int = 21) -> str:
    """A ``steps``-op scenario of acquire/publish/release on a 2,048-page trie that evicts."""
    rng = random.Random(seed)
    prompts = [list(range(p * 100_000, p * 100_000 + TOKENS_PER_PAGE * rng.randint(2, 12))) for p in range(24)]
    lines = ["title: bench_print: acquire/publish/release of varied prompts, evicting",
             f"cache trie pages={PAGES} tokens_per_page={TOKENS_PER_PAGE}"]
    fresh = 5_000_000
    request = 0
    while len(lines) - 2 < steps:
        own = TOKENS_PER_PAGE * rng.randint(4, 24) + rng.randint(0, TOKENS_PER_PAGE - 1)
        tokens = rng.choice(prompts) + list(range(fresh, fresh + own))
        fresh += own
        name = f"r{request}"
        request += 1
        lines += [f"acquire {name} {' '.join(map(str, tokens))}", f"publish {name}", f"release {name}"]
    return "\n".join(lines[:steps + 2]) + "\n"


def measure(path: Path) -> dict:
    """One ``kvviz run PATH --print`` in a child process: wall, CPU, first step, bytes."""
    command = [sys.executable, "-m", "kvviz", "run", str(path), "--print"]
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="120")
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT)
    first = None
    size = 0
    buffered = b""
    for chunk in iter(lambda: proc.stdout.read1(65536), b""):
        size += len(chunk)
        if first is None:
            buffered += chunk
            if b"step 1/" in buffered:
                first = time.perf_counter() - start
            buffered = buffered[-16:]
    _, status = os.waitpid(proc.pid, 0)
    wall = time.perf_counter() - start
    rc = os.waitstatus_to_exitcode(status)
    proc.returncode = rc
    err = proc.stderr.read().decode(errors="replace")
    return {"wall": wall, "first": first, "bytes": size, "rc": rc, "stderr": err}


def print_slice_step(first: int, step: int) -> int:
    """Row "``kvviz run s.kvs --print --step 600`` on the same slice" (31 s then): the
    slice made as ``benchmarks/bench_check.py`` makes it (``kvviz trace TRACE --first N
    --to-kvs``), then one ``run --print --step`` of it in a child process, its CPU and wall
    seconds and the bytes printed."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from bench_check import TRACE, child_cpu, make_slice

    if not TRACE.is_file():
        sys.exit(f"bench_print: {TRACE}: no such file (the shipped sample conversation)")
    with tempfile.TemporaryDirectory() as folder:
        slice_path, _ = make_slice(TRACE, first, "trie", folder, "bench_print")
        out_path = Path(folder) / "out.txt"
        load_before = os.getloadavg()
        start = time.perf_counter()
        with out_path.open("wb") as out:
            cpu, code = child_cpu(["run", str(slice_path), "--print", "--step", str(step)], stdout=out)
        wall = time.perf_counter() - start
        size = out_path.stat().st_size
        load_after = os.getloadavg()
    print(f"kvviz run SLICE --print --step {step}: {TRACE.name} --first {first}")
    print(f"  CPU {cpu:.2f} s, wall {wall:.2f} s, {size / 1e3:.1f} kB printed, exit {code}")
    print(f"  load average before {load_before[0]:.2f}, after {load_after[0]:.2f} (1 min)")
    return 0 if code in (0, 1) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--write", type=Path, help="write the scenario here and stop")
    parser.add_argument("--slice", action="store_true",
                        help="time `kvviz run SLICE --print --step 600` of the Mooncake slice instead")
    parser.add_argument("--first", type=int, default=200, help="with --slice: requests in the slice (600 steps)")
    args = parser.parse_args()
    if args.slice:
        return print_slice_step(args.first, 3 * args.first)
    text = scenario_text(args.steps)
    if args.write:
        args.write.write_text(text, encoding="utf-8")
        print(f"wrote {args.write} ({args.steps} steps, {PAGES} pages x {TOKENS_PER_PAGE} tokens)")
        return 0
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "bench_print.kvs"
        path.write_text(text, encoding="utf-8")
        load_before = os.getloadavg()
        before = os.times()
        result = measure(path)
        after = os.times()
        load_after = os.getloadavg()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    print(f"kvviz run --print: {args.steps} steps x {PAGES} pages x {TOKENS_PER_PAGE} tokens (python {sys.version.split()[0]})")
    print(f"  wall {result['wall']:.2f} s, CPU {cpu:.2f} s, first step after "
          f"{'never' if result['first'] is None else format(result['first'], '.2f') + ' s'}, "
          f"{result['bytes'] / 1e6:.1f} MB printed, exit {result['rc']}")
    print(f"  load average before {load_before[0]:.2f}, after {load_after[0]:.2f} (1 min)")
    verdict = "met" if result["wall"] <= TARGET_S else "MISSED"
    print(f"  target: <= {TARGET_S:.0f} s wall for 1,000 steps: {verdict}"
          f" (CPU {cpu:.2f} s: {'within' if cpu <= TARGET_S else 'beyond'} it; on a shared machine wall is CPU"
          f" plus waiting for a core)")
    if result["rc"] not in (0, 1):
        print(result["stderr"], file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
