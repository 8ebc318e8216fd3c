# SPDX-License-Identifier: Apache-2.0
"""Why-queries: why was page P evicted, why did allocation A match only k pages.

Answers come from the frames themselves (events and the snapshot before the step) plus the
session's :class:`~kvviz.core.session.WhyIndex`, so they work on any frame of a long
timeline without replaying it from the start.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvcore import events as ev
from kvcore.events import BlockEvicted

from kvviz.core.designs import design_of
from kvviz.core.designs.trie import match_stop
from kvviz.core.free_queue import next_victim, place_text, queue_text
from kvviz.core.words import TOKENS, Units, count
from kvviz.core.policy_words import key_phrase, key_value, words_for

if TYPE_CHECKING:  # pragma: no cover
    from kvviz.core.session import Session

MAX_LISTED = 12


@dataclass(frozen=True, slots=True)
class Answer:
    """A why-answer: a title, lines of explanation, and what to highlight."""

    title: str
    lines: tuple[str, ...]
    step: int | None = None
    pages: tuple[int, ...] = ()
    nodes: tuple[int, ...] = ()

    def text(self) -> str:
        """The answer as plain text."""
        return "\n".join([self.title, *("  " + line for line in self.lines)])


def _holders(snapshot) -> dict[int, list[str]]:
    """page -> labels of allocations whose published path holds it."""
    out: dict[int, list[str]] = {}
    for a in snapshot.allocations:
        for p in a.pages[: a.published]:
            out.setdefault(p, []).append(a.label)
    return out


def _op_text(session: "Session", step: int) -> str:
    return session.steps[step - 1].op.text if 0 < step <= len(session.steps) else "start"


def _listed(items: list[str]) -> str:
    shown = ", ".join(items[:MAX_LISTED])
    return shown + (f" and {len(items) - MAX_LISTED:,} more" if len(items) > MAX_LISTED else "")


def page_status(session: "Session", frame_index: int, page: int) -> Answer:
    """Where page ``page`` is at frame ``frame_index`` and what, if anything, keeps it from
    being evicted: free (its place in the free list), owned (by which allocation), cached
    (its node and key; referenced by whom; or its rank among the eviction candidates; or the
    children it must outlive). O(pages + nodes)."""
    snap = session.frame(frame_index).snapshot
    if not 0 <= page < snap.page_count:
        return Answer(f"Page {page} does not exist.", (f"The cache has pages 0..{snap.page_count - 1}.",))
    title = f"Page {page} has not been evicted up to step {frame_index}."
    info = snap.pages[page]
    at = f"at step {frame_index}"
    label = session.label_tokens
    if design_of(snap).lazy:  # free and cached overlap in one free queue
        return Answer(title, tuple(_hash_page_lines(snap, page, at, label)), None, (page,),
                      (info.node,) if info.node is not None else ())
    if info.state == "free":
        place = snap.free_position(page) + 1  # said 1-based: "number 1 of 8"
        return Answer(title, (f"It is free {at}: no node or allocation holds it. It is number {place:,} of "
                              f"{snap.free_count:,} in the free list; acquires take free pages from the front.",),
                      None, (page,))
    if info.state == "owned":
        owner = snap.allocation(info.owner)
        name = owner.label if owner is not None else f"allocation #{info.owner}"
        block = owner.pages.index(page) if owner is not None else "?"
        return Answer(title, (f"It is owned {at}: block {block} of {name}, not published yet. Owned pages are "
                              f"never evicted; it returns to the free list when {name} is released, or joins "
                              f"the trie if {name} publishes it once full.",), None, (page,))
    node = snap.node_for_page(page)
    words = words_for(snap)
    key = snap.node_key(node)
    lines = [f"It is cached {at}: node {node.id} holds [{label(node.tokens)}] with key {key_phrase(snap, key)} "
             f"({words.gloss(key)})."]
    if node.ref:
        holders = _holders(snap).get(page, [])
        who = f"{holders[0]} is" if len(holders) == 1 else "they are"
        lines.append(f"It is protected: ref {node.ref}, on the published path of {_listed(holders)}. A "
                     f"referenced node is never evicted; it becomes evictable when {who} released.")
    elif node.id in snap.heap:
        ranked = sorted(snap.heap, key=lambda n: snap.node_key(snap.node(n)))
        rank = ranked.index(node.id) + 1
        rule = "" if words.lru else f" ({snap.policy}: {words.rule})"
        if rank == 1:
            lines.append(f"It is evictable and the next victim: the {words.smallest} key of the "
                         f"{count(len(ranked), 'eviction candidate')} in the heap{rule}. The next acquire that needs "
                         f"more than the {count(snap.free_count, 'free page')} takes its page first.")
        else:
            first = snap.node(ranked[0])
            lines.append(f"It is evictable: eviction candidate {rank:,} of {len(ranked):,} in the heap, "
                         f"{words.smallest} key first{rule}; {count(rank - 1, 'candidate')} with {words.smaller} keys "
                         f"go before it (the next victim is node {first.id} (page {first.page}) key "
                         f"{key_phrase(snap, snap.node_key(first))}).")
    else:
        lines.extend(_interior_lines(snap, node))
    return Answer(title, tuple(lines), None, (page,), (node.id,))


def _hash_page_lines(snap, page: int, at: str, label) -> list[str]:
    """Where ``page`` of a hash cache is and what keeps its block: free (its place in the free
    queue), owned, or holding a cached block (referenced, or queued and evicted lazily when
    taken; a duplicate; unreachable)."""
    info = snap.pages[page]
    queued = snap.free_count
    if info.state == "free":
        return [f"It is free {at}: no block, no owner. It is {place_text(snap.free_position(page), queued)} "
                "in the free queue; acquires take pages from the queue's head, q0."]
    if info.state == "owned":
        owner = snap.allocation(info.owner)
        name = owner.label if owner is not None else f"allocation #{info.owner}"
        block = owner.pages.index(page) if owner is not None else "?"
        return [f"It is owned {at}: block {block} of {name}, not cached yet. An owned page is never evicted; it "
                f"joins the free queue's head when {name} is released (it holds no cached block), or caches its "
                f"block if {name} publishes it once full."]
    b = snap.block_for_page(page)
    after = "the first block of a chain" if b.parent is None else f"after key {b.parent[:8]}"
    lines = [f"It is cached {at}: block {b.id} [{label(b.tokens)}], key {b.key[:8]} ({after})."]
    first = next(x for x in snap.blocks if x.key == b.key)
    if first.page != page:
        lines.append(f"It is a duplicate: page {first.page} cached the same key first, and lookups use that page "
                     "(vLLM caches both copies: block tables never change).")
    if not b.reachable:
        lines.append("It is unreachable: an earlier block of its chain is no longer cached, so no acquire can match "
                     "it (there is no tree to keep a parent while its child is cached).")
    if info.ref:
        holders = _holders(snap).get(page, [])
        who = f"{holders[0]} is" if len(holders) == 1 else "they are"
        lines.append(f"It is protected: ref {info.ref}, in the block tables of {_listed(holders)}. A referenced "
                     f"page is never reused; it joins the free queue's tail when {who} released.")
        return lines
    place = snap.free_position(page)
    victim = next_victim(snap)
    lines.append(f"It is evictable: ref 0, {place_text(place, queued)} in the free queue. Its block stays "
                 "matchable until an acquire takes the page from the queue's head; then the block leaves the cache "
                 "(lazy eviction).")
    if victim is not None and victim.page == page:
        lines.append(f"It is the next block to go: {count(place, 'page')} ahead of it in the queue "
                     "hold no cached block.")
    return lines


def _interior_lines(snap, node) -> list[str]:
    """Why a cached, unreferenced node with children is not a candidate, and who protects it."""
    children = snap.children(node.id)
    lines = [f"It is evictable but not a candidate yet: ref 0, but it has {count(len(children), 'child node')} "
             f"({_listed([f'node {c} (page {snap.node(c).page})' for c in children])}). Only leaves are "
             "evicted: it goes only after everything below it."]
    holders = _holders(snap)
    below, stack = [], list(children)
    while stack:  # the subtree, for the referenced descendants that pin the whole chain above them
        n = snap.node(stack.pop())
        if n.ref:
            below.append(f"node {n.id} (page {n.page}, ref {n.ref}: {', '.join(holders.get(n.page, []))})")
        stack.extend(snap.children(n.id))
    if below:
        lines.append(f"Protected for now by referenced nodes below it: {_listed(sorted(below))}.")
    return lines


def why_evicted(session: "Session", frame_index: int, page: int) -> Answer:
    """Why page ``page`` was evicted, as of frame ``frame_index`` (its latest eviction so far);
    for a page not evicted yet, :func:`page_status`."""
    if design_of(session.frame(frame_index).snapshot).lazy:
        return _why_hash_evicted(session, frame_index, page)
    steps = [s for s in session.why_index.page_evicted_at.get(page, []) if s <= frame_index]
    if not steps:
        return page_status(session, frame_index, page)
    step = steps[-1]
    frame = session.frame(step)
    before = session.frame(step - 1).snapshot
    label = session.label_tokens
    keys = {n.id: before.node_key(n) for n in before.nodes}
    pages_of = {n.id: n.page for n in before.nodes}
    tokens_of = {n.id: n.tokens for n in before.nodes}
    candidates = {n: keys[n] for n in before.heap}
    referenced_now: set[int] = set()
    evicted_earlier: set[int] = set()  # evicted by this step before the victim
    victim = None
    for e in frame.events:
        if isinstance(e, ev.RefTaken):
            referenced_now.add(e.node)
        elif isinstance(e, ev.CandidateRemoved):
            candidates.pop(e.node, None)
        elif isinstance(e, ev.CandidateAdded):
            candidates[e.node] = e.key
            pages_of[e.node] = e.page
        elif isinstance(e, ev.Evicted):
            if e.page == page:
                victim = e
                # The cache reports a parent that this very eviction made a leaf just before
                # the eviction itself; it was not a candidate when the victim was chosen.
                if e.parent_became_candidate is not None:
                    candidates.pop(e.parent_became_candidate, None)
                break
            candidates.pop(e.node, None)
            evicted_earlier.add(e.node)
    assert victim is not None, "the why-index pointed at a step without this eviction"
    free_before = before.free_count
    words = words_for(before)
    lines = [
        f"Step {step}: `{_op_text(session, step)}` needed pages; the free list had {free_before}, "
        f"so the cache evicted {words.victim(victim.key)}.",
        f"Page {page} held node {victim.node} [{label(victim.tokens)}] with key {key_phrase(before, victim.key)} "
        f"({words.gloss(victim.key)}).",
        f"Candidates at that moment (childless, ref 0), {words.smallest_first()}:",
    ]
    ordered = sorted(candidates.items(), key=lambda kv: kv[1])
    for node, key in ordered[:MAX_LISTED]:
        mark = "  <- evicted" if node == victim.node else ""
        lines.append(f"  node {node} page {pages_of.get(node)} [{label(tokens_of.get(node, ()))}] "
                     f"key {key_value(key)}{mark}")
    if len(ordered) > MAX_LISTED:
        lines.append(f"  ... and {len(ordered) - MAX_LISTED} more")
    holders = _holders(before)
    acquiring = frame.op.name if frame.op is not None else "?"
    protected = []
    for n in before.nodes:
        if n.parent is None:
            continue
        if n.ref > 0:
            protected.append(f"page {n.page} (node {n.id}, ref {n.ref}: {', '.join(holders.get(n.page, []))})")
        elif n.id in referenced_now:
            protected.append(f"page {n.page} (node {n.id}: just matched by {acquiring})")
    for a in before.allocations:
        for p in a.pages[a.published:]:
            protected.append(f"page {p} (unpublished tail of {a.label})")
    if protected:
        lines.append("Protected (referenced, so never evicted):")
        lines.extend("  " + p for p in protected[:MAX_LISTED])
        if len(protected) > MAX_LISTED:
            lines.append(f"  ... and {len(protected) - MAX_LISTED} more")
    interior = [n for n in before.nodes if n.parent is not None and n.ref == 0 and n.id not in candidates
                and n.id not in referenced_now and n.id != victim.node and n.id not in evicted_earlier]
    if interior:
        lines.append("Unreferenced but interior (evictable only after their children): " +
                     ", ".join(f"node {n.id} page {n.page}" for n in interior[:MAX_LISTED]))
    return Answer(f"Why was page {page} evicted? (step {step})", tuple(lines), step, (page,), (victim.node,))


def _why_hash_evicted(session: "Session", frame_index: int, page: int) -> Answer:
    """Why a hash cache's ``page`` lost its block (its latest lazy eviction up to
    ``frame_index``): the acquire or extend that took the page from the free queue's head,
    and the queue as it stood, found through the session's why-index (one frame read)."""
    found = None
    steps = [s for s in session.why_index.page_evicted_at.get(page, []) if s <= frame_index]
    for step in reversed(steps):
        frame = session.frame(step)
        found = next((e for e in frame.events if isinstance(e, BlockEvicted) and e.page == page), None)
        if found is not None:
            break
    if found is None:
        return page_status(session, frame_index, page)
    before = session.frame(step - 1).snapshot
    label = session.label_tokens
    still = ("Another page still caches the same key, so requests still match those tokens." if found.still_cached
             else "No other page cached its key: a later request spelling those tokens computes them again.")
    lines = (
        f"Step {step}: `{_op_text(session, step)}` needed new pages and takes them from the free queue's head; "
        f"page {page} was among them and still held block {found.block} [{label(found.tokens)}].",
        "A hash cache evicts lazily: a released page's block stays cached (and matchable) while the page waits "
        "in the free queue, and leaves only when the page is reused.",
        f"The free queue before the step, head first (* holds a cached block): {queue_text(before)}.",
        "Pages reach the queue when their last holder releases them: to the tail when they hold a cached block "
        "(last block first), to the head when they hold none (reused first); so cached blocks go least recently "
        "released first.",
        still,
    )
    return Answer(f"Why was page {page} evicted? (step {step})", lines, step, (page,), (found.block,))


def why_short_match(session: "Session", frame_index: int, name: str, units: Units = TOKENS) -> Answer:
    """Why allocation ``name`` (its latest acquire up to ``frame_index``) matched only k pages.

    ``units`` says what a token stands for (blocks of a converted trace)."""
    step = next((i + 1 for i in range(min(frame_index, len(session.steps)) - 1, -1, -1)
                 if session.steps[i].op.kind == "acquire" and session.steps[i].op.name == name), None)
    if step is None:
        return Answer(f"No acquire of {name!r} up to step {frame_index}.", ())
    frame = session.frame(step)
    if frame.error is not None:
        return Answer(f"The acquire of {name} at step {step} failed: it matched nothing and changed nothing.",
                      (frame.error.message,), step)
    matched = next(e for e in frame.events if isinstance(e, ev.Matched))
    tpp = frame.snapshot.tokens_per_page
    tokens = frame.op.tokens or ()
    full = len(tokens) // tpp
    k = len(matched.nodes)
    label = session.label_tokens
    whole = count(full, "block") if units.block_tokens is not None else count(full, "full page")
    title = f"Why did {name} match {k:,} of {whole}? (step {step})"
    parent = matched.nodes[-1] if matched.nodes else 0  # 0: the root
    if units.block_tokens is not None:
        amount = f"{k:,} of {count(len(tokens), 'block')} (of {units.block_tokens:,} tokens)"
    else:
        amount = f"{matched.matched_tokens:,} of {count(len(tokens), 'token')}"
    design = design_of(frame.snapshot)
    stop = match_stop(tokens, k, tpp, label, parent) if design.tree else matched.reason
    lines = [f"`{frame.op.text}` matched {amount}: {stop}."]
    if not design.shares:
        lines.append(design.clause("why_unshared"))
        return Answer(title, tuple(lines), step)
    if design.lazy:
        return Answer(title, tuple(lines + _hash_match_lines(session, step, tokens, k, tpp)), step,
                      tuple(matched.pages), tuple(matched.nodes))
    if k == full:
        # The stop clause already says a partial last page is never shared: said once.
        return Answer(title, tuple(lines), step, tuple(matched.pages), tuple(matched.nodes))
    block = tuple(tokens[k * tpp:(k + 1) * tpp])
    where = "the root" if parent == 0 else f"node {parent}"
    index = session.why_index
    earlier = _created_after_prefix(index, tokens, k, tpp, step)
    if earlier:
        node, created, old_parent = earlier[-1]
        under = where if old_parent == parent else (
            "the root" if old_parent == 0 else f"node {old_parent} (an earlier node for this same prefix, evicted "
                                               "since)")
        evicted = index.node_evicted_at.get(node)
        lines.append(f"Block {k} [{label(block)}] was cached as node {node} under {under} at step {created} "
                     f"(`{_op_text(session, created)}`).")
        if evicted is not None and evicted < step:
            lines.append(f"It was evicted at step {evicted} (`{_op_text(session, evicted)}`): it was "
                         f"{words_for(frame.snapshot).victim_then} then. Ask why page for details.")
            return Answer(title, tuple(lines), step, tuple(matched.pages), (node,))
    before = session.frame(step - 1).snapshot
    elsewhere = [n for n in before.nodes if n.tokens == block and n.parent != parent]
    if elsewhere:
        n = elsewhere[0]
        under = "the root" if not n.parent else f"node {n.parent}"
        lines.append(f"Block {k} [{label(block)}] is cached, but after a different prefix (node {n.id}, under "
                     f"{under}): a page is shared only when everything before it matches too "
                     f"(a shorter shared prefix).")
        return Answer(title, tuple(lines), step, tuple(matched.pages), (n.id,))
    lines.append(f"Block {k} [{label(block)}] was never seen after this prefix: no earlier request published it "
                 f"under {where}.")
    return Answer(title, tuple(lines), step, tuple(matched.pages), tuple(matched.nodes))


def _created_after_prefix(index, tokens, k: int, tpp: int, step: int) -> list[tuple[int, int, int]]:
    """Every node created before ``step`` for block ``k`` of ``tokens`` after the same token
    path (its first ``k`` blocks), as (node, step created, parent), oldest first. Keyed by
    tokens, not by the parent's id: a prefix node evicted and created again has a new id, and
    the block cached under the old one was still seen after this prefix. O(nodes created)."""
    parent_of = {node: (parent, block) for (parent, block), made in index.created.items() for node, _ in made}

    def spells(node: int, blocks: int) -> bool:  # node's token path is the first ``blocks`` blocks
        while blocks > 0:
            entry = parent_of.get(node)
            if entry is None or entry[1] != tuple(tokens[(blocks - 1) * tpp:blocks * tpp]):
                return False
            node, blocks = entry[0], blocks - 1
        return node == 0

    block = tuple(tokens[k * tpp:(k + 1) * tpp])
    found = [(node, made, parent) for (parent, b), nodes in index.created.items() if b == block
             for node, made in nodes if made < step and spells(parent, k)]
    return sorted(found, key=lambda x: (x[1], x[0]))


def _hash_match_lines(session: "Session", step: int, tokens, k: int, tpp: int) -> list[str]:
    """Why a hash cache's match stopped at block ``k``: its key chains every block before it,
    so it is cached only if this very prefix was published and its page not reused since."""
    full = len(tokens) // tpp
    if k == full:
        rest = len(tokens) - full * tpp
        return [f"The last {count(rest, 'token')} fill only part of a block; partial blocks are never cached."] if rest \
            else []
    block = tuple(tokens[k * tpp:(k + 1) * tpp])
    before = session.frame(step - 1).snapshot
    lines = [f"A block's key chains its tokens with the key of every block before it, so block {k} "
             f"[{session.label_tokens(block)}] matches only if a request published this very prefix and the page "
             "caching it was not reused since (lazy eviction takes a cached block when its page is reused)."]
    elsewhere = [b for b in before.blocks if b.tokens == block]
    if elsewhere:
        lines.append(f"The same tokens are cached on page {elsewhere[0].page}, but after another prefix: another "
                     "key.")
    return lines
