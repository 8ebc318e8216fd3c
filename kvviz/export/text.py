# SPDX-License-Identifier: Apache-2.0
"""Rich renderables of a frame: the headless view (`--print`, `.txt` exports).

Plain objects, no widget code: tests render them into ``Console(width=N, color_system=None)``
and compare text.
"""

from __future__ import annotations

import io
import re
from typing import TYPE_CHECKING

from rich.console import Console, Group
from rich.segment import Segment
from rich.style import Style
from rich.styled import Styled
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from kvcore.events import BlockEvicted

from ..model.designs import design_of
from ..model.free_queue import free_page_count, next_victim, place_text, queue_position, queue_text
from ..model.policy_words import key_fields, key_phrase, key_value, words_for
from ..model.view import heap_name, key_text

if TYPE_CHECKING:  # pragma: no cover
    from ..model.session import Frame, Session

STATE_STYLE = {"free": "dim", "owned": "yellow", "cached": "cyan", "evictable": "magenta"}
MAX_TREE_NODES = 400
#: Tokens spelled out in one label; a node of a 65,536-token page or an allocation of a
#: million tokens is abbreviated (``… +N more``), so a text export stays readable and small.
MAX_LABEL_TOKENS = 24
#: Pages drawn in the grid and in one block table; the rest are counted, not drawn.
MAX_GRID_PAGES = 4096
MAX_BLOCK_TABLE_PAGES = 64

#: What the page grid's cells and the block tables' marks mean (the grid's vocabulary is
#: the design's: free, owned, cached, evictable).
PAGE_LEGEND = ("pages: . free · r1 owned by allocation r1 (unpublished) · C2 cached, ref 2 · "
               "E evictable (cached, ref 0) · + taken, - freed, ! evicted in this step")
BLOCK_TABLE_LEGEND = "block table: 4 published · 4* published, shared with another allocation · (4) owned (unpublished)"


def trie_tree(frame: "Frame", session: "Session") -> Tree | Text:
    """The trie as a Rich tree: tokens, page, ref and last access; changes marked.

    Siblings in creation order, depth first, as the UI's trie view draws them, so a node is
    found in the same place in ``--print`` output and on screen (and the first
    ``MAX_TREE_NODES`` shown are the same ones)."""
    snap = frame.snapshot
    design = design_of(snap)
    other = STRUCTURE_SECTIONS.get(design.views[0])
    if other is not None:  # the design's own view of what is cached (a hash cache's blocks)
        return other(frame, session)
    if not design.tree:
        return Text(design.clause("no_structure"), style="dim")
    diff = frame.diff
    added, touched = set(diff.nodes_added), set(diff.nodes_touched)
    root = Tree(Text("root", style="bold"))
    # Pre-order with an explicit stack (a chain of thousands of pages must not recurse):
    # children pushed last-first so the first-created child is drawn first.
    stack = [(child, root) for child in reversed(snap.children(0))]
    shown = 0
    show_key = not words_for(snap).lru  # lru's key is t<last_access> and the order of creation
    while stack:
        node_id, parent = stack.pop()
        shown += 1
        if shown > MAX_TREE_NODES:
            root.add(Text(f"... {len(snap.nodes) - 1 - MAX_TREE_NODES} more nodes", style="dim"))
            break
        n = snap.node(node_id)
        mark = " +new" if node_id in added else " *touched" if node_id in touched else ""
        state = "cached" if n.ref else "evictable"
        style = "green" if node_id in added else "blue" if node_id in touched else (
            "cyan" if n.ref else "magenta")
        key = f" key {key_text(snap, n)}" if show_key else ""
        label = Text(f"[{session.vocab.label_tokens(n.tokens, limit=MAX_LABEL_TOKENS)}] page {n.page} "
                     f"ref {n.ref} t{n.last_access}{key} ({state}){mark}", style=style)
        branch = parent.add(label)
        stack.extend((child, branch) for child in reversed(snap.children(node_id)))
    evictions = frame.evictions
    if evictions:
        for e in evictions:
            root.add(Text(f"x evicted node {e.node} [{session.vocab.label_tokens(e.tokens, limit=MAX_LABEL_TOKENS)}] "
                          f"page {e.page} (key {key_phrase(snap, e.key)})", style="red"))
    elif diff.nodes_evicted:  # a backend without events: the diff still knows
        root.add(Text(f"x evicted nodes {', '.join(map(str, diff.nodes_evicted))} "
                      f"(pages {', '.join(map(str, diff.pages_evicted))})", style="red"))
    return TreeLines(root)


class TreeLines:
    """A Rich :class:`~rich.tree.Tree` of one-style labels drawn as Rich draws it (the same
    guides, wrapping and styles), line by line without Rich's per-node rendering.

    Rich renders each of a 400-node trie's labels through its whole pipeline (~0.3 s a step
    at 2,048 pages); a label of plain single-cell text is wrapped here as Rich's
    ``divide_line`` wraps it. Any other label (wide characters, tabs, a narrow column) is
    handed to Rich, so the output never differs. ``tree`` is the Rich tree."""

    GUIDE_WIDTH = 4
    MIN_WIDTH = 8  # narrower label columns go through Rich (its edge cases are its own)

    def __init__(self, tree: Tree):
        self.tree = tree

    def __rich_console__(self, console, options):
        tree = self.tree
        if tree.hide_root or options.justify is not None or options.legacy_windows:
            yield tree  # outside the one shape drawn here
            return
        guides = Tree.ASCII_GUIDES if options.ascii_only else Tree.TREE_GUIDES[0]
        guide_style = console.get_style(tree.guide_style, default="") or Style.null()
        if guide_style.bold or guide_style.underline2:
            yield tree
            return
        base = console.get_style(tree.style)
        guide = list(Segment.apply_style([Segment(g, guide_style) for g in guides], base.background_style,
                                         post_style=Style(bold=False, underline2=False)))
        space, cont, fork, end = (g.text for g in guide)
        prefix_style = guide[0].style  # every guide's (one segment per line's guides, not one per level)
        line = Segment.line()
        # (node, its depth, prefix of its first line, prefix of its other lines and its children's)
        stack = [(tree, 0, "", "")]
        while stack:
            node, depth, first, rest = stack.pop()
            width = options.max_width - self.GUIDE_WIDTH * depth
            for number, segments in enumerate(self._label_lines(console, options, node, base, width)):
                prefix = first if number == 0 else rest
                if prefix:
                    yield Segment(prefix, prefix_style)
                yield from segments
                yield line
            if node.expanded and node.children:
                last = len(node.children) - 1
                stack.extend((child, depth + 1, rest + (end if i == last else fork), rest + (space if i == last else cont))
                             for i, child in reversed(list(enumerate(node.children))))

    def _label_lines(self, console, options, node, base, width):
        label = node.label
        style = base + console.get_style(node.style)
        if (isinstance(label, Text) and not label.spans and width >= self.MIN_WIDTH and not label.end.strip("\n")
                and label.justify in (None, "default") and label.overflow in (None, "fold") and not label.no_wrap
                and _single_cells(label.plain)):
            text = label.plain
            seg_style = style + console.get_style(label.style)
            return [[Segment(piece, seg_style)] for piece in _wrapped(text, width)]
        return console.render_lines(Styled(label, style), options.update(width=width, highlight=False, height=None),
                                    pad=False)


def _single_cells(text: str) -> bool:
    """Every character one cell wide and printable (ASCII and the ellipsis labels use)."""
    return text.replace("…", "").isascii() and text.isprintable()


def _wrapped(text: str, width: int) -> list[str]:
    """``text`` (single-cell characters) wrapped into lines of at most ``width``, as Rich's
    ``Text.wrap`` wraps it: ``rich._wrap.divide_line`` (words keep their trailing spaces,
    a word longer than a line is folded), then each line's trailing spaces past ``width`` cut."""
    breaks = []
    offset = 0
    for match in _WORD.finditer(text):
        start, word = match.start(), match.group()
        length = len(word.rstrip())
        if width - offset >= length:
            offset += len(word)
        elif length > width:
            chunks = [word[i:i + width] for i in range(0, len(word), width)]
            for number, chunk in enumerate(chunks):
                if start:
                    breaks.append(start)
                if number == len(chunks) - 1:
                    offset = len(chunk)
                else:
                    start += len(chunk)
        elif offset and start:
            breaks.append(start)
            offset = len(word)
    pieces = [text[a:b] for a, b in zip([0, *breaks], [*breaks, len(text)])]
    return [piece if len(piece) <= width else piece[:width] + piece[width:].rstrip() for piece in pieces]


_WORD = re.compile(r"\s*\S+\s*")


#: Hex digits of a block key shown (the full key is 64; 8 tell a scenario's blocks apart).
KEY_DIGITS = 8


def block_lines(snap, limit: int = MAX_TREE_NODES) -> list[tuple[object, str, str]]:
    """A hash cache's cached blocks as the exports list them, the first ``limit``:
    ``(block, text, state)``, in caching order. ``text`` has the block's page, ref, key and parent key (``root`` for a
    first block), where it waits in the free queue, and what makes it special: a duplicate
    (lookups use the copy cached first) or unreachable (its chain broke above it). ``state``
    is ``cached``, ``evictable`` or ``unreachable``. The exports share it, so they agree."""
    first_copy: dict[str, int] = {}
    for b in snap.blocks:
        first_copy.setdefault(b.key, b.page)
    out = []
    for b in snap.blocks[:limit]:
        ref = snap.pages[b.page].ref
        parent = "root" if b.parent is None else b.parent[:KEY_DIGITS]
        where = "" if ref else f", queued {place_text(queue_position(snap, b.page), len(snap.free))}"
        copy = "" if first_copy[b.key] == b.page else f", a duplicate: lookups use page {first_copy[b.key]}"
        state = "evictable" if not ref else "cached"
        reach = ""
        if not b.reachable:
            state = "unreachable"
            reach = ", UNREACHABLE: an earlier block of its chain is not cached, no acquire can match it"
        out.append((b, f"page {b.page} ref {ref} key {b.key[:KEY_DIGITS]} after {parent}{where}{copy}{reach}", state))
    return out


def hash_blocks(frame: "Frame", session: "Session") -> Text:
    """A hash cache's blocks, one line each (:func:`block_lines`), new ones marked, and the
    blocks this step evicted lazily (their pages taken from the free queue's head)."""
    snap = frame.snapshot
    added = set(frame.diff.nodes_added)
    text = Text("blocks (vLLM's hash map: chained keys, no tree)", style="bold")
    if not snap.blocks:
        text.append("\n  (none cached)", style="dim")
    for b, line, state in block_lines(snap):
        tokens = session.vocab.label_tokens(b.tokens, limit=MAX_LABEL_TOKENS)
        style = "green" if b.id in added else "red" if state == "unreachable" else STATE_STYLE[state]
        text.append(f"\n  block {b.id} [{tokens}] {line} ({state}){' +new' if b.id in added else ''}", style=style)
    if len(snap.blocks) > MAX_TREE_NODES:
        text.append(f"\n  ... {len(snap.blocks) - MAX_TREE_NODES} more blocks", style="dim")
    for e in (e for e in frame.events if isinstance(e, BlockEvicted)):
        still = "; its key is still cached on another page" if e.still_cached else ""
        text.append(f"\n  x evicted block {e.block} [{session.vocab.label_tokens(e.tokens, limit=MAX_LABEL_TOKENS)}] "
                    f"page {e.page} (lazily: its page was taken from the free queue){still}", style="red")
    return text


def free_queue_line(snap) -> Text:
    """A hash cache's free queue, head first (``*``: the page holds a cached block, which
    leaves when the page is taken), and the next block lazy eviction takes."""
    victim = next_victim(snap)
    then = (f"; next evicted: block {victim.id} on page {victim.page}, when an acquire takes that far" if victim
            else "; no queued page holds a cached block")
    return Text(f"free queue (head first, * holds a cached block): {queue_text(snap)}{then}")


class PageGrid:
    """One cell per page: ``.`` free, owner name for an unpublished tail, ``C<ref>`` cached
    and referenced, ``E`` evictable; ``+`` taken, ``-`` freed, ``!`` evicted in this step.
    As many columns as the console width allows."""

    def __init__(self, frame: "Frame"):
        self.frame = frame

    def cells(self) -> list[Text]:
        snap = self.frame.snapshot
        diff = self.frame.diff
        taken, freed, evicted = set(diff.pages_taken), set(diff.pages_freed), set(diff.pages_evicted)
        alloc_names = {a.id: a.label for a in snap.allocations}
        digits = len(str(max(snap.page_count - 1, 0)))
        out = []
        for info in snap.pages[:MAX_GRID_PAGES]:
            if info.state == "cached":
                state = "cached" if info.ref else "evictable"
                body = f"C{info.ref}" if info.ref else "E"
            elif info.state == "owned":
                state, body = "owned", alloc_names.get(info.owner, "?")[:3]
            else:
                state, body = "free", "."
            mark = "!" if info.page in evicted else "+" if info.page in taken else "-" if info.page in freed else " "
            out.append(Text(f"{info.page:>{digits}}:{body:<3}{mark}", style=STATE_STYLE.get(state, "red")))
        return out

    def rows(self) -> list[tuple[str, str]]:
        """Each drawn page's cell as ``(text, state)``, pool order: :meth:`cells` without a
        Rich object per cell (a 2,048-page grid printed at every step of a long timeline)."""
        snap = self.frame.snapshot
        diff = self.frame.diff
        taken, freed, evicted = set(diff.pages_taken), set(diff.pages_freed), set(diff.pages_evicted)
        alloc_names = {a.id: a.label for a in snap.allocations}
        digits = len(str(max(snap.page_count - 1, 0)))
        out = []
        for info in snap.pages[:MAX_GRID_PAGES]:
            page = info.page
            if info.state == "cached":
                state = "cached" if info.ref else "evictable"
                body = f"C{info.ref}" if info.ref else "E"
            elif info.state == "owned":
                state, body = "owned", alloc_names.get(info.owner, "?")[:3]
            else:
                state, body = "free", "."
            mark = "!" if page in evicted else "+" if page in taken else "-" if page in freed else " "
            out.append((f"{page:>{digits}}:{body:<3}{mark}", state))
        return out

    def __rich_console__(self, console, options):
        # The lines a ``Table.grid(padding=(0, 1))`` of the cells draws (each column as wide
        # as its widest cell, cells left-aligned, one space between columns, a short last
        # row padded out), built as strings with one segment per run of equally styled
        # text: Rich measuring and wrapping 2,048 Text cells cost ~40 ms a step.
        cells = self.rows()
        width = max((len(text) for text, _ in cells), default=1) + 1
        columns = max(1, min(32, options.max_width // width))
        widths = [0] * min(columns, len(cells))  # the table has as many columns as its first row
        for i, (text, _) in enumerate(cells):
            widths[i % columns] = max(widths[i % columns], len(text))
        styles = {state: console.get_style(STATE_STYLE.get(state, "red")) for state in {s for _, s in cells}}
        line = Segment.line()
        for start in range(0, len(cells), columns):
            run_style, run = None, []
            segments = []
            for column, width in enumerate(widths):
                index = start + column
                if index < len(cells):
                    text, state = cells[index]
                    style = styles[state]
                else:  # the short last row: the table pads its empty cells
                    text, style = "", None
                pieces = ((" ", None),) if column else ()
                for piece, piece_style in (*pieces, (text, style), (" " * (width - len(text)), style)):
                    if not piece:
                        continue
                    if piece_style is not run_style and run:
                        segments.append(Segment("".join(run), run_style))
                        run = []
                    run_style = piece_style
                    run.append(piece)
            if run:
                segments.append(Segment("".join(run), run_style))
            yield from segments
            yield line
        hidden = len(self.frame.snapshot.pages) - len(cells)
        if hidden > 0:
            yield Text(f"... {hidden} more pages", style="dim")


def page_grid(frame: "Frame") -> PageGrid:
    """The page pool as a grid renderable."""
    return PageGrid(frame)


def allocations_table(frame: "Frame", session: "Session") -> Table:
    """Live allocations: tokens, block table (published pages marked), hit length."""
    snap = frame.snapshot
    table = Table(title="allocations", title_justify="left", show_edge=False, pad_edge=False)
    for col in ("name", "tokens", "block table", "published", "hit"):
        table.add_column(col)
    shared = {}
    for a in snap.allocations:
        for p in a.pages[: a.published]:
            shared[p] = shared.get(p, 0) + 1
    for a in snap.allocations:
        cells = []
        for i, p in enumerate(a.pages[:MAX_BLOCK_TABLE_PAGES]):
            cells.append(f"{p}{'*' if shared.get(p, 0) > 1 else ''}" if i < a.published else f"({p})")
        if len(a.pages) > MAX_BLOCK_TABLE_PAGES:
            cells.append(f"… +{len(a.pages) - MAX_BLOCK_TABLE_PAGES} more")
        toks = session.vocab.label_tokens(a.tokens, limit=MAX_LABEL_TOKENS)
        table.add_row(a.label, toks if len(toks) <= 40 else toks[:37] + "...", " ".join(cells), str(a.published),
                      str(a.hit_tokens))
    return table


def heap_list(frame: "Frame", session: "Session", limit: int = 16) -> Text:
    """The eviction heap in array order, keys under the snapshot's policy ((last_access, seq)
    under lru, named in the heading otherwise); the next victim first."""
    snap = frame.snapshot
    design = design_of(snap)
    other = ORDER_SECTIONS.get(design.views[1])
    if other is not None:  # the design's own eviction order (a hash cache's free queue)
        return other(snap)
    if not design.tree:
        return Text("")
    if not snap.heap:
        return Text(f"{heap_name(snap)}: empty (no unreferenced leaves)", style="dim")
    parts = []
    for i, node_id in enumerate(snap.heap[:limit]):
        n = snap.node(node_id)
        parts.append(f"{i}: node {node_id} page {n.page} key {key_value(snap.node_key(n))}"
                     f"{'  <- next victim' if i == 0 else ''}")
    if len(snap.heap) > limit:
        parts.append(f"... {len(snap.heap) - limit} more")
    order = "array order" if words_for(snap).lru else f"array order, key {key_fields(snap)}"
    return Text(f"{heap_name(snap)} ({order}):\n  " + "\n  ".join(parts))


STRUCTURE_SECTIONS = {"blocks": hash_blocks}
"""Each design view of what is cached (:attr:`kvviz.model.designs.Design.views`, first) other
than the trie, :func:`trie_tree` draws: a new design's view is one entry."""

ORDER_SECTIONS = {"queue": free_queue_line}
"""Each design view of the eviction order (:attr:`~kvviz.model.designs.Design.views`, second)
other than the heap, :func:`heap_list` draws."""


def legends_text() -> Text:
    """The page grid's and the block tables' legends: printed once above a whole timeline
    (``--print``), since every step's grid and tables use the same marks."""
    return Text(f"{PAGE_LEGEND}\n{BLOCK_TABLE_LEGEND}", style="dim")


def frame_renderable(frame: "Frame", session: "Session", legends: bool = True, total: int | None = None) -> Group:
    """Everything about one step: header, narration, trie, pool, allocations, heap, checks.
    ``legends=False`` leaves out the grid's and the block tables' legends (a whole timeline
    prints them once, :func:`legends_text`). ``total``: the last step's index in the header
    (default the session's last; a timeline printed while it runs knows it from the script)."""
    snap = frame.snapshot
    total = len(session) - 1 if total is None else total
    head = Text(f"step {frame.index}/{total}", style="bold")
    if frame.op is not None:
        head.append(f"  {frame.op.text}", style="bold")
    if frame.error is not None:
        head.append(f"  FAILED ({frame.error.kind})", style="bold red")
    parts: list = [head]
    if frame.story:
        parts.append(Text(frame.story, style="italic"))
    parts.append(Text(frame.explanation))
    design = design_of(snap)
    queue = f" | {design.nouns.free} {snap.free_count}" if design.lazy else ""  # free and cached overlap
    parts.append(Text(f"clock {snap.clock} | free {free_page_count(snap)} | cached {snap.cached_count} "
                      f"(evictable {snap.evictable_count}) | owned {snap.owned_count}{queue} | "
                      f"pages {snap.page_count} x {snap.tokens_per_page} tokens", style="dim"))
    parts.append(trie_tree(frame, session))
    parts.append(page_grid(frame))
    if legends:
        parts.append(Text(PAGE_LEGEND, style="dim"))
    if snap.allocations:
        parts.append(allocations_table(frame, session))
        if legends:
            parts.append(Text(BLOCK_TABLE_LEGEND, style="dim"))
    heap = heap_list(frame, session)
    if heap.plain:
        parts.append(heap)
    for v in frame.violations:
        parts.append(Text(f"VIOLATION {v}", style="bold red"))
    for r in frame.expects:
        # As written: a scoped line reads "[trie base] expect hit r1 0", never "expect [trie base] expect ...".
        parts.append(Text(f"{r.expect.text or 'expect'}: {r.message}",
                          style="green" if r.ok else "bold red"))
    return Group(*parts)


def frame_text(frame: "Frame", session: "Session", width: int = 100) -> str:
    """The frame as plain text (no colour)."""
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None, force_terminal=False, legacy_windows=False)
    console.print(frame_renderable(frame, session))
    return buf.getvalue()
