# SPDX-License-Identifier: Apache-2.0
"""``kvviz diff --ui`` and ``kvviz compare``: one scenario on two caches, side by side.

Two columns, one per side (kvcore's trie and shortfin's for a diff; any two configurations
for a compare), each the main screen's :class:`~kvviz.ui.widgets.cache_column.CacheColumn`
(trie, page pool, allocations, LRU heap, with the same titles) fed that side's frame of the
current step; a hash side (vLLM's design: no tree, no
heap) gets the block view in the trie's place and the free-queue view in the heap's
(:data:`kvviz.ui.panes.PANES`); a header with the step, the op and a track
marking where the two sides differ (the first divergence stands out); and a bottom panel
saying what differs at this step (outcome, free pages, cached blocks, block tables), each
side's invariant violations and the known issues a backend (shortfin) saw so far. A compare
also shows each side's running counters (hit tokens, pages computed and reused, evictions,
failed ops) at the top of its column, with this step's change.

The app only views a finished :class:`~kvviz.compare.engine.CompareRun`: it never applies an op.
"""

from __future__ import annotations

from typing import ClassVar

from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Static

from kvviz.compare.engine import FIELD_NAMES, CompareRun, Counters, divergence_summary
from kvviz.ui.stepping import StepActions
from kvviz.ui.themes import set_up_appearance, variable_defaults
from kvviz.ui.widgets.allocation_table import AllocationTable
from kvviz.ui.widgets.cache_column import CacheColumn
from kvviz.core.narrate import count
from kvviz.core.view import (
    ALLOCATION,
    NODE,
    PAGE,
    FrameView,
    Selection,
    TokenLabels,
    highlight_for,
    literal,
    needs_previous,
    violation_marks,
)
from kvviz.ui.panes import panes_for
from kvviz.ui.widgets.block_view import BlockView
from kvviz.ui.widgets.free_queue_view import FreeQueueView
from kvviz.ui.widgets.heap_view import HeapView
from kvviz.ui.widgets.key_footer import KeyFooter
from kvviz.ui.widgets.page_grid import PageGrid
from kvviz.ui.widgets.trie_view import TrieView

HELP = ("→ / l  next step   ← / h  previous step\n"
        "Home / End  first / last step\n"
        "d  jump to the first divergence\n"
        "q  quit\n"
        "Left column: {left}; right column: {right}. The bottom panel says what differs at this step.")


SIDES_ROWS = 17
"""Rows the two sides get before the divergence report takes any: at 80x24 a fixed 14-row
report left each trie no row at all."""
REPORT_ROWS = (4, 14)
"""The divergence report's fewest and most rows (it scrolls)."""


class DiffApp(StepActions, App[None]):
    """Two sides of one :class:`~kvviz.compare.engine.CompareRun` side by side (see the module doc)."""

    TITLE = "kvviz diff"

    CSS = """
    Screen { layout: vertical; background: $background; }
    * { scrollbar-size-vertical: 1; }
    #header { height: 2; padding: 0 1; background: $panel; }
    #columns { height: 1fr; }
    .side { width: 1fr; border: round $kv-rule; border-title-color: $accent; border-title-style: bold; }
    .side .counters { height: 1; padding: 0 1; color: $kv-muted; }
    .side .structure { height: 2fr; min-height: 3; }
    .side .pool { height: auto; max-height: 8; }
    .side .lower { height: 1fr; min-height: 3; }
    .side .allocations { width: 1fr; }
    .side .order { width: 1fr; }
    .side .structure, .side .pool, .side .allocations, .side .order {
        border: round $kv-rule; border-title-color: $kv-muted;
    }
    .side .structure:focus, .side .pool:focus, .side .allocations:focus, .side .order:focus {
        border: round $accent; border-title-color: $accent;
    }
    #report-box { height: 14; border: round $kv-rule; border-title-color: $kv-muted; padding: 0 1; }
    #report-box.-differs { border: round $error; border-title-color: $error; }
    """

    BINDINGS: ClassVar = [
        Binding("left,h", "previous_step", "back", key_display="←"),
        Binding("right,l", "next_step", "step", key_display="→"),
        Binding("home", "first_step", "First step", show=False),
        Binding("end", "last_step", "Last step", show=False),
        Binding("d", "divergence", "divergence"),
        Binding("question_mark", "help", "help", key_display="?"),
        Binding("q", "quit", "quit"),
    ]

    def __init__(self, run: CompareRun, step: int | None = None, *, theme: str | None = None,
                 animations: bool = True, counters: bool | None = None):
        """``counters``: show each side's running counters (default: for a compare, not a diff)."""
        super().__init__()
        set_up_appearance(self, theme, animations)
        self.run_ = run
        self.title = f"kvviz {run.command}"
        self.sides = tuple(side.key for side in run.sides)
        self.show_counters = run.command == "compare" if counters is None else counters
        self.start_step = step
        self.step = 0
        self.selection: dict[str, Selection | None] = {side: None for side in self.sides}
        # Which views each column shows, by the kind of cache its snapshots describe.
        self.panes = {side.key: panes_for(side.session.frame(0).snapshot.kind) for side in run.sides}
        # Both sides run the one scenario, so one frozen copy of its vocabulary serves both.
        self.labels = TokenLabels(run.scenario.vocab)

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return variable_defaults(self.current_theme)

    # -- layout --------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static(id="header")
        with Horizontal(id="columns"):
            for side in self.sides:
                with Vertical(id=f"{side}-side", classes="side"):
                    if self.show_counters:
                        yield Static(id=f"{side}-counters", classes="counters")
                    yield CacheColumn((self.panes[side],), prefix=f"{side}-", id=f"{side}-column")
        with VerticalScroll(id="report-box"):
            yield Static(id="report")
        yield KeyFooter()

    def on_mount(self) -> None:
        for side in self.run_.sides:
            self.query_one(f"#{side.key}-side").border_title = side.title
        self.query_one("#report-box").border_title = "Divergence"
        d = self.run_.divergence
        self.go_to(self.start_step if self.start_step is not None else (d.step if d is not None else 0))
        self.widget(self.sides[0], self.panes[self.sides[0]][0].role).focus()

    def on_resize(self, event) -> None:
        self._size_report(event.size.height)

    def _size_report(self, height: int) -> None:
        """The report takes the rows the sides leave: header, footer and SIDES_ROWS first."""
        fewest, most = REPORT_ROWS
        self.query_one("#report-box").styles.height = max(fewest, min(most, height - 3 - SIDES_ROWS))

    def column(self, side: str) -> CacheColumn:
        """The views of side ``side``."""
        return self.query_one(f"#{side}-column", CacheColumn)

    def widget(self, side: str, role: str):
        """One of the views: ``role`` is pool, allocations, and trie and heap, or on a hash
        side blocks and queue (:data:`kvviz.ui.panes.PANES`)."""
        return self.column(side).widget(role)

    def roles(self, side: str) -> tuple[str, ...]:
        """The widget roles of column ``side``: its structure pane first."""
        return self.column(side).roles()

    # -- showing a step --------------------------------------------------------------------

    @property
    def last_step(self) -> int:
        return len(self.run_) - 1

    def side(self, key: str):
        """The run's :class:`~kvviz.compare.engine.Side` whose column is ``key``."""
        return self.run_.sides[self.sides.index(key)]

    def session(self, side: str):
        """The session shown in column ``side``."""
        return self.side(side).session

    def go_to(self, step: int) -> None:
        """Show step ``step`` (clamped) on both sides."""
        self.step = max(0, min(self.last_step, int(step)))
        for side in self.sides:
            self._show_side(side, rebuild=True)
        self._show_header()
        self._show_report()

    def _show_side(self, side: str, rebuild: bool) -> None:
        session = self.session(side)
        frame = session.frame(self.step)
        previous = session.frame(self.step - 1).snapshot if self.step > 0 and needs_previous(frame) else None
        selection = self.selection[side]
        view = FrameView(frame, self.labels, highlight_for(selection, frame.snapshot), violation_marks(frame),
                         previous, selection, last_step=self.last_step)
        self.column(side).show(view, rebuild, session.units)
        self.query_one(f"#{side}-side").border_subtitle = self._outcome_text(frame)
        if self.show_counters:
            self.query_one(f"#{side}-counters", Static).update(self.counters_markup(side))

    def counters_markup(self, side: str) -> str:
        """Column ``side``'s running counters at this step, with what this step added."""
        counters = self.side(side).counters
        now = counters[self.step]
        before = counters[self.step - 1] if self.step > 0 else Counters()

        def cell(value: int, previous: int, text: str) -> str:
            added = f" [$accent]+{value - previous:,}[/]" if value > previous else ""
            return f"[b]{value:,}[/b]{added} {text}"

        return " · ".join((cell(now.hit_tokens, before.hit_tokens, "hit tokens"),
                           cell(now.pages_computed, before.pages_computed, "computed"),
                           cell(now.pages_reused, before.pages_reused, "reused"),
                           cell(now.evictions, before.evictions, "evicted"),
                           cell(now.failures, before.failures, "failed")))

    @staticmethod
    def _outcome_text(frame) -> str:
        if frame.op is None:
            return "start"
        text = "ok" if frame.error is None else f"FAILED ({frame.error.kind})"
        if frame.violations:
            text += f" · {count(len(frame.violations), 'violation')}"
        return text

    def differences(self, step: int) -> tuple[str, ...]:
        """The compared fields that differ at ``step``."""
        return self.run_.differences(step)

    def _show_header(self) -> None:
        run, step = self.run_, self.step
        frame = run.left.session.frame(step)
        op = literal(frame.op.text) if frame.op is not None else "start"
        d = run.divergence
        where = (f"first divergence at step {d.step}" + ("" if step == d.step else " (d jumps there)")
                 if d is not None else "no divergence")
        title = literal(run.scenario.title or run.scenario.path or "scenario")
        top = f"[b]Step {step}/{self.last_step}[/b] · [b]{op}[/b]  [$kv-muted]{title} · {where}[/]"
        marks = []
        for i in range(len(run)):
            differs = bool(self.differences(i))
            glyph = "◆" if d is not None and i == d.step else ("≠" if differs else "=")
            style = "$error" if differs else "$success"
            cell = f"[{style}]{glyph}[/]"
            if i == step:
                cell = f"[reverse]{cell}[/reverse]"
            marks.append(cell)
        self.query_one("#header", Static).update(
            top + "\n" + " ".join(marks) + "  [$kv-muted]= same · ≠ differs · ◆ first divergence[/]")

    def report_markup(self) -> str:
        """The bottom panel: what differs at this step, violations, a backend's findings so far."""
        run, step = self.run_, self.step
        fields = run.differences(step)
        d = run.divergence
        lines = []
        if not fields:
            lines.append(f"[b $success]Step {step}: both agree[/] on success or failure, free pages, "
                         f"cached blocks and block tables.")
        else:
            first = "  [b $error]◆ FIRST DIVERGENCE[/]" if d is not None and d.step == step else ""
            names = ", ".join(FIELD_NAMES[f] for f in fields)
            lines.append(f"[b $error]Step {step} differs[/] in {literal(names)}{first}")
            lines += [f"  {literal(text)}" for text in divergence_summary(run, step)]
        if self.show_counters:
            # What each cache did, in its own words (kvcore's explanation names the policy's key):
            # the side by side of "who is evicted and why".
            for side, frame in zip(run.sides, run.frames(step)):
                if frame.op is not None:
                    lines.append(f"[b]{literal(side.name)}[/b]: {literal(frame.explanation)}")
        for side in run.sides:
            lines += self._findings_markup(side, bool(fields))
        for side, frame in zip(run.sides, run.frames(step)):
            if frame.error is not None:
                lines.append(f"[b]{literal(side.name)}[/b]: [$warning]{literal(frame.error.kind)}: "
                             f"{literal(frame.error.message)}[/]")
            for v in frame.violations:
                lines.append(f"[b $kv-violation]{literal(side.name)} ⚠ {literal(str(v))}[/]")
        return "\n".join(lines)

    def _findings_markup(self, side, differs: bool) -> list[str]:
        """The known issues ``side``'s backend saw up to this step; for a backend that looks for
        them (shortfin), also when none explains a divergence."""
        step = self.step
        findings = [(i, f) for i, fs in enumerate(side.findings[:step + 1]) for f in fs]
        if not findings:
            return [f"[$kv-muted]No known {literal(side.name)} issue seen so far explains this.[/]"] \
                if differs and side.foreign else []  # the reference has no known departures
        lines = [f"[b]Known {literal(side.title)} issues seen up to step {step}:[/b]"]
        for i, f in findings:
            try:
                title = f" ({f.issue.kind}: {f.issue.title})"
            except KeyError:  # pragma: no cover - an unlisted code
                title = ""
            lines.append(f"  [$warning]step {i}: {literal(f.code)}[/]{literal(title)}: {literal(f.message)}")
        return lines

    def _show_report(self) -> None:
        self.query_one("#report", Static).update(self.report_markup())
        box = self.query_one("#report-box")
        box.set_class(bool(self.differences(self.step)), "-differs")
        box.border_title = f"Divergence report · step {self.step}"
        box.scroll_home(animate=False)

    # -- selection inside one column -------------------------------------------------------

    def _select(self, widget, selection: Selection) -> None:
        # The posting view's id says which column.
        wid = getattr(widget, "id", None) or ""
        side = next((key for key in self.sides if wid.startswith(f"{key}-")), self.sides[-1])
        self.selection[side] = selection
        self._show_side(side, rebuild=False)

    @on(TrieView.NodeSelected)
    @on(HeapView.NodeSelected)
    def _node_selected(self, message) -> None:
        self._select(message.control, Selection(NODE, message.node))

    @on(PageGrid.PageSelected)
    @on(FreeQueueView.PageSelected)
    @on(BlockView.BlockSelected)  # a block is its page's: the pool, tables and queue mark the page
    def _page_selected(self, message) -> None:
        self._select(message.control, Selection(PAGE, message.page))

    @on(AllocationTable.AllocationSelected)
    def _allocation_selected(self, message: AllocationTable.AllocationSelected) -> None:
        self._select(message.control, Selection(ALLOCATION, message.allocation))

    # -- keys ----------------------------------------------------------------------------

    def action_divergence(self) -> None:
        """Jump to the first step where the two sides differ."""
        d = self.run_.divergence
        if d is None:
            self.notify("No divergence: both sides agree at every step.", timeout=3)
            return
        self.go_to(d.step)

    def action_help(self) -> None:
        left, right = self.run_.sides
        self.notify(HELP.format(left=left.title, right=right.title), title=f"{self.title} keys", timeout=8)


def make_diff_app(run: CompareRun, step: int | None = None, **opts) -> DiffApp:
    """The side-by-side app on ``run``, opened at ``step`` (default: the first divergence, else 0).

    Options: ``theme``, ``animations`` (False for deterministic screenshots) and ``counters``
    (default: shown for a ``kvviz compare`` run).
    """
    return DiffApp(run, step, **opts)
