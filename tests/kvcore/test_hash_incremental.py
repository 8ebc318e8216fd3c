# SPDX-License-Identifier: Apache-2.0
"""The hash cache's snapshots and invariant checks cost what a step changed, and say what
the whole ones say.

Oracles: a snapshot read from the live structures (``_snapshot_from_live``) for the kept
rows, and ``check_snapshot`` for :class:`kvcore.incremental.IncrementalChecker`, at every
step of random runs that evict lazily, cache duplicates, extend, release, and start from a
restored cache whose free queue puts parents ahead of children (so blocks become
unreachable and reachable again). Planted bugs: snapshots corrupted in one row (a ref count,
a free-queue entry, a hash-map entry, a parent key, ...) at every step, and live caches
corrupted in a copy of the state, each caught at the step it happens. Work is counted in
bytes allocated (tracemalloc), never in seconds.
"""

from __future__ import annotations

import dataclasses
import os
import weakref

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvcore
from kvcore import HashBlockPagedAttentionCache, KVCacheError, PagePool, Snapshot, check_snapshot
from kvcore.blockkey import block_key
from kvcore.incremental import IncrementalChecker
from kvcore.snapshot import PageInfo, PageTable, QueuedPages, SnapshotChanges, touched_rows, untouched_free
from tests.kvcore.step_memory import largest_checked_step

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
EXAMPLES = {"dev": 40, "ci": 150, "soak": 10_000}.get(PROFILE, 150)

token = st.integers(0, 2)  # few distinct tokens: keys repeat, chains share prefixes
op_strategy = st.one_of(
    st.tuples(st.just("acquire"), st.lists(token, max_size=8), st.integers(0, 2)),
    st.tuples(st.just("publish"), st.integers(0, 20)),
    st.tuples(st.just("extend"), st.integers(0, 20), st.lists(token, max_size=4), st.integers(0, 2)),
    st.tuples(st.just("release"), st.integers(0, 20)),
    st.tuples(st.just("request"), st.lists(token, max_size=8)),  # acquire, publish, release
    st.tuples(st.just("race"), st.lists(token, min_size=1, max_size=6)),  # two publish one prefix: a duplicate
)


def apply(cache, held: list, op: tuple) -> None:
    """Apply one generated op (a failure changes nothing and is part of the run)."""
    kind = op[0]
    try:
        if kind == "acquire":
            held.append(cache.acquire_pages_for_tokens(op[1], op[2]))
        elif kind == "request":
            a = cache.acquire_pages_for_tokens(op[1])
            a.publish_pages_for_tokens()
            a.release_pages()
        elif kind == "race":
            first = cache.acquire_pages_for_tokens(op[1])
            second = cache.acquire_pages_for_tokens(op[1])
            held += [first, second]
            first.publish_pages_for_tokens()
            second.publish_pages_for_tokens()
        elif held:
            a = held[op[1] % len(held)]
            if kind == "publish":
                a.publish_pages_for_tokens()
            elif kind == "extend":
                a.extend_allocation(a.tokens + tuple(op[2]), op[3])
            else:
                held.remove(a)
                a.release_pages()
    except KVCacheError:
        pass


@st.composite
def runs(draw):
    """``(cache, held, ops)``: a recording hash cache, restored from a warmed-up one whose
    free queue was shuffled (parents may now be reused before their children), its live
    allocations, and the ops to run on it."""
    recompute = draw(st.booleans(), label="recompute_last_token")
    cache = HashBlockPagedAttentionCache(PagePool(draw(st.integers(1, 8), label="pages")),
                                         draw(st.integers(1, 3), label="tokens_per_page"),
                                         recompute_last_token=recompute)
    held: list = []
    for op in draw(st.lists(op_strategy, max_size=12), label="warm-up"):
        apply(cache, held, op)
    d = cache.snapshot().to_dict()
    d["free"] = draw(st.permutations(d["free"]), label="free queue")
    verify = draw(st.booleans(), label="verify")  # False: the restored cache keeps the snapshot's rows
    cache = HashBlockPagedAttentionCache.restore(Snapshot.from_dict(d), verify=verify, recompute_last_token=recompute)
    cache.record_events(True)
    return cache, [cache.allocations[i] for i in sorted(cache.allocations)], draw(
        st.lists(op_strategy, min_size=1, max_size=25), label="ops")


def _told_changes(before: Snapshot, after: Snapshot) -> tuple:
    """What an honest account of ``after`` against ``before`` lists: the block, page and
    allocation rows that are not the same objects."""
    def ids(old_rows, new_rows):
        old, new = {r.id: r for r in old_rows}, {r.id: r for r in new_rows}
        return tuple(sorted(i for i in old.keys() | new.keys() if old.get(i) is not new.get(i)))

    pages = tuple(p for p, (a, b) in enumerate(zip(before.pages, after.pages)) if a is not b)
    return ids(before.blocks, after.blocks), pages, ids(before.allocations, after.allocations)


# -- the kept rows: each snapshot is the live state's, and says what it changed ---------------


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run=runs())
def test_each_snapshot_equals_one_read_from_the_live_cache_and_names_every_row_it_changed(run):
    cache, held, ops = run
    before = cache.snapshot()
    for op in ops:
        apply(cache, held, op)
        cache.take_events()
        after = cache.snapshot()
        live = cache._snapshot_from_live()
        assert after == live and after.blocks == live.blocks  # reachability included
        changes = after._changes
        assert changes is not None and changes.before() is before, "every step took the kept rows"
        blocks, pages, allocations = _told_changes(before, after)
        assert set(blocks) <= set(changes.nodes) and set(pages) <= set(changes.pages)
        assert set(allocations) <= set(changes.allocations)
        before = after


def test_the_kept_rows_follow_a_parent_evicted_and_cached_again():
    """Unreachable and reachable again, through the kept rows: the one chain-wide change."""
    before, cut, joined = _cut_and_joined()
    assert cut._changes.before() is before and joined._changes.before() is cut
    assert [b.reachable for b in cut.blocks] == [False] and cut._changes.nodes == (1, 2)  # parent gone, child cut
    assert [b.tokens for b in joined.blocks if b.reachable] == [(3, 4), (1, 2), (3, 4)]  # old child, new chain
    assert joined._changes.nodes == (2, 3, 4)
    _, _, parent_only = _cut_and_joined(again=(1, 2))
    assert [(b.tokens, b.reachable) for b in parent_only.blocks] == [((3, 4), True), ((1, 2), True)]
    assert parent_only._changes.nodes == (2, 3)  # the old child's row changed: no copy of it was cached


def _cut_and_joined(again=(1, 2, 3, 4)):
    """Three snapshots of a chain (1, 2)(3, 4): cached (before), its parent's page reused (cut:
    the child unreachable), ``again`` cached (joined: with (1, 2), the child reachable again)."""
    cache = kvcore.make_cache("hash", 5, 2)
    chain = cache.acquire_pages_for_tokens([1, 2, 3, 4])
    chain.publish_pages_for_tokens()
    pages = chain.pages
    chain.release_pages()
    d = cache.snapshot().to_dict()
    d["free"] = [pages[0]] + [p for p in d["free"] if p not in pages] + [pages[1]]
    cache = HashBlockPagedAttentionCache.restore(Snapshot.from_dict(d))
    cache.record_events(True)
    before = cache.snapshot()
    cache.acquire_pages_for_tokens([5, 5])
    cut = cache.snapshot()
    cache.acquire_pages_for_tokens(list(again)).publish_pages_for_tokens()
    joined = cache.snapshot()
    assert joined == cache._snapshot_from_live() and joined.blocks == cache._snapshot_from_live().blocks
    return before, cut, joined


@pytest.mark.parametrize("step, again", [("cut", (1, 2, 3, 4)), ("joined", (1, 2, 3, 4)), ("joined", (1, 2))])
def test_a_child_whose_parent_changed_but_whose_row_did_not_is_caught(step, again):
    """The chain-wide invariant: the child's row is the one unchanged row that is wrong, so
    only re-checking the children of a key whose state changed finds it."""
    before, cut, joined = _cut_and_joined(again)
    old, new = (before, cut) if step == "cut" else (cut, joined)
    child_id = next(b.id for b in old.blocks if b.tokens == (3, 4))
    stale = dataclasses.replace(new, blocks=tuple(next(b for b in old.blocks if b.id == child_id)
                                                  if b.id == child_id else b for b in new.blocks))
    full = _caught_as_in_full(old, stale, step)
    assert [v.invariant for v in full] == [11] and "reachable" in full[0].message


# -- the incremental check: the full check's verdict, at every step ----------------------------


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run=runs())
def test_the_incremental_check_agrees_with_the_full_one_at_every_step(run):
    cache, held, ops = run
    checker = IncrementalChecker()
    assert checker.check(cache.snapshot()) == check_snapshot(cache.snapshot()) == []
    for op in ops:
        apply(cache, held, op)
        cache.take_events()
        snap = cache.snapshot()
        assert checker.check(snap) == check_snapshot(snap) == []
    assert checker.full_checks == 1  # a healthy run is checked in full once, then by what changed


def test_a_trusted_hash_keyframe_is_checked_on_from_what_changed():
    cache = kvcore.make_cache("hash", 8, 1)
    cache.record_events(True)
    cache.acquire_pages_for_tokens([1, 2, 3]).publish_pages_for_tokens()
    checker = IncrementalChecker()
    checker.trust(cache.snapshot())
    cache.acquire_pages_for_tokens([1, 2, 4])
    assert checker.check(cache.snapshot()) == [] and checker.full_checks == 0


# -- planted bugs: snapshots corrupted in one row -------------------------------------------


def _flip(key: str) -> str:
    return ("1" if key[0] == "0" else "0") + key[1:]


def _rekeyed(b, parent: str | None, tokens: tuple) -> object:
    """``b`` holding ``tokens`` under ``parent``, its key chained from them (a row whose own
    key is right, on a page whose holders need another)."""
    key = block_key(None if parent is None else bytes.fromhex(parent), tokens).hex()
    return dataclasses.replace(b, key=key, parent=parent, tokens=tokens)


def _corruptions(snap: Snapshot, before: Snapshot | None = None) -> list:
    """Snapshots differing from ``snap`` in one row or one queue entry (a few in two, where
    one would be caught by another row), each the way a broken cache or adapter could get
    it wrong: ``(what, snapshot)`` pairs. With ``before``, also each changed row put back
    as it was there (a row the cache forgot to update)."""
    out = []
    replace = dataclasses.replace
    blocks = list(snap.blocks)
    keys = [b.key for b in blocks]

    def with_block(i, row):
        return replace(snap, blocks=tuple(blocks[:i] + [row] + blocks[i + 1:]))

    for i, b in enumerate(blocks):
        other_page = next((p for p in range(snap.page_count) if p != b.page), b.page)
        rows = [("hash-map entry: key", replace(b, key=_flip(b.key))),
                ("hash-map entry: re-keyed", _rekeyed(b, b.parent, b.tokens[:-1] + (b.tokens[-1] + 1,))),
                ("parent key", replace(b, parent=_flip(b.parent) if b.parent else keys[i - 1] if i else _flip(b.key))),
                ("parent key: none", replace(b, parent=None)),
                ("parent key: re-keyed", _rekeyed(b, keys[i - 1] if i and keys[i - 1] != b.parent else None, b.tokens)),
                ("hash-map entry: page", replace(b, page=other_page)),
                ("tokens", replace(b, tokens=b.tokens[:-1] + (b.tokens[-1] + 1,))),
                ("reachable flipped", replace(b, reachable=not b.reachable)),
                ("id", replace(b, id=snap.next_seq))]
        for what, row in rows:
            if row != b:
                out.append((f"block {b.id} {what}", with_block(i, row)))
        out.append((f"block {b.id} gone", replace(snap, blocks=tuple(blocks[:i] + blocks[i + 1:]))))
    pages = list(touched_rows(snap.pages))

    def with_page(p, row):
        rows = tuple(pages[:p] + [row] + pages[p + 1:])
        return replace(snap, pages=PageTable(rows, snap.page_count) if isinstance(snap.pages, PageTable) else rows)

    for p, info in enumerate(pages):
        rows = [(f"ref {info.ref + 1}", PageInfo(p, info.state, info.owner, info.node, info.ref + 1))]
        if info.ref:
            rows.append((f"ref {info.ref - 1}", PageInfo(p, info.state, info.owner, info.node, info.ref - 1)))
        rows += [(state, PageInfo(p, state, info.owner, info.node, info.ref))
                 for state in ("free", "owned", "cached") if state != info.state]
        rows.append(("owner", PageInfo(p, info.state, 99 if info.owner is None else None, info.node, info.ref)))
        for what, row in rows:
            out.append((f"page {p} {what}", with_page(p, row)))
    explicit, run = untouched_free(snap.free)
    held = [p for p in range(min(snap.page_count, len(pages) + 1)) if p not in snap.free]
    if isinstance(snap.free, QueuedPages):
        head, start, tail = snap.free.queue_parts()
        queues = [(f"free-queue link to held page {p}", (head, start, tail + (p,))) for p in held]
        for i, p in enumerate(tail):
            queues.append((f"free-queue link to {p} dropped", (head, start, tail[:i] + tail[i + 1:])))
            queues.append((f"free-queue page {p} twice", (head + (p,), start, tail)))
        if run:
            queues.append(("never-used run starts one later: a page leaked", (head, start + 1, tail)))
            queues.append(("free-queue page listed and in the never-used run", (head, start, tail + (start,))))
        if start:
            queues.append(("never-used run starts one earlier, over a used page", (head, start - 1, tail)))
        for what, (h, u, t) in queues:
            out.append((what, replace(snap, free=QueuedPages(h, u, snap.page_count, t))))
    else:
        free = list(snap.free)
        for p in held:
            out.append((f"free-queue link to held page {p}", replace(snap, free=tuple(free + [p]))))
        for i in range(len(free)):
            out.append((f"free-queue link to {free[i]} dropped", replace(snap, free=tuple(free[:i] + free[i + 1:]))))
            out.append((f"free-queue page {free[i]} twice", replace(snap, free=tuple(free + [free[i]]))))
    allocations = list(snap.allocations)

    def with_allocation(i, row):
        return replace(snap, allocations=tuple(allocations[:i] + [row] + allocations[i + 1:]))

    for i, a in enumerate(allocations):
        rows = [("published+1", replace(a, published=a.published + 1)), ("released", replace(a, released=True)),
                ("tokens", replace(a, tokens=a.tokens + (0,) * (snap.tokens_per_page + 1)))]
        if a.pages:
            rows += [("page twice", replace(a, pages=a.pages + a.pages[:1])), ("reversed", replace(a, pages=a.pages[::-1])),
                     ("a page dropped", replace(a, pages=a.pages[:-1]))]
        if a.published:
            rows.append(("published-1", replace(a, published=a.published - 1)))
        for what, row in rows:
            if row != a:
                out.append((f"allocation {a.id} {what}", with_allocation(i, row)))
        out.append((f"allocation {a.id} gone", replace(snap, allocations=tuple(allocations[:i] + allocations[i + 1:]))))
        for other in allocations:  # another's unpublished page in this one's tail, its row counting both
            for p in other.pages[other.published:] if other.id != a.id else ():
                bad = with_allocation(i, replace(a, pages=a.pages + (p,)))
                info = pages[p]
                for owner in (info.owner, a.id):  # its row naming either holder
                    rows2 = tuple(pages[:p] + [PageInfo(p, info.state, owner, info.node, info.ref + 1)] + pages[p + 1:])
                    out.append((f"allocation {a.id} shares {other.label}'s unpublished page {p} (row: owner {owner})",
                                replace(bad, pages=PageTable(rows2, snap.page_count)
                                        if isinstance(snap.pages, PageTable) else rows2)))
    if before is not None:  # rows the cache forgot to update
        old_blocks = {b.id: b for b in before.blocks}
        for i, b in enumerate(blocks):
            if b.id in old_blocks and old_blocks[b.id] is not b:
                out.append((f"block {b.id} as it was", with_block(i, old_blocks[b.id])))
        old_pages = touched_rows(before.pages)
        for p in range(min(len(pages), len(old_pages))):
            if old_pages[p] is not pages[p]:
                out.append((f"page {p} as it was", with_page(p, old_pages[p])))
        old_allocations = {a.id: a for a in before.allocations}
        for i, a in enumerate(allocations):
            if a.id in old_allocations and old_allocations[a.id] is not a:
                out.append((f"allocation {a.id} as it was", with_allocation(i, old_allocations[a.id])))
    return out


def _with_account(before: Snapshot, bad: Snapshot) -> Snapshot:
    """``bad`` with an honest account against ``before`` (as the cache would tell it)."""
    object.__setattr__(bad, "_changes", SnapshotChanges(weakref.ref(before), *_told_changes(before, bad)))
    return bad


def _caught_as_in_full(before: Snapshot, bad: Snapshot, what: str) -> list:
    full = check_snapshot(bad)
    for told in (False, True):  # compared by identity, then through an account
        probe = IncrementalChecker()
        assert probe.check_full(before) == []
        copy = _with_account(before, dataclasses.replace(bad)) if told else dataclasses.replace(bad)
        assert probe.check(copy) == full, (what, told)
    return full


@settings(max_examples=EXAMPLES // 3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run=runs(), data=st.data())
def test_a_snapshot_corrupted_in_one_row_gets_the_full_checks_violations_at_that_step(run, data):
    cache, held, ops = run
    before = cache.snapshot()
    for op in ops:
        apply(cache, held, op)
        cache.take_events()
        after = cache.snapshot()
        corruptions = _corruptions(after, before)
        if corruptions:
            for what, bad in data.draw(st.lists(st.sampled_from(corruptions), max_size=3, unique_by=lambda c: c[0]),
                                       label="corruptions"):
                _caught_as_in_full(before, bad, what)
        before = after


def _rich_state(page_count: int = 12):
    """A healthy hash cache whose last step touched a bit of everything: a held chain with an
    owned tail, a duplicate, a released chain queued and cached, an eviction and (in a pool
    of 12) an unreachable block. Returns the cache and the snapshots before and after that
    last step. Above 8,192 pages the snapshots' queue is lazy, with a never-used run."""
    cache = kvcore.make_cache("hash", page_count, 2)
    chain = cache.acquire_pages_for_tokens([7, 7, 8, 8])
    chain.publish_pages_for_tokens()
    pages = chain.pages
    chain.release_pages()
    if page_count <= 12:  # the parent's page first in the queue: it is reused before its child's
        d = cache.snapshot().to_dict()
        d["free"] = [pages[0]] + [p for p in d["free"] if p not in pages] + [pages[1]]
        cache = HashBlockPagedAttentionCache.restore(Snapshot.from_dict(d))
    cache.record_events(True)
    cache.acquire_pages_for_tokens([9])  # evicts (7, 7) in a pool of 12: (8, 8) stays cached, unreachable
    a = cache.acquire_pages_for_tokens([1, 2, 3, 4, 5], name="a")
    c = cache.acquire_pages_for_tokens([1, 2, 3, 4], name="c")
    a.publish_pages_for_tokens()
    c.publish_pages_for_tokens()  # a duplicate of a's blocks
    b = cache.acquire_pages_for_tokens([1, 2, 6, 6], 1, name="b")
    b.publish_pages_for_tokens()
    before = cache.snapshot()
    b.release_pages()
    after = cache.snapshot()
    assert check_snapshot(after) == [] and any(not blk.reachable for blk in after.blocks) == (page_count <= 12)
    return cache, before, after


@pytest.mark.parametrize("page_count", [12, 9_000])
def test_every_corruption_of_a_rich_hash_state_is_caught_as_the_full_check_catches_it(page_count):
    _, before, after = _rich_state(page_count)
    assert isinstance(after.free, QueuedPages) == (page_count > 8_192)
    corruptions = _corruptions(after, before)
    violated = sum(bool(_caught_as_in_full(before, bad, what)) for what, bad in corruptions)
    assert len(corruptions) > 100 and violated >= 0.9 * len(corruptions), (violated, len(corruptions))


# -- planted bugs: live caches corrupted in a copy of the state ------------------------------


def _held_page(cache, name: str, i: int) -> int:
    return next(a for a in cache.allocations.values() if a.name == name).pages[i]


def _ref_count(cache):
    """One ref count off by one, on a page the step's allocation holds (so re-read)."""
    page = _held_page(cache, "a", 0)
    cache._refs[page] += 1
    cache._rows.stale.add(page)


def _free_queue_link_dropped(cache):
    """A queued cached page unlinked from the free queue: ref 0, in no queue (leaked)."""
    page = next(iter(cache._pool._back))
    del cache._pool._back[page]


def _free_queue_link_to_held_page(cache):
    """A held page linked into the free queue's tail: it could be handed out twice."""
    cache._pool._back[_held_page(cache, "a", 1)] = True


def _hash_map_entry(cache):
    """The key map's entry for a's first block points at c's second block, then a request
    matches through it: its block table holds a block its tokens do not spell."""
    first_key = next(b.key for b in cache._blocks.values() if b.tokens == (1, 2))
    wrong = next(b for b in cache._blocks.values() if b.tokens == (3, 4))
    cache._by_key[first_key] = [wrong]
    cache.acquire_pages_for_tokens([1, 2, 9])


def _parent_key(cache):
    """The chain keys an allocation publishes from, with its first key corrupted: publish
    caches block 1 under the right key but names a parent that does not chain to it."""
    d = cache.acquire_pages_for_tokens([1, 2, 3, 5], name="d")
    cache._keys[d.id][0] = bytes(32)
    d.publish_pages_for_tokens()


@pytest.mark.parametrize("plant", [_ref_count, _free_queue_link_dropped, _free_queue_link_to_held_page, _hash_map_entry,
                                   _parent_key])
def test_a_bug_planted_in_a_copy_of_the_live_state_is_caught_at_the_step_it_happens(plant):
    original, before, _ = _rich_state()
    cache = HashBlockPagedAttentionCache.restore(before, verify=False)  # a copy: its rows are before's
    cache.record_events(True)
    checker = IncrementalChecker()
    checker.trust(before)
    cache.acquire_pages_for_tokens([4, 4])  # one healthy step first
    healthy = cache.snapshot()
    assert healthy._changes is not None and checker.check(healthy) == [] and checker.full_checks == 0
    cache.acquire_pages_for_tokens([1, 2, 3], name="step")  # the step the bug happens in
    plant(cache)
    snap = cache.snapshot()
    assert snap._changes is not None and snap._changes.before() is healthy  # the kept rows made it
    full = check_snapshot(snap)
    assert full, "the planted bug is a violation"
    assert checker.check(snap) == full
    assert original.check_invariants() == []  # the state copied from is untouched


# -- the cost of a step: what it changed, counted in bytes ------------------------------------


def _largest_step_allocation(page_count: int, warm_blocks: int = 0) -> int:
    """The most bytes one step (the op, its snapshot, the incremental check) allocates at its
    peak on a recording hash cache, after ``warm_blocks`` blocks were cached and released
    (state the step does not touch). The first step is left out (it sizes shared tables)."""
    cache = kvcore.make_cache("hash", page_count, 4)
    cache.record_events(True)
    for i in range(warm_blocks // 8):  # chains of 8 blocks, distinct, released: cached and queued
        a = cache.acquire_pages_for_tokens([10_000 + i] * 32)
        a.publish_pages_for_tokens()
        a.release_pages()
    cache.take_events()
    checker = IncrementalChecker()
    assert checker.check(cache.snapshot()) == []
    held = []
    steps = []
    for i in range(20):
        tokens = [i % 4, 1, 2, 3] + [1000 + i] * 12  # 4 pages of 4 tokens, the first shared by some
        steps.append(lambda tokens=tokens: held.append(cache.acquire_pages_for_tokens(tokens, 8)))
        steps.append(lambda: held[-1].publish_pages_for_tokens())
        steps.append(lambda i=i: held.pop(0).release_pages() if i % 2 else None)
    largest = largest_checked_step(cache, checker, steps)
    assert checker.full_checks == 1
    return largest


def test_a_hash_step_allocates_the_same_on_a_pool_of_1k_10k_or_100k_pages():
    small, middle, large = map(_largest_step_allocation, (1_000, 10_000, 100_000))
    assert small > 1000  # the measure sees a step's work
    # A 1k pool's snapshot lists its pages and queue (plain tuples, 8 KB each); a listed 10k
    # or 100k pool would allocate 80 KB or 800 KB more per step.
    assert middle <= small + 16 * 1024, (small, middle)
    assert large <= small + 16 * 1024, (small, large)


def test_a_hash_step_costs_what_it_changed_not_the_blocks_cached_before_it():
    """The same steps after 80 or 4,000 blocks were cached: the snapshot copies its row
    arrays (8 bytes per row, in C) but builds no row it did not change, and the check reads
    no row it did not change (a rebuilt block row with its two keys is over 300 bytes, and a
    full check's tables over 100 bytes per block)."""
    few, many = _largest_step_allocation(8_192, 80), _largest_step_allocation(8_192, 4_000)
    assert many <= few + 24 * (4_000 - 80) + 16 * 1024, (few, many)
