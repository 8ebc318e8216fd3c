# SPDX-License-Identifier: Apache-2.0
"""``kvviz serve``'s tab cap is sized by memory: the served command is started once at launch,
its peak resident memory measured, and the cap lowered so that every tab, at twice that, fits
MAX_SERVE_MEMORY_BYTES (said on stderr when it is lowered)."""

from __future__ import annotations

import sys

import click
import pytest

from kvviz.serve.command import _sessions_by_memory
from kvviz.core.limits import MAX_SERVE_MEMORY_BYTES
from kvviz.serve.sessions import measure_tab

MIB = 2**20


def test_a_tab_of_a_gigabyte_lowers_the_cap_to_what_fits_and_says_why(capsys):
    with click.Context(click.Command("serve")):
        assert _sessions_by_memory(32, 1024 * MIB, ("watch", "--replay-file", "big.jsonl")) == \
            MAX_SERVE_MEMORY_BYTES // (2 * 1024 * MIB) == 2
    said = capsys.readouterr().err
    assert "at most 2 tabs at once, not 32" in said and "took 1,024 MiB at start" in said


@pytest.mark.parametrize("peak", [58 * MIB, 0], ids=["the-shipped-recordings-watch", "not-measured"])
def test_a_small_tab_or_an_unmeasured_one_keeps_the_cap_asked_for(peak, capsys):
    assert _sessions_by_memory(32, peak, ("demo", "lru")) == 32
    assert capsys.readouterr().err == ""


def test_a_tab_is_measured_once_its_app_runs():
    problem, peak = measure_tab((sys.executable, "-m", "kvviz", "demo", "lru"), 90.0)
    assert problem is None
    assert 10 * MIB < peak < 1024 * MIB  # a demo's app: tens of MiB
