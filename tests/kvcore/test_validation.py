# SPDX-License-Identifier: Apache-2.0
"""Arguments and snapshots kvcore refuses: each refusal is a KVCacheError
raised before anything changes, and ``restore(verify=True)`` gives back an equal cache or
refuses the snapshot with the reason."""

from __future__ import annotations

import dataclasses
import json
import resource
from enum import IntEnum

import pytest

import kvcore
from kvcore import (
    BasePagedAttentionCache,
    InvalidConfiguration,
    InvalidOperation,
    KVCacheError,
    PagePool,
    Snapshot,
    SnapshotFormatError,
    TriePagedAttentionCache,
)

KINDS = [TriePagedAttentionCache, BasePagedAttentionCache]


@pytest.fixture(params=KINDS, ids=["trie", "base"])
def cache(request):
    """A cache with one live allocation ``a`` (tokens 1..6, 2 pages of 4) and some history."""
    cache = request.param(PagePool(8), 4)
    done = cache.acquire_pages_for_tokens([11, 12, 13, 14])
    done.publish_pages_for_tokens()
    done.release_pages()
    live = cache.acquire_pages_for_tokens([1, 2, 3, 4, 5, 6], 2, name="a")
    live.publish_pages_for_tokens()
    return cache


def refused_without_change(cache, operation, *args, **kwargs) -> InvalidOperation:
    before = cache.snapshot()
    with pytest.raises(InvalidOperation) as raised:
        operation(*args, **kwargs)
    assert cache.snapshot() == before  # the clock included
    assert cache.check_invariants() == []
    return raised.value


# ------------------------------------------------------------------------------ tokens

JUNK_TOKENS = [
    pytest.param([[1]], id="a nested list"),
    pytest.param([1, 2, 3, 4, [5]], id="a list after a full page"),
    pytest.param([1.0, 2.0, 3.0, 4.0], id="floats equal to ints"),
    pytest.param([True, 2, 3, 4], id="a bool"),
    pytest.param([1, 2, None], id="None"),
    pytest.param("abcd", id="a string"),
    pytest.param(5, id="not a sequence"),
]


@pytest.mark.parametrize("tokens", JUNK_TOKENS)
def test_acquire_refuses_tokens_that_are_not_ints(cache, tokens):
    error = refused_without_change(cache, cache.acquire_pages_for_tokens, tokens)
    assert "acquire" in str(error) and "integers" in str(error)


@pytest.mark.parametrize("tokens", JUNK_TOKENS)
def test_extend_refuses_tokens_that_are_not_ints(cache, tokens):
    allocation = cache.allocations[1]
    refused_without_change(cache, allocation.extend_allocation, tokens)
    if isinstance(tokens, list):  # also when the junk only continues the allocation's own tokens
        refused_without_change(cache, allocation.extend_allocation, list(allocation.tokens) + tokens)


@pytest.mark.parametrize("tokens", JUNK_TOKENS)
def test_publish_refuses_tokens_that_are_not_ints(cache, tokens):
    allocation = cache.allocations[1]
    refused_without_change(cache, allocation.publish_pages_for_tokens, tokens)
    if isinstance(tokens, list):
        refused_without_change(cache, allocation.publish_pages_for_tokens, list(allocation.tokens) + tokens)


def test_extend_with_nested_lists_is_refused_before_the_clock_moves():
    cache = TriePagedAttentionCache(PagePool(4), 1)
    allocation = cache.acquire_pages_for_tokens([])
    clock = cache.clock
    with pytest.raises(InvalidOperation):
        allocation.extend_allocation([[1], [2]])
    assert cache.clock == clock and allocation.tokens == ()


def test_a_float_never_shares_the_pages_of_the_int_it_equals():
    cache = TriePagedAttentionCache(PagePool(4), 2)
    first = cache.acquire_pages_for_tokens([1, 2])
    first.publish_pages_for_tokens()
    with pytest.raises(InvalidOperation):
        cache.acquire_pages_for_tokens([1.0, 2.0])
    assert cache.snapshot().stats.hit_tokens == 0


def test_int_subclasses_are_stored_as_plain_ints():
    class Token(IntEnum):
        BOS = 1
        EOS = 2

    cache = TriePagedAttentionCache(PagePool(4), 2)
    allocation = cache.acquire_pages_for_tokens([Token.BOS, Token.EOS, 3])
    assert [type(t) for t in allocation.tokens] == [int, int, int]
    snap = cache.snapshot()
    assert Snapshot.from_dict(json.loads(snap.to_json())) == snap


def test_huge_and_negative_ints_are_tokens_too():
    cache = TriePagedAttentionCache(PagePool(4), 2)
    allocation = cache.acquire_pages_for_tokens([-5, 10**30])
    allocation.publish_pages_for_tokens()
    snap = cache.snapshot()
    assert Snapshot.from_dict(json.loads(snap.to_json())) == snap
    assert cache.check_invariants() == []


@pytest.mark.parametrize("name", [3, b"a", ["a"]])
def test_acquire_refuses_a_name_that_is_not_a_string(cache, name):
    refused_without_change(cache, cache.acquire_pages_for_tokens, [1], name=name)


def test_a_snapshot_with_float_tokens_is_a_format_error():
    cache = TriePagedAttentionCache(PagePool(4), 2)
    cache.acquire_pages_for_tokens([1, 2, 3]).publish_pages_for_tokens()
    d = cache.snapshot().to_dict()
    d["allocations"][0]["tokens"][0] = 1.0
    with pytest.raises(SnapshotFormatError, match=r"allocations\[0\].tokens\[0\]"):
        Snapshot.from_dict(d)
    d = cache.snapshot().to_dict()
    d["nodes"][1][2] = [1.0, 2]
    with pytest.raises(SnapshotFormatError, match=r"nodes\[1\]"):
        Snapshot.from_dict(d)


# ---------------------------------------------------------------------- configuration


@pytest.mark.parametrize("tokens_per_page", [0, -1, True, 2.0, "4"])
@pytest.mark.parametrize("cls", KINDS)
def test_a_cache_refuses_tokens_per_page_that_is_not_a_positive_int(cls, tokens_per_page):
    with pytest.raises(InvalidConfiguration) as raised:
        cls(PagePool(4), tokens_per_page)
    assert isinstance(raised.value, KVCacheError) and isinstance(raised.value, ValueError)


@pytest.mark.parametrize("page_count", [-1, True, 3.0])
def test_a_pool_refuses_a_page_count_that_is_not_a_non_negative_int(page_count):
    with pytest.raises(InvalidConfiguration):
        PagePool(page_count)


@pytest.mark.parametrize("free_order, needle", [
    ([0, 0, 1], "page 0 twice"),
    ([0, 3], "not a page"),
    ([-1, 0], "not a page"),
    ([True], "not a page"),
    ([0.0], "not a page"),
])
def test_a_pool_refuses_a_free_order_that_would_hand_a_page_out_twice_or_one_it_lacks(free_order, needle):
    with pytest.raises(InvalidConfiguration, match=needle):
        PagePool(3, free_order=free_order)


# --------------------------------------------------------------------------- restore


def _healthy_trie() -> TriePagedAttentionCache:
    """Two live allocations (one sharing the other's first page), an evictable chain."""
    cache = TriePagedAttentionCache(PagePool(10), 2)
    gone = cache.acquire_pages_for_tokens([7, 8, 9, 10], name="gone")
    gone.publish_pages_for_tokens()
    gone.release_pages()
    a = cache.acquire_pages_for_tokens([1, 2, 3, 4, 5], name="a")
    a.publish_pages_for_tokens()
    cache.acquire_pages_for_tokens([1, 2, 6], name="b")
    return cache


def _healthy_base() -> BasePagedAttentionCache:
    cache = BasePagedAttentionCache(PagePool(6), 2)
    cache.acquire_pages_for_tokens([1, 2, 3], name="a")
    cache.acquire_pages_for_tokens([4], name="b")
    return cache


def _node(d, tokens):
    return next(n for n in d["nodes"] if n[2] == tokens)


def _root(d):
    return next(n for n in d["nodes"] if n[1] is None)


def _set(row, index, value):
    row[index] = value


CORRUPT_TRIE = [
    ("next_allocation_id at a live id", lambda d: d.update(next_allocation_id=d["allocations"][-1]["id"])),
    ("next_allocation_id below a live id", lambda d: d.update(next_allocation_id=0)),
    ("two allocations with one id", lambda d: d["allocations"][1].update(id=d["allocations"][0]["id"])),
    ("allocations out of order", lambda d: d["allocations"].reverse()),
    ("a released allocation row", lambda d: d["allocations"][0].update(released=True)),
    ("a negative page in the free list", lambda d: d["free"].__setitem__(0, -1)),
    ("a negative page in a block table", lambda d: d["allocations"][1]["pages"].__setitem__(1, -1)),
    ("a negative page on a node", lambda d: _set(_node(d, [3, 4]), 3, -1)),
    ("a page row numbered wrongly", lambda d: _set(d["pages"][0], 0, -1)),
    ("a page row with the wrong ref", lambda d: _set(d["pages"][_node(d, [1, 2])[3]], 4, 7)),
    ("a page row with an owner for a free page", lambda d: _set(d["pages"][d["free"][0]], 2, 0)),
    ("a negative ref", lambda d: _set(_node(d, [7, 8]), 4, -1)),
    ("root ref 2", lambda d: _set(_root(d), 4, 2)),
    ("root with another id", lambda d: _set(_root(d), 0, 99)),
    ("published -2", lambda d: d["allocations"][0].update(published=-2)),
    ("published beyond the pages", lambda d: d["allocations"][0].update(published=9)),
    ("negative hit tokens", lambda d: d["allocations"][0].update(hit_tokens=-2)),
    ("next_seq -1", lambda d: d.update(next_seq=-1)),
    ("next_seq at a node id", lambda d: d.update(next_seq=max(n[0] for n in d["nodes"]))),
    ("the root in the heap", lambda d: d["heap"].append(_root(d)[0])),
    ("a negative clock", lambda d: d.update(clock=-1)),
    ("a negative last_access", lambda d: _set(_node(d, [9, 10]), 5, -3)),
    ("negative stats", lambda d: d["stats"].update(evictions=-1)),
    ("an unknown policy", lambda d: d.update(policy="arc")),  # lfu and the rest are policies now
    ("a page count far above the page table", lambda d: d.update(page_count=2**40)),
    ("a page count below the page table", lambda d: d.update(page_count=d["page_count"] - 1)),
]

CORRUPT_BASE = [
    ("trie nodes in a base snapshot", lambda d: d["nodes"].append([0, None, [], None, 0, 0, 0])),
    ("a heap in a base snapshot", lambda d: d.update(heap=[0])),
    ("next_seq 7 in a base snapshot", lambda d: d.update(next_seq=7)),
    ("published pages in a base snapshot", lambda d: d["allocations"][0].update(published=1)),
    ("hit tokens in a base snapshot", lambda d: d["allocations"][0].update(hit_tokens=2)),
    ("next_allocation_id below a live id", lambda d: d.update(next_allocation_id=1)),
    ("a page count far above the page table", lambda d: d.update(page_count=2**40)),
    ("two page rows swapped", lambda d: d["pages"].reverse()),
]


def _limit_memory(megabytes: int):
    """Cap the address space for the block (a mutant that allocates per page fails fast)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    used = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
    cap = used + megabytes * 2**20
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    return soft, hard


@pytest.mark.parametrize("case, change", CORRUPT_TRIE, ids=[c for c, _ in CORRUPT_TRIE])
def test_restore_refuses_each_corrupt_trie_snapshot(case, change):
    d = _healthy_trie().snapshot().to_dict()
    change(d)
    snap = Snapshot.from_dict(d)
    limits = _limit_memory(256)
    try:
        with pytest.raises(InvalidOperation, match="cannot restore"):
            TriePagedAttentionCache.restore(snap)
    finally:
        resource.setrlimit(resource.RLIMIT_AS, limits)


@pytest.mark.parametrize("case, change", CORRUPT_BASE, ids=[c for c, _ in CORRUPT_BASE])
def test_restore_refuses_each_corrupt_base_snapshot(case, change):
    d = _healthy_base().snapshot().to_dict()
    change(d)
    snap = Snapshot.from_dict(d)
    limits = _limit_memory(256)
    try:
        with pytest.raises(InvalidOperation, match="cannot restore"):
            BasePagedAttentionCache.restore(snap)
    finally:
        resource.setrlimit(resource.RLIMIT_AS, limits)


@pytest.mark.parametrize("make", [_healthy_trie, _healthy_base], ids=["trie", "base"])
def test_restore_gives_back_an_equal_cache_when_it_accepts(make):
    snap = make().snapshot()
    restored = kvcore.restore(Snapshot.from_dict(json.loads(snap.to_json())))
    assert restored.snapshot() == snap


def test_restore_says_which_field_differs_once_restored():
    d = _healthy_base().snapshot().to_dict()
    d["heap"] = [0]  # a base cache has no heap; nothing before the final comparison minds
    with pytest.raises(InvalidOperation, match=r"heap has 1 entries in the snapshot but 0 once restored"):
        BasePagedAttentionCache.restore(Snapshot.from_dict(d))


def test_any_order_of_the_free_list_is_a_state_restore_keeps():
    d = _healthy_base().snapshot().to_dict()
    d["free"].reverse()
    restored = BasePagedAttentionCache.restore(Snapshot.from_dict(d))
    assert list(restored.snapshot().free) == d["free"]


def test_unknown_kinds_are_kv_cache_errors():
    with pytest.raises(InvalidConfiguration):
        kvcore.make_cache("lfu", 4, 2)
    snap = _healthy_base().snapshot()
    import dataclasses

    with pytest.raises(InvalidOperation, match="unknown cache kind"):
        kvcore.restore(dataclasses.replace(snap, kind="radix"))


@pytest.mark.parametrize("cls", KINDS)
def test_tokens_whose_iteration_fails_are_refused_not_half_read(cls):
    def tokens():
        yield 1
        raise TypeError("the tokenizer broke")

    cache = cls(PagePool(4), 2)
    with pytest.raises(InvalidOperation, match="sequence of integers"):
        cache.acquire_pages_for_tokens(tokens())
    assert cache.clock == 0 and cache.allocations == {}


# ------------------------------------------------- bounds a restored cache keeps

# Every field a packed heap key depends on (kvcore/heap.py): last_access under 2**64, seq
# under 2**40. A restored clock or next_seq at the edge would let the next op build a key
# that overflows its field, after which the cache refuses its own snapshot.
PACKED_KEY_EDGES = [
    pytest.param("clock", 2**64, id="clock 2**64"),
    pytest.param("clock", 2**64 - 1, id="clock 2**64 - 1 (one tick from the edge)"),
    pytest.param("next_seq", 2**40, id="next_seq 2**40"),
    pytest.param("next_seq", 2**40 + 5, id="next_seq above 2**40"),
]


@pytest.mark.parametrize("field, value", PACKED_KEY_EDGES)
@pytest.mark.parametrize("make", [_healthy_trie, _healthy_base], ids=["trie", "base"])
def test_restore_refuses_a_clock_or_next_seq_a_packed_heap_key_cannot_hold(make, field, value):
    snap = dataclasses.replace(make().snapshot(), **{field: value})
    with pytest.raises(InvalidOperation, match=rf"cannot restore the snapshot: {field} is {value}; it must be"):
        type(make()).restore(snap)


def test_restore_refuses_a_hash_snapshot_whose_clock_a_packed_key_cannot_hold():
    cache = kvcore.make_cache("hash", 4, 2)
    cache.acquire_pages_for_tokens([1, 2, 3]).release_pages()
    snap = dataclasses.replace(cache.snapshot(), clock=2**64)
    with pytest.raises(InvalidOperation, match="clock is 18446744073709551616; it must be"):
        kvcore.restore(snap)


@pytest.mark.parametrize("field", ["clock", "next_seq"])
def test_a_cache_restored_near_the_largest_accepted_clock_or_next_seq_keeps_working(field):
    """Restored at the edge, later keys still fit their fields (the invariants hold); a
    little below it, the cache's own later snapshot restores too."""
    from kvcore.verify import FIELD_LIMITS

    snap = _healthy_trie().snapshot()
    for below in (1, 100):
        restored = TriePagedAttentionCache.restore(dataclasses.replace(snap, **{field: FIELD_LIMITS[field] - below}))
        for i in range(3):  # new nodes, touches, evictions: keys built from the edge values
            a = restored.acquire_pages_for_tokens([50 + i, 51, 52, 53], name=f"n{i}")
            a.publish_pages_for_tokens()
            a.release_pages()
        assert restored.check_invariants() == []
        if below == 100:
            assert TriePagedAttentionCache.restore(restored.snapshot()).snapshot() == restored.snapshot()


# ------------------------------------------- pools a cache cannot be born with


@pytest.mark.parametrize("page_count", [2**63, 2**63 + 1, 2**70])
def test_a_pool_refuses_a_page_count_of_2_to_the_63_or_more_naming_the_limit(page_count):
    with pytest.raises(InvalidConfiguration, match=r"page_count must be below 2\*\*63"):
        PagePool(page_count)


def test_the_largest_pool_accepted_hands_out_its_pages():
    pool = PagePool(2**63 - 1)
    cache = TriePagedAttentionCache(pool, 1)
    a = cache.acquire_pages_for_tokens([1, 2])
    assert a.pages == (0, 1)
    assert cache.check_invariants() == []


@pytest.mark.parametrize("make", [TriePagedAttentionCache, BasePagedAttentionCache,
                                  kvcore.HashBlockPagedAttentionCache], ids=["trie", "base", "hash"])
def test_a_cache_refuses_a_pool_whose_free_order_leaves_pages_out(make):
    pool = PagePool(4, free_order=[2, 0])  # pages 1 and 3 would be nowhere: invariant 1 from birth
    with pytest.raises(InvalidConfiguration, match=r"2 of its 4 pages free.*pages 1 and 3 are not"):
        make(pool, 2)


@pytest.mark.parametrize("make", [TriePagedAttentionCache, BasePagedAttentionCache,
                                  kvcore.HashBlockPagedAttentionCache], ids=["trie", "base", "hash"])
def test_a_cache_refuses_a_pool_another_cache_already_takes_pages_from(make):
    pool = PagePool(4)
    first = make(pool, 2)
    with pytest.raises(InvalidConfiguration, match="already the page pool of another cache"):
        make(pool, 2)
    first.acquire_pages_for_tokens([1, 2, 3])
    assert first.check_invariants() == []


def test_a_full_free_order_in_any_order_is_still_a_pool_a_cache_can_use():
    cache = TriePagedAttentionCache(PagePool(4, free_order=[3, 1, 0, 2]), 2)
    assert cache.acquire_pages_for_tokens([1, 2, 3]).pages == (3, 1)
    assert cache.check_invariants() == []
