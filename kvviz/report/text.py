# SPDX-License-Identifier: Apache-2.0
"""Rich renderables of a frame: the headless view (`--print`, `.txt` exports).

Plain objects, no widget code: tests render them into ``Console(width=N, color_system=None)``
and compare text.
"""

from __future__ import annotations

import io
import re
import weakref
from bisect import bisect_left
from operator import attrgetter
from typing import TYPE_CHECKING

from rich.cells import cell_len, set_cell_size
from rich.console import Console, Group
from rich.segment import Segment
from rich.style import Style
from rich.styled import Styled
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from kvcore.events import BlockEvicted

from kvviz.core.designs import design_of
from kvviz.core.free_queue import free_page_count, next_victim, place_text, queue_text
from kvviz.core.policy_words import key_fields, key_phrase, key_value, words_for
from kvviz.core.view import heap_name, node_key_text

if TYPE_CHECKING:  # pragma: no cover
    from kvviz.core.session import Frame, Session

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
    # Branches as (label, style, children): plain text needs no Rich object per node, and
    # TreeLines makes the Rich tree only when Rich draws it.
    root: tuple = ("root", "bold", [])
    # Pre-order with an explicit stack (a chain of thousands of pages must not recurse):
    # children pushed last-first so the first-created child is drawn first.
    shown = 0
    show_key = not words_for(snap).lru  # lru's key is t<last_access> and the order of creation
    vocab = session.vocab
    labels = _token_labels(vocab)
    children_of = _children_index(snap)
    stack = [(child, root) for child in reversed(children_of.get(0, ()))]
    while stack:
        node_id, parent = stack.pop()
        shown += 1
        if shown > MAX_TREE_NODES:
            root[2].append((f"... {len(snap.nodes) - 1 - MAX_TREE_NODES} more nodes", "dim", []))
            break
        n = snap.node(node_id)
        mark = " +new" if node_id in added else " *touched" if node_id in touched else ""
        state = "cached" if n.ref else "evictable"
        style = "green" if node_id in added else "blue" if node_id in touched else (
            "cyan" if n.ref else "magenta")
        key = f" key {node_key_text(snap, n)}" if show_key else ""
        tokens = labels.get(n.tokens)
        if tokens is None:
            tokens = labels[n.tokens] = vocab.label_tokens(n.tokens, limit=MAX_LABEL_TOKENS)
        branch = (f"[{tokens}] page {n.page} ref {n.ref} t{n.last_access}{key} ({state}){mark}", style, [])
        parent[2].append(branch)
        kids = children_of.get(node_id)
        if kids:
            stack.extend((child, branch) for child in reversed(kids))
    evictions = frame.evictions
    if evictions:
        for e in evictions:
            root[2].append((f"x evicted node {e.node} [{vocab.label_tokens(e.tokens, limit=MAX_LABEL_TOKENS)}] "
                            f"page {e.page} (key {key_phrase(snap, e.key)})", "red", []))
    elif diff.nodes_evicted:  # a backend without events: the diff still knows
        root[2].append((f"x evicted nodes {', '.join(map(str, diff.nodes_evicted))} "
                        f"(pages {', '.join(map(str, diff.pages_evicted))})", "red", []))
    return TreeLines(branches=root)


def _rich_tree(branches: tuple) -> Tree:
    """The Rich tree of ``(label, style, children)`` branches (iterative: chains run deep)."""
    text, style, children = branches
    root = Tree(Text(text, style=style))
    stack = [(child, root) for child in reversed(children)]
    while stack:
        (text, style, children), parent = stack.pop()
        branch = parent.add(Text(text, style=style))
        stack.extend((child, branch) for child in reversed(children))
    return root


def _token_labels(vocab) -> dict[tuple[int, ...], str]:
    """``tokens -> vocab.label_tokens(tokens, limit=MAX_LABEL_TOKENS)`` kept for ``vocab``: a
    trie's nodes keep their tokens, and a printed timeline labels each at every step."""
    # A vocabulary only learns spellings (the UI's command bar may teach it one): the labels
    # kept are those of the spellings it had, dropped once it has more.
    learned = len(vocab._spellings)
    kept = _TOKEN_LABELS.get(vocab)
    if kept is None or kept[0] != learned or len(kept[1]) >= _MAX_WRAPPED:
        kept = _TOKEN_LABELS[vocab] = (learned, {})
    return kept[1]


def _children_index(snap) -> dict[int, list[int]]:
    """Node id -> its children's ids in creation order, as ``snap.children`` lists them. When
    ``snap`` follows the snapshot indexed last (the cache's account of what changed), the
    index is that one's with the nodes gone and new moved: the structure changes by the
    nodes an op created or evicted, not by the trie's size. Treat as read-only."""
    memo = _LAST_CHILDREN
    changes = snap._changes
    last = memo.get("snapshot")
    before = last() if last is not None else None
    if changes is None or before is None or changes.before() is not before:
        index: dict[int, list[int]] = {}
        for n in snap.nodes:
            if n.parent is not None:
                index.setdefault(n.parent, []).append(n.id)
    else:
        index = dict(memo["index"])  # lists copied when changed: the last index stays right
        for node_id in changes.nodes:
            old, new = _node_by_id(before.nodes, node_id), _node_by_id(snap.nodes, node_id)
            if (old is None) == (new is None) and (old is None or old.parent == new.parent):
                continue
            if old is not None and old.parent is not None:
                index[old.parent] = [c for c in index.get(old.parent, ()) if c != node_id]
            if new is not None and new.parent is not None:
                index[new.parent] = [*index.get(new.parent, ()), node_id]  # ids grow: created last
    _LAST_CHILDREN.update(snapshot=weakref.ref(snap), index=index)
    return index


_LAST_CHILDREN: dict = {}


def _node_by_id(nodes, node_id: int):
    i = bisect_left(nodes, node_id, key=_node_id)
    return nodes[i] if i < len(nodes) and nodes[i].id == node_id else None


_node_id = attrgetter("id")


_TOKEN_LABELS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class TreeLines:
    """A Rich :class:`~rich.tree.Tree` of one-style labels drawn as Rich draws it (the same
    guides, wrapping and styles), line by line without Rich's per-node rendering.

    Rich renders each of a 400-node trie's labels through its whole pipeline (~0.3 s a step
    at 2,048 pages); a label of plain single-cell text is wrapped here as Rich's
    ``divide_line`` wraps it. Any other label (wide characters, tabs, a narrow column) is
    handed to Rich, so the output never differs. ``tree`` is the Rich tree."""

    GUIDE_WIDTH = 4
    MIN_WIDTH = 8  # narrower label columns go through Rich (its edge cases are its own)

    def __init__(self, tree: Tree | None = None, *, branches: tuple | None = None):
        """``tree``: a Rich tree; or ``branches``, ``(label, style, children)`` nested, the
        tree made from them when first needed (plain text never needs it)."""
        self._tree = tree
        self.branches = branches

    @property
    def tree(self) -> Tree:
        """The Rich tree drawn."""
        if self._tree is None:
            self._tree = _rich_tree(self.branches)
        return self._tree

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
    """:func:`_wrap` memoised: a trie's labels come back at every step, and wrapping them was
    most of a printed step once Rich was out of the way."""
    if len(text) <= width:
        return [text]  # no word passes the edge: one line, as it is
    key = (text, width)
    pieces = _WRAPPED.get(key)
    if pieces is None:
        if len(_WRAPPED) >= _MAX_WRAPPED:
            _WRAPPED.clear()
        pieces = _WRAPPED[key] = tuple(_wrap(text, width))
    return list(pieces)


_WRAPPED: dict[tuple[str, int], tuple[str, ...]] = {}
_MAX_WRAPPED = 1 << 16


def _wrap(text: str, width: int) -> list[str]:
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
        where = "" if ref else f", queued {place_text(snap.free_position(b.page), snap.free_count)}"
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


class PageGridText:
    """One cell per page: ``.`` free, owner name for an unpublished tail, ``C<ref>`` cached
    and referenced, ``E`` evictable; ``+`` taken, ``-`` freed, ``!`` evicted in this step.
    As many columns as the console width allows."""

    def __init__(self, frame: "Frame"):
        self.frame = frame

    def cells(self) -> list[Text]:
        """Each drawn page's cell as Rich text styled by its state, pool order."""
        snap = self.frame.snapshot
        diff = self.frame.diff
        cell = self._cell_maker(snap, set(diff.pages_taken), set(diff.pages_freed), set(diff.pages_evicted))
        out = []
        for info in snap.pages[:MAX_GRID_PAGES]:
            text, state = cell(info)
            out.append(Text(text, style=STATE_STYLE.get(state, "red")))
        return out

    def rows(self) -> list[tuple[str, str]]:
        """Each drawn page's cell as ``(text, state)``, pool order: :meth:`cells` without a
        Rich object per cell (a 2,048-page grid printed at every step of a long timeline).

        When the frame's snapshot follows the one drawn last (the cache's account of what
        changed, :class:`kvcore.snapshot.SnapshotChanges`), only the cells of the pages it
        changed and of the pages marked then or now are made again (a test holds them to
        the cells made whole)."""
        snap = self.frame.snapshot
        diff = self.frame.diff
        taken, freed, evicted = set(diff.pages_taken), set(diff.pages_freed), set(diff.pages_evicted)
        marked = taken | freed | evicted
        memo = _LAST_GRID
        changes = snap._changes
        last = memo.get("snapshot")
        if changes is not None and last is not None and changes.before() is last() is not None \
                and memo["page_count"] == snap.page_count:
            out = list(memo["rows"])
            pages = {p for p in (*changes.pages, *memo["marked"], *marked) if p < len(out)}
        else:
            out = [None] * min(len(snap.pages), MAX_GRID_PAGES)
            pages = range(len(out))
        if pages:
            cell = self._cell_maker(snap, taken, freed, evicted)
            page_rows = snap.pages
            for p in pages:
                out[p] = cell(page_rows[p])
        _LAST_GRID.update(snapshot=weakref.ref(snap), rows=out, marked=marked, page_count=snap.page_count)
        return out

    @staticmethod
    def _cell_maker(snap, taken: set, freed: set, evicted: set):
        alloc_names = {a.id: a.label for a in snap.allocations}
        digits = len(str(max(snap.page_count - 1, 0)))

        def cell(info) -> tuple[str, str]:
            page = info.page
            if info.state == "cached":
                state = "cached" if info.ref else "evictable"
                body = f"C{info.ref}" if info.ref else "E"
            elif info.state == "owned":
                state, body = "owned", alloc_names.get(info.owner, "?")[:3]
            else:
                state, body = "free", "."
            mark = "!" if page in evicted else "+" if page in taken else "-" if page in freed else " "
            return f"{page:>{digits}}:{body:<3}{mark}", state
        return cell

    @staticmethod
    def _columns(cells: list[tuple[str, str]], max_width: int) -> tuple[int, list[int]]:
        """How many cells a row holds at ``max_width``, and each column's width."""
        lengths = [len(text) for text, _ in cells]
        width = max(lengths, default=1) + 1
        columns = max(1, min(32, max_width // width))
        # the table has as many columns as its first row; each as wide as its widest cell
        widths = [max(lengths[c::columns]) for c in range(min(columns, len(cells)))]
        return columns, widths

    def layout(self, cells: list[tuple[str, str]], max_width: int) -> list[str]:
        """The lines :meth:`__rich_console__` draws, as text: cells left-aligned in their
        column, one space between columns, a short last row padded with empty cells."""
        columns, widths = self._columns(cells, max_width)
        texts = [text for text, _ in cells]
        texts += [""] * (-len(texts) % columns if len(texts) > columns else 0)
        lines = []
        for start in range(0, len(texts), columns):
            lines.append(" ".join([t.ljust(w) for t, w in zip(texts[start:start + columns], widths)]))
        return lines

    def __rich_console__(self, console, options):
        # The lines a ``Table.grid(padding=(0, 1))`` of the cells draws (each column as wide
        # as its widest cell, cells left-aligned, one space between columns, a short last
        # row padded out), built as strings with one segment per run of equally styled
        # text: Rich measuring and wrapping 2,048 Text cells cost ~40 ms a step.
        cells = self.rows()
        columns, widths = self._columns(cells, options.max_width)
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


_LAST_GRID: dict = {}  # the grid drawn last: its snapshot (weakly), cells, marked pages, pool size


def page_grid(frame: "Frame") -> PageGridText:
    """The page pool as a grid renderable."""
    return PageGridText(frame)


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
"""Each design view of what is cached (:attr:`kvviz.core.designs.Design.views`, first) other
than the trie, :func:`trie_tree` draws: a new design's view is one entry."""

ORDER_SECTIONS = {"queue": free_queue_line}
"""Each design view of the eviction order (:attr:`~kvviz.core.designs.Design.views`, second)
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


# -- plain text, without Rich's pipeline -------------------------------------------------------
#
# ``run --print`` of 1,000 steps x 2,048 pages spent most of its time in Rich measuring,
# wrapping and cropping segments it then wrote without any style (stdout a pipe or a file).
# When a console writes no colour, the same text is built here as strings: each Text wrapped
# as Rich wraps it (``_wrapped``), the trie and the grid as their renderables draw them. A
# part this does not know (the allocations table), or text it cannot wrap the same way (wide
# characters, tabs), is rendered by Rich itself, so the output never differs (a test holds
# every demo's every step to Rich's text).


def writes_plain(console) -> bool:
    """True when ``console`` writes no styles at all (no colour system: not a terminal), in
    UTF-8, so :func:`plain_text` gives exactly what ``console.print`` would write."""
    options = console.options
    return (console.color_system is None and not options.ascii_only and not options.legacy_windows
            and options.justify is None and not console.soft_wrap)


def plain_rule(console) -> str:
    """What ``console.rule()`` writes (no title): a line of ``─`` as wide as the console."""
    return "─" * console.width + "\n"


def plain_text(console, renderable) -> str:
    """What ``console.print(renderable)`` writes on a console that :func:`writes_plain`."""
    width = console.width
    parts = renderable.renderables if isinstance(renderable, Group) else [renderable]
    out = []
    for part in parts:
        lines = None
        if isinstance(part, Text):
            lines = _text_lines(part, width)
        elif isinstance(part, TreeLines):
            lines = _tree_lines(console, part)
        elif isinstance(part, PageGridText):
            lines = _grid_lines(part, width)
        if lines is None:
            with console.capture() as capture:
                console.print(part)
            out.append(capture.get())
        else:
            out.append("\n".join(lines) + "\n")
    return "".join(out)


def _text_lines(text: Text, width: int) -> list[str] | None:
    """A Text's lines as Rich prints it at ``width`` (styles dropped), or None when Rich
    might wrap it otherwise."""
    if (width < TreeLines.MIN_WIDTH or text.end != "\n" or text.justify not in (None, "default")
            or text.overflow not in (None, "fold") or text.no_wrap):
        return None
    lines = []
    for line in text.plain.split("\n"):
        if not _single_cells(line):
            return None
        lines.extend(_wrapped(line, width))
    return lines


def _tree_lines(console, part: "TreeLines") -> list[str] | None:
    """The lines :class:`TreeLines` draws on ``console``: a label it wraps itself is wrapped
    here the same way; one it hands to Rich (a narrow column deep in a long chain, wide
    characters) is handed to Rich here too, and its line cropped to the console as ``print``
    crops it."""
    if part.branches is not None:
        root = part.branches
        label_of = _plain_branch
    else:
        tree = part.tree
        if tree.hide_root or _needs_rich(tree, console):
            return None
        root = tree
        label_of = _rich_branch
    options = console.options
    space, cont, fork, end = Tree.TREE_GUIDES[0]
    full = options.max_width
    lines: list[str] = []
    stack = [(root, 0, "", "")]
    while stack:
        node, depth, first, rest = stack.pop()
        found = label_of(node)
        if found is None:
            return None
        text, children = found
        width = full - TreeLines.GUIDE_WIDTH * depth
        pieces = _plain_pieces(text, width)
        if pieces is not None:
            for number, piece in enumerate(pieces):
                lines.append((first if number == 0 else rest) + piece)
        else:
            for number, piece in enumerate(_rich_lines(console, text, width)):
                line = (first if number == 0 else rest) + piece
                lines.append(line if cell_len(line) <= full else set_cell_size(line, full))
        if children:
            last = len(children) - 1
            stack.extend((child, depth + 1, rest + (end if i == last else fork), rest + (space if i == last else cont))
                         for i, child in reversed(list(enumerate(children))))
    return lines


def _plain_pieces(text: str, width: int) -> tuple[str, ...] | None:
    """``text`` wrapped at ``width`` as TreeLines wraps a label itself, or None where it hands
    the label to Rich (narrow, wide characters); memoised with the answer."""
    key = (text, width)
    pieces = _PIECES.get(key, False)
    if pieces is False:
        if len(_PIECES) >= _MAX_WRAPPED:
            _PIECES.clear()
        ok = width >= TreeLines.MIN_WIDTH and _single_cells(text)
        pieces = _PIECES[key] = tuple(_wrapped(text, width)) if ok else None
    return pieces


_PIECES: dict[tuple[str, int], tuple[str, ...] | None] = {}


def _plain_branch(branch: tuple) -> tuple[str, list]:
    return branch[0], branch[2]


def _rich_branch(node: Tree) -> tuple[str, list] | None:
    """A Rich tree node's label text and children, or None when its label is not a Text of
    the defaults (TreeLines' Rich path would draw it otherwise)."""
    label = node.label
    if (not isinstance(label, Text) or label.end != "\n" or label.justify not in (None, "default")
            or label.overflow not in (None, "fold") or label.no_wrap or "\n" in label.plain):
        return None
    return label.plain, (node.children if node.expanded else [])


def _rich_lines(console, text: str, width: int) -> tuple[str, ...]:
    """The lines Rich renders ``Text(text)`` into at ``width`` (TreeLines' Rich path), as
    text; memoised, since deep labels come back at every step."""
    key = (text, width)
    lines = _RICH_LINES.get(key)
    if lines is None:
        if len(_RICH_LINES) >= _MAX_WRAPPED:
            _RICH_LINES.clear()
        rendered = console.render_lines(Text(text), console.options.update(width=width, highlight=False, height=None),
                                        pad=False)
        lines = _RICH_LINES[key] = tuple("".join(segment.text for segment in line) for line in rendered)
    return lines


_RICH_LINES: dict[tuple[str, int], tuple[str, ...]] = {}


def _needs_rich(tree: Tree, console) -> bool:
    """True where :class:`TreeLines` itself hands the whole tree to Rich."""
    guide_style = console.get_style(tree.guide_style, default="") or Style.null()
    return bool(tree.hide_root or guide_style.bold or guide_style.underline2)


def _grid_lines(grid: "PageGridText", width: int) -> list[str] | None:
    """The lines :class:`PageGridText` draws at ``width``."""
    cells = grid.rows()
    lines = grid.layout(cells, width)
    hidden = len(grid.frame.snapshot.pages) - len(cells)
    if hidden > 0:
        more = _text_lines(Text(f"... {hidden} more pages"), width)
        if more is None:
            return None
        lines.extend(more)
    return lines


def frame_text(frame: "Frame", session: "Session", width: int = 100) -> str:
    """The frame as plain text (no colour)."""
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None, force_terminal=False, legacy_windows=False)
    console.print(frame_renderable(frame, session))
    return buf.getvalue()
