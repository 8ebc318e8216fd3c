# SPDX-License-Identifier: Apache-2.0
"""``kvviz diff --ui``: one scenario on kvcore's trie and on shortfin's, side by side.

Two columns, one per backend, each with the same views as the main app (trie, page pool,
allocations, LRU heap) fed that backend's frame of the current step; a header with the step,
the op and a track marking where the two sides differ (the first divergence stands out);
and a bottom panel saying what differs at this step (outcome, free pages, cached blocks,
block tables), each side's invariant violations and shortfin's known issues seen so far.

The app only views a finished :class:`~kvviz.diffrun.DiffRun`: it never applies an op.
"""

from __future__ import annotations

from typing import ClassVar

from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Footer, Static

from ..model.compare import FIELD_NAMES, DiffRun, Divergence, _field_summary
from .stepping import StepActions
from .themes import set_up_appearance, variable_defaults
from .widgets.allocation_table import AllocationTable
from ..model.narrate import count
from ..model.view import (
    ALLOCATION,
    NODE,
    PAGE,
    FrameView,
    Selection,
    TokenLabels,
    heap_title,
    highlight_for,
    literal,
    needs_previous,
    violation_marks,
)
from .widgets.heap_view import HeapView
from .widgets.page_grid import PageGrid
from .widgets.trie_view import TrieView

SIDES = ("kvcore", "shortfin")

HELP = ("→ / l  next step   ← / h  previous step\n"
        "Home / End  first / last step\n"
        "d  jump to the first divergence\n"
        "q  quit\n"
        "Left column: kvcore's trie; right column: shortfin's. The bottom panel says what differs "
        "at this step.")


def _shortfin_version() -> str:
    try:
        from ..backends.shortfin_backend import SHORTFIN_VERSION
    except ImportError:  # pragma: no cover - shortfin missing: run_diff would have failed first
        return "3.9.0"
    return SHORTFIN_VERSION


class DiffApp(StepActions, App[None]):
    """kvcore and shortfin side by side on one :class:`DiffRun` (see the module doc)."""

    TITLE = "kvviz diff"

    CSS = """
    Screen { layout: vertical; background: $background; }
    * { scrollbar-size-vertical: 1; }
    #header { height: 2; padding: 0 1; background: $panel; }
    #columns { height: 1fr; }
    .side { width: 1fr; border: round $kv-rule; border-title-color: $accent; border-title-style: bold; }
    .side .trie { height: 1fr; }
    .side .pool { height: auto; max-height: 8; }
    .side .lower { height: 1fr; }
    .side .allocations { width: 1fr; }
    .side .heap { width: 1fr; }
    .side .trie, .side .pool, .side .allocations, .side .heap {
        border: round $kv-rule; border-title-color: $kv-muted;
    }
    .side .trie:focus, .side .pool:focus, .side .allocations:focus, .side .heap:focus {
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

    def __init__(self, run: DiffRun, step: int | None = None, *, theme: str | None = None,
                 animations: bool = True):
        super().__init__()
        set_up_appearance(self, theme, animations)
        self.run_ = run
        self.start_step = step
        self.step = 0
        self.selection: dict[str, Selection | None] = {side: None for side in SIDES}
        self.version = _shortfin_version()
        # Both sides run the one scenario, so one frozen copy of its vocabulary serves both.
        self.labels = TokenLabels(run.scenario.vocab)

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return variable_defaults(self.current_theme)

    # -- layout --------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Static(id="header")
        with Horizontal(id="columns"):
            for side in SIDES:
                with Vertical(id=f"{side}-side", classes="side"):
                    yield TrieView(id=f"{side}-trie", classes="trie")
                    yield PageGrid(id=f"{side}-pool", classes="pool")
                    with Horizontal(classes="lower"):
                        yield AllocationTable(id=f"{side}-allocations", classes="allocations")
                        yield HeapView(id=f"{side}-heap", classes="heap")
        with VerticalScroll(id="report-box"):
            yield Static(id="report")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.query_one("#kvcore-side").border_title = "kvcore trie"
        self.query_one("#shortfin-side").border_title = f"shortfin {self.version}"
        self.query_one("#report-box").border_title = "Divergence"
        for side in SIDES:
            self.widget(side, "trie").border_title = "Trie"
        d = self.run_.divergence
        self.go_to(self.start_step if self.start_step is not None else (d.step if d is not None else 0))
        self.widget("kvcore", "trie").focus()

    def widget(self, side: str, role: str):
        """One of the views: ``role`` is trie, pool, allocations or heap."""
        kinds = {"trie": TrieView, "pool": PageGrid, "allocations": AllocationTable, "heap": HeapView}
        return self.query_one(f"#{side}-{role}", kinds[role])

    # -- showing a step --------------------------------------------------------------------

    @property
    def last_step(self) -> int:
        return len(self.run_) - 1

    def session(self, side: str):
        return self.run_.kvcore if side == "kvcore" else self.run_.shortfin

    def go_to(self, step: int) -> None:
        """Show step ``step`` (clamped) on both sides."""
        self.step = max(0, min(self.last_step, int(step)))
        for side in SIDES:
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
        for role in ("trie", "allocations", "heap", "pool"):
            self.widget(side, role).show(view, rebuild)
        snap = frame.snapshot
        self.widget(side, "pool").border_title = (f"Page pool · {snap.page_count} × "
                                                  f"{count(snap.tokens_per_page, 'token')}")
        self.widget(side, "allocations").border_title = f"Allocations · {len(snap.allocations)} live"
        self.widget(side, "heap").border_title = heap_title(snap)
        self.query_one(f"#{side}-side").border_subtitle = self._outcome_text(frame)

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
        kv, sf = self.run_.observations[step]
        return kv.differences(sf)

    def _show_header(self) -> None:
        run, step = self.run_, self.step
        frame = run.kvcore.frame(step)
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
        """The bottom panel: what differs at this step, violations, shortfin's findings so far."""
        run, step = self.run_, self.step
        kv_frame, sf_frame = run.frames(step)
        kv_obs, sf_obs = run.observations[step]
        fields = kv_obs.differences(sf_obs)
        d = run.divergence
        lines = []
        if not fields:
            lines.append(f"[b $success]Step {step}: both agree[/] on success or failure, free pages, "
                         f"cached blocks and block tables.")
        else:
            first = "  [b $error]◆ FIRST DIVERGENCE[/]" if d is not None and d.step == step else ""
            names = ", ".join(FIELD_NAMES[f] for f in fields)
            lines.append(f"[b $error]Step {step} differs[/] in {literal(names)}{first}")
            here = Divergence(step, kv_frame.op.text if kv_frame.op else "", 0, fields, kv_obs, sf_obs)
            label = run.kvcore.label_tokens
            for f in fields:
                for text in _field_summary(f, here, run.scenario.config.tokens_per_page, label):
                    lines.append(f"  {literal(text)}")
        findings = [(i, f) for i, fs in enumerate(run.findings[:step + 1]) for f in fs]
        if findings:
            lines.append(f"[b]Known shortfin {self.version} issues seen up to step {step}:[/b]")
            for i, f in findings:
                try:
                    title = f" ({f.issue.kind}: {f.issue.title})"
                except KeyError:  # pragma: no cover - an unlisted code
                    title = ""
                lines.append(f"  [$warning]step {i}: {literal(f.code)}[/]{literal(title)}: {literal(f.message)}")
        elif fields:
            lines.append("[$kv-muted]No known shortfin issue seen so far explains this.[/]")
        for name, frame in (("kvcore", kv_frame), ("shortfin", sf_frame)):
            if frame.error is not None:
                lines.append(f"[b]{name}[/b]: [$warning]{literal(frame.error.kind)}: {literal(frame.error.message)}[/]")
            for v in frame.violations:
                lines.append(f"[b $kv-violation]{name} ⚠ {literal(str(v))}[/]")
        return "\n".join(lines)

    def _show_report(self) -> None:
        self.query_one("#report", Static).update(self.report_markup())
        box = self.query_one("#report-box")
        box.set_class(bool(self.differences(self.step)), "-differs")
        box.border_title = f"Divergence report · step {self.step}"
        box.scroll_home(animate=False)

    # -- selection inside one column -------------------------------------------------------

    def _select(self, widget, selection: Selection) -> None:
        # The posting view's id says which column.
        side = "kvcore" if (getattr(widget, "id", None) or "").startswith("kvcore") else "shortfin"
        self.selection[side] = selection
        self._show_side(side, rebuild=False)

    @on(TrieView.NodeSelected)
    @on(HeapView.NodeSelected)
    def _node_selected(self, message) -> None:
        self._select(message.control, Selection(NODE, message.node))

    @on(PageGrid.PageSelected)
    def _page_selected(self, message: PageGrid.PageSelected) -> None:
        self._select(message.control, Selection(PAGE, message.page))

    @on(AllocationTable.AllocationSelected)
    def _allocation_selected(self, message: AllocationTable.AllocationSelected) -> None:
        self._select(message.control, Selection(ALLOCATION, message.allocation))

    # -- keys ----------------------------------------------------------------------------

    def action_divergence(self) -> None:
        """Jump to the first step where the two sides differ."""
        d = self.run_.divergence
        if d is None:
            self.notify("No divergence: both caches agree at every step.", timeout=3)
            return
        self.go_to(d.step)

    def action_help(self) -> None:
        self.notify(HELP, title="kvviz diff keys", timeout=8)


def make_diff_app(run: DiffRun, step: int | None = None, **opts) -> DiffApp:
    """The side-by-side app on ``run``, opened at ``step`` (default: the first divergence, else 0).

    Options: ``theme`` and ``animations`` (False for deterministic screenshots).
    """
    return DiffApp(run, step, **opts)


def run_diff_app(run: DiffRun, step: int | None = None) -> None:
    """Run the side-by-side UI in the terminal."""
    make_diff_app(run, step).run()
