# SPDX-License-Identifier: Apache-2.0
"""Hash-cache snapshots: exact round trips, faithful restores, and an invariant checker
that catches each kind of corruption (and leaves trie and base snapshots as they were)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kvcore
from kvcore import HashBlockPagedAttentionCache, InvalidOperation, QueuedPages, Snapshot, SnapshotFormatError
from kvcore import check_snapshot

#: The top-level fields a trie or base snapshot has always serialised (bundles depend on them).
TRIE_FIELDS = {"schema", "kind", "policy", "tokens_per_page", "page_count", "clock", "next_seq",
               "next_allocation_id", "pages", "free", "nodes", "allocations", "heap", "stats"}


def _state():
    """A healthy hash cache: a held chain with an owned tail (a), a released chain sharing
    its first block (b: cached at the tail, its uncached page at the head), a duplicate (c)."""
    cache = kvcore.make_cache("hash", 10, 2)
    a = cache.acquire_pages_for_tokens([1, 2, 3, 4, 5], name="a")
    c = cache.acquire_pages_for_tokens([1, 2, 3, 4], name="c")
    a.publish_pages_for_tokens()
    c.publish_pages_for_tokens()  # a duplicate of a's two blocks
    b = cache.acquire_pages_for_tokens([1, 2, 7, 8], 1, name="b")
    b.publish_pages_for_tokens()
    b.release_pages()
    return cache


ops = st.lists(st.tuples(st.sampled_from(["acquire", "publish", "extend", "release", "cycle"]),
                         st.lists(st.integers(0, 2), max_size=7), st.integers(0, 2), st.integers(0, 5)),
               max_size=30)


def _apply(cache, held: list, op) -> None:
    kind, tokens, extra, pick = op
    try:
        if kind == "acquire" or not held:
            held.append(cache.acquire_pages_for_tokens(tokens, extra))
        elif kind == "cycle":
            a = cache.acquire_pages_for_tokens(tokens, extra)
            a.publish_pages_for_tokens()
            a.release_pages()
        elif kind == "publish":
            held[pick % len(held)].publish_pages_for_tokens()
        elif kind == "extend":
            a = held[pick % len(held)]
            a.extend_allocation(list(a.tokens) + tokens, extra)
        else:
            held.pop(pick % len(held)).release_pages()
    except kvcore.KVCacheError:
        pass


# -- serialisation --------------------------------------------------------------------------


def test_a_hash_snapshot_round_trips_exactly_through_json():
    snap = _state().snapshot()
    d = json.loads(json.dumps(snap.to_dict()))
    back = Snapshot.from_dict(d)
    assert back == snap and back.to_dict() == snap.to_dict() and back.digest() == snap.digest()
    assert snap.to_json() == json.dumps(snap.to_dict(), sort_keys=True, separators=(",", ":"))
    assert set(d) == TRIE_FIELDS | {"blocks"}


@pytest.mark.parametrize("kind", ["trie", "base"])
def test_trie_and_base_snapshots_serialise_the_fields_they_always_had(kind):
    cache = kvcore.make_cache(kind, 8, 2)
    a = cache.acquire_pages_for_tokens([1, 2, 3])
    a.publish_pages_for_tokens()
    d = cache.snapshot().to_dict()
    assert set(d) == TRIE_FIELDS and cache.snapshot().blocks == ()
    assert Snapshot.from_dict(d).blocks == ()


def test_the_snapshot_says_which_page_holds_which_block_and_the_free_queue_in_order():
    cache = _state()
    snap = cache.snapshot()
    b_pages = [p for p in snap.free if snap.block_for_page(p) is not None]
    assert [snap.block_for_page(p).tokens for p in b_pages] == [(7, 8)]  # (1, 2) is held by a and c
    assert snap.free[0] not in [b.page for b in snap.blocks]  # b's uncached page went to the head
    for b in snap.blocks:
        assert snap.pages[b.page].node == b.id and snap.block(b.id) is b
    keys = [b.key for b in snap.blocks]
    assert len(keys) == 5 and len(set(keys)) == 3  # a's two blocks, c's two duplicates, b's second block


@pytest.mark.parametrize("row, field, path", [
    (lambda d: d["blocks"][0].__setitem__(2, 7), "key", "blocks[0][2]"),
    (lambda d: d["blocks"][0].__setitem__(3, 7), "parent", "blocks[0][3]"),
    (lambda d: d["blocks"][0].__setitem__(5, 1), "reachable", "blocks[0][5]"),
    (lambda d: d["blocks"][0].__setitem__(4, ["x"]), "tokens", "blocks[0][4]"),
    (lambda d: d.pop("blocks"), "blocks", "blocks"),
])
def test_from_dict_names_the_field_of_a_malformed_block_row(row, field, path):
    d = _state().snapshot().to_dict()
    row(d)
    with pytest.raises(SnapshotFormatError) as info:
        Snapshot.from_dict(d)
    assert info.value.path == path


def test_a_lazy_free_queue_equals_the_tuple_it_stands_for():
    queue = QueuedPages((7, 3), 5, 8, (1, 2))
    assert queue == (7, 3, 5, 6, 7, 1, 2) and hash(queue) == hash((7, 3, 5, 6, 7, 1, 2))
    assert (queue[1], queue[2], queue[-1], len(queue)) == (3, 5, 2, 7)
    assert 6 in queue and 1 in queue and 4 not in queue


# -- restore --------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(page_count=st.integers(1, 8), tpp=st.integers(1, 3), before=ops, after=ops, through_json=st.booleans())
def test_restore_then_continue_equals_continue(page_count, tpp, before, after, through_json):
    live = kvcore.make_cache("hash", page_count, tpp)
    held: list = []
    for op in before:
        _apply(live, held, op)
    snap = live.snapshot()
    if through_json:
        snap = Snapshot.from_dict(json.loads(snap.to_json()))
    restored = kvcore.restore(snap)
    assert restored.snapshot() == live.snapshot()
    twins = [restored.allocations[a.id] for a in held]
    for op in after:
        _apply(live, held, op)
        _apply(restored, twins, op)
        assert restored.snapshot() == live.snapshot()
    assert restored.check_invariants() == []


def test_restore_refuses_a_tampered_hash_snapshot_saying_why():
    d = _state().snapshot().to_dict()
    d["free"] = d["free"][1:]  # a ref-0 page vanishes from the queue
    with pytest.raises(InvalidOperation, match="not in the free queue"):
        HashBlockPagedAttentionCache.restore(Snapshot.from_dict(d))


def test_restore_refuses_a_trie_snapshot_and_a_trie_refuses_a_hash_one():
    trie = kvcore.make_cache("trie", 4, 2).snapshot()
    with pytest.raises(InvalidOperation, match="a trie snapshot cannot be restored as a hash cache"):
        HashBlockPagedAttentionCache.restore(trie)
    with pytest.raises(InvalidOperation, match="a hash snapshot cannot be restored as a trie cache"):
        kvcore.TriePagedAttentionCache.restore(_state().snapshot())


# -- invariants -----------------------------------------------------------------------------


def _tampered(change):
    d = _state().snapshot().to_dict()
    change(d)
    return check_snapshot(Snapshot.from_dict(d))


def _alloc(d, name):
    return next(a for a in d["allocations"] if a["name"] == name)


def _block_on(d, page):
    return next(b for b in d["blocks"] if b[1] == page)


def _queued_block(d):
    return next(b for b in d["blocks"] if b[1] in d["free"])


def _swap_row(d, page, row):
    d["pages"][page] = [page, *row]


def test_a_healthy_hash_cache_has_no_violations():
    assert _state().check_invariants() == []


@pytest.mark.parametrize("change, invariant, needle", [
    (lambda d: d["free"].pop(0), 7, "not in the free queue"),
    (lambda d: d["free"].append(d["free"][0]), 7, "twice"),
    (lambda d: d["free"].append(_alloc(d, "a")["pages"][2]), 7, "is in the free queue but has ref 1"),
    (lambda d: d["pages"][_alloc(d, "a")["pages"][0]].__setitem__(4, 3), 8, "has ref 3 but 1 live allocations"),
    (lambda d: _queued_block(d).__setitem__(4, [7]), 9, "not a full page"),
    (lambda d: _queued_block(d).__setitem__(4, [8, 7]), 9, "chain to"),
    (lambda d: _queued_block(d).__setitem__(0, 99), 9, "not between 1 and next_seq"),
    (lambda d: d["blocks"].append(list(_queued_block(d)[:1]) + [_alloc(d, "a")["pages"][0]]
                                  + list(_queued_block(d)[2:])), 9, "holds two cached blocks"),
    (lambda d: _block_on(d, _alloc(d, "c")["pages"][1]).__setitem__(2, _queued_block(d)[2]), 9, "chain to"),
    (lambda d: _alloc(d, "c").update(pages=[_alloc(d, "c")["pages"][1], _alloc(d, "c")["pages"][0]]), 10,
     "not the block its tokens spell"),
    (lambda d: _alloc(d, "a").update(published=2, pages=_alloc(d, "a")["pages"][:2] + [_alloc(d, "c")["pages"][0]]),
     10, "holds cached block"),
    (lambda d: _alloc(d, "c").update(tokens=[1, 2, 3, 4, 5], pages=_alloc(d, "c")["pages"]
                                     + [_alloc(d, "a")["pages"][2]]), 10, "only a cached page is shared"),
    (lambda d: _alloc(d, "a").update(tokens=list(range(9))), 10, "only 3 pages"),
    (lambda d: _queued_block(d).__setitem__(5, False), 11, "says reachable=False"),
    (lambda d: _swap_row(d, d["free"][0], ["cached", None, 1, 0]), 11, "page table says page"),
    (lambda d: d["nodes"].append([0, None, [], None, 0, 0, 0]), 11, "no trie"),
    (lambda d: _alloc(d, "a").update(released=True), 6, "still holds pages"),
])
def test_each_kind_of_hash_corruption_is_reported_with_its_invariant(change, invariant, needle):
    violations = _tampered(change)
    assert any(v.invariant == invariant and needle in v.message for v in violations), violations


def test_a_hash_violation_names_its_invariant_and_the_pages_involved():
    d = _state().snapshot().to_dict()
    page = _alloc(d, "a")["pages"][2]
    d["free"].append(page)
    (v,) = [v for v in check_snapshot(Snapshot.from_dict(d)) if v.invariant == 7]
    assert v.pages == (page,)
    assert str(v).startswith("invariant 7 (hash: the free queue holds exactly the ref-0 pages, each once)")


def test_a_block_whose_parent_is_not_cached_must_say_unreachable():
    d = _state().snapshot().to_dict()
    child = _queued_block(d)  # b's (7, 8): its parent (1, 2) is cached, so it is reachable
    child[3] = "0" * 64  # a parent key nobody caches (the key check fails too: the chain changed)
    kinds = {(v.invariant, "reachable" in v.message) for v in check_snapshot(Snapshot.from_dict(d))}
    assert (11, True) in kinds and (9, False) in kinds


def test_the_live_key_map_queue_flags_and_ref_table_are_checked_too():
    cache = _state()
    block = next(iter(cache._blocks.values()))
    cache._by_key[block.key].append(block)  # listed twice
    assert any(v.invariant == 9 for v in cache.check_invariants())
    cache = _state()
    front = cache._pool._front  # b's uncached page, at the head
    front[next(iter(front))] = True  # flagged as holding a block it does not hold
    assert any(v.invariant == 7 and "flag" in v.message for v in cache.check_invariants())
    cache = _state()
    cache._refs[next(iter(cache._refs))] = 0
    assert any(v.invariant == 8 and "ref table" in v.message for v in cache.check_invariants())


def _paths(value, path=()):
    """Every (container, key) inside a JSON value, for mutating one of them."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield value, k
            yield from _paths(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield value, i
            yield from _paths(v, path + (i,))


junk = st.one_of(st.integers(-3, 12), st.none(), st.booleans(), st.text(max_size=3), st.just("0" * 64),
                 st.lists(st.integers(-1, 9), max_size=3))


@settings(max_examples=300, deadline=None)
@given(data=st.data(), changes=st.integers(1, 3))
def test_a_mangled_hash_snapshot_is_refused_in_words_or_restored_exactly(data, changes):
    """Whatever a bundle holds: a format error, a refusal, or a restore equal to it. Never
    another exception (the CLI turns these two into one line and exit 2)."""
    d = _state().snapshot().to_dict()
    for _ in range(changes):
        places = list(_paths(d))
        container, key = data.draw(st.sampled_from(places), label="where")
        container[key] = data.draw(junk, label="what")
    try:
        snap = Snapshot.from_dict(d)
    except SnapshotFormatError:
        return
    try:
        restored = HashBlockPagedAttentionCache.restore(snap)
    except InvalidOperation:
        return
    assert restored.snapshot() == snap
