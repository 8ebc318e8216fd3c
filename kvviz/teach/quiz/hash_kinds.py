# SPDX-License-Identifier: Apache-2.0
"""The hash cache's question kinds (vLLM's design): which cached block the free queue drops
first, how many tokens a chained-key lookup hits, which pages an acquire takes. Its rules,
not the trie's: one free queue head first, lazy eviction, keys that chain every block before.
"""

from __future__ import annotations

from kvcore import events as ev

from kvviz.core.free_queue import _explicit
from kvviz.core.words import count
from kvviz.teach.quiz.core import Parting, Mistake, around, page_slips, QuestionKind, StepView, Value, block_table_kind, cached_pages_run, page_list, pages_text


def _queue(snap) -> list[int]:
    """The free queue head first (the pages that may hold a block; the never-used run as it comes)."""
    return list(_explicit(snap.free))


def _first(view: StepView, test) -> int | None:
    return next((s.index for s in view.substeps() if test(s.event)), None)


def _drops(view: StepView) -> tuple[ev.BlockEvicted, ...]:
    return tuple(e for e in view.after.events if isinstance(e, ev.BlockEvicted))


def _matched_pages(view: StepView) -> set[int]:
    return set(view.matched.pages) if view.matched else set()


# queue drop ------------------------------------------------------------------------------

def _queued_cached(view: StepView) -> list[int]:
    """Queued pages that hold a cached block, in queue order, not matched by this acquire."""
    snap = view.snap0
    mine = _matched_pages(view)
    return [p for p in _queue(snap) if snap.block_for_page(p) is not None and p not in mine]


def _drop_distractors(view: StepView, answer: Value) -> list[Mistake]:
    snap = view.snap0
    cached = _queued_cached(view)
    out = []
    if cached:
        out.append(Mistake(cached[-1], "the tail's page: pages are taken from the queue's head, so the tail's block "
                                       "goes last", "queue-tail"))
        out.append(Mistake(min(cached), "the lowest page number: the queue's order decides, not the page number",
                           "first-cached"))
    queue = [p for p in _queue(snap) if p not in _matched_pages(view)]
    if queue and snap.block_for_page(queue[0]) is None:
        out.append(Mistake(queue[0], "the head page: it holds no cached block, so taking it drops nothing",
                           "free-page"))
    held = [b.page for b in snap.blocks if snap.pages[b.page].ref > 0]
    if held:
        out.append(Mistake(min(held), "a page still referenced: it is in no queue, so it is never reused",
                           "referenced-leaf"))
    return out


def _drop_hints(view: StepView) -> tuple[str, str, str]:
    snap = view.snap0
    shown = " ".join(f"{p}{'*' if snap.block_for_page(p) is not None else ''}" for p in _queue(snap)[:12])
    return ("New pages come from the free queue's head; a taken page that still caches a block loses it then "
            "(lazy eviction).",
            "Walk the free queue from its head: the first page it takes that still holds a block drops it.",
            f"The queue, head first (* caches a block): {shown or 'empty'}; this acquire's matched pages leave the "
            "queue first.")


DROP = QuestionKind(
    "queue_drop", "the first block dropped", "number", "page",
    applies=lambda v: not v.tree and v.ok and v.op.kind == "acquire" and bool(_drops(v)),
    ask=lambda v: (f"{v.text()} It takes pages from the free queue's head. Which page's cached block is dropped "
                   "first?"),
    answer=lambda v: _drops(v)[0].page,
    bound=lambda v: v.snap0.page_count - 1,
    describe=lambda x: f"page {x}",
    distractors=_drop_distractors,
    hints=_drop_hints,
    why=lambda v, x: (f"Page {x} was the first page taken from the queue's head that still cached a block (block "
                      f"{_drops(v)[0].block}); the pages before it held none. A block leaves only when its page is "
                      "reused."),
    diverge=lambda v, x: Parting(v.index, _first(v, lambda e: isinstance(e, ev.BlockEvicted)),
                                    f"you chose page {x}: the first page taken from the head that cached a block was "
                                    f"page {_drops(v)[0].page}."),
    weight=3,
    lesson=frozenset({"hash-vs-trie"}),
)


# hit tokens ------------------------------------------------------------------------------

def _any_prefix_hit(view: StepView) -> int:
    """Tokens matched if a block matched wherever its tokens are cached (its key ignored)."""
    snap = view.snap0
    return cached_pages_run(view.op.tokens, snap.tokens_per_page, {b.tokens for b in snap.blocks})


def _hash_hit_distractors(view: StepView, answer: Value) -> list[Mistake]:
    tokens = view.op.tokens
    out = [Mistake(_any_prefix_hit(view), "a block cached after another prefix: a block's key chains every block "
                                          "before it", "prefix-ignored"),
           Mistake(len(tokens), "the whole request: a partial block is never cached, nor anything after a miss",
                   "whole-request")]
    if answer:
        out.append(Mistake(0, "no sharing at all: released blocks stay cached in the queue until their page is reused",
                           "no-sharing"))
        live = 0
        for page in view.matched.pages:  # the blocks whose pages are still held: those a learner keeps
            if view.snap0.pages[page].ref == 0:
                break
            live += 1
        out.append(Mistake(live * view.snap0.tokens_per_page, "only blocks still held: a released block stays "
                                                                "cached in the queue until its page is reused",
                           "eager-eviction"))
    return around(view, "hash_hits", answer, out + page_slips(view, answer, "the lookup stops at the first block "
                                                                            "whose chained key is not cached", "block"))


def _hash_hit_applies(view: StepView) -> bool:
    if view.tree or not view.ok or view.op.kind != "acquire" or view.matched is None:
        return False
    if view.matched.matched_tokens == len(view.op.tokens):
        return False  # every token hits: "the largest number offered" would be the answer, no choice can lie above
    return view.matched.matched_tokens > 0 or _any_prefix_hit(view) > 0


HASH_HITS = QuestionKind(
    "hash_hits", "hit tokens", "number", "token",
    applies=_hash_hit_applies,
    ask=lambda v: f"{v.text()} How many of its {count(len(v.op.tokens), 'token')} will hit the cache?",
    answer=lambda v: v.matched.matched_tokens,
    bound=lambda v: len(v.op.tokens),
    describe=lambda x: count(x, "token"),
    distractors=_hash_hit_distractors,
    hints=lambda v: ("A hash cache looks up each full block's chained key (its tokens and the key of the block "
                     "before) from block 0, and stops at the first key not cached.",
                     "A queued page's block still matches (eviction is lazy); a block whose page was reused does not.",
                     f"{count(len(v.op.tokens) // v.snap0.tokens_per_page, 'full block')} of "
                     f"{v.snap0.tokens_per_page} tokens; the cache holds {count(len(v.snap0.blocks), 'block')}."),
    why=lambda v, x: (f"The lookup matched {count(x // v.snap0.tokens_per_page, 'block')} in a row from block 0: "
                      f"{v.matched.reason}."),
    diverge=lambda v, x: Parting(v.index, _first(v, lambda e: isinstance(e, ev.Matched)),
                                    f"you said {count(x, 'token')}: the lookup matched {v.matched.matched_tokens}; "
                                    f"{v.matched.reason}."),
    weight=2,
    lesson=frozenset({"hash-vs-trie"}),
)


# block table -----------------------------------------------------------------------------

def _table_distractors(view: StepView, answer: Value) -> list[Mistake]:
    matched = tuple(view.matched.pages) if view.matched else ()
    queue = [p for p in _queue(view.snap0) if p not in set(matched)]
    new = len(answer) - len(matched)
    out = [Mistake(tuple(sorted(answer)), "page-number order: a block table is in token order", "page-order")]
    if new >= 1 and len(queue) >= new:
        out.append(Mistake(matched + tuple(queue[len(queue) - new:]), "from the queue's tail: new pages come from "
                                                                      "its head", "queue-tail"))
    if matched and len(queue) >= len(answer):
        out.append(Mistake(tuple(queue[:len(answer)]), "copying the hit pages: a hit reuses the cached pages",
                           "copied-hits"))
    if new >= 2:
        out.append(Mistake(answer[:-1], "a page too few: a partial last block still needs a whole page",
                           "page-too-few"))
    return out


HASH_TABLE = block_table_kind(
    "hash_table",
    applies=lambda v: (not v.tree and v.ok and v.op.kind == "acquire" and v.mine(v.snap1) is not None
                       and len(v.mine(v.snap1).pages) >= 2),
    distractors=_table_distractors,
    hints=lambda v: ("Matched pages first (they leave the free queue), then new pages from the queue's head, in "
                     "token order.",
                     "Take the matched pages out of the queue, then read the queue from its head.",
                     f"The queue, head first: {pages_text(_queue(v.snap0)[:12])}."),
    why=lambda v, x: (f"{v.op.name} holds pages {pages_text(x)}: "
                      f"{count(len(v.matched.pages) if v.matched else 0, 'matched page')}, then new pages from the "
                      "free queue's head."),
    diverge=lambda v, x: Parting(v.index, _first(v, lambda e: isinstance(e, (ev.PagesTaken, ev.Matched))),
                                    f"you said {page_list(x)}: the cache gave {page_list(v.mine(v.snap1).pages)}."),
    weight=2,
)

HASH_KINDS = (DROP, HASH_HITS, HASH_TABLE)
"""The hash cache's kinds, in table order."""
