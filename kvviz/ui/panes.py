# SPDX-License-Identifier: Apache-2.0
"""Which views show a cache's own structure, by the kind of snapshot they show.

Every kvviz screen has two panes that depend on the cache's design: the upper one shows
what is cached, the lower one the eviction order. A trie (and a base cache, whose views say
it has neither) gets the trie view and the heap view; a hash cache (vLLM's design: no tree,
no heap) the block view and the free-queue view. One table, keyed like the exports by the
design's view (:attr:`kvviz.core.designs.Design.views`), read by the main app and the
side-by-side app alike, so a new design is one entry (or none, when it reuses a view).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kvviz.core.designs import TRIE, design
from kvviz.core.hash_view import blocks_title, free_queue_title
from kvviz.core.view import heap_title
from kvviz.ui.widgets.block_view import BlockView
from kvviz.ui.widgets.free_queue_view import FreeQueueView
from kvviz.ui.widgets.heap_view import HeapView
from kvviz.ui.widgets.line_view import LineView
from kvviz.ui.widgets.trie_view import TrieView


@dataclass(frozen=True)
class Pane:
    """One design-dependent pane: its widget ``role`` (the widget id's suffix), the view
    class, and its border title for a snapshot."""

    role: str
    view: type[LineView]
    title: Callable[..., str]


def _trie_title(snapshot) -> str:
    return "Trie"


TRIE_PANES = (Pane(TRIE, TrieView, _trie_title), Pane("heap", HeapView, heap_title))
HASH_PANES = (Pane("blocks", BlockView, blocks_title), Pane("queue", FreeQueueView, free_queue_title))

PANES: dict[str, tuple[Pane, Pane]] = {TRIE: TRIE_PANES, "blocks": HASH_PANES}
"""By the design's view of what is cached (:attr:`kvviz.core.designs.Design.views`): (the
pane of what is cached, the pane of the eviction order)."""


def panes_for(kind: str) -> tuple[Pane, Pane]:
    """The two panes for a snapshot of ``kind``, by its design (a kind with no design, or a
    view not listed, gets the trie's, whose views say what they cannot show)."""
    try:
        view = design(kind).views[0]
    except KeyError:
        return TRIE_PANES
    return PANES.get(view, TRIE_PANES)


ROLES: dict[str, type[LineView]] = {pane.role: pane.view for panes in PANES.values() for pane in panes}
"""Every design-dependent role, with its view class."""
