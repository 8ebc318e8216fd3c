"""Plain-language narration of a step, generated from its events.

Used when a script has no narration of its own, and always as the "what happened" line:
"acquire r2: matched 2 of 3 full pages (8 of 12 tokens); evicted page 5 [9 10 11 12],
last used at tick 3, the oldest unreferenced leaf".
"""

from __future__ import annotations

from collections.abc import Callable

from kvcore import Snapshot
from kvcore import events as ev

Labeler = Callable[[tuple[int, ...]], str]


def default_labeler(tokens: tuple[int, ...]) -> str:
    """Tokens as space-separated integers."""
    return " ".join(map(str, tokens))


def _pages(pages) -> str:
    pages = list(pages)
    return f"page {pages[0]}" if len(pages) == 1 else "pages " + ", ".join(map(str, pages))


def narrate(op_text: str, op_kind: str | None, name: str | None, events: tuple, before: Snapshot | None,
            after: Snapshot, error: tuple[str, str] | None, label: Labeler = default_labeler) -> str:
    """One paragraph saying what the op did (or why it failed and that nothing changed)."""
    if op_kind is None:
        free = after.free_count
        return (f"Start: a {after.kind} cache of {after.page_count} pages, {after.tokens_per_page} tokens per page; "
                f"{free} page{'s' if free != 1 else ''} free.")
    head = f"{op_kind} {name}"
    if error is not None:
        kind, message = error
        return f"{head} failed ({kind}): {message}. Nothing changed."
    parts: list[str] = []
    evicted = [e for e in events if isinstance(e, ev.Evicted)]
    for e in events:
        if isinstance(e, ev.Matched) and op_kind == "acquire":
            tpp = after.tokens_per_page
            full = e.total_tokens // tpp
            k = len(e.nodes)
            if after.kind == "base":
                parts.append(f"no sharing in the base cache ({e.total_tokens} tokens)")
            elif full == 0:
                parts.append(f"{e.total_tokens} tokens make no full page, nothing to match")
            else:
                parts.append(f"matched {k} of {full} full page{'s' if full != 1 else ''} "
                             f"({e.matched_tokens} of {e.total_tokens} tokens)")
        elif isinstance(e, ev.PagesTaken):
            parts.append(f"took {_pages(e.pages)} from the free list")
        elif isinstance(e, ev.NodeCreated):
            parts.append(f"cached [{label(e.tokens)}] as node {e.node} on page {e.page}")
        elif isinstance(e, ev.Deduplicated):
            parts.append(f"[block {e.index}] was already cached by someone else (node {e.node}): "
                         f"adopted page {e.page} and returned its own copy, page {e.own_page}")
        elif isinstance(e, ev.PagesFreed) and e.reason == "release":
            parts.append(f"returned unpublished {_pages(e.pages)} to the free list")
        elif isinstance(e, ev.CandidateAdded) and op_kind == "release":
            parts.append(f"node {e.node} (page {e.page}) is now unreferenced and childless: an eviction "
                         f"candidate with key {e.key}")
    if op_kind == "release":
        dropped = [e for e in events if isinstance(e, ev.RefDropped)]
        if dropped:
            parts.insert(0, f"dropped its reference on {len(dropped)} node{'s' if len(dropped) != 1 else ''}")
    if op_kind == "publish":
        touched = next((e for e in events if isinstance(e, ev.Touched)), None)
        if not any(isinstance(e, (ev.NodeCreated, ev.Deduplicated)) for e in events):
            if after.kind == "base":
                parts.append("the base cache shares nothing, so publish only advances the clock")
            else:
                parts.append("nothing new to share (only full pages are published, and never twice)")
        if touched is not None:
            parts.append(f"refreshed {len(touched.nodes)} node{'s' if len(touched.nodes) != 1 else ''} "
                         f"already on its path")
    for i, e in enumerate(evicted):
        why = "the oldest unreferenced leaf" if i == 0 else "the next oldest"
        if e.parent_became_candidate is not None:
            why += f"; its parent node {e.parent_became_candidate} became a leaf and a candidate"
        parts.append(f"evicted page {e.page} [{label(e.tokens)}], last used at tick {e.key[0]}, {why}")
    if op_kind == "extend" and not any(isinstance(e, (ev.PagesTaken, ev.Evicted)) for e in events):
        parts.append("its pages already had room")
    return f"{head}: " + ("; ".join(parts) if parts else "done") + "."
