# SPDX-License-Identifier: Apache-2.0
"""The quiz tests' own oracle: every question kind's answer and every distractor's mistake,
recomputed from the snapshots before and after a step (and, for the sub-step kinds, kvcore's
fine events), with code that shares nothing with kvviz.teach.quiz.

The quiz reads events, kvcore's counters and its own simulations; this reads block tables,
page states and parent links, so a quiz that computed an answer or labelled a mistake wrongly
disagrees here.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import replace

from kvviz.core.demos import demo_names, load_demo
from kvviz.teach.generate import generate
from kvviz.core.scenario import parse_scenario
from kvviz.core.session import Session

POLICIES = ("lru", "fifo", "lfu", "mru", "filo", "slru", "priority")
LEVELS = ("easy", "medium", "hard")
SOAK = os.environ.get("HYPOTHESIS_PROFILE") == "soak"

#: Each policy's key, written here from DESIGN.md's table (not kvcore's code).
KEYS = {
    "lru": lambda n: (n.last_access, n.seq),
    "fifo": lambda n: (n.seq,),
    "lfu": lambda n: (n.hits, n.last_access, n.seq),
    "mru": lambda n: (-n.last_access, n.seq),
    "filo": lambda n: (-n.seq,),
    "slru": lambda n: (0 if n.hits < 2 else 1, n.last_access, n.seq),
    "priority": lambda n: (n.priority, n.last_access, n.seq),
}


# -- sessions ---------------------------------------------------------------------------------

def demo_sessions():
    for name in demo_names():
        yield name, Session.from_scenario(load_demo(name))


def random_session(seed: int, level: str, kind: str = "trie", policy: str = "lru") -> Session:
    scenario = parse_scenario(generate(seed, level), f"<seed {seed} {level}>")
    return Session.from_scenario(replace(scenario, config=replace(scenario.config, kind=kind, policy=policy)))


def random_sessions(per_config: int):
    """``per_config`` seeded scenarios for each trie policy, the base cache and the hash cache."""
    configs = [("trie", p) for p in POLICIES] + [("base", "lru"), ("hash", "lru")]
    for seed in range(per_config):  # configurations interleaved: every design comes early
        for kind, policy in configs:
            level = LEVELS[seed % 3]
            yield f"{kind}/{policy}/{level}/{seed}", random_session(seed, level, kind, policy)


# -- the trie, read from snapshots -------------------------------------------------------------

def ceil(a, b):
    return (a + b - 1) // b


def path_of(snap, tokens):
    """Nodes of ``snap`` matched by the full pages of ``tokens``, root first."""
    tpp = snap.tokens_per_page
    path, parent = [], 0
    for i in range(len(tokens) // tpp):
        block = tuple(tokens[i * tpp:(i + 1) * tpp])
        match = [n for n in snap.nodes if n.parent == parent and n.tokens == block]
        if not match:
            break
        path.append(match[0])
        parent = match[0].id
    return path


def refs(snap, node):
    """A node's ref counted from the block tables: live allocations whose published pages hold it."""
    return sum(1 for a in snap.allocations if not a.released and node.page in a.pages[:a.published])


def kids(snap):
    return Counter(n.parent for n in snap.nodes if n.parent is not None)


def demand(snap, op):
    """(new pages needed, nodes protected by the op's own match) for an acquire or extend."""
    tpp = snap.tokens_per_page
    if op.kind == "acquire":
        path = path_of(snap, op.tokens) if snap.kind == "trie" else []
        return ceil(len(op.tokens) - len(path) * tpp + op.extra, tpp), {n.id for n in path}
    mine = snap.allocation_named(op.name)
    tokens = mine.tokens + op.tokens if op.append else op.tokens
    return max(0, ceil(len(tokens) + op.extra, tpp) - len(mine.pages)), set()


def evictions(snap, protected, count, key=None, cascade=True, every_ref0=False):
    """The first ``count`` victims when popping the smallest ``key`` (default the policy's) among
    childless ref-0 nodes, a parent joining when left childless (``cascade``); ``every_ref0``:
    every ref-0 node counts as a candidate from the start (the cascade-early learner)."""
    key = key or KEYS[snap.policy]
    alive = {n.id: n for n in snap.nodes if n.parent is not None}
    children = kids(snap)
    if every_ref0:
        pool = sorted((n for n in alive.values() if refs(snap, n) == 0 and n.id not in protected), key=key)
        return pool[:count]
    ready = {i for i, n in alive.items() if children[i] == 0 and refs(snap, n) == 0 and i not in protected}
    order = []
    while ready and len(order) < count:
        victim = min((alive[i] for i in ready), key=key)
        order.append(victim)
        ready.discard(victim.id)
        children[victim.parent] -= 1
        parent = alive.get(victim.parent)
        if cascade and parent is not None and children[parent.id] == 0 and refs(snap, parent) == 0 \
                and parent.id not in protected:
            ready.add(parent.id)
    return order


def shown_pages(question):
    return [int(p) for p in re.findall(r"page (\d+) \(node", question.text)]


# -- hash, read from snapshots ----------------------------------------------------------------

def hash_match(snap, tokens):
    """Pages the hash cache matches: block i cached with these tokens after block i-1's key."""
    tpp = snap.tokens_per_page
    pages, parent = [], None
    for i in range(len(tokens) // tpp):
        chunk = tuple(tokens[i * tpp:(i + 1) * tpp])
        found = [b for b in snap.blocks if b.tokens == chunk and b.parent == parent]
        if not found:
            break
        first = min(found, key=lambda b: b.id)
        pages.append(first.page)
        parent = first.key
    return pages


def queue(snap):
    return list(snap.free)


def holds_block(snap, page):
    return any(b.page == page for b in snap.blocks)


# -- the answers ---------------------------------------------------------------------------------

def answer(view, question):
    """The correct answer to ``question`` at ``view``, recomputed without the quiz's code."""
    s0, s1, op = view.before.snapshot, view.after.snapshot, view.after.op
    kind = question.kind
    if kind in ("victim", "victims"):
        needed, protected = demand(s0, op)
        order = evictions(s0, protected, needed - len(s0.free))
        assert all(s1.node(n.id) is None for n in order)  # the simulation agrees with what was left
        return order[0].page if kind == "victim" else tuple(n.page for n in order[:min(3, len(order))])
    if kind == "hits":
        return len(path_of(s0, op.tokens)) * s0.tokens_per_page
    if kind == "block_table":
        if op.kind == "publish":
            mine = s0.allocation_named(op.name)
            path = path_of(s1, s1.allocation_named(op.name).tokens)
            return tuple(n.page for n in path) + tuple(mine.pages[len(path):])
        needed, protected = demand(s0, op)
        mine = s0.allocation_named(op.name)
        start = tuple(n.page for n in path_of(s0, op.tokens)) if op.kind == "acquire" else mine.pages
        taken = min(needed, len(s0.free))
        victims = evictions(s0, protected, needed - taken)
        return tuple(start) + tuple(s0.free[:taken]) + tuple(n.page for n in victims)
    if kind == "ref":
        return refs(s1, s1.node(int(re.search(r"node (\d+)", question.text).group(1))))
    if kind in ("fail", "base_fail"):
        if view.after.error is None:
            return 0
        need, free, evictable = map(int, re.search(r"need (\d+) pages?: (\d+) free, (\d+) evictable",
                                                   view.after.error.message).groups())
        return need - free - evictable
    if kind in ("free", "base_free"):
        return sum(1 for p in s1.pages if p.state == "free")
    if kind == "evictable":
        return tuple(sorted(p for p in shown_pages(question) if refs(s1, s1.node_for_page(p)) == 0))
    if kind == "next_swap":
        return asked_sift(view, question)[2]
    if kind == "new_candidates":
        kid = kids(s1)
        return tuple(sorted(n.page for n in s1.nodes if n.parent is not None and kid[n.id] == 0
                            and refs(s1, n) == 0 and s0.node(n.id) is not None
                            and not (kids(s0)[n.id] == 0 and refs(s0, n) == 0)))
    if kind == "dedup_blocks":
        before, after = s0.allocation_named(op.name), s1.allocation_named(op.name)
        return tuple(i for i in range(len(before.pages)) if before.pages[i] != after.pages[i])
    if kind == "base_table":
        return tuple(s0.free[:ceil(len(op.tokens) + op.extra, s0.tokens_per_page)])
    if kind == "hash_hits":
        return len(hash_match(s0, op.tokens)) * s0.tokens_per_page
    if kind in ("hash_table", "queue_drop"):
        matched = hash_match(s0, op.tokens)
        rest = [p for p in queue(s0) if p not in matched]
        new = ceil(len(op.tokens) + op.extra, s0.tokens_per_page) - len(matched)
        if kind == "hash_table":
            return tuple(matched) + tuple(rest[:new])
        return next(p for p in rest[:new] if holds_block(s0, p))
    raise AssertionError(f"the oracle does not know the kind {kind!r}: add it")


def top_replaced(state, view):
    """The heap array right after the pop: the popped node's parent takes slot 0 when the pop
    leaves it childless with ref 0 (and not matched by the op), else the last slot moves up."""
    heap = list(state.heap)
    victim = state.node(heap[0])
    parent = state.node(victim.parent)
    _, protected = demand(view.before.snapshot, view.after.op)
    if parent is not None and parent.parent is not None and kids(state)[parent.id] == 1 \
            and refs(state, parent) == 0 and parent.id not in protected:
        heap[0] = parent.id
    else:
        heap[0] = heap.pop()
    return heap


def sifts(view):
    """Each pop of the op whose heap held three entries or more before it: (which pop of the
    op it is, 1-based; kvcore's state right before it; the heap array right after it; the node
    the moved node swaps with first, itself if none), by sifting down that heap array."""
    from kvcore import events as ev

    steps = view.session.substeps(view.index)
    out, nth = [], 0
    for s in steps:
        if not isinstance(s.event, ev.HeapPopped):
            continue
        nth += 1
        state = steps.state(s.index - 1) if s.index else view.before.snapshot
        if len(state.heap) < 3:
            continue
        heap = top_replaced(state, view)
        keys = [KEYS[state.policy](state.node(n)) for n in heap[:3]]
        best = min((i for i in (1, 2) if i < len(heap)), key=keys.__getitem__, default=None)
        out.append((nth, state, heap, heap[best] if best is not None and keys[best] < keys[0] else heap[0]))
    return out


ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")


def asked_sift(view, question):
    """The pop a next-swap question asks about, as its text names it ("the heap before the
    second eviction"): it must be the op's first such pop or its first whose sift moves."""
    word = re.search(r"before the (\w+) eviction", question.text).group(1)
    nth = ORDINALS.index(word) + 1 if word in ORDINALS else int(word.removesuffix("th"))
    every = sifts(view)
    moving = next((s for s in every if s[3] != s[2][0]), None)
    asked = next(s for s in every if s[0] == nth)
    assert asked in (every[0], moving), f"the question asks about pop {nth}: neither the first nor the first moving"
    return asked[1:]


# -- the mistakes: each tag's value, by kind, recomputed -----------------------------------------

def _key_desc(snap):
    return lambda n: tuple(-x for x in KEYS[snap.policy](n))


def _victim_mistakes(view, q):
    s0, op = view.before.snapshot, view.after.op
    needed, protected = demand(s0, op)
    count = 1 if q.kind == "victim" else len(q.answer)
    kid = kids(s0)

    def pages(order):
        return order[0].page if q.kind == "victim" else tuple(n.page for n in order)

    out = {
        "largest-key": pages(evictions(s0, protected, count, key=_key_desc(s0))),
        "lru-only": pages(evictions(s0, protected, count, key=KEYS["lru"])),
        "seq-only": pages(evictions(s0, protected, count, key=lambda n: n.seq)),
        "cascade-early": pages(evictions(s0, protected, count, every_ref0=True)) if q.kind == "victims" else None,
        "cascade-missed": pages(evictions(s0, protected, count, cascade=False)) if q.kind == "victims" else None,
        "page-order": tuple(sorted(q.answer)) if q.kind == "victims" else None,
    }
    if q.kind == "victim":
        interior = [n for n in s0.nodes if n.parent is not None and refs(s0, n) == 0 and kid[n.id]
                    and n.id not in protected]
        held = [n for n in s0.nodes if n.parent is not None and refs(s0, n) and not kid[n.id]]
        own = [s0.node(i) for i in protected if refs(s0, s0.node(i)) == 0 and not kid[i]]
        key = KEYS[s0.policy]
        out["interior"] = min(interior, key=key).page if interior else None
        out["referenced-leaf"] = min(held, key=key).page if held else None
        out["own-prefix"] = min(own, key=lambda n: n.id).page if own else None
        out["free-page"] = s0.free[0] if s0.free else None
    return out


def mistake_value(view, q, tag):
    """What a learner who made mistake ``tag`` answers to ``q`` (the test's own computation)."""
    s0, s1, op = view.before.snapshot, view.after.snapshot, view.after.op
    tpp = s0.tokens_per_page
    kind = q.kind
    if kind in ("victim", "victims"):
        return _victim_mistakes(view, q)[tag]
    if kind in ("hits", "hash_hits"):
        tokens = op.tokens
        if tag == "whole-request":
            return len(tokens)
        if tag == "no-sharing":
            return 0
        slips = {"pages-not-tokens": q.answer // tpp, "page-short": q.answer - tpp, "page-past-miss": q.answer + tpp}
        if tag in slips:  # the right walk, miscounted
            return slips[tag]
        if tag == "prefix-ignored":
            cached = {n.tokens for n in s0.nodes if n.parent is not None} | {b.tokens for b in s0.blocks}
            k = 0
            while (k + 1) * tpp <= len(tokens) and tuple(tokens[k * tpp:(k + 1) * tpp]) in cached:
                k += 1
            return k * tpp
        if tag == "partial-page":
            path = path_of(s0, tokens)
            parent = path[-1].id if path else 0
            start = len(path) * tpp
            best = 0
            for n in s0.nodes:
                if n.parent == parent:
                    same = 0
                    while same < len(n.tokens) and start + same < len(tokens) and n.tokens[same] == tokens[start + same]:
                        same += 1
                    best = max(best, same)
            return start + best
        if tag == "unpublished":
            best = 0
            for a in s0.allocations:
                if len(a.tokens) // tpp > a.published:
                    same = 0
                    while same < min(len(a.tokens), len(tokens)) and a.tokens[same] == tokens[same]:
                        same += 1
                    best = max(best, same // tpp * tpp)
            return best
        if tag == "eager-eviction":
            live = 0
            for page in hash_match(s0, tokens):
                if s0.pages[page].ref == 0:
                    break
                live += 1
            return live * tpp
    if kind in ("block_table", "hash_table", "base_table"):
        ans = q.answer
        if tag == "page-order":
            return tuple(sorted(ans))
        if tag == "page-too-few":
            return ans[:-1]
        if kind == "block_table":
            mine = s0.allocation_named(op.name)
            if tag == "own-copies":
                return tuple(mine.pages)
            kept = len(path_of(s0, op.tokens)) if op.kind == "acquire" else len(mine.pages)
            if tag == "largest-key":
                needed, protected = demand(s0, op)
                k = needed - min(needed, len(s0.free))
                return ans[:len(ans) - k] + tuple(n.page for n in evictions(s0, protected, k, key=_key_desc(s0)))
            if tag == "copied-hits":
                return tuple(s0.free[:len(ans)])
            if tag == "page-too-many":
                return ans[:kept] + tuple(s0.free[:len(ans) - kept + 1])
        if kind == "base_table":
            if tag == "queue-tail":
                return tuple(s0.free[len(s0.free) - len(ans):])
            if tag == "page-too-many":
                return tuple(s0.free[:len(ans) + 1])
            if tag == "page-too-few":
                return tuple(s0.free[:len(ans) - 1])
        if kind == "hash_table":
            matched = hash_match(s0, op.tokens)
            rest = [p for p in queue(s0) if p not in matched]
            if tag == "queue-tail":
                new = len(ans) - len(matched)
                return tuple(matched) + tuple(rest[len(rest) - new:])
            if tag == "copied-hits":
                return tuple(rest[:len(ans)])
    if kind == "ref":
        node = int(re.search(r"node (\d+)", q.text).group(1))
        before = refs(s0, s0.node(node))
        return {"ref-unchanged": before, "ref-zeroed": 0, "ref-up": before + 1, "ref-one": 1,
                "ref-twice": q.answer + 1, "ref-all": len(s1.allocations), "ref-hits": s1.node(node).hits}[tag]
    if kind in ("fail", "base_fail"):
        needed, protected = demand(s0, op)
        free = len(s0.free)
        ref0 = 0 if kind == "base_fail" else sum(1 for n in s0.nodes if n.parent is not None and refs(s0, n) == 0)
        evictable = ref0 - sum(1 for i in protected if refs(s0, s0.node(i)) == 0)
        if op.kind == "acquire":
            rest = len(op.tokens) - len(protected) * tpp + op.extra
            bare = ceil(len(op.tokens) - len(protected) * tpp, tpp)
        else:
            mine = s0.allocation_named(op.name)
            tokens = mine.tokens + op.tokens if op.append else op.tokens
            rest = len(tokens) + op.extra - len(mine.pages) * tpp
            bare = ceil(len(tokens), tpp) - len(mine.pages)
        table = {"free-only": max(0, needed - free), "page-too-few": max(0, rest // tpp - free - evictable),
                 "extra-ignored": max(0, bare - free - evictable),
                 "own-prefix": max(0, needed - free - ref0),
                 "referenced-evictable": 0, "pool-full": 1, "needed-not-short": needed, "trie-rules": max(0, needed - free - 1),
                 "page-too-many": max(0, ceil(len(op.tokens), tpp) + ceil(op.extra, tpp) - free - evictable),
                 "copied-hits": max(0, ceil(len(op.tokens) + op.extra, tpp) - free - ref0)}
        return table[tag]
    if kind in ("free", "base_free"):
        free = len(s0.free)
        mine = s0.allocation_named(op.name)
        if tag == "unchanged":
            return free
        if tag == "release-all":
            return free + len(mine.pages)
        if tag == "release-unshared":
            return q.answer + sum(1 for p in mine.pages[:mine.published] if refs(s0, s0.node_for_page(p)) == 1)
        if tag == "release-candidates":
            kid = kids(s0)
            return q.answer + sum(1 for p in mine.pages[:mine.published]
                                  if refs(s0, s0.node_for_page(p)) == 1 and kid[s0.node_for_page(p).id] == 0)
        if tag == "evicted-stay":
            return q.answer + sum(1 for n in s0.nodes if n.parent is not None and s1.node(n.id) is None)
        if tag == "both-copies":
            return free + 2 * (q.answer - free)
        if tag == "trie-rules" and op.kind == "release":
            return free + len(mine.pages) - mine.published
        if tag == "trie-rules":
            return max(0, free - ceil(len(op.tokens) + op.extra, tpp) + 1)
        if kind == "base_free" and tag == "page-too-few" and op.kind == "release":
            return free + len(mine.pages) - 1
        if kind == "base_free" and tag == "release-extra":
            return free + len(mine.pages) + 1
        if kind == "base_free" and tag == "page-too-many":
            return max(0, free - ceil(len(op.tokens), tpp) - ceil(op.extra, tpp))
        matched = len(path_of(s0, op.tokens)) * tpp if op.kind == "acquire" and s0.kind == "trie" else 0
        if op.kind == "acquire":
            total = len(op.tokens) - matched
        else:
            tokens = mine.tokens + op.tokens if op.append else op.tokens
            total = len(tokens) - len(mine.pages) * tpp
        if tag == "hits-taken":
            return max(0, free - ceil(len(op.tokens) + op.extra, tpp))
        if tag == "page-too-few":
            return max(0, free - max(0, (total + op.extra) // tpp))
        if tag == "extra-ignored":
            return max(0, free - max(0, ceil(total, tpp)))
    if kind == "evictable":
        shown = [s1.node_for_page(p) for p in shown_pages(q)]
        kid = kids(s1)
        return tuple(sorted({
            "candidates-only": [n.page for n in shown if kid[n.id] == 0 and refs(s1, n) == 0],
            "every-leaf": [n.page for n in shown if kid[n.id] == 0],
            "before-op": [n.page for n in shown if s0.node(n.id) is not None and refs(s0, s0.node(n.id)) == 0],
            "all": [n.page for n in shown], "none": [],
        }[tag]))
    if kind == "next_swap":
        state, heap, _ = asked_sift(view, q)
        moved = heap[0]
        children = [heap[i] for i in (1, 2) if i < len(heap)]
        key = KEYS[state.policy]
        deeper = heap[3:7]
        assert state.heap[0] not in heap, "the popped node has left the heap"
        return {"wrong-child": max(children, key=lambda n: key(state.node(n))) if children else None,
                "swap-always": min(children, key=lambda n: key(state.node(n))) if children else None,
                "no-swap": moved,
                "skips-a-level": min(deeper, key=lambda n: key(state.node(n))) if deeper else None,
                "seq-only": min(heap[1:7], key=lambda n: state.node(n).seq) if heap[1:] else None}[tag]
    if kind == "new_candidates":
        mine = s0.allocation_named(op.name)
        path = [s0.node_for_page(p) for p in mine.pages[:mine.published]]
        kid = kids(s0)
        return tuple(sorted({
            "interior": [n.page for n in path if refs(s0, n) == 1],
            "referenced-parent": [n.page for n in path if kid[n.id] == 0],
            "none": [], "grandparent": [path[-2].page] if len(path) >= 2 else [],
        }[tag]))
    if kind == "dedup_blocks":
        mine = s0.allocation_named(op.name)
        full = len(mine.tokens) // tpp
        return {"all": tuple(range(mine.published, full)), "none": (), "first-block": (mine.published,),
                "last-block": (full - 1,)}[tag]
    if kind == "queue_drop":
        matched = hash_match(s0, op.tokens) if op.kind == "acquire" else []
        rest = [p for p in queue(s0) if p not in matched]
        cached = [p for p in rest if holds_block(s0, p)]
        return {"queue-tail": cached[-1] if cached else None, "first-cached": min(cached) if cached else None,
                "free-page": rest[0] if rest and not holds_block(s0, rest[0]) else None,
                "referenced-leaf": min((b.page for b in s0.blocks if s0.pages[b.page].ref > 0), default=None),
                }[tag]
    raise AssertionError(f"the oracle cannot re-derive mistake {tag!r} of kind {kind!r}: add it")
