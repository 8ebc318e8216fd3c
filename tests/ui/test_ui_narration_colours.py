# SPDX-License-Identifier: Apache-2.0
"""The event log colours every eviction red, whichever design made it: the trie's
``Evicted`` and the hash cache's ``BlockEvicted`` (a lazy eviction) alike."""

from __future__ import annotations

from kvcore import events as ev
from kvviz.core.demos import load_demo
from kvviz.core.session import Session
from kvviz.core.view import FrameView
from kvviz.ui.widgets.narration import narration_markup


def first_frame_with(session: Session, event_type):
    for i in range(1, len(session)):
        frame = session.frame(i)
        if any(isinstance(e, event_type) for e in frame.events):
            return frame
    raise AssertionError(f"no step of the demo has a {event_type.__name__}")


def evicted_lines(markup: str) -> list[str]:
    return [line for line in markup.splitlines() if line.startswith("[$kv-evicted]")]


def test_a_trie_eviction_and_a_hash_eviction_are_both_coloured_as_evictions():
    trie = first_frame_with(Session.from_scenario(load_demo("eviction-cascade")), ev.Evicted)
    hashed = first_frame_with(Session.from_scenario(load_demo("hash-vs-trie"), kind="hash"), ev.BlockEvicted)
    for frame, event_type in ((trie, ev.Evicted), (hashed, ev.BlockEvicted)):
        lines = evicted_lines(narration_markup(FrameView(frame)))
        count = sum(isinstance(e, event_type) for e in frame.events)
        assert len(lines) == count, (event_type.__name__, lines)
