# SPDX-License-Identifier: Apache-2.0
"""The event vocabulary: one union, one table, every class in both."""

from __future__ import annotations

import typing

from kvcore import events as ev


def test_the_event_union_names_every_event_class_the_table_reads_back():
    assert set(typing.get_args(ev.Event)) == set(ev.EVENT_TYPES.values())
    assert len(ev.EVENT_TYPES) == len(typing.get_args(ev.Event)) == 24


def test_every_hash_event_is_also_in_the_union():
    assert set(ev.HASH_EVENTS) <= set(typing.get_args(ev.Event))
