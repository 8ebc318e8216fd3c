# SPDX-License-Identifier: Apache-2.0
"""The Markdown export: what a person pastes into a GitHub issue.

A summary, a Mermaid diagram of the trie at the step (GitHub renders it; new nodes green,
touched blue, evicted red) or, for a hash cache, the table of its cached blocks (unreachable
ones marked) and its free queue in order; tables of pages and allocations, and the script.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from kvviz.core.designs import TRIE, design_of
from kvviz.core.free_queue import free_page_count, next_victim, queue_text
from kvviz.core.policy_words import key_fields, key_value, words_for
from kvviz.core.view import heap_name, node_key_text
from kvviz.report.text import block_lines

if TYPE_CHECKING:  # pragma: no cover
    from kvviz.core.session import Frame, Session

MAX_MERMAID_NODES = 200
MAX_PAGE_ROWS = 256
#: Tokens spelled out in one label or cell, pages in one block table: a node of a
#: 65,536-token page or an allocation of a million tokens is abbreviated (``… +N more``),
#: so the report stays a size GitHub renders.
MAX_LABEL_TOKENS = 24
MAX_BLOCK_TABLE_PAGES = 64


def _tokens(session: "Session", tokens) -> str:
    return session.vocab.label_tokens(tuple(tokens), limit=MAX_LABEL_TOKENS)


def _block_table(pages) -> str:
    shown = " ".join(map(str, pages[:MAX_BLOCK_TABLE_PAGES]))
    return shown + (f" … +{len(pages) - MAX_BLOCK_TABLE_PAGES} more" if len(pages) > MAX_BLOCK_TABLE_PAGES else "")


def _esc(text: str) -> str:
    # Mermaid entity codes; a backtick would switch the label to a Markdown string.
    return (text.replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;").replace("|", "#124;")
            .replace("`", "#96;"))


def _cell(text: str) -> str:
    """``text`` safe inside a Markdown table cell: a word's ``|`` must not split the cell and
    a word like ``<s>`` must not become HTML."""
    return text.replace("|", "\\|").replace("<", "&lt;")


def _fence(text: str) -> str:
    """A code fence longer than any run of backticks in ``text``, so the text cannot close it."""
    longest = max((len(run) for run in re.findall("`+", text)), default=0)
    return "`" * max(3, longest + 1)


def mermaid(frame: "Frame", session: "Session") -> str:
    """A Mermaid flowchart of the trie at ``frame``."""
    snap = frame.snapshot
    lines = ["graph TD", '  n0(("root"))']
    added, touched = set(frame.diff.nodes_added), set(frame.diff.nodes_touched)
    shown = 0
    show_key = not words_for(snap).lru  # lru's key is t<last_access> and the order of creation
    for n in snap.nodes:
        if n.parent is None:
            continue
        shown += 1
        if shown > MAX_MERMAID_NODES:
            lines.append(f'  more["... {len(snap.nodes) - 1 - MAX_MERMAID_NODES} more nodes"]')
            break
        label = _esc(_tokens(session, n.tokens))
        key = f" · key {node_key_text(snap, n)}" if show_key else ""
        lines.append(f'  n{n.id}["{label}<br/>page {n.page} · ref {n.ref} · t{n.last_access}{key}"]')
        lines.append(f"  n{n.parent} --> n{n.id}")
    if frame.index > 0 and frame.diff.nodes_evicted:
        before = session.frame(frame.index - 1).snapshot
        for node_id in frame.diff.nodes_evicted:
            n = before.node(node_id)
            if n is None:
                continue
            lines.append(f'  n{n.id}["{_esc(_tokens(session, n.tokens))}<br/>page {n.page} · evicted"]')
            if snap.node(n.parent) is not None or n.parent == 0:
                lines.append(f"  n{n.parent} -.-> n{n.id}")
            lines.append(f"  class n{n.id} evicted")
    lines += [
        "  classDef new fill:#d4f7d4,stroke:#2e7d32",
        "  classDef touched fill:#d6e6ff,stroke:#1565c0",
        "  classDef evicted fill:#ffd6d6,stroke:#c62828,stroke-dasharray: 4 3",
        "  classDef evictable stroke-dasharray: 2 2",
    ]
    for n in snap.nodes:
        if n.id in added:
            lines.append(f"  class n{n.id} new")
        elif n.id in touched:
            lines.append(f"  class n{n.id} touched")
        elif n.parent is not None and n.ref == 0:
            lines.append(f"  class n{n.id} evictable")
    return "\n".join(lines)


def hash_sections(frame: "Frame", session: "Session") -> list[str]:
    """A hash cache's blocks (a table: new, evictable, duplicate and unreachable ones say so),
    the blocks this step evicted, and the free queue in order with the next lazy victim."""
    snap = frame.snapshot
    added = set(frame.diff.nodes_added)
    out = ["## Blocks (vLLM's hash map: chained keys, no tree)", "", "| block | tokens | where | state |",
           "|---|---|---|---|"]
    for b, line, state in block_lines(snap, MAX_MERMAID_NODES):
        mark = "new, " if b.id in added else ""
        state = f"**{state}**" if state == "unreachable" else state
        out.append(f"| {b.id} | {_cell(_tokens(session, b.tokens))} | {_cell(line)} | {mark}{state} |")
    if not snap.blocks:
        out.append("| (none) | | | |")
    if len(snap.blocks) > MAX_MERMAID_NODES:
        out.append(f"| ... | {len(snap.blocks) - MAX_MERMAID_NODES} more | | |")
    if frame.index > 0 and frame.diff.nodes_evicted:
        before = session.frame(frame.index - 1).snapshot
        gone = [before.block(i) for i in frame.diff.nodes_evicted]
        out += ["", "Evicted by this step (lazily: their pages were taken from the free queue's head): " +
                ", ".join(f"block {b.id} [{_cell(_tokens(session, b.tokens))}] on page {b.page}" for b in gone if b)]
    victim = next_victim(snap)
    then = (f"Next evicted: block {victim.id} on page {victim.page}, when an acquire takes that far." if victim
            else "No queued page holds a cached block.")
    out += ["", "## Free queue (head first; * holds a cached block, evicted when its page is taken)", "",
            f"`{queue_text(snap)}`", "", then, ""]
    return out


def _trie_section(frame: "Frame", session: "Session") -> list[str]:
    """The trie as a Mermaid diagram; nothing for a design without one (the base cache)."""
    if not design_of(frame.snapshot).tree:
        return []
    return ["## Trie", "", "```mermaid", mermaid(frame, session), "```", ""]


SECTIONS = {TRIE: _trie_section, "blocks": hash_sections}
"""The report's sections of what is cached, by the design's view of it
(:attr:`kvviz.core.designs.Design.views`, first): a new design's view is one entry."""


def frame_markdown(frame: "Frame", session: "Session", script: str, summary: str) -> str:
    """The whole Markdown report for one step."""
    snap = frame.snapshot
    out = [f"# kvviz report: {session.title or 'scenario'} — step {frame.index} of {len(session) - 1}", "",
           summary, ""]
    if frame.op is not None:
        out += [f"**Op:** `{frame.op.text}`" + (f" — **failed** ({frame.error.kind}): {frame.error.message}"
                                              if frame.error else ""), ""]
    out += [f"**What happened:** {frame.explanation}", ""]
    if frame.story:
        out += [f"> {frame.story}", ""]
    if frame.violations:
        out += ["## Invariant violations", ""] + [f"- {v}" for v in frame.violations] + [""]
    design = design_of(snap)
    queue = f", {design.nouns.free} {snap.free_count}" if design.lazy else ""  # free and cached overlap
    out += [f"Cache: {snap.kind}, {snap.page_count} pages × {snap.tokens_per_page} tokens, clock {snap.clock}; "
            f"free {free_page_count(snap)}, cached {snap.cached_count} (evictable {snap.evictable_count}), "
            f"owned {snap.owned_count}{queue}.", ""]
    out += SECTIONS.get(design.views[0], _trie_section)(frame, session)
    out += ["## Allocations", "", "| name | tokens | block table | published | hit tokens |", "|---|---|---|---|---|"]
    for a in snap.allocations:
        out.append(f"| {_cell(a.label)} | {_cell(_tokens(session, a.tokens))} | {_block_table(a.pages)} | "
                   f"{a.published} | {a.hit_tokens} |")
    if not snap.allocations:
        out.append("| (none) | | | | |")
    holder = design.clause("holder")
    out += ["", "## Pages", "", f"| page | state | {holder} | owner | ref |", "|---|---|---|---|---|"]
    names = {a.id: a.label for a in snap.allocations}
    for info in snap.pages[:MAX_PAGE_ROWS]:
        out.append(f"| {info.page} | {info.state} | {'' if info.node is None else info.node} | "
                   f"{names.get(info.owner, '') if info.owner is not None else ''} | {info.ref if info.node else ''} |")
    if len(snap.pages) > MAX_PAGE_ROWS:
        out.append(f"| ... | {len(snap.pages) - MAX_PAGE_ROWS} more | | | |")
    if snap.heap:
        order = "array order" if words_for(snap).lru else f"array order, key {key_fields(snap)}"
        out += ["", f"## {heap_name(snap)} ({order}; next victim first)", ""]
        out += [f"{i}. node {n} (page {snap.node(n).page}), key {key_value(snap.node_key(snap.node(n)))}"
                for i, n in enumerate(snap.heap[:32], 1)]
    fence = _fence(script)
    out += ["", "## Script", "", fence, script.rstrip("\n"), fence, ""]
    return "\n".join(out)
