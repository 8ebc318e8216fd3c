# SPDX-License-Identifier: Apache-2.0
"""The block forest of ``kvviz watch``: the cache a server's KV events describe, rebuilt.

Each block hangs under the block its parent key names (:func:`forest_lines`), so a chain
reads straight down, and indents where it branches (where two requests diverged). A row shows the block's key (as
sent: opaque), its token positions in the chain (``tok 32–47``; ``+0–15`` counts from an
orphan, whose start is unknown), its medium, its LoRA, its copies (the same key stored twice
on one medium, ``×2``) and its token values. Blocks the step stored are green; blocks it
removed stay where they were for that step, struck through in red, and are gone the step
after. A block whose parent key is not in the forest is an **orphan** (⊘): kvviz attached
after its parent was stored, or the parent was removed first; it heads a chain of its own.

A straight run of :data:`FOLD_MIN` or more blocks (each the only child of the one before, no
copy between) is **folded** into one row, ``▸ ×169 blocks, tokens 16..2719``, which keeps the
step's marks (``+12 stored``, ``✗169 removed``); branch points end a run, so the forest reads as
its branches. Enter unfolds the run under the cursor (and folds it again from any of its
blocks). :meth:`ForestView.search` finds blocks by hash prefix, token ids or text (with a
tokenizer); :meth:`ForestView.next_hit` walks the hits, unfolding the run that hides one.

The view draws a frozen :class:`~kvviz.watch.view.WatchView`; moving the cursor posts
:class:`ForestView.BlockSelected`, which the app answers with the timeline's why-answer.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

from textual.binding import Binding
from textual.message import Message
from textual.widget import Widget

from kvviz.watch.wire import key_label, key_order, block_hash_text, medium_label
from kvviz.printable import printable
from kvviz.core.narrate import count
from kvviz.watch.view import WatchView
from kvviz.ui.widgets.line_view import LineView, Row, SelectionMessage, Span

MAX_INDENT = 12
"""Most branch levels drawn further right; blocks below deeper branches stay at this indent
(marked with their branch level)."""

CONTEXT_ROWS = 3
"""Rows shown above the step's first change when it is scrolled into sight."""

ORPHAN = "⊘"
"""The marker of a block whose parent key is not in the forest."""

COPY = "≡"
"""The marker of another medium's copy of the key above (its children hang under the first)."""

FOLD_MIN = 3
"""The shortest straight run of blocks folded into one row."""

FOLDED = "▸"
"""The marker of a folded run (enter unfolds it)."""

LEGEND = ("● cached · + stored this batch · ✗ removed this batch (gone the next)",
          f"{ORPHAN} orphan: parent not cached (never seen or removed) · {COPY} same key, other medium · "
          f"{FOLDED} a folded chain: enter unfolds · / search, n N next")
"""The legend, under the header (two lines, so a narrow pane still shows it)."""


@dataclass(frozen=True, slots=True)
class ForestLine:
    """One block as the forest draws it.

    ``depth`` counts the blocks above it in its chain; ``level`` the branches above it (a
    chain goes straight down, each branch indents once, up to :data:`MAX_INDENT`). ``start`` is the position of its first token in its chain (counted from the orphan that
    heads the chain when ``relative``); ``removed`` and ``stored``: what the step shown did
    to it; ``copy_of`` True for another medium's copy of the key drawn just above (the key's
    children hang under its first copy).
    """

    block: object
    prefix: str
    depth: int
    start: int
    relative: bool
    head: bool
    level: int = 0
    removed: bool = False
    stored: bool = False
    lost_copy: bool = False
    copy_of: bool = False

    @property
    def orphan(self) -> bool:
        """True when the chain's parent key is not in the forest (a chain's head only)."""
        return self.head and self.block.parent is not None


def _order(block) -> tuple:
    # Deterministic on every run: the step that stored it, then the key (ints before bytes,
    # which do not compare), then the medium.
    return (block.stored_at, key_order(block.key), block.medium or "")


def forest_lines(state, effect=None) -> tuple[ForestLine, ...]:
    """The blocks of ``state`` (a ``ForestState``) and those ``effect`` (the step's
    ``BatchEffect``) removed, depth first from each chain's head, heads in storing order.

    Removed blocks keep their place for the step that removed them. Every block appears once,
    also when keys loop (a crafted stream): such a block heads a chain. O(blocks log blocks).
    """
    present = state.blocks
    stored = {(b.key, b.medium) for b in effect.stored} if effect is not None else set()
    removed_here = list(effect.removed) if effect is not None else []
    lost = {(b.key, b.medium) for b in removed_here if (b.key, b.medium) in present}
    gone = {}
    for b in removed_here:
        if (b.key, b.medium) not in present:
            gone.setdefault((b.key, b.medium), b)
    blocks = sorted([*present.values(), *gone.values()], key=_order)
    first_copy: dict[Hashable, object] = {}
    for b in blocks:
        first_copy.setdefault(b.key, b)
    children: dict[Hashable, list] = {}
    heads = []
    for b in blocks:
        if first_copy[b.key] is not b:
            continue  # drawn right under its first copy
        if b.parent is not None and b.parent in first_copy and b.parent != b.key:
            children.setdefault(b.parent, []).append(b)
        else:
            heads.append(b)
    copies: dict[Hashable, list] = {}
    for b in blocks:
        if first_copy[b.key] is not b:
            copies.setdefault(b.key, []).append(b)
    out: list[ForestLine] = []
    seen: set = set()
    marks = (stored, gone, lost)
    _walk(heads, children, copies, marks, out, seen)
    leftover = [b for b in blocks if first_copy[b.key] is b and b.key not in seen]
    while leftover:  # keys that loop: the first left over heads a chain
        _walk(leftover[:1], children, copies, marks, out, seen)
        leftover = [b for b in leftover if b.key not in seen]
    return tuple(out)


def _walk(heads, children, copies, marks, out: list[ForestLine], seen: set) -> None:
    # Depth first with an explicit stack: a conversation's chain is hundreds of blocks long.
    # Each entry: the block, the guide drawn before its marker, the prefix its children's
    # guides start with, its indent level (branches only), its depth, its first token's
    # position, whether positions count from an orphan, whether it heads a chain.
    stored, gone, lost = marks
    pending = []
    for i in range(len(heads) - 1, -1, -1):
        last = i == len(heads) - 1
        pending.append((heads[i], "└─" if last else "├─", "  " if last else "│ ", 0, 0, 0,
                        heads[i].parent is not None, True))
    while pending:
        b, guide, inner, level, depth, start, relative, head = pending.pop()
        if b.key in seen:
            continue
        seen.add(b.key)
        for copy_index, block in enumerate([b, *copies.get(b.key, ())]):
            ident = (block.key, block.medium)
            # A copy is drawn where the key's children start, as a note on the row above.
            out.append(ForestLine(block, guide if copy_index == 0 else inner, depth, start, relative,
                                  head and copy_index == 0, level=level, removed=ident in gone,
                                  stored=ident in stored, lost_copy=ident in lost, copy_of=copy_index > 0))
        below = children.get(b.key, ())
        after = start + len(b.tokens)
        if len(below) == 1:  # a chain goes straight down: no new indent until it branches
            pending.append((below[0], inner, inner, level, depth + 1, after, relative, False))
            continue
        deeper = level >= MAX_INDENT
        for i in range(len(below) - 1, -1, -1):
            last = i == len(below) - 1
            child_guide = inner if deeper else inner + ("└─" if last else "├─")
            child_inner = inner if deeper else inner + ("  " if last else "│ ")
            pending.append((below[i], child_guide, child_inner, level + 1, depth + 1, after, relative, False))


@dataclass(frozen=True, slots=True)
class FoldedRun:
    """A straight run of blocks drawn as one row: its lines, first to last."""

    lines: tuple[ForestLine, ...]

    @property
    def first(self) -> ForestLine:
        """The run's first block (its row's item is this block's id)."""
        return self.lines[0]

    @property
    def stored(self) -> int:
        """Blocks of the run the step stored."""
        return sum(1 for line in self.lines if line.stored)

    @property
    def removed(self) -> int:
        """Blocks of the run the step removed (or took a copy of)."""
        return sum(1 for line in self.lines if line.removed or line.lost_copy)

    @property
    def tokens(self) -> int:
        """Tokens in the run's blocks."""
        return sum(len(line.block.tokens) for line in self.lines)


def fold_runs(lines: Sequence[ForestLine], least: int = FOLD_MIN) -> list[ForestLine | FoldedRun]:
    """``lines`` with every straight run of at least ``least`` blocks as one :class:`FoldedRun`:
    each block after the first is the only child of the one before (same branch level, the next
    depth, drawn right under it), and no copy on another medium sits between. O(lines)."""
    out: list[ForestLine | FoldedRun] = []
    run: list[ForestLine] = []

    def flush() -> None:
        if len(run) >= least:
            out.append(FoldedRun(tuple(run)))
        else:
            out.extend(run)
        run.clear()

    for line in lines:
        if run and not line.copy_of and not line.head and line.level == run[-1].level \
                and line.depth == run[-1].depth + 1 and line.block.parent == run[-1].block.key \
                and (len(run) == 1 or line.prefix == run[-1].prefix):
            run.append(line)
            continue
        flush()
        if line.copy_of:
            out.append(line)
        else:
            run.append(line)
    flush()
    return out


def matches(line: ForestLine, query: str, decode=None) -> bool:
    """Whether block ``line`` answers a search: ``query`` is a hash prefix (hex as shown, or the
    key as sent), token ids in a row (``5 9 2`` or ``5,9,2``) or, with ``decode``, text."""
    block = line.block
    wanted = query.strip().lower().rstrip("…")
    if not wanted:
        return False
    words = wanted.replace(",", " ").split()
    if all(word.isdigit() for word in words) and len(words) > 1:
        ids = tuple(int(word) for word in words)
        tokens = tuple(block.tokens)
        return any(tokens[i:i + len(ids)] == ids for i in range(len(tokens) - len(ids) + 1))
    label = key_label(block.key, 0).lower()
    if label.startswith(wanted) or block_hash_text(block.key).lower().startswith(wanted):
        return True
    if len(words) == 1 and wanted.isdigit() and int(wanted) in block.tokens:
        return True
    return decode is not None and query.strip() in decode(block.tokens)


def token_values(tokens: Iterable[int], budget: int) -> str:
    """A block's tokens in at most ``budget`` cells: "[1600–1615]" for a run of consecutive
    ids, else "[5 9 2 …]"."""
    tokens = tuple(tokens)
    if not tokens:
        return "[]"
    if len(tokens) > 2 and all(b - a == 1 for a, b in zip(tokens, tokens[1:])):
        text = f"[{tokens[0]}–{tokens[-1]}]"
    else:
        text = "[" + " ".join(map(str, tokens)) + "]"
    if len(text) > budget:
        text = text[:max(1, budget - 2)] + "…]"
    return text


class ForestView(LineView):
    """The block forest of the watch step shown (see the module doc).

    | Class | Description |
    | :- | :- |
    | `forest-view--guide` | The chains' guide lines. |
    | `forest-view--block` | A cached block. |
    | `forest-view--stored` | A block stored by this step. |
    | `forest-view--removed` | A block removed by this step (struck through; gone the next step). |
    | `forest-view--loss` | The count of blocks removed, and a copy lost. |
    | `forest-view--orphan` | An orphan and its marker. |
    | `forest-view--meta` | Positions, medium, LoRA, copies, the header and the legend. |
    | `forest-view--note` | A reset, a removal of a block never seen. |

    Plus those of :class:`~kvviz.ui.widgets.line_view.LineView` (cursor, linked, muted).
    """

    COMPONENT_CLASSES = {
        "forest-view--guide", "forest-view--block", "forest-view--stored", "forest-view--removed",
        "forest-view--orphan", "forest-view--meta", "forest-view--note", "forest-view--loss",
    }

    DEFAULT_CSS = """
    ForestView {
        & > .forest-view--guide { color: $kv-muted; }
        & > .forest-view--block { color: $kv-cached; }
        & > .forest-view--stored { color: $kv-new; text-style: bold; }
        & > .forest-view--removed { color: $kv-evicted; text-style: strike; }
        & > .forest-view--loss { color: $kv-evicted; text-style: bold; }
        & > .forest-view--orphan { color: $warning; text-style: bold; }
        & > .forest-view--meta { color: $kv-muted; }
        & > .forest-view--note { color: $warning; }
    }
    """

    BINDINGS = [Binding("enter", "toggle_fold", "unfold", show=False)]

    class BlockSelected(SelectionMessage):
        """The user put the cursor on a block: ``key`` (as sent) on ``medium``."""

        def __init__(self, source: Widget, key: Hashable, medium: str | None) -> None:
            super().__init__(source)
            self.key = key
            self.medium = medium

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._parent_of: dict[Hashable, Hashable | None] = {}
        self._linked: frozenset = frozenset()
        self.lines: tuple[ForestLine, ...] = ()
        """The blocks as laid out for the step shown (tests read them)."""
        self.decode = None
        """Token ids to text (a tokenizer's ``decode``), or None: the text is shown beside the tokens."""
        self._unfolded: set[Hashable] = set()  # the first blocks of the runs the user unfolded
        self._run_of: dict[Hashable, Hashable] = {}  # a folded-away block -> its run's first block
        self._hits: list[Hashable] = []
        self._hit = -1
        self.query = ""
        """The last search."""

    # -- building rows -------------------------------------------------------------------

    def build_rows(self, view: WatchView, width: int) -> list[Row]:
        frame = view.frame
        effect = frame.effect
        self.lines = forest_lines(frame.state, effect)
        self._parent_of = {line.block.key: line.block.parent for line in self.lines}
        rows = [Row(None, "header")] + [Row(None, ("legend", i)) for i in range(len(LEGEND))]
        if effect is not None and effect.cleared:
            rows.append(Row(None, "cleared"))
        self._run_of = {}
        for part in fold_runs(self.lines):
            if isinstance(part, FoldedRun):
                first = (part.first.block.key, part.first.block.medium)
                for line in part.lines:
                    self._run_of[(line.block.key, line.block.medium)] = first
                if first in self._unfolded:
                    rows += [Row((line.block.key, line.block.medium), line) for line in part.lines]
                else:
                    rows.append(Row(first, part))
            else:
                rows.append(Row((part.block.key, part.block.medium), part))
        if not self.lines:
            rows.append(Row(None, "empty"))
        if effect is not None:
            rows += [Row(None, ("unknown", key)) for key in effect.removed_unknown]
        self._link(view)
        return rows

    def keeps_rows(self, old: WatchView | None, new: WatchView) -> bool:
        # A step's frame never changes once received: the same step keeps its rows.
        return old is not None and old.step == new.step and old.revision == new.revision

    def show(self, view: WatchView, rebuild: bool = True) -> None:
        """Render ``view`` (rows are kept when only the selection changed). On a new step the
        first block it stored or removed scrolls into sight, unless the selected block is
        there to keep in sight (a forest of thousands of blocks hides a step's change)."""
        old = self.view
        if self._rows and not (rebuild and not self.keeps_rows(old, view)):
            self._link(view)
        super().show(view, rebuild)
        if old is not None and old.step == view.step:
            return
        if view.selected is not None and view.selected in self._item_row:
            return
        row = self.first_change_row()
        top, height = self.scroll_offset.y, self.scrollable_content_region.height
        if row is not None and not top <= row < top + height:
            self.scroll_to(y=max(0, row - CONTEXT_ROWS), animate=False, immediate=True, force=True)
            self.restyle()

    def first_change_row(self) -> int | None:
        """The first row of a block the step stored or removed (or a removal never seen)."""
        for index, row in enumerate(self._rows):
            data = row.data
            if isinstance(data, ForestLine) and (data.stored or data.removed or data.lost_copy):
                return index
            if isinstance(data, FoldedRun) and (data.stored or data.removed):
                return index
            if isinstance(data, tuple) and data[0] == "unknown":
                return index
        return None

    def _link(self, view: WatchView) -> None:
        """The selected block's chain up to its head: the rows linked to the selection."""
        selected = view.selected
        linked = set()
        key = selected[0] if selected is not None else None
        while key is not None and key in self._parent_of and key not in linked:
            linked.add(key)
            key = self._parent_of[key]
        self._linked = frozenset(linked)

    # -- rendering -----------------------------------------------------------------------

    def render_row(self, row: Row, width: int) -> list[Span]:
        style = self.style_of
        data = row.data
        if isinstance(data, ForestLine):
            return self._block_spans(data, width)
        if isinstance(data, FoldedRun):
            return self._run_spans(data, width)
        if data == "header":
            return self._header_spans()
        if isinstance(data, tuple) and data[0] == "legend":
            return [(LEGEND[data[1]], style("forest-view--meta"))]
        if data == "cleared":
            return [("AllBlocksCleared: the server reset its cache; every block was dropped",
                     style("forest-view--note"))]
        if data == "empty":
            return [("no cached blocks", style("line-view--muted"))]
        if isinstance(data, tuple) and data[0] == "unknown":
            return [(f"✗ {key_label(data[1])} removed, never seen stored (before kvviz attached, a gap or a restart)",
                     style("forest-view--note"))]
        return []

    def _header_spans(self) -> list[Span]:
        style = self.style_of
        view = self.view
        spans: list[Span] = [(count(view.cached, "block") + " cached", style("forest-view--meta"))]
        if view.orphans:
            spans.append((f" · {count(view.orphans, 'orphan')}", style("forest-view--orphan")))
        effect = view.frame.effect
        if effect is not None:
            if effect.stored:
                spans.append((f" · +{len(effect.stored):,} stored", style("forest-view--stored")))
            removed = len(effect.removed) + len(effect.removed_unknown)
            if removed:
                spans.append((f" · −{removed:,} removed", style("forest-view--loss")))
            if effect.duplicates:
                spans.append((f" · {count(effect.duplicates, 'duplicate store')}", style("forest-view--meta")))
            spans.append((" this batch", style("forest-view--meta")))
        return spans

    def _block_spans(self, line: ForestLine, width: int) -> list[Span]:
        style = self.style_of
        block = line.block
        meta = style("forest-view--meta")
        if line.removed:
            look, mark, tag = style("forest-view--removed"), "✗ ", " removed"
        elif line.stored:
            look, mark, tag = style("forest-view--stored"), "+ ", " stored"
        else:
            look, mark, tag = style("forest-view--block"), "● ", ""
        if line.orphan:
            mark = f"{ORPHAN} "
        elif line.copy_of:
            mark = f"{COPY} "
        spans: list[Span] = [(line.prefix, style("forest-view--guide")),
                             (mark, style("forest-view--orphan") if line.orphan else look),
                             (key_label(block.key), look)]
        size = len(block.tokens)
        sign = "+" if line.relative else ""
        positions = f"{sign}{line.start}–{line.start + size - 1}" if size else f"{sign}{line.start} (no tokens)"
        tail: list[Span] = [(f" tok {positions} {medium_label(block.medium)}", meta)]
        if block.lora is not None:
            tail.append((f" lora {printable(str(block.lora))}", meta))  # the publisher's name
        if block.copies > 1:
            tail.append((f" ×{block.copies}", meta))
        if line.level > MAX_INDENT:
            tail.append((f" branch {line.level}", meta))
        if line.orphan:
            tail.append((" orphan", style("forest-view--orphan")))
        if tag:
            tail.append((tag, look))
        if line.lost_copy:
            tail.append((" −1 copy", style("forest-view--loss")))
        used = sum(len(text) for text, _ in spans) + sum(len(text) for text, _ in tail) + 1
        values = token_values(block.tokens, max(6, width - used))
        if self.decode is not None:
            text = self.decode(block.tokens).replace("\n", "⏎")
            values = token_values(block.tokens, max(6, (width - used) // 2))
            values += " " + repr(text)[:max(4, width - used - len(values) - 1)]
        return [*spans, *tail, (" " + values, meta)]

    def _run_spans(self, run: FoldedRun, width: int) -> list[Span]:
        style = self.style_of
        first, last = run.first, run.lines[-1]
        meta = style("forest-view--meta")
        look = style("forest-view--block")
        if run.removed == len(run.lines):
            look = style("forest-view--removed")
        elif run.stored == len(run.lines):
            look = style("forest-view--stored")
        sign = "+" if first.relative else ""
        end = last.start + len(last.block.tokens) - 1
        spans: list[Span] = [(first.prefix, style("forest-view--guide")),
                             (f"{ORPHAN} " if first.orphan else f"{FOLDED} ",
                              style("forest-view--orphan") if first.orphan else look),
                             (f"×{len(run.lines):,} blocks, tokens {sign}{first.start}..{sign}{end}", look),
                             (f" {key_label(first.block.key)}..{key_label(last.block.key)} "
                              f"{medium_label(first.block.medium)}", meta)]
        if run.stored:
            spans.append((f" +{run.stored:,} stored", style("forest-view--stored")))
        if run.removed:
            spans.append((f" ✗{run.removed:,} removed", style("forest-view--loss")))
        if first.orphan:
            spans.append((" orphan", style("forest-view--orphan")))
        return spans

    # -- folding and search ----------------------------------------------------------------

    def action_toggle_fold(self) -> None:
        """Unfold the run under the cursor, or fold again the run of the block under it."""
        item = self.cursor
        if item is None or self.view is None:
            return
        first = self._run_of.get(item)
        if first is None:
            return
        if first in self._unfolded:
            self._unfolded.discard(first)
        else:
            self._unfolded.add(first)
        self._rebuild()
        self.move_cursor(first, post=False)

    def unfold_to(self, item: Hashable) -> None:
        """Make block ``item`` a row of its own (unfolding the run that holds it)."""
        first = self._run_of.get(item)
        if first is not None and first not in self._unfolded:
            self._unfolded.add(first)
            self._rebuild()

    def move_cursor(self, item: Hashable, post: bool = True) -> None:
        """Put the cursor on block ``item``, unfolding the run that hides it."""
        if item not in self._item_row:
            self.unfold_to(item)
        super().move_cursor(item, post)

    def search(self, query: str) -> int:
        """Find the blocks of the step shown that answer ``query`` (see :func:`matches`), in
        forest order; put the cursor on the first. Returns how many."""
        self.query = query
        self._hits = [(line.block.key, line.block.medium) for line in self.lines
                      if not line.removed and matches(line, query, self.decode)]
        self._hit = -1
        if self._hits:
            self.next_hit(1)
        return len(self._hits)

    def next_hit(self, delta: int = 1) -> Hashable | None:
        """The cursor to the next (``delta`` 1) or previous (-1) hit of the last search, around
        the end; None when there is none."""
        if not self._hits:
            return None
        self._hit = (self._hit + delta) % len(self._hits)
        item = self._hits[self._hit]
        self.move_cursor(item)
        return item

    @property
    def hit_position(self) -> tuple[int, int]:
        """(the hit under the cursor, 1-based; how many hits) of the last search."""
        return (self._hit + 1 if self._hits else 0, len(self._hits))

    # -- selection -----------------------------------------------------------------------

    def is_linked(self, item: Hashable) -> bool:
        data = self._row_data(item)
        if isinstance(data, FoldedRun):
            return any(line.block.key in self._linked for line in data.lines)
        return item[0] in self._linked

    def _row_data(self, item: Hashable):
        row = self._item_row.get(item)
        return None if row is None else self._rows[row].data

    def selected_message(self, item: Hashable) -> Message | None:
        key, medium = item
        return self.BlockSelected(self, key, medium)
