# SPDX-License-Identifier: Apache-2.0
"""SVG snapshots at fixed sizes (update with ``pytest tests/ui --snapshot-update`` after
looking at the report). Deterministic: animations and cursor blink off, no clock, colours on."""

from __future__ import annotations

from kvviz.explore.app import make_app

SIZE = (100, 30)


def app_at(session, step):
    return make_app(session, step, animations=False, cursor_blink=False)


def test_lru_demo_first_step(snap_compare, lru):
    assert snap_compare(app_at(lru, 0), terminal_size=SIZE)


def test_lru_demo_middle_step(snap_compare, lru):
    assert snap_compare(app_at(lru, len(lru) // 2), terminal_size=SIZE)


def test_lru_demo_last_step(snap_compare, lru):
    assert snap_compare(app_at(lru, len(lru) - 1), terminal_size=SIZE)


def test_help_screen(snap_compare, small):
    assert snap_compare(app_at(small, 0), press=["question_mark"], terminal_size=SIZE)


def test_a_failed_op(snap_compare, small):
    assert snap_compare(app_at(small, 7), terminal_size=SIZE)


def test_an_invariant_violation(snap_compare, leaky):
    assert snap_compare(app_at(leaky, 3), terminal_size=SIZE)


def test_small_terminal_60_by_20(snap_compare, lru):
    assert snap_compare(app_at(lru, 27), terminal_size=(60, 20))
