# SPDX-License-Identifier: Apache-2.0
"""``kvviz watch``: a server's KV-event stream in the kvviz UI, one step per received batch.

The app owns a :class:`~kvviz.watch.timeline.WatchTimeline` (the frames rebuilt from the
messages), the step shown, whether it **follows** the newest batch, and the block selected;
for each change it hands the widgets one frozen :class:`~kvviz.watch.view.WatchView`
(state down, messages up). Live, the step moves to each new batch; stepping back pauses
following: batches keep being recorded into the timeline, the header and the timeline bar
say how many wait, and ``l`` (or end) returns to live.

Messages arrive from a :class:`~kvviz.watch.subscriber.Subscriber` (which
receives and decodes them on its own thread) through one Textual interval that drains
``subscriber.poll()``; tests skip the clock and call :meth:`WatchApp.receive` (or
:meth:`WatchApp.receive_messages`) themselves. The caller starts and stops the subscriber.

The screen: the header line (rates, cached blocks over time, gaps, restarts, undecodable
messages, the incomplete-view banner), the timeline bar, the block forest, blocks per medium,
one line where the trie, heap and ref views would be (the stream carries none of it), the
narration of the step with its notes, and the why line of the selected block.

One factory, :func:`make_watch_app`, serves the CLI and the tests.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.widgets import Static

from kvviz.watch.events import DESIGN
from kvviz.core.view import literal
from kvviz.ui.exporting import export_and_tell, offer_download, portable_svg
from kvviz.ui.saving import free_stem, slug
from kvviz.ui.screens.help_screen import HelpScreen, keys_and_legend
from kvviz.ui.screens.prompt_screen import PromptScreen
from kvviz.ui.stepping import StepActions
from kvviz.ui.terminal_title import step_title, title_the_terminal
from kvviz.ui.themes import set_up_appearance, variable_defaults
from kvviz.watch.view import (FOLDED_STEP, VIEW_STEP_BYTES, StepWindow, StreamTotals, WatchView, sparkline_samples,
                               step_summary)
from kvviz.watch.widgets.forest_view import LEGEND as FOREST_LEGEND
from kvviz.watch.widgets.forest_view import ForestView
from kvviz.ui.widgets.key_footer import KeyFooter
from kvviz.watch.widgets.medium_bars import MediumBars
from kvviz.ui.widgets.timeline_bar import TimelineBar
from kvviz.watch.widgets.watch_header import WatchHeader, source_label
from kvviz.watch.widgets.watch_narration import WatchNarration
from kvviz.watch.widgets.watch_timeline_bar import WatchTimelineBar

POLL_SECONDS = 0.1
"""How often the one timer drains the subscriber (ten times a second)."""

POLL_BATCH = 200
"""Most messages taken per drain (about 4,000 events of vLLM's, some 50 ms of adding): a drain
that takes a full chunk schedules the next one right after the screen refreshes instead of
waiting for the timer, so a burst is worked off at full speed while the screen still redraws
and answers keys between chunks; the header says how many wait ("catching up: N waiting")."""

NOT_CARRIED = DESIGN.unknowable
"""Where the trie, heap and ref views would be: why they cannot be (the events design's words)."""

WHY_HINT = "why: ↑ ↓ put the cursor on a block to see when it was stored and removed"

KEYS: tuple[tuple[str, str], ...] = (
    ("→, ← / h", "next / previous batch (stepping back pauses following)"),
    ("home", "the start, before the first batch"),
    ("l / end", "back to live: the newest batch, following each new one"),
    ("g", "go to step N"),
    ("e", "export this step: a bundle .json (replays its messages), a .md report, an .svg picture"),
    ("↑ ↓ (j k)", "the cursor in the forest: why that block is cached or removed"),
    ("enter", "unfold the folded chain under the cursor (again: fold it)"),
    ("/", "search the forest: a hash prefix, token ids (5 9 2) or text (with --tokenizer)"),
    ("n / N", "the next / previous block the search found"),
    ("tab / shift+tab", "move between the forest and the narration"),
    ("?", "this help"),
    ("q", "quit"),
)
"""Every key of the watch, as its help lists them (a test checks them against the bindings)."""

LEGEND = f"""\
[b]The forest[/b]
  {literal(FOREST_LEGEND[0])}
  {literal(FOREST_LEGEND[1])}
  tok 32–47: the block's token positions in its chain (+0–15: counted from an orphan)
  ×2: copies of one key on one medium · lora: the block's adapter

[b]The timeline[/b]  one step per batch received: [$kv-violation]![/] gap or restart  [$error]✗[/] undecodable  [$kv-evicted]▾[/] removed blocks

[b]What is not shown[/b]  {literal(NOT_CARRIED)}: a view of what is cached and removed, not of who holds it"""


class WatchHelpScreen(HelpScreen):
    """The watch's keys and legend; escape, ? or q closes it."""

    # A wider box than the explorer's help (this subclass's rule wins over HelpScreen's).
    DEFAULT_CSS = """
    WatchHelpScreen > VerticalScroll { width: 100; }
    """

    BOX_TITLE = "kvviz watch help"

    def markup(self) -> str:
        """The watch's keys, then its legend."""
        return keys_and_legend(KEYS, LEGEND)


class WatchApp(StepActions, App[None]):
    """The watch UI on one timeline (see the module doc)."""

    CSS_PATH = "app.tcss"
    TITLE = "kvviz watch"

    BINDINGS = [
        Binding("left,h", "previous_step", "back", key_display="←"),
        Binding("right", "next_step", "step", key_display="→"),
        Binding("home", "first_step", "Start", show=False),
        Binding("end", "live", "Live", show=False),
        Binding("l", "live", "live"),
        Binding("g", "jump", "go to"),
        Binding("e", "export", "export"),
        Binding("slash", "search", "search", key_display="/"),
        Binding("n", "next_hit", "next hit", show=False),
        Binding("N", "previous_hit", "previous hit", show=False),
        Binding("question_mark", "help", "help", key_display="?"),
        Binding("q", "quit", "quit"),
    ]

    def __init__(self, timeline, *, subscriber=None, step: int | None = None, animations: bool = False,
                 cursor_blink: bool = False, export_dir: str | Path | None = None, theme: str | None = None,
                 prompt: tuple[int, ...] | None = None, tokenizer=None):
        super().__init__()
        self.prompt = prompt  # --explain's prompt: explained at the step shown
        self.tokenizer = tokenizer
        self._explained: dict[int, object] = {}  # step -> its Explanation (a step never changes)
        self._hot: tuple[int, list] | None = None  # (last step, the hot prefixes of the stream up to it)
        set_up_appearance(self, theme, animations)
        self.cursor_blink = cursor_blink
        self.timeline = timeline
        timeline.viewer_step_bytes = VIEW_STEP_BYTES  # the lists below count in its memory bound
        self.subscriber = subscriber
        self.export_dir = Path(export_dir) if export_dir is not None else None
        self.start_step = step
        self.step = 0
        self.following = True
        self.paused_at = 0  # the last step when following stopped: later ones are waiting
        self.selected = None  # (key, medium) of the block under the forest's cursor
        self.why_text: str | None = None
        self.view: WatchView | None = None
        # Per kept step (cut with the timeline's fold: StepWindow), its marks, the stream's totals
        # and the most blocks cached up to it: the header, the banner and the medium bars say
        # what was known at the step shown, never later.
        self.summaries = StepWindow(FOLDED_STEP)
        self.totals_at = StepWindow()
        self.peak_at = StepWindow()
        self._totals = StreamTotals()  # over every step counted, folded ones included
        self._peak = 0
        self._told_full = False  # the forest's cap was said (once)
        self._titles: dict[str, str] = {}
        self._terminal_title = ""  # served: the title last written (terminal_title)
        self._poll_timer = None
        self.backlog = 0  # messages the subscriber holds that the timeline has not taken yet
        self._drain_scheduled = False

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return variable_defaults(self.current_theme)

    # -- layout --------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield WatchHeader(id="header")
        yield WatchTimelineBar(id="timeline")
        with Horizontal(id="views"):
            yield ForestView(id="forest")
            with Vertical(id="side"):
                yield MediumBars(id="media")
                yield Static(NOT_CARRIED, id="not-carried")
                yield Static("", id="insight")
                yield WatchNarration(id="narration")
        yield Static(WHY_HINT, id="why")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.media.border_title = "Blocks per medium"
        self.query_one("#not-carried").border_title = "Trie · heap · refs"
        self.narration.border_title = "Narration · notes"
        self.query_one("#insight").border_title = "Explain · this batch · hot" if self.prompt else "This batch · hot"
        if self.tokenizer is not None:
            self.forest.decode = self.tokenizer.decode
        self._count_new_steps()
        start = self.last_step if self.start_step is None else self.start_step
        self.following = self.start_step is None or start >= self.last_step
        self.paused_at = self.last_step
        self.go_to(start)
        if self.subscriber is not None:
            self._poll_timer = self.set_interval(POLL_SECONDS, self.poll_subscriber)
        self.forest.focus()

    @property
    def header(self) -> WatchHeader:
        return self.query_one("#header", WatchHeader)

    @property
    def timeline_bar(self) -> WatchTimelineBar:
        return self.query_one("#timeline", WatchTimelineBar)

    @property
    def forest(self) -> ForestView:
        return self.query_one("#forest", ForestView)

    @property
    def media(self) -> MediumBars:
        return self.query_one("#media", MediumBars)

    @property
    def narration(self) -> WatchNarration:
        return self.query_one("#narration", WatchNarration)

    @property
    def why_line(self) -> Static:
        return self.query_one("#why", Static)

    # -- messages in -----------------------------------------------------------------------

    @property
    def last_step(self) -> int:
        """The newest step (one per message received)."""
        return self.timeline.last_step

    @property
    def waiting(self) -> int:
        """Batches received since following stopped (0 while live)."""
        return 0 if self.following else self.last_step - self.paused_at

    def receive(self, received: Iterable) -> int:
        """Record ``received`` (the subscriber's ``Received`` values, in order) in the
        timeline; live, show the newest. Returns how many were recorded."""
        added = self.timeline.add_all(received)
        self._arrived(added)
        return added

    def receive_messages(self, messages: Iterable) -> int:
        """Record raw ``Message`` values (the timeline decodes them). Returns how many."""
        added = self.timeline.add_all(messages)
        self._arrived(added)
        return added

    def poll_subscriber(self) -> None:
        """The timer's tick: up to :data:`POLL_BATCH` messages the subscriber decoded; when it
        had that many (a backlog), the next chunk is drained right after the screen refreshes."""
        if self.subscriber is None:
            return
        for line in getattr(self.subscriber, "notices", list)():  # e.g. a recording that stopped
            self.notify(line, severity="error", timeout=10)
        taken = self.subscriber.poll(POLL_BATCH)
        full = len(taken) >= POLL_BATCH
        self.backlog = getattr(self.subscriber, "pending", 0) if full else 0
        if not self.receive(taken) and self.view is not None and (
                self.view.backlog != self.backlog or self.view.connected != self._connected()):
            self._show(rebuild=False)  # nothing new, but the header's backlog or handshake changed
        if full and not self._drain_scheduled:
            self._drain_scheduled = True
            self.call_after_refresh(self._drain_next)

    def _connected(self) -> tuple[bool, ...]:
        """Each rank's handshake, from the subscriber's stats (none for a recording, or a
        subscriber without stats)."""
        stats = getattr(self.subscriber, "stats", None)
        return tuple(getattr(stats, "connected", ()))

    def _drain_next(self) -> None:
        self._drain_scheduled = False
        self.poll_subscriber()

    def _arrived(self, added: int) -> None:
        if not added:
            return
        self._count_new_steps()
        if self.following:
            self.go_to(self.last_step)
        else:  # paused: the step shown stays; only the header and the bar say more wait
            self._show(rebuild=False)

    def _count_new_steps(self) -> None:
        """Marks, totals and the peak for the steps not counted yet (each step once); the
        values of steps the timeline folded away are let go, and those of steps it derived
        again (a replay's late answer put in its place) are counted again."""
        timeline = self.timeline
        rederived = timeline.take_rederived()
        if rederived is not None and rederived < len(self.summaries):
            for window in (self.summaries, self.totals_at, self.peak_at):
                window.cut_to(rederived + 1)
            self._totals, self._peak = self.totals_at[rederived], self.peak_at[rederived]
            self._explained = {step: found for step, found in self._explained.items() if step <= rederived}
            self._hot = None
            if self.view is not None and self.view.step > rederived:
                self.view = None  # the step shown was derived again: its frame is rebuilt
        cached, removed = timeline.cached_over_time, timeline.removed_per_step
        first = timeline.first_step
        for index in range(len(self.summaries), self.last_step + 1):
            notes = timeline.notes(index) if index >= first else ()  # a folded step's are gone
            summary = step_summary(index, notes, removed[index])
            self._totals = self._totals.plus(summary) if index else self._totals
            self._peak = max(self._peak, cached[index])
            if index >= first:
                self.summaries.append(summary)
                self.totals_at.append(self._totals)
                self.peak_at.append(self._peak)
            else:  # folded before it was counted: only the running totals keep it
                for window in (self.summaries, self.totals_at, self.peak_at):
                    window.fold_to(index + 1)
        for window in (self.summaries, self.totals_at, self.peak_at):
            window.fold_to(first)
        if timeline.full_words is not None and not self._told_full:
            self._told_full = True
            self.notify(timeline.full_words, severity="warning", timeout=10)

    # -- showing a step ----------------------------------------------------------------------

    def go_to(self, step: int) -> None:
        """Show step ``step`` (clamped to the timeline's kept steps)."""
        self.step = max(self.timeline.first_step, min(self.last_step, int(step)))
        self._show(rebuild=True)

    def _show(self, rebuild: bool) -> None:
        timeline = self.timeline
        # A paused step may have been folded away since (a live watch bounds its memory).
        self.step = max(self.step, timeline.first_step)
        shown = self.view
        if not rebuild and shown is not None and shown.step == self.step:
            # The same step: its frame never changes (rebuilding one replays up to a
            # keyframe's worth of batches, and a paused screen redraws on every tick).
            frame, orphans = shown.frame, shown.orphans
        else:
            frame = timeline.frame(self.step)
            orphans = sum(1 for block in frame.state.blocks.values() if block.orphan)
            if self.selected is not None:
                # The why line tells what the stream said up to the step shown, never later.
                self.why_text = timeline.why_block(self.selected[0], at=self.step)
        view = WatchView(
            frame, self.last_step, source=timeline.source, replay=self.subscriber is None,
            following=self.following, waiting=self.waiting, backlog=self.backlog,
            connected=self._connected(), rates=timeline.rates(self.step),
            cached_samples=sparkline_samples(timeline.cached_over_time, self.step), peak=self.peak_at[self.step],
            totals=self.totals_at[self.step], orphans=orphans, selected=self.selected, why=self.why_text,
            summaries=self.summaries.frozen())
        self.view = view
        self.header.show(view)
        self.timeline_bar.show(view)
        if rebuild or self.forest.view is None or self.forest.view.step != view.step:
            self.forest.show(view, rebuild=True)
            self.media.show(view)
            self.narration.show(view)
            self.query_one("#insight", Static).update(Content(self.insight_text(view)))
            self._title(self.forest, f"Block forest · step {view.step}")
        else:
            self.forest.show(view, rebuild=False)
        self.why_line.update(Content(f"why: {view.why}" if view.why else WHY_HINT))
        self._title_the_terminal(view)

    def insight_text(self, view: WatchView) -> str:
        """The insight pane: the --explain verdict at the step shown, what this batch's request
        matched and stored, and the hottest prefixes of the stream received so far."""
        from kvviz.watch.hot import batch_match

        lines = []
        if self.prompt is not None:
            lines += self.explanation(view.step, view.following).lines()[:2]
        matched = batch_match(view.frame)
        if matched is not None:
            lines.append(matched.line())
        hot = self.hot_prefixes()
        decode = None if self.tokenizer is None else self.tokenizer.decode
        if hot:
            lines.append(f"hot prefixes (batches {self.timeline.first_step + 1}..{self._hot[0]}):")
            lines += [f"  {h.line(decode)}" for h in hot[:3]]
        return "\n".join(lines)

    def explanation(self, step: int, following: bool = False):
        """``--explain``'s verdict at ``step`` (kept: a step's state never changes). Following a
        live stream, an earlier step's verdict (it names its step) stands until the stream has
        grown by :func:`_worth_again`: each costs a pass over the messages."""
        from kvviz.watch.explain import explain

        if following and step not in self._explained and self._explained:
            newest = max(self._explained)
            if not _worth_again(newest, step):
                return self._explained[newest]
        if step not in self._explained:
            decode = None if self.tokenizer is None else self.tokenizer.decode
            self._explained[step] = explain(self.timeline, self.prompt, step, decode=decode)
        return self._explained[step]

    def hot_prefixes(self) -> list:
        """The hot prefixes of every batch received (recomputed when more have arrived)."""
        from kvviz.watch.hot import hot_prefixes

        last = self.timeline.last_step
        if self._hot is None or (self._hot[0] != last and (self.subscriber is None or _worth_again(self._hot[0], last))):
            self._hot = (last, hot_prefixes(self.timeline.kept_messages_until(last)))
        return self._hot[1]

    def _title_the_terminal(self, view: WatchView) -> None:
        # Served (kvviz serve), the terminal's title becomes the browser tab's, as the main
        # app's (terminal_title): written only when it changes, since each batch redraws.
        if not self.is_web:
            return
        name = f"watch {source_label(view.source)}" if view.source else "watch"  # the header's source
        title = step_title(name, view.step, view.last_step, state="live" if view.following else "paused")
        if title != self._terminal_title:
            self._terminal_title = title
            title_the_terminal(self, title)

    def _title(self, widget, title: str) -> None:
        # Setting a border title repaints the whole widget: only when it changes.
        if self._titles.get(widget.id) != title:
            self._titles[widget.id] = title
            widget.border_title = title

    # -- stepping --------------------------------------------------------------------------

    def pause(self) -> None:
        """Stop following the newest batch (batches keep being recorded and counted)."""
        if self.following:
            self.following = False
            self.paused_at = self.last_step

    def action_previous_step(self) -> None:
        """One batch back; pauses following."""
        self.pause()
        super().action_previous_step()

    def action_next_step(self) -> None:
        """One batch forward (paused stays paused: l returns to live)."""
        if self.following and self.step >= self.last_step:
            return
        super().action_next_step()

    def action_first_step(self) -> None:
        """The start, before the first batch; pauses following."""
        self.pause()
        super().action_first_step()

    def action_live(self) -> None:
        """Back to live: the newest batch, following each new one."""
        self.following = True
        self.go_to(self.last_step)

    def action_last_step(self) -> None:
        """The newest batch, live again."""
        self.action_live()

    JUMP_STEPS = "the watch has steps 0..{last} so far"

    def jump_to(self, step: int) -> None:
        """Go to the step typed at the jump prompt, paused there."""
        self.pause()
        self.go_to(step)

    def action_search(self) -> None:
        """Ask what to find in the forest (a hash prefix, token ids, or text with a tokenizer)."""
        def done(value: str | None) -> None:
            if value:
                self.search(value)

        text = " or text" if self.tokenizer is not None else ""
        self.push_screen(PromptScreen("Find a block", self.forest.query, placeholder=f"hash prefix, token ids{text}",
                                      help="n / N: the next / previous hit", max_length=200), done)

    def search(self, query: str) -> int:
        """Find ``query`` in the forest of the step shown; say how many blocks answer."""
        found = self.forest.search(query)
        if found:
            self.notify(f"{found:,} block{'s' if found != 1 else ''} match {query!r}: n / N walk them", timeout=4)
        else:
            self.notify(f"no block of step {self.step} matches {query!r}", severity="warning", timeout=4)
        return found

    def action_next_hit(self) -> None:
        """The next block the search found."""
        self.forest.next_hit(1)

    def action_previous_hit(self) -> None:
        """The previous block the search found."""
        self.forest.next_hit(-1)

    def action_help(self) -> None:
        """Keys and legend."""
        self.push_screen(WatchHelpScreen())

    # -- export ------------------------------------------------------------------------------

    EXPORT_SUFFIXES = (".json", ".md", ".svg")

    def export_paths(self) -> dict[str, Path]:
        """Where ``e`` writes the step shown: ``kvviz-watch-<source>-step<N>.json/.md/.svg``
        in the export folder, numbered ``-2``, ``-3``, ... when a name is taken (never
        overwritten)."""
        folder = self.export_dir or Path.cwd()
        stem = free_stem(folder, f"kvviz-watch-{slug(self.timeline.source)}-step{self.step}", self.EXPORT_SUFFIXES)
        return {suffix: folder / f"{stem}{suffix}" for suffix in self.EXPORT_SUFFIXES}

    def export_step(self) -> list[Path]:
        """Write the bundle, the Markdown report and an SVG picture of the step shown; returns
        the paths written."""
        from kvviz.report.atomic import write_text_atomic
        from kvviz.watch.bundle import write_watch_export

        paths = self.export_paths()
        if self.is_web:  # served (kvviz serve): one download, as the main app's e offers
            from kvviz.watch.bundle import dumps_watch_bundle, make_watch_bundle

            bundle = dumps_watch_bundle(make_watch_bundle(self.timeline, self.step))
            return [offer_download(self, paths[".json"], bundle)]
        paths[".json"].parent.mkdir(parents=True, exist_ok=True)
        for suffix in (".json", ".md"):
            write_watch_export(self.timeline, self.step, paths[suffix])
        title = f"kvviz watch · {self.timeline.source or 'stream'} · step {self.step}"
        write_text_atomic(paths[".svg"], portable_svg(self.export_screenshot(title=title)))
        return list(paths.values())

    def action_export(self) -> None:
        """Export the step shown (the picture without the toasts of earlier exports) and say
        where the files went."""
        self.clear_notifications()
        self.call_after_refresh(lambda: export_and_tell(self))

    # -- selection ---------------------------------------------------------------------------

    @on(ForestView.BlockSelected)
    def _block_selected(self, message: ForestView.BlockSelected) -> None:
        self.select(message.key, message.medium)

    def select(self, key, medium: str | None = None) -> None:
        """Select block ``key`` (on ``medium``): the forest marks its chain, the why line
        says what the timeline knows of it."""
        self.selected = (key, medium)
        self.why_text = self.timeline.why_block(key, at=self.step)
        self._show(rebuild=False)

    @on(TimelineBar.StepClicked)
    def _step_clicked(self, message: TimelineBar.StepClicked) -> None:
        self.pause()
        self.go_to(message.step)


def _worth_again(done: int, now: int) -> bool:
    """Whether a pass over the messages made at step ``done`` is worth making again at ``now``:
    after 64 more batches or an eighth more, so a live stream's passes cost O(messages) in all."""
    return now - done >= max(64, done // 8)


def make_watch_app(timeline, *, subscriber=None, step: int | None = None, animations: bool = False,
                   cursor_blink: bool = False, export_dir: str | Path | None = None,
                   theme: str | None = None, prompt: tuple[int, ...] | None = None, tokenizer=None) -> WatchApp:
    """The watch UI on ``timeline`` (a :class:`~kvviz.watch.timeline.WatchTimeline`).

    ``subscriber``: a started :class:`~kvviz.watch.subscriber.Subscriber` whose
    messages the app drains ten times a second (None: a recording, nothing more arrives);
    ``step``: the step to open at, paused (None: the newest, live); ``animations`` and
    ``cursor_blink`` off by default (deterministic screenshots); ``export_dir``: where
    exports go (default the current directory); ``theme``: any registered theme name;
    ``prompt``: ``--explain``'s token ids, explained at the step shown; ``tokenizer``: a
    :class:`~kvviz.core.tokenizer_file.TextTokenizer` for text beside the tokens.
    """
    return WatchApp(timeline, subscriber=subscriber, step=step, animations=animations, cursor_blink=cursor_blink,
                    export_dir=export_dir, theme=theme, prompt=prompt, tokenizer=tokenizer)
