"""Rich renderables of a frame: the headless view (`--print`, `.txt` exports).

Plain objects, no widget code: tests render them into ``Console(width=N, color_system=None)``
and compare text.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

if TYPE_CHECKING:  # pragma: no cover
    from ..model.session import Frame, Session

STATE_STYLE = {"free": "dim", "owned": "yellow", "cached": "cyan", "evictable": "magenta"}
MAX_TREE_NODES = 400


def trie_tree(frame: "Frame", session: "Session") -> Tree | Text:
    """The trie as a Rich tree: tokens, page, ref and last access; changes marked."""
    snap = frame.snapshot
    if snap.kind == "base":
        return Text("(base cache: no trie, nothing is shared)", style="dim")
    diff = frame.diff
    added, touched = set(diff.nodes_added), set(diff.nodes_touched)
    root = Tree(Text("root", style="bold"))
    stack = [(0, root)]
    shown = 0
    while stack:
        node_id, branch = stack.pop()
        for child_id in reversed(snap.children(node_id)):
            n = snap.node(child_id)
            shown += 1
            if shown > MAX_TREE_NODES:
                branch.add(Text(f"... {len(snap.nodes) - 1 - MAX_TREE_NODES} more nodes", style="dim"))
                stack.clear()
                break
            mark = " +new" if child_id in added else " *touched" if child_id in touched else ""
            state = "held" if n.ref else "evictable"
            style = "green" if child_id in added else "blue" if child_id in touched else (
                "cyan" if n.ref else "magenta")
            label = Text(f"[{session.label_tokens(n.tokens)}] page {n.page} ref {n.ref} "
                         f"t{n.last_access} ({state}){mark}", style=style)
            stack.append((child_id, branch.add(label)))
    evictions = frame.evictions
    if evictions:
        for e in evictions:
            root.add(Text(f"x evicted node {e.node} [{session.label_tokens(e.tokens)}] page {e.page} "
                          f"(key {e.key})", style="red"))
    elif diff.nodes_evicted:  # a backend without events: the diff still knows
        root.add(Text(f"x evicted nodes {', '.join(map(str, diff.nodes_evicted))} "
                      f"(pages {', '.join(map(str, diff.pages_evicted))})", style="red"))
    return root


class PageGrid:
    """One cell per page: ``.`` free, owner name for an unpublished tail, ``C<ref>`` cached
    and referenced, ``E`` evictable; ``+`` taken, ``-`` freed, ``!`` evicted in this step.
    As many columns as the console width allows."""

    CELL = 9  # "123:abc+" plus a space

    def __init__(self, frame: "Frame"):
        self.frame = frame

    def cells(self) -> list[Text]:
        snap = self.frame.snapshot
        diff = self.frame.diff
        taken, freed, evicted = set(diff.pages_taken), set(diff.pages_freed), set(diff.pages_evicted)
        alloc_names = {a.id: a.label for a in snap.allocations}
        digits = len(str(max(snap.page_count - 1, 0)))
        out = []
        for info in snap.pages:
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

    def __rich_console__(self, console, options):
        cells = self.cells()
        width = max((len(c) for c in cells), default=1) + 1
        columns = max(1, min(32, options.max_width // width))
        table = Table.grid(padding=(0, 1))
        for start in range(0, len(cells), columns):
            table.add_row(*cells[start:start + columns])
        yield table


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
        for i, p in enumerate(a.pages):
            cells.append(f"{p}{'*' if shared.get(p, 0) > 1 else ''}" if i < a.published else f"({p})")
        toks = session.label_tokens(a.tokens)
        table.add_row(a.label, toks if len(toks) <= 40 else toks[:37] + "...", " ".join(cells), str(a.published),
                      str(a.hit_tokens))
    return table


def heap_list(frame: "Frame", session: "Session", limit: int = 16) -> Text:
    """The eviction heap in array order, keys (last_access, seq); the next victim first."""
    snap = frame.snapshot
    if snap.kind == "base":
        return Text("")
    if not snap.heap:
        return Text("LRU heap: empty (no unreferenced leaves)", style="dim")
    parts = []
    for i, node_id in enumerate(snap.heap[:limit]):
        n = snap.node(node_id)
        parts.append(f"{i}: node {node_id} page {n.page} key ({n.last_access}, {n.seq})"
                     f"{'  <- next victim' if i == 0 else ''}")
    if len(snap.heap) > limit:
        parts.append(f"... {len(snap.heap) - limit} more")
    return Text("LRU heap (array order):\n  " + "\n  ".join(parts))


def frame_renderable(frame: "Frame", session: "Session") -> Group:
    """Everything about one step: header, narration, trie, pool, allocations, heap, checks."""
    snap = frame.snapshot
    total = len(session) - 1
    head = Text(f"step {frame.index}/{total}", style="bold")
    if frame.op is not None:
        head.append(f"  {frame.op.text}", style="bold")
    if frame.error is not None:
        head.append(f"  FAILED ({frame.error.kind})", style="bold red")
    parts: list = [head]
    if frame.story:
        parts.append(Text(frame.story, style="italic"))
    parts.append(Text(frame.explanation))
    parts.append(Text(f"clock {snap.clock} | free {snap.free_count} | cached {snap.cached_count} "
                      f"(evictable {snap.evictable_count}) | owned {snap.owned_count} | "
                      f"pages {snap.page_count} x {snap.tokens_per_page} tokens", style="dim"))
    parts.append(trie_tree(frame, session))
    parts.append(page_grid(frame))
    if snap.allocations:
        parts.append(allocations_table(frame, session))
    heap = heap_list(frame, session)
    if heap.plain:
        parts.append(heap)
    for v in frame.violations:
        parts.append(Text(f"VIOLATION {v}", style="bold red"))
    for r in frame.expects:
        parts.append(Text(f"expect {r.expect.text.removeprefix('expect ').strip()}: {r.message}",
                          style="green" if r.ok else "bold red"))
    return Group(*parts)


def frame_text(frame: "Frame", session: "Session", width: int = 100) -> str:
    """The frame as plain text (no colour)."""
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None, force_terminal=False, legacy_windows=False)
    console.print(frame_renderable(frame, session))
    return buf.getvalue()
