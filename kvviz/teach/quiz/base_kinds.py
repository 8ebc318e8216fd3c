# SPDX-License-Identifier: Apache-2.0
"""The base cache's question kinds: it shares nothing, so its questions are about the free
list alone (what an acquire takes, what a release gives back, when the pool says no), and
its hints and whys state its own rules, never the trie's.
"""

from __future__ import annotations

from kvcore import events as ev

from kvviz.core.words import are, count
from kvviz.teach.quiz.core import (Parting, Mistake, around, QuestionKind, StepView, Value, block_table_kind, ceil_div, free_pages_kind,
                   page_list, pages_text)


def needed(view: StepView) -> int:
    """Pages a base acquire takes: every token and extra slot, rounded up to pages."""
    return ceil_div(len(view.op.tokens) + view.op.extra, view.snap0.tokens_per_page)


def _first(view: StepView, cls) -> int | None:
    return next((s.index for s in view.substeps() if isinstance(s.event, cls)), None)


# free pages ------------------------------------------------------------------------------

def _free_applies(view: StepView) -> bool:
    if not view.ok:
        return False
    if view.op.kind == "release":
        mine = view.mine(view.snap0)
        return mine is not None and bool(mine.pages)
    return view.op.kind == "acquire" and view.snap1.free_count != view.snap0.free_count


def _free_distractors(view: StepView, answer: Value) -> list[Mistake]:
    snap, op = view.snap0, view.op
    out = [Mistake(snap.free_count, "unchanged: this op moves pages to or from the free list", "unchanged")]
    tpp = snap.tokens_per_page
    if op.kind == "release":
        mine = view.mine(snap)
        out.append(Mistake(snap.free_count + len(mine.pages) - mine.published,
                           "the trie's rule (published pages stay cached): a base cache caches nothing, so "
                           "release frees every page", "trie-rules"))
        out.append(Mistake(snap.free_count + len(mine.pages) - 1, "a page too few: every page of the block table "
                                                                  "returns, the partial last one too", "page-too-few"))
        if snap.free_count + len(mine.pages) < len(snap.pages):  # a count the pool can hold
            out.append(Mistake(snap.free_count + len(mine.pages) + 1, "a page too many: a release returns the pages "
                                                                      "of its block table, no more", "release-extra"))
    else:
        out.append(Mistake(max(0, snap.free_count - ceil_div(len(op.tokens), tpp) - ceil_div(op.extra, tpp)),
                           "a page too many: tokens and extra slots share the last started page", "page-too-many"))
        out.append(Mistake(max(0, snap.free_count - (len(op.tokens) + op.extra) // tpp),
                           "a partial page needs no page: every started page takes a whole page", "page-too-few"))
        out.append(Mistake(max(0, snap.free_count - ceil_div(len(op.tokens), tpp)),
                           "forgetting the extra slots: they take pages too", "extra-ignored"))
        out.append(Mistake(max(0, snap.free_count - needed(view) + 1),
                           "the trie's rule (a cached first page is shared): a base cache shares nothing",
                           "trie-rules"))
    return out


def _free_hints(view: StepView) -> tuple[str, str, str]:
    snap, op = view.snap0, view.op
    if op.kind == "release":
        third = f"{op.name} holds {count(len(view.mine(snap).pages), 'page')}; {are(snap.free_count)} free now."
    else:
        third = (f"{count(len(op.tokens), 'token')} + {op.extra} extra slots over {snap.tokens_per_page} tokens a "
                 f"page, rounded up; {are(snap.free_count)} free now.")
    return ("A base cache shares nothing: an acquire takes a page for every started page of tokens and extra "
            "slots; a release returns every page it held.",
            "Count the pages the op takes or returns; publish changes nothing here.",
            third)


BASE_FREE = free_pages_kind(
    "base_free",
    applies=_free_applies,
    distractors=_free_distractors,
    hints=_free_hints,
    why=lambda v, x: (f"The free list went from {v.snap0.free_count} to {x}: "
                      + ("a base cache caches nothing, so release returned every page."
                         if v.op.kind == "release" else
                         f"it took {count(v.snap0.free_count - x, 'page')}, one per started page; a base cache "
                         "shares nothing, so nothing is found.")),
    diverge=lambda v, x: Parting(v.index, _first(v, (ev.PagesTaken, ev.PagesFreed)),
                                    f"you said {count(x, 'free page')}: the op "
                                    f"{'returned' if v.op.kind == 'release' else 'took'} "
                                    f"{count(abs(v.snap1.free_count - v.snap0.free_count), 'page')}."),
    lesson=frozenset({"base-vs-trie"}),
)


# block table -----------------------------------------------------------------------------

def _table_distractors(view: StepView, answer: Value) -> list[Mistake]:
    free = view.snap0.free
    n = len(answer)
    out = [Mistake(tuple(sorted(answer)), "page-number order: a block table is in token order, the free list's "
                                          "order", "page-order"),
           Mistake(tuple(free[len(free) - n:]) if n else (), "from the back of the free list: pages come from its "
                                                              "front", "queue-tail")]
    if len(free) > n:
        out.append(Mistake(tuple(free[:n + 1]), "a page too many: tokens and extra slots are rounded up once",
                           "page-too-many"))
    if n >= 2:
        out.append(Mistake(tuple(free[:n - 1]), "a page too few: a partial last page takes a whole page",
                           "page-too-few"))
    return out


BASE_TABLE = block_table_kind(
    "base_table",
    applies=lambda v: v.ok and v.op.kind == "acquire" and v.mine(v.snap1) is not None and needed(v) >= 2,
    distractors=_table_distractors,
    hints=lambda v: ("A base acquire takes its pages from the front of the free list, in token order.",
                     "Look at the free list's order (the hand-out order), not at the page numbers.",
                     f"It needs {count(needed(v), 'page')}; the free list's front: "
                     f"{pages_text(v.snap0.free[:needed(v) + 1])}."),
    why=lambda v, x: (f"{v.op.name} holds pages {pages_text(x)}: the first {count(len(x), 'page')} of the free "
                      "list, in order (a base cache shares nothing)."),
    diverge=lambda v, x: Parting(v.index, _first(v, ev.PagesTaken),
                                    f"you said {page_list(x)}: the op took {page_list(v.mine(v.snap1).pages)} from "
                                    "the free list's front."),
)


# will it fail ----------------------------------------------------------------------------

def _fail_applies(view: StepView) -> bool:
    if view.op.kind != "acquire" or view.op.tokens is None:
        return False
    if view.after.error is not None and view.after.error.kind != "CacheAllocationFailure":
        return False
    return needed(view) >= view.snap0.free_count and (view.after.error is not None) == \
        (needed(view) > view.snap0.free_count)


def _fail_distractors(view: StepView, answer: Value) -> list[Mistake]:
    snap, op = view.snap0, view.op
    tpp = snap.tokens_per_page
    out = [Mistake(max(0, (len(op.tokens) + op.extra) // tpp - snap.free_count),
                   "a partial page needs no page: every started page takes a whole page", "page-too-few"),
           Mistake(max(0, ceil_div(len(op.tokens), tpp) - snap.free_count),
                   "forgetting the extra slots: they take pages too", "extra-ignored"),
           Mistake(max(0, needed(view) - snap.free_count - 1),
                   "the trie's rule (a cached prefix is shared, idle pages evicted): a base cache has neither",
                   "trie-rules"),
           Mistake(max(0, ceil_div(len(op.tokens), tpp) + ceil_div(op.extra, tpp) - snap.free_count),
                   "a page too many: tokens and extra slots share the last started page", "page-too-many")]
    out.append(Mistake(0 if answer else 1, "the pool looks full: but free pages are all it needs"
                       if not answer else "referenced pages can be taken: a base cache only has its free list",
                       "pool-full" if not answer else "referenced-evictable"))
    out.append(Mistake(needed(view), "the pages it needs, not how many it is short: the free pages count against "
                                      "them", "needed-not-short"))
    return around(view, "base_fail", answer, out, bound=needed(view))  # the shortfall was the largest offered 60%


BASE_FAIL = QuestionKind(
    "base_fail", "will it fail", "number", "page",
    applies=_fail_applies,
    ask=lambda v: f"{v.text()} Will it fail? Answer how many pages short it is (0: it succeeds).",
    answer=lambda v: max(0, needed(v) - v.snap0.free_count),
    bound=lambda v: needed(v),
    describe=lambda x: f"fails, {count(x, 'page')} short" if x else "succeeds",
    distractors=_fail_distractors,
    hints=lambda v: ("A base cache has no cached pages to evict: an acquire fits when the free list covers every "
                     "started page of tokens and extra slots.",
                     "Compare the pages it needs with the free count.",
                     f"It needs {count(needed(v), 'page')}; {are(v.snap0.free_count)} free."),
    why=lambda v, x: (f"It needs {count(needed(v), 'page')} and {are(v.snap0.free_count)} free, so "
                      + (f"it fails, {count(x, 'page')} short; a failed op changes nothing." if x else "it succeeds.")),
    diverge=lambda v, x: Parting(v.index, 0, f"you said {BASE_FAIL.describe(x)}: kvcore compared "
                                                f"{count(needed(v), 'page')} needed with "
                                                f"{v.snap0.free_count} free before changing anything."),
    weight=2,
)

BASE_KINDS = (BASE_FREE, BASE_TABLE, BASE_FAIL)
"""The base cache's kinds, in table order."""
