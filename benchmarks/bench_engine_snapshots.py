# SPDX-License-Identifier: Apache-2.0
"""What an op costs on the real engines' caches, and whether it grows with the pool.

Run (in the engine venv, ``bash scripts/install-engines.sh VENV``; about a minute):

    VENV/bin/python benchmarks/bench_engine_snapshots.py
    VENV/bin/python benchmarks/bench_engine_snapshots.py --pages 1024,4096 --cycles 20

For each pool size (default 1,024 / 4,096 / 16,384 pages of 16 tokens) and each cache (kvcore's
trie and hash designs, vLLM 0.33.0's ``KVCacheManager``, SGLang 0.5.23's ``RadixCache``):

1. Fills half the pool: ``pages / 16`` prompts of 8 pages (a shared 2-page stem, 6 pages of
   their own), each acquired, published and released, so the cache holds ~pages/2 cached
   pages; 4 more prompts stay live.
2. Times ``--cycles`` cycles of acquire / publish / release of new prompts of the same shape
   (no eviction: half the pool is free), in CPU milliseconds per op: the whole op as a
   session drives it (``apply``, then ``snapshot``), and the part that reads the engine's
   state into a kvcore snapshot (the backend's ``_read``; kvcore: ``snapshot()``).
3. On the engines, twice: **before**, every read a full re-read of the pool
   (``full_reads=True``, the contract), and **after**, the read of what the op's
   instrumented calls touched (the default).
4. The same cycles in a kvviz session (``Session.apply``: the op, its snapshot, the invariant
   check, the diff and the narration of the frame; the fill built as a session too): what a
   frame of ``kvviz run --backend ...`` costs, reads of what changed and checks told by them
   (after); on the engines then with full reads and whole checks (before).

The last lines are the growth from the smallest pool to the largest (×16 pages by default):
near 1× is a cost that does not grow with the pool. The garbage collector is off while
timing; CPU time is what a busy machine disturbs least. Prints ``os.getloadavg()``.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from a checkout

from kvviz.backends.kvcore_backend import kvcore_backend  # noqa: E402
from kvviz.backends.registry import make_backend_factory  # noqa: E402
from kvviz.core.scenario import CacheConfig, Op, Scenario, Step  # noqa: E402
from kvviz.core.session import Session  # noqa: E402

POOLS = (1_024, 4_096, 16_384)
TPP = 16
PROMPT_PAGES = 8
STEM = tuple(range(1, 2 * TPP + 1))


def prompt(n: int) -> tuple[int, ...]:
    """Prompt ``n``: the shared stem, then pages of its own."""
    base = 1_000 + n * TPP * PROMPT_PAGES
    return STEM + tuple(range(base, base + (PROMPT_PAGES - 2) * TPP))


def cycle_ops(n: int) -> tuple[Op, Op, Op]:
    """Prompt ``n`` acquired, published and released."""
    name = f"p{n}"
    return Op("acquire", name, prompt(n), 0), Op("publish", name, None), Op("release", name, None)


def cycle(backend, n: int) -> None:
    for op in cycle_ops(n):
        backend.apply(op)
        backend.snapshot()


def measure_session(backend: str, kind: str, pages: int, cycles: int) -> tuple[float, float | None]:
    """CPU ms per ``Session.apply`` over ``cycles`` cycles, after the fill built as a session;
    then, on an engine, over as many more with full reads and whole checks (what a frame cost
    before), else None."""
    count = pages // (2 * PROMPT_PAGES)
    steps = [Step(op) for n in range(count) for op in cycle_ops(n)]
    steps += [Step(Op("acquire", f"live{n}", prompt(n), 0)) for n in range(count, count + 4)]
    session = Session.from_scenario(Scenario(config=CacheConfig(kind, pages, TPP), steps=tuple(steps)),
                                    backend_factory=make_backend_factory(backend))
    after = _session_ms(session, count + 4, cycles)
    if backend == "kvcore":
        return after, None
    session.backend.full_reads = True
    session.backend.check = session.backend.check_full  # the check before: the whole snapshot
    return after, _session_ms(session, count + 4 + cycles, cycles)


def _session_ms(session, first: int, cycles: int) -> float:
    gc.collect()
    gc.disable()
    try:
        start = time.process_time()
        for n in range(first, first + cycles):
            for op in cycle_ops(n):
                session.apply(op)
        spent = time.process_time() - start
    finally:
        gc.enable()
    return 1000 * spent / (3 * cycles)


class ReadTimer:
    """CPU seconds spent in a backend's reads (its ``_read``, or kvcore's ``snapshot``)."""

    def __init__(self, backend, method: str):
        self.spent = 0.0
        real = getattr(backend, method)

        def timed():
            start = time.process_time()
            try:
                return real()
            finally:
                self.spent += time.process_time() - start

        setattr(backend, method, timed)


def measure(backend, first: int, cycles: int, read: str) -> tuple[float, float]:
    """(ms per op, ms per op reading) over ``cycles`` cycles from prompt ``first``."""
    timer = ReadTimer(backend, read)
    gc.collect()
    gc.disable()
    try:
        start = time.process_time()
        for n in range(first, first + cycles):
            cycle(backend, n)
        spent = time.process_time() - start
    finally:
        gc.enable()
    ops = 3 * cycles
    return 1000 * spent / ops, 1000 * timer.spent / ops


def fill(backend, pages: int) -> int:
    """Half the pool cached, 4 prompts live; the next prompt number."""
    count = pages // (2 * PROMPT_PAGES)
    for n in range(count):
        cycle(backend, n)
    for n in range(count, count + 4):
        backend.apply(Op("acquire", f"live{n}", prompt(n), 0))
    return count + 4


def engines(names: set[str]) -> dict:
    """Label -> (a backend of ``pages`` pages, its registry name, its cache kind)."""
    out = {}
    if "vllm" in names:
        from kvviz.backends.vllm_backend import VllmBackend
        out["vLLM"] = (lambda pages: VllmBackend(pages, TPP), "vllm", "hash")
    if "sglang" in names:
        from kvviz.backends.sglang_backend import SglangBackend
        out["SGLang"] = (lambda pages: SglangBackend(pages, TPP), "sglang", "trie")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", default=",".join(map(str, POOLS)), help="pool sizes, comma-separated")
    parser.add_argument("--cycles", type=int, default=40, help="acquire/publish/release cycles timed (3 ops each)")
    parser.add_argument("--engines", default="vllm,sglang", help="which engines (vllm, sglang)")
    args = parser.parse_args(argv)
    pools = [int(p) for p in args.pages.split(",")]
    makers = engines(set(args.engines.split(",")))
    print(f"load {os.getloadavg()[0]:.1f}; {TPP} tokens/page, prompts of {PROMPT_PAGES} pages; "
          f"{args.cycles} cycles (x3 ops) per figure; CPU ms per op (op + read / read alone)")
    results: dict[str, list[tuple[float, float]]] = {}
    sessions: dict[str, list[float]] = {}
    for pages in pools:
        for design in ("trie", "hash"):
            backend = kvcore_backend(CacheConfig(design, pages, TPP), None)
            first = fill(backend, pages)
            results.setdefault(f"kvcore {design}", []).append(measure(backend, first, args.cycles, "snapshot"))
            sessions.setdefault(f"kvcore {design}", []).append(measure_session("kvcore", design, pages, args.cycles)[0])
        for label, (make, name, kind) in makers.items():
            after, before = measure_session(name, kind, pages, args.cycles)
            sessions.setdefault(f"{label} before", []).append(before)
            sessions.setdefault(f"{label} after", []).append(after)
            backend = make(pages)
            first = fill(backend, pages)
            backend.full_reads = True
            results.setdefault(f"{label} before (full reads)", []).append(
                measure(backend, first, args.cycles, "_read"))
            backend.full_reads = False
            cycle(backend, first + args.cycles)  # (its first read is a full one: the rows to keep)
            results.setdefault(f"{label} after (what changed)", []).append(
                measure(backend, first + args.cycles + 1, args.cycles, "_read"))
    width = max(map(len, results))
    print(f"{'':{width}}  " + "  ".join(f"{p:>17,} pages" for p in pools))
    for label, rows in results.items():
        print(f"{label:{width}}  " + "  ".join(f"{op:8.2f} / {read:6.2f} ms   " for op, read in rows))
    print("in a session (Session.apply: op, snapshot, check, diff, narration), CPU ms per op:")
    for label, rows in sessions.items():
        print(f"  {label:{width - 2}}  " + "  ".join(f"{ms:8.2f} ms              " for ms in rows))
    print(f"growth {pools[0]:,} -> {pools[-1]:,} pages (x{pools[-1] / pools[0]:g}):")
    for label, rows in results.items():
        (op0, read0), (op1, read1) = rows[0], rows[-1]
        print(f"  {label:{width}}  op {op1 / op0:5.2f}x   read {read1 / read0:5.2f}x")
    for label, rows in sessions.items():
        print(f"  {label + ' in a session':{width}}  op {rows[-1] / rows[0]:5.2f}x")
    print(f"load {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
