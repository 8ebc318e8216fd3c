# SPDX-License-Identifier: Apache-2.0
"""Does the CI profile of the state machines still catch real bugs? Plant one, run, say.

Run:  python benchmarks/planted_bugs.py                      (each bug once, a random seed)
      python benchmarks/planted_bugs.py --seeds 0 1 2 3 4    (each bug once per seed)
      python benchmarks/planted_bugs.py --bug heap_tie --profile soak

For each bug in :data:`BUGS` (one small edit to kvcore, the kind a refactor of a hot path
makes, that needs several operations in a row to show): copy kvcore and tests/ into a fresh
temporary folder, apply the edit there (the checkout is never touched), and run the state
machines that cover it under ``HYPOTHESIS_PROFILE`` (default ``ci``, what ``pytest`` runs)
with PYTHONPATH on the copy, in one process (``-n 0``), with a fresh Hypothesis database (a
failure remembered from an earlier run would be replayed, not found). Each run is its own
process group, killed at ``--timeout`` seconds.

Prints, per bug and seed: caught or missed, how many examples passed before the first
failing one and the seconds the generate phase took (Hypothesis's statistics), the test
that failed and the first line of its error. Exit 1 if any bug was missed.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRIE_MACHINE = "tests/kvcore/test_stateful.py::TestTrieCacheAgainstModel"
HASH_MACHINE = "tests/kvcore/test_hash_stateful.py::TestHashCacheMachine"
EVICTION_ORDER_TEST = ("tests/kvcore/test_eviction_paths.py::"
                       "test_batch_eviction_takes_the_smaller_child_however_the_heap_was_filled")
FAST_PATH_TEST = ("tests/kvcore/test_trie_fast.py::"
                  "test_the_fast_path_leaves_what_the_readable_path_leaves_after_every_operation")


@dataclass(frozen=True)
class PlantedBug:
    """One edit to one kvcore file: ``old`` (which must occur exactly once) becomes ``new``."""

    name: str
    what: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


BUGS = (
    PlantedBug(
        "heap_tie",
        "eviction's pop (Floyd's hole walk, inlined in the fast path's kvcore.trie_fast.evict) picks "
        "the smaller child by the key above seq (last_access, after any leading field) alone: "
        "on a tie there it takes the left child even when the right one has the smaller seq. "
        "Two lru candidates never share a last_access (one op touches one path), so it shows "
        "under fifo and filo, whose keys are all seq: a few evictions from a heap of 3+",
        "kvcore/trie_fast.py",
        "                if keys[child + 1] < keys[child]:\n"
        "                    child += 1\n"
        "                keys[pos] = keys[child]\n",
        "                if keys[child + 1] >> 40 < keys[child] >> 40:\n"
        "                    child += 1\n"
        "                keys[pos] = keys[child]\n",
        # The deterministic test (every release order of five fifo or filo leaves) catches it
        # in every run, in about a second. The state machine alone rarely does: it missed it in
        # each of seeds 0, 1 and 2 at 3,500 examples (the budget before 1,200), 3 minutes each.
        (EVICTION_ORDER_TEST, TRIE_MACHINE),
    ),
    PlantedBug(
        "cascade_parent",
        "an eviction batch that ends on a victim whose parent just became childless and ref 0 "
        "forgets to make that parent a candidate (an off-by-one at the end of the cascade)",
        "kvcore/trie_fast.py",
        "            key = key_of(parent)\n"
        "            if not left or key > rest:\n"
        "                break\n",
        "            if not left:\n"
        "                candidate = None\n"
        "                break\n"
        "            key = key_of(parent)\n"
        "            if key > rest:\n"
        "                break\n",
        (FAST_PATH_TEST, TRIE_MACHINE),
    ),
    PlantedBug(
        "dedup_touched",
        "a publish that deduplicates onto a node an acquire has already matched (hits > 0) "
        "keeps its own page in the block table while also giving it back to the pool",
        "kvcore/trie.py",
        "            pages[i] = child.page\n",
        "            pages[i] = child.page if not child.hits else own_page\n",
        (TRIE_MACHINE,),
    ),
    PlantedBug(
        "protected_first_page",
        "an acquire near a full pool counts the ref-0 nodes on its matched path as protected "
        "(about to be referenced, so not evictable for it) from the second page on: the first "
        "matched page, held by no one, is counted evictable for the very acquire that will "
        "reference it, so an acquire that cannot fit goes on (and runs out of victims) or fails "
        "naming the wrong figures. Needs a cached, unreferenced prefix, a pool nearly full of "
        "held pages, and an acquire that matches the prefix and asks for more than is left",
        "kvcore/trie.py",
        "            protected = sum(1 for n in matched if n.ref == 0)",
        "            protected = sum(1 for n in matched[1:] if n.ref == 0)",
        (TRIE_MACHINE,),
    ),
    PlantedBug(
        "hash_release_order",
        "the hash cache's release (the fast path, not recording events) frees the "
        "published pages in order instead of reversed (vLLM frees reversed(req_blocks)): the "
        "free queue's order is wrong once a release frees two cached blocks",
        "kvcore/hashblock.py",
        "            for page in reversed(pages[:published]):\n",
        "            for page in pages[:published]:\n",
        (HASH_MACHINE,),
    ),
)

# "... 338 passing examples, 1 failing ..." (Hypothesis 6.155), "... 338 passing, 1 failing, and
# 20 invalid test cases" (6.170).
_PASSING = re.compile(r"during generate phase \(([\d.]+) seconds\):.*?(\d+) passing(?: examples)?, (\d+) failing",
                      re.S)


@dataclass(frozen=True)
class Outcome:
    """What one run of one bug's state machines said."""

    caught: bool
    passing_before: int | None  # examples that passed before the first failing one
    generate_seconds: float | None
    wall_seconds: float
    failed_test: str
    first_error: str
    timed_out: bool


#: Appended to the copy's tests/conftest.py unless --shrink: the first failing example is what
#: this script measures, and shrinking it costs minutes. The budgets stay the profile's.
_NO_SHRINKING = """

_profile_then = pytest_configure


def pytest_configure(config):
    from hypothesis import Phase
    _profile_then(config)
    settings.register_profile("planted", settings.default,
                              phases=[Phase.explicit, Phase.reuse, Phase.generate])
    settings.load_profile("planted")
"""


def planted_copy(bug: PlantedBug, into: Path, shrink: bool = True) -> None:
    """kvcore and tests/ copied into ``into``, with ``bug`` applied to the copy (and the copy's
    Hypothesis told not to shrink unless ``shrink``)."""
    shutil.copytree(ROOT / "kvcore", into / "kvcore", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "tests", into / "tests",
                    ignore=shutil.ignore_patterns("__pycache__", "__snapshots__", ".hypothesis"))
    target = into / bug.path
    text = target.read_text()
    count = text.count(bug.old)
    if count != 1:
        raise SystemExit(f"{bug.path}: the code bug {bug.name} edits occurs {count} times, not once "
                         "(kvcore changed: update the bug)")
    target.write_text(text.replace(bug.old, bug.new))
    if not shrink:
        with open(into / "tests" / "conftest.py", "a") as conftest:
            conftest.write(_NO_SHRINKING)


def run_bug(bug: PlantedBug, profile: str, seed: int | None, timeout: float, shrink: bool) -> Outcome:
    """Run ``bug``'s tests on a planted copy; kill the run's process group at ``timeout``."""
    with tempfile.TemporaryDirectory(prefix=f"planted-{bug.name}-") as folder:
        work = Path(folder)
        planted_copy(bug, work, shrink)
        env = dict(os.environ, PYTHONPATH=str(work), HYPOTHESIS_PROFILE=profile, PYTHONDONTWRITEBYTECODE="1")
        command = [sys.executable, "-m", "pytest", "-n", "0", "-p", "no:cacheprovider", "-x", "-q",
                   "--rootdir", str(work), "--hypothesis-show-statistics", *bug.tests]
        if seed is not None:
            command.append(f"--hypothesis-seed={seed}")
        started = time.monotonic()  # a bound and a figure to print, never behaviour under test
        process = subprocess.Popen(command, cwd=work, env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, start_new_session=True)
        timed_out = False
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        wall = time.monotonic() - started
    caught = process.returncode == 1 and not timed_out
    failed = re.search(r"^FAILED (\S+)", output, re.M)
    error = re.search(r"^E {2,}(\S.*)$", output, re.M)
    passing = seconds = None
    if caught:
        # Statistics come per test in the order run; the failing test's are the last block.
        stats = _PASSING.findall(output)
        if stats:
            seconds, passing = float(stats[-1][0]), int(stats[-1][1])
    return Outcome(caught, passing, seconds, wall, failed.group(1) if failed else "",
                   error.group(1)[:110] if error else "", timed_out)


def check_the_copy_is_what_runs() -> None:
    """The planted copy must be what the subprocess imports, not the checkout's kvcore."""
    with tempfile.TemporaryDirectory(prefix="planted-check-") as folder:
        work = Path(folder)
        shutil.copytree(ROOT / "kvcore", work / "kvcore", ignore=shutil.ignore_patterns("__pycache__"))
        found = subprocess.run([sys.executable, "-c", "import kvcore; print(kvcore.__file__)"], cwd=work,
                               env=dict(os.environ, PYTHONPATH=str(work)), capture_output=True, text=True,
                               timeout=60).stdout.strip()
        if not found.startswith(str(work)):
            raise SystemExit(f"the subprocess imports kvcore from {found}, not the planted copy")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bug", action="append", choices=[b.name for b in BUGS],
                        help="only this bug (repeatable); default every bug")
    parser.add_argument("--profile", default="ci", help="HYPOTHESIS_PROFILE for the runs (default ci)")
    parser.add_argument("--seeds", type=int, nargs="*", default=None,
                        help="Hypothesis seeds, one run per bug and seed; default one run, random seed")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds before a run is killed")
    parser.add_argument("--shrink", action="store_true",
                        help="let Hypothesis shrink each failure (minutes more per bug; the figures are the same)")
    args = parser.parse_args(argv)
    check_the_copy_is_what_runs()
    bugs = [b for b in BUGS if not args.bug or b.name in args.bug]
    seeds = args.seeds if args.seeds else [None]
    print(f"profile {args.profile}; load average {os.getloadavg()[0]:.1f}", flush=True)
    missed = 0
    for bug in bugs:
        print(f"\n{bug.name}: {bug.what}", flush=True)
        for seed in seeds:
            out = run_bug(bug, args.profile, seed, args.timeout, args.shrink)
            label = "random" if seed is None else seed
            if out.caught:
                how = ("at once (a test with no Hypothesis examples)" if out.passing_before is None else
                       f"after {out.passing_before} passing examples ({out.generate_seconds} s generating)")
                print(f"  seed {label}: CAUGHT {how}, {out.wall_seconds:.0f} s wall in all,"
                      f" by {out.failed_test}\n      {out.first_error}", flush=True)
            else:
                missed += 1
                why = "timed out" if out.timed_out else "every example passed"
                print(f"  seed {label}: MISSED ({why}, {out.wall_seconds:.0f} s wall)", flush=True)
    print(f"\nload average {os.getloadavg()[0]:.1f}; {missed} run(s) missed a bug")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
