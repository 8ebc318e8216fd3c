# SPDX-License-Identifier: Apache-2.0
"""The views of one cache at one step, as a column: what is cached (the trie, or a hash
cache's blocks), the page pool, the allocations and the eviction order (the heap, or a hash
cache's free queue).

The main screen has one; the side-by-side app one per side. Both draw a step with
:meth:`CacheColumn.show` and get the same titles from it ("Page pool · 8 pages × 4 tokens"),
so the two cannot drift apart. Which design-dependent views a column shows is
:mod:`kvviz.ui.panes`' table; a column given both rows (the main screen: a session opened
from the palette may be of another design) shows the pair the step's snapshot asks for.

Two arrangements: ``beside`` (the main screen: the structure on the left, the pool,
allocations and order stacked on the right) or stacked (a side-by-side column: the
structure, the pool, then the allocations beside the order).
"""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widget import Widget

from kvviz.core.view import FrameView
from kvviz.core.words import TOKENS, count
from kvviz.ui.panes import Pane, panes_for
from kvviz.ui.widgets.allocation_table import AllocationTable
from kvviz.ui.widgets.line_view import LineView
from kvviz.ui.widgets.page_grid import PageGrid


def pool_title(snapshot, units) -> str:
    """``Page pool · 8 pages × 4 tokens``; a converted trace's token is a block of the
    trace's size, said as one: ``8 pages × 1 block of 16 tokens``."""
    per_page = (units or TOKENS).per_page(snapshot.tokens_per_page)
    return f"Page pool · {count(snapshot.page_count, 'page')} × {per_page}"


def allocations_title(snapshot, units, narrow: bool = False) -> str:
    """``Allocations · 2 live · hit in tokens`` (in blocks for a converted trace); ``narrow``
    (a quarter of the terminal, beside the order) only ``Allocations · 2 live``: the unit
    would be cut to "hit in to…"."""
    title = f"Allocations · {len(snapshot.allocations)} live"
    if narrow:
        return title
    blocks = units.block_tokens if units is not None else None
    return f"{title} · hit in {'blocks' if blocks is not None else 'tokens'}"


class CacheColumn(Widget):
    """One cache's views (see the module doc). ``panes``: the rows of
    :data:`kvviz.ui.panes.PANES` to compose, the first shown until a step is; ``prefix``:
    the views' ids start with it (``left-`` gives ``left-pool``)."""

    DEFAULT_CSS = """
    CacheColumn { width: 1fr; height: 1fr; layout: vertical; overflow: hidden hidden; }
    CacheColumn.-beside { layout: horizontal; }
    """

    def __init__(self, panes: Sequence[tuple[Pane, Pane]], *, prefix: str = "", beside: bool = False,
                 id: str | None = None, classes: str | None = None):
        super().__init__(id=id, classes=classes)
        self.panes = tuple(panes)
        self.prefix = prefix
        self.shown: tuple[Pane, Pane] = self.panes[0]
        self.set_class(beside, "-beside")
        self._widgets: dict[str, Widget] = {}
        self._titles: dict[str, str] = {}

    def compose(self) -> ComposeResult:
        prefix = self.prefix
        uppers = [upper for upper, _ in self.panes]
        orders = [order for _, order in self.panes]
        for upper in uppers:
            yield upper.view(id=f"{prefix}{upper.role}", classes=f"structure {upper.role}")
        if self.has_class("-beside"):
            with Vertical(id=f"{prefix}side"):
                yield PageGrid(id=f"{prefix}pool", classes="pool")
                yield AllocationTable(id=f"{prefix}allocations", classes="allocations")
                for order in orders:
                    yield order.view(id=f"{prefix}{order.role}", classes=f"order {order.role}")
            return
        yield PageGrid(id=f"{prefix}pool", classes="pool")
        with Horizontal(classes="lower"):
            yield AllocationTable(id=f"{prefix}allocations", classes="allocations")
            for order in orders:
                yield order.view(id=f"{prefix}{order.role}", classes=f"order {order.role}")

    def widget(self, role: str) -> Widget:
        """The view of ``role`` (pool, allocations, or a pane's role: trie, heap, blocks,
        queue), found once: a step must not walk the DOM."""
        widget = self._widgets.get(role)
        if widget is None:
            widget = self._widgets[role] = self.query_one(f"#{self.prefix}{role}")
        return widget

    @property
    def structure(self) -> LineView:
        """The upper view shown: the trie, or a hash cache's blocks."""
        return self.widget(self.shown[0].role)

    @property
    def order(self) -> LineView:
        """The eviction-order view shown: the heap, or a hash cache's free queue."""
        return self.widget(self.shown[1].role)

    def roles(self) -> tuple[str, ...]:
        """The roles of the views shown, the structure first."""
        upper, order = self.shown
        return (upper.role, "allocations", order.role, "pool")

    def show(self, view: FrameView, rebuild: bool, units=None) -> None:
        """Draw ``view`` in every view shown (``rebuild``: the step changed, not only the
        selection) and title them; ``units`` (the session's) words the pool's pages."""
        snap = view.snapshot
        self.shown = shown = panes_for(snap.kind)
        if len(self.panes) > 1:  # a loaded session may be of another design
            for pair in self.panes:
                for pane in pair:
                    self.widget(pane.role).display = pane in shown
        for role in self.roles():
            self.widget(role).show(view, rebuild)
        for pane in shown:
            self._title(pane.role, pane.title(snap))
        self._title("pool", pool_title(snap, units))
        self._title("allocations", allocations_title(snap, units, narrow=not self.has_class("-beside")))

    def _title(self, role: str, title: str) -> None:
        # Setting a border title repaints the whole widget: only when it changes.
        if self._titles.get(role) != title:
            self._titles[role] = title
            self.widget(role).border_title = title
