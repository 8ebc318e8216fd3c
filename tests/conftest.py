# SPDX-License-Identifier: Apache-2.0
"""Hypothesis profiles, chosen with ``HYPOTHESIS_PROFILE`` (default ``ci``) or ``--soak``.

- ``ci``   — what ``pytest`` runs. Ordinary property tests get Hypothesis's usual 100
             examples; the state machines (tests/kvcore/test_stateful.py, test_hash_stateful.py)
             and the incremental-invariant tests scale their own budgets from the profile name,
             sized so that benchmarks/planted_bugs.py's planted bugs are all caught.
- ``dev``  — quick feedback while editing.
- ``soak`` — a long hunt for rare interleavings, opt-in only: ``pytest --soak`` (or
             ``HYPOTHESIS_PROFILE=soak``; ``--soak`` also sets ``KVVIZ_FUZZ_SCALE=100`` for the
             fuzzers unless it is set). Hours, not minutes: the trie machine alone runs 200,000
             examples of 50 steps.

Deadlines are off: timings on a shared 2-core CI machine are noise, not bugs. ``print_blob``
prints a reproduction blob for every failure so it can be replayed with ``@reproduce_failure``.
"""

import gc
import os
import sys
import tempfile

import pytest
from hypothesis import HealthCheck, settings

# Compiled bytecode is kept (in the __pycache__ folders .gitignore leaves out) even where
# PYTHONDONTWRITEBYTECODE is set, for this run and the processes it starts: without it every
# xdist worker compiled and assertion-rewrote all the test modules again at each collection
# (9.5 s of CPU per worker, 2.2 s from the cache) and every `python -m kvviz` a test starts
# compiled kvviz again (0.15-0.2 s of CPU each).
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

_COMMON = dict(deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow])

settings.register_profile("ci", max_examples=100, **_COMMON)
settings.register_profile("dev", max_examples=30, **_COMMON)
settings.register_profile("soak", max_examples=10_000, **_COMMON)

#: The fuzzers' multiplier under ``--soak`` (tests/fuzz/bounds.py reads it).
SOAK_FUZZ_SCALE = "100"


def pytest_addoption(parser) -> None:
    parser.addoption("--soak", action="store_true", default=False,
                     help="the long Hypothesis profile (state machines 100k-200k examples, fuzzers x100): hours")


def pytest_configure(config) -> None:
    # Before collection: the state machines and fuzzers read these when their modules import.
    # xdist workers inherit the environment and get --soak too.
    if config.getoption("soak"):
        os.environ["HYPOTHESIS_PROFILE"] = "soak"
        os.environ.setdefault("KVVIZ_FUZZ_SCALE", SOAK_FUZZ_SCALE)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_collection_modifyitems(config, items) -> None:
    """The slow tests first (in their collected order), then the rest: xdist's work stealing
    hands each worker a contiguous share and lets an idle one take from the end of another's,
    so a minute-long test collected last (the 60 s flood) kept one worker busy after the other
    had finished. Only the order changes; every test still runs."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_collection_finish(session) -> None:
    """Move what collection built (every test module, its imports, the items) out of the
    cyclic collector's sight before the first test runs.

    Those ~190k objects live until the process ends, yet every full collection walked them:
    each ``gc.collect()`` the code under test makes (a sweep frees each replay's trie with
    one, 36 in a sweep with ``--replay-all``) and each automatic full pass. Measured on the
    one-pass and policy sweep tests (collected with the whole suite, ``-n 0``): 31.9 s of CPU
    before, 4.7 s after; tests/watch and tests/practice 42.7 s, 37.7 s after.

    Then full passes come ten times less often, as in kvviz itself once its heap is settled
    (``kvviz.commands.settle_heap``: ``(700, 10, 100)``, Python's default is
    ``(700, 10, 10)``). Many tests build 10^5-page caches or 3,000-step timelines, and each
    automatic full pass walked all of it again: on tests/ui, tests/model and tests/core
    (``-n 2``) 284 full passes took 100 s of CPU, a fifth of the whole; 72 took 44 s after,
    and the three folders ran in 186 s instead of 232 s. Young objects are collected as often
    as before; a garbage cycle that grew old waits longer for its pass."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(700, 10, 100)


@pytest.fixture(scope="session")
def _data_directories(tmp_path_factory):
    """One folder (per worker) for every test's data directory."""
    return tmp_path_factory.mktemp("xdg-data")


@pytest.fixture(autouse=True)
def _private_data_directory(_data_directories, monkeypatch):
    """Every test gets its own empty user data directory (``XDG_DATA_HOME``): the course's
    progress file (kvviz/teach/course.py) is read by ``kvviz demo --list`` and written by
    ``kvviz practice``, and no test may read or write the real home's. Subprocesses inherit it.

    Made with ``tempfile.mkdtemp`` inside one session folder, not ``tmp_path_factory.mktemp``:
    pytest numbers a new folder by listing every folder already in its base, so a numbered
    folder for each of ~2,000 tests per worker cost O(tests) each (3.7 ms at 4,000 folders,
    measured), quadratic over the run; and every ``tmp_path`` paid for them too."""
    monkeypatch.setenv("XDG_DATA_HOME", tempfile.mkdtemp(prefix="test-", dir=_data_directories))
