# SPDX-License-Identifier: Apache-2.0
"""The Markdown report of a watched stream's step: what a person pastes into an issue.

The step's narration and notes, the summary of the stream up to that step (a table), the
cached blocks per medium, and the block forest as a Mermaid graph (GitHub renders it): blocks
stored by this step green, orphans dashed, blocks this step removed red (a clear's too: every
block it took out, marked "cleared"). The graph is bounded
(:data:`MAX_MERMAID_BLOCKS`, then "… and K more"), so a cache of 100,000 blocks still makes a
report GitHub shows.
"""

from __future__ import annotations

from kvviz.watch.wire import key_label, key_order, medium_label
from kvviz.watch.events import UNKNOWABLE
from kvviz.watch.timeline import WatchTimeline
from kvviz.printable import printable

MAX_MERMAID_BLOCKS = 200
"""Blocks the forest graph draws (those the step stored and their ancestors first, then the
others: roots first, each tree depth first); the rest are counted."""
MAX_LABEL_TOKENS = 8
"""Tokens spelled out in one block's label."""
MAX_REMOVED_SHOWN = 20
"""Blocks removed (or cleared) by the step drawn in red; the rest are counted."""

#: The summary table's rows: (field of WatchTimeline.summary(), what it is).
SUMMARY_ROWS = (
    ("messages", "messages received (steps)"),
    ("undecodable", "undecodable messages"),
    ("events", "events"),
    ("blocks_stored", "blocks stored"),
    ("duplicates", "stores of a block already cached (copies)"),
    ("blocks_removed", "blocks removed"),
    ("removed_unknown", "removals of blocks not cached"),
    ("cached_blocks", "blocks cached now"),
    ("peak_blocks", "peak blocks cached"),
    ("orphans", "orphans cached now"),
    ("gaps", "gaps in seq"),
    ("missing_messages", "messages lost in gaps"),
    ("restarts", "publisher restarts (view reset)"),
)


def _cell(text: str) -> str:
    return printable(text).replace("|", "\\|").replace("<", "&lt;")  # a medium is the publisher's string


def _esc(text: str) -> str:
    # Mermaid entity codes; a backtick would switch the label to a Markdown string.
    return (printable(text).replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;").replace("|", "#124;")
            .replace("`", "#96;"))


def _tokens(tokens) -> str:
    shown = " ".join(map(str, tokens[:MAX_LABEL_TOKENS]))
    return shown + (f" … +{len(tokens) - MAX_LABEL_TOKENS}" if len(tokens) > MAX_LABEL_TOKENS else "")


def forest_order(state) -> list:
    """The cached blocks in drawing order: roots (no parent cached on their medium) by the
    step that stored them, each followed by its subtree depth first, children in the same
    order. Deterministic for equal states."""
    def order(block):
        return (block.stored_at, key_order(block.key), medium_label(block.medium))

    children: dict = {}
    roots = []
    blocks = state.blocks
    for (key, medium), block in blocks.items():
        parent = block.parent
        if parent is not None and (parent, medium) in blocks:
            children.setdefault((parent, medium), []).append(block)
        else:
            roots.append(block)
    out = []
    stack = sorted(roots, key=order, reverse=True)
    while stack:
        block = stack.pop()
        out.append(block)
        stack.extend(sorted(children.get((block.key, block.medium), ()), key=order, reverse=True))
    return out


def _chosen(ordered: list, state, step: int) -> list:
    """The blocks to draw, at most :data:`MAX_MERMAID_BLOCKS`, in drawing order: those the step
    stored and their ancestors first (what the step did is what a report is about), then the
    others in order."""
    blocks = state.blocks
    focus: dict = {}
    for block in ordered:
        if block.stored_at != step or step == 0:
            continue
        walk = block
        while walk is not None and (walk.key, walk.medium) not in focus and len(focus) < MAX_MERMAID_BLOCKS:
            focus[(walk.key, walk.medium)] = True
            walk = blocks.get((walk.parent, walk.medium)) if walk.parent is not None else None
        if len(focus) >= MAX_MERMAID_BLOCKS:
            break
    for block in ordered:
        if len(focus) >= MAX_MERMAID_BLOCKS:
            break
        focus.setdefault((block.key, block.medium), True)
    return [block for block in ordered if (block.key, block.medium) in focus]


def removed_blocks(timeline: WatchTimeline, step: int) -> list:
    """``(block, "removed" | "cleared")`` for every block step ``step`` took out: its
    BlockRemoved's blocks in order, then, when it cleared the cache, every block cached before
    it or stored by it that is gone after it and no removal named (in drawing order)."""
    frame = timeline.frame(step)
    effect = frame.effect
    if effect is None:
        return []
    out = [(block, "removed") for block in effect.removed]
    if effect.cleared and step > 0:
        named = {(block.key, block.medium) for block in effect.removed}
        after = frame.state.blocks
        before = timeline.frame(step - 1).state
        candidates = {(b.key, b.medium): b for b in forest_order(before)}
        for block in effect.stored:
            candidates.setdefault((block.key, block.medium), block)
        out += [(block, "cleared") for block_id, block in candidates.items()
                if block_id not in after and block_id not in named]
    return out


def _text(tokens, decode) -> str:
    """``tokens`` as ids, then their text when ``decode`` (a tokenizer's) is given."""
    if decode is None:
        return _tokens(tokens)
    return f"{_tokens(tokens)} {decode(tokens)[:80]!r}"


def forest_mermaid(timeline: WatchTimeline, step: int, decode=None) -> str:
    """A Mermaid flowchart of the forest at ``step`` (bounded by :data:`MAX_MERMAID_BLOCKS`);
    ``decode`` (a tokenizer's) adds each block's text."""
    frame = timeline.frame(step)
    state = frame.state
    ordered = forest_order(state)
    shown = _chosen(ordered, state, step)
    ids = {(b.key, b.medium): f"b{i}" for i, b in enumerate(shown)}
    lines = ["graph LR"]
    for block in shown:
        node = ids[(block.key, block.medium)]
        medium = "" if block.medium in (None, "GPU") else f" · {medium_label(block.medium)}"
        copies = f" · {block.copies} copies" if block.copies > 1 else ""
        orphan = " · orphan" if block.orphan else ""
        label = _esc(f"{key_label(block.key)}{medium}{copies}{orphan}") + "<br/>" + _esc(_text(block.tokens, decode))
        lines.append(f'  {node}["{label}"]')
        parent = ids.get((block.parent, block.medium)) if block.parent is not None else None
        if parent is not None:
            lines.append(f"  {parent} --> {node}")
    if len(ordered) > len(shown):
        lines.append(f'  more["… and {len(ordered) - len(shown):,} more blocks"]')
    gone = removed_blocks(timeline, step)
    for i, (block, how) in enumerate(gone[:MAX_REMOVED_SHOWN]):
        node = f"r{i}"
        lines.append(f'  {node}["{_esc(key_label(block.key))} · {how}<br/>{_esc(_text(block.tokens, decode))}"]')
        parent = ids.get((block.parent, block.medium)) if block.parent is not None else None
        if parent is not None:
            lines.append(f"  {parent} -.-> {node}")
        lines.append(f"  class {node} removed")
    if len(gone) > MAX_REMOVED_SHOWN:
        lines.append(f'  gone["… and {len(gone) - MAX_REMOVED_SHOWN:,} more removed"]')
        lines.append("  class gone removed")
    lines += ["  classDef new fill:#d4f7d4,stroke:#2e7d32",
              "  classDef orphan stroke-dasharray: 4 3",
              "  classDef removed fill:#ffd6d6,stroke:#c62828,stroke-dasharray: 4 3"]
    for block in shown:
        node = ids[(block.key, block.medium)]
        if block.stored_at == step and step > 0:
            lines.append(f"  class {node} new")
        elif block.orphan:
            lines.append(f"  class {node} orphan")
    return "\n".join(lines)


def watch_markdown(timeline: WatchTimeline, step: int, decode=None) -> str:
    """The whole Markdown report of ``step`` of ``timeline``; ``decode`` (a tokenizer's) adds
    each block's text beside its tokens."""
    upto = timeline.prefix(step)
    summary = upto.summary()
    frame = upto.frame(step)
    source = timeline.source or "a KV-event stream"
    out = [f"# kvviz watch report: {source} — step {step} of {timeline.last_step}", "", frame.narration, ""]
    if frame.notes:
        out += [f"- {note}" for note in frame.notes] + [""]
    if frame.error:
        out += [f"**Undecodable:** {frame.error}", ""]
    out += ["## Summary (up to this step)", "", "| | |", "|---|---|"]
    out += [f"| {what} | {summary[field]:,} |" for field, what in SUMMARY_ROWS]
    by_type = ", ".join(f"{_cell(k)} {v:,}" for k, v in summary["events_by_type"].items()) or "none"
    out += [f"| events by type | {by_type} |"]
    unknown = ", ".join(f"{_cell(k)} {v:,}" for k, v in {**summary["unknown_fields"], **summary["unknown_types"]}.items())
    out += [f"| unknown fields and types | {unknown or 'none'} |"]
    lints = ", ".join(f"{_cell(k)} {v:,}" for k, v in summary["lints"].items())
    out += [f"| lints (odd but decoded), by kind | {lints or 'none'} |", ""]
    out += ["## Blocks per medium", "", "| medium | cached blocks |", "|---|---|"]
    out += [f"| {_cell(medium)} | {n:,} |" for medium, n in summary["per_medium"].items()]
    if not summary["per_medium"]:
        out.append("| (none) | 0 |")
    out += ["", "## Block forest", "",
            f"Blocks stored by this step are green, orphans dashed, blocks it removed (or cleared) red; "
            f"the first {MAX_MERMAID_BLOCKS} blocks are drawn. Not known from the stream: {UNKNOWABLE}.", "",
            "```mermaid", forest_mermaid(upto, step, decode), "```", "",
            "## Replay", "",
            f"Forest digest at step {step}: `{frame.state.digest()}`.", "",
            f"`kvviz watch --replay-file {source} --step {step}` shows this step; `kvviz watch --replay-file {source} "
            f"--export-step {step} -o step.json` writes a bundle `kvviz open` replays and verifies.", ""]
    return "\n".join(out)


__all__ = ["MAX_MERMAID_BLOCKS", "forest_mermaid", "forest_order", "removed_blocks", "watch_markdown"]
