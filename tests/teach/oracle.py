# SPDX-License-Identifier: Apache-2.0
"""An oracle for the perform-the-op exercises, independent of kvviz's sub-step code.

For each op it runs kvcore itself (restored to the frame before, watched by its own
callback) and keeps kvcore's snapshot after every event; a move's shown state must be one of
them. The expected answer of every move is then derived from that state and the op alone,
by the rules written out here (the reference models' policy keys, the chained block keys),
never from kvviz's events or sentences:

- the walk's stop: follow the op's full blocks down the state's trie (hash: while the chained
  key is cached; base: nothing is shared);
- pages taken: the need computed from the op and the match, that many pages from the
  state's free list (or queue) front;
- the drop: of those pages, the ones the state shows still caching a block;
- the victim: the childless ref-0 non-root node with the smallest policy key;
- a heap swap: mid-sift the heap is a valid heap except around the sifting entry, so the
  one out-of-order parent/child pair (the smaller child when both children are smaller) is
  the next swap, and no such pair means the sift stops;
- dedup: the parent of block i is found by walking the allocation's tokens; a child holding
  block i's tokens is adopted, else a node is created.

It also counts what kvcore did (its own events) against the moves asked: one victim move per
eviction, one swap move per swap, one take (and on a hash cache one drop) move per take and
one take move (answer: nothing) per acquire or extend that fit without taking from a
non-empty free list, one adopt answer per dedup, one stop move per acquire that walked.
"""

from __future__ import annotations

import math
from collections import Counter

import kvcore
from kvcore import events as ev

from tests.kvcore.refmodel import policy_key
from tests.kvcore.refmodel_hash import key_hex


def kvcore_states(session, step: int):
    """kvcore's own states through frame ``step``'s op: the one before, then one per event;
    and the events (watched by this oracle's own callback)."""
    before = session.frame(step - 1).snapshot
    cache = kvcore.restore(before, recompute_last_token=session.config.recompute_last_token)
    states = [before]
    events = []

    def on_event(event) -> None:
        events.append(event)
        states.append(cache.snapshot())
    cache.watch(on_event)
    op = session.frame(step).op
    by_name = {a.name: a for a in cache.allocations.values()}
    try:
        if op.kind == "acquire":
            cache.acquire_pages_for_tokens(op.tokens, op.extra, name=op.name, priority=op.priority)
        elif op.kind == "publish":
            by_name[op.name].publish_pages_for_tokens(op.tokens)
        elif op.kind == "extend":
            alloc = by_name[op.name]
            tokens = tuple(alloc.tokens) + tuple(op.tokens) if op.append else op.tokens
            alloc.extend_allocation(tokens, op.extra)
        elif op.kind == "release":
            by_name[op.name].release_pages()
    except (kvcore.KVCacheError, KeyError):
        pass
    finally:
        cache.watch(None)
    return states, events


def _blocks(tokens, tpp):
    return [tuple(tokens[i * tpp:(i + 1) * tpp]) for i in range(len(tokens) // tpp)]


def _child(state, parent: int, block) -> int | None:
    for node in state.nodes:
        if node.id and (node.parent or 0) == parent and tuple(node.tokens) == block:
            return node.id
    return None


def walk_length(state, tokens, recompute_last: bool = False) -> int:
    """How many full blocks of ``tokens`` ``state`` has cached from block 0."""
    tpp = state.tokens_per_page
    if state.kind == "base":
        return 0
    if state.kind == "hash":
        cached = {b.key for b in state.blocks}
        limit = (len(tokens) - 1) // tpp if recompute_last and tokens else len(tokens) // tpp
        k = 0
        while k < limit and key_hex(tuple(tokens[:(k + 1) * tpp]), tpp) in cached:
            k += 1
        return k
    node, k = 0, 0
    for block in _blocks(tokens, tpp):
        child = _child(state, node, block)
        if child is None:
            break
        node, k = child, k + 1
    return k


def _need(session, step: int, state, matched: int) -> int:
    op = session.frame(step).op
    tpp = state.tokens_per_page
    if op.kind == "acquire":
        return math.ceil((len(op.tokens) - matched * tpp + op.extra) / tpp)
    after = session.frame(step).snapshot.allocation_named(op.name)
    held = next(a for a in state.allocations if a.name == op.name)
    return max(0, math.ceil((len(after.tokens) + op.extra) / tpp) - len(held.pages))


def expected(move, session, before) -> tuple:
    """The oracle's answer to ``move`` (a value as the exercise's choices hold them)."""
    state = move.state
    op = session.frame(move.step).op
    recompute = session.config.recompute_last_token
    if move.kind == "stop":
        return (walk_length(state, op.tokens, recompute),)
    if move.kind in ("take", "drop"):
        matched = walk_length(before, op.tokens, recompute) if op.kind == "acquire" else 0
        need = _need(session, move.step, state, matched)
        taken = tuple(state.free[:need])
        if move.kind == "take":
            return taken
        return tuple(p for p in taken if state.pages[p].state == "cached")
    if move.kind == "victim":
        leaves = [n for n in state.nodes if n.id and n.ref == 0 and not any(m.parent == n.id for m in state.nodes)]
        if not leaves:
            return ()
        return (min(leaves, key=lambda n: policy_key(state.policy, n)).id,)
    if move.kind == "swap":
        nodes = {n.id: n for n in state.nodes}
        heap = state.heap

        def key(slot):
            return policy_key(state.policy, nodes[heap[slot]])
        bad = [((c - 1) // 2, c) for c in range(1, len(heap)) if key(c) < key((c - 1) // 2)]
        if not bad:
            return ()
        parents = {p for p, _ in bad}
        assert len(parents) == 1, f"the heap is out of order in more than one place: {bad}"
        parent = parents.pop()
        return (parent, min((c for _, c in bad), key=key))
    if move.kind == "dedup":
        index = move.info("block")
        alloc = session.frame(move.step).snapshot.allocation_named(op.name)
        blocks = _blocks(alloc.tokens, state.tokens_per_page)
        node = 0
        for block in blocks[:index]:
            node = _child(state, node, block)
            assert node is not None, "the path above a published block is cached"
        assert node == move.info("parent"), "the move names the parent the tokens lead to"
        child = _child(state, node, blocks[index])
        return ("create",) if child is None else ("adopt", child)
    raise AssertionError(f"no oracle rule for move kind {move.kind}")


def problems(exercise, session, *, counts: bool = True) -> list[str]:
    """Every disagreement between the exercise and the oracle: a state kvcore never held, a
    right answer the rules do not give, a wrong choice that is in fact right, a count of
    moves that does not match what kvcore did (``counts``: the exercise holds every move of
    its ops)."""
    out: list[str] = []
    by_step: dict[int, list] = {}
    for move in exercise.moves:
        by_step.setdefault(move.step, []).append(move)
    for step, moves in by_step.items():
        states, events = kvcore_states(session, step)
        before = states[0]
        for move in moves:
            where = f"step {step} move {move.index} ({move.kind}, sub-step {move.anchor})"
            if move.state not in states:
                out.append(f"{where}: its state is none of kvcore's own states of the op")
                continue
            want = expected(move, session, before)
            right = [c for c in move.choices if c.right]
            if len(right) != 1:
                out.append(f"{where}: {len(right)} right choices")
                continue
            if right[0].value != want:
                out.append(f"{where}: graded {right[0].value} right, the oracle says {want}")
            if sum(c.value == want for c in move.choices) != 1:
                out.append(f"{where}: the oracle's answer {want} is not exactly one choice")
            if len(move.choices) < 2 or len({c.value for c in move.choices}) != len(move.choices):
                out.append(f"{where}: choices not distinct, or fewer than two")
        if counts:
            out += _counts(step, moves, events, session, states)
    return out


def _queue_caches(states, events, j: int) -> bool:
    """Whether the free queue held a page still caching a block before the run of block
    evictions that ends at event ``j`` (``states[k]`` is the state before event ``k``)."""
    while j > 0 and isinstance(events[j - 1], ev.BlockEvicted):
        j -= 1
    state = states[j]
    return any(state.pages[p].state == "cached" for p in state.free)


def _counts(step: int, moves, events, session, states) -> list[str]:
    kinds = Counter(type(e) for e in events)
    asked = Counter(m.kind for m in moves)
    op = session.frame(step).op
    design = session.frame(0).snapshot.kind
    out = []

    def differ(name, got, want):
        if got != want:
            out.append(f"step {step}: {got} {name} moves, kvcore did {want}")
    differ("victim", asked["victim"], kinds[ev.HeapPopped])
    differ("swap (a swap answer)", sum(1 for m in moves if m.kind == "swap" and m.answer.value != ()),
           kinds[ev.HeapSwapped])
    fits = op.kind in ("acquire", "extend") and kinds[ev.OpStarted] and not kinds[ev.Failed]
    # nothing taken: the free list then ends the op as it stood when the take would have come
    nothing_taken = fits and not kinds[ev.PagesTaken] and bool(session.frame(step).snapshot.free)
    differ("take", asked["take"], kinds[ev.PagesTaken] + nothing_taken)
    if design == "hash":  # a drop is asked where the queue still caches a block before the take's drops
        differ("drop", asked["drop"], sum(1 for j, e in enumerate(events) if isinstance(e, ev.PagesTaken)
                                          and _queue_caches(states, events, j)))
    differ("dedup (an adopt answer)", sum(1 for m in moves if m.kind == "dedup" and m.answer.value != ("create",)),
           kinds[ev.Deduplicated])
    full = len(op.tokens or ()) // session.frame(0).snapshot.tokens_per_page if op.kind == "acquire" else 0
    walked = bool(kinds[ev.Walked] or kinds[ev.Matched])
    cached = bool(states[0].blocks if design == "hash" else any(n.id for n in states[0].nodes))
    # asked where something is cached to match (base shares nothing; an empty cache gives 0 away)
    differ("stop", asked["stop"], 1 if full and walked and design != "base" and cached else 0)
    return out
