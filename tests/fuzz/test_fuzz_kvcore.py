# SPDX-License-Identifier: Apache-2.0
"""Fuzz kvcore's promises: misuse never corrupts a cache, and restore
never gives back a different cache.

* **Junk arguments**: random caches driven by calls whose tokens, extra slots, names and
  handles are junk as often as not (floats equal to ints, bools, strings, nested lists,
  None, huge and negative ints, non-iterables, released handles). Every call either
  succeeds or raises a :class:`KVCacheError`; a failed call leaves the snapshot equal to
  before; after every call the invariants hold and the snapshot round-trips through JSON.
* **Corrupted snapshots**: real snapshots' ``to_dict()`` with fields mutated (numbers moved
  by one, made negative or huge, swapped for other types, rows dropped, duplicated or
  added) go through ``Snapshot.from_dict`` and ``restore(verify=True)``: refused with a
  ``SnapshotFormatError`` or a ``KVCacheError``, or restored to a cache whose snapshot
  equals the one given. Under a memory cap and an alarm, since a mutant such as
  ``page_count = 2**40`` must be refused before anything is allocated per page.

``KVVIZ_FUZZ_SCALE`` (default 1) multiplies the examples: ``KVVIZ_FUZZ_SCALE=100 pytest
tests/fuzz/test_fuzz_kvcore.py`` is the soak run. At scale 1 both run in a few seconds.
"""

from __future__ import annotations

import copy
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvcore
from kvcore import KVCacheError, PagePool, Snapshot, SnapshotFormatError

from .bounds import alarm, fuzz_scale, memory_cap

SCALE = fuzz_scale()

FUZZ = settings(max_examples=150 * SCALE, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

HEADROOM = 512 * 2**20  # bytes a single example may allocate beyond what the process maps
SECONDS = 20  # per example, far above what any example needs

# ------------------------------------------------------------------------ junk arguments

good_token = st.integers(0, 3)
junk_token = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1.0, 2.0, 0.0, True, False, None, "1", b"1", (1,), [1], [[1]], {1: 2}, 1j]),
    st.integers(-(2**70), 2**70),
    st.just(2**200),
    st.text(max_size=3),
    st.lists(st.integers(0, 3), max_size=2),
)
token = st.one_of(good_token, good_token, good_token, junk_token)
tokens = st.one_of(
    st.lists(token, max_size=9),
    st.lists(good_token, max_size=9),
    st.tuples(good_token, good_token, good_token),
    st.sampled_from([None, 5, 2.5, "0123", b"\x00\x01", object()]),
)
extra = st.one_of(st.integers(0, 3), st.sampled_from([-1, 2**80, 1.0, True, None, "1"]))
name = st.one_of(st.none(), st.text(max_size=3), st.sampled_from([3, b"a", ["a"], 1.5]))
op = st.one_of(
    st.tuples(st.just("acquire"), tokens, extra, name),
    st.tuples(st.just("extend"), st.integers(0, 30), tokens, extra, st.booleans()),
    st.tuples(st.just("publish"), st.integers(0, 30), tokens, st.booleans(), st.one_of(st.booleans(), st.just(0))),
    st.tuples(st.just("release"), st.integers(0, 30)),
)


def call(cache, handles: list, step: tuple) -> None:
    """One generated call on ``cache`` (handles: every allocation made so far)."""
    kind = step[0]
    if kind == "acquire":
        handles.append(cache.acquire_pages_for_tokens(step[1], step[2], name=step[3]))
        return
    if not handles:
        return
    handle = handles[step[1] % len(handles)]
    if kind == "extend":
        new = step[2]
        if step[4] and isinstance(new, list):  # continue the allocation's tokens with the junk
            new = list(handle.tokens) + new
        handle.extend_allocation(new, step[3])
    elif kind == "publish":
        new = step[2]
        if step[3] and isinstance(new, list):
            new = list(handle.tokens) + new
        if step[4]:
            handle.publish_pages_for_tokens(new, publish_incomplete_page=step[4])
        else:
            handle.publish_pages_for_tokens(new)
    else:
        handle.release_pages()


@FUZZ
@given(kind=st.sampled_from(["trie", "base"]), page_count=st.integers(0, 8), tokens_per_page=st.integers(1, 3),
       steps=st.lists(op, min_size=1, max_size=25))
def test_misuse_with_junk_raises_kv_cache_errors_and_changes_nothing(kind, page_count, tokens_per_page, steps):
    cache = kvcore.make_cache(kind, page_count, tokens_per_page)
    handles: list = []
    with memory_cap(HEADROOM), alarm(SECONDS):
        for step in steps:
            before = cache.snapshot()
            try:
                call(cache, handles, step)
            except KVCacheError:
                assert cache.snapshot() == before, f"a failed {step[0]} changed the cache"
                continue
            # Succeeded: the state is healthy and exactly serialisable (no junk stored).
            snap = cache.snapshot()
            assert cache.check_invariants() == []
            assert Snapshot.from_dict(json.loads(snap.to_json())) == snap
            assert all(type(t) is int for a in snap.allocations for t in a.tokens)


# --------------------------------------------------------------------- corrupted snapshots


def real_snapshot(kind: str, page_count: int, tokens_per_page: int, steps) -> Snapshot:
    """A snapshot of a cache driven by valid calls (failed ones skipped)."""
    cache = kvcore.make_cache(kind, page_count, tokens_per_page)
    handles: list = []
    for step in steps:
        try:
            call(cache, handles, step)
        except KVCacheError:
            pass
    return cache.snapshot()


valid_op = st.one_of(
    st.tuples(st.just("acquire"), st.lists(good_token, max_size=9), st.integers(0, 2), st.none()),
    st.tuples(st.just("extend"), st.integers(0, 30), st.lists(good_token, max_size=3), st.integers(0, 2),
              st.just(True)),
    st.tuples(st.just("publish"), st.integers(0, 30), st.none(), st.just(False), st.just(False)),
    st.tuples(st.just("release"), st.integers(0, 30)),
)

#: What a mutated value becomes.
replacement = st.one_of(
    st.integers(-3, 12),
    st.sampled_from([-1, 2**31, 2**40, 2**63, None, True, 1.5, "x", "free", "owned", "cached", [], [0], {}]),
)


def paths(value, prefix=()):
    """Every path (a tuple of keys and indices) to a value inside a JSON-able structure."""
    out = [prefix]
    if isinstance(value, dict):
        for key in value:
            out += paths(value[key], prefix + (key,))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out += paths(item, prefix + (i,))
    return out


def mutate(d: dict, data) -> dict:
    """``d`` with one to three mutations: replace a value, drop, duplicate or add a list row."""
    d = copy.deepcopy(d)
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        where = data.draw(st.sampled_from(paths(d)[1:]), label="path")
        parent = d
        for key in where[:-1]:
            parent = parent[key]
        key = where[-1]
        how = data.draw(st.sampled_from(["replace", "replace", "replace", "drop", "duplicate", "append"]),
                        label="how")
        if how == "replace":
            parent[key] = data.draw(replacement, label="new value")
        elif how == "drop":
            del parent[key]
        elif isinstance(parent, list):
            parent.insert(key, copy.deepcopy(parent[key]) if how == "duplicate"
                          else data.draw(replacement, label="row"))
        else:
            parent[key] = [parent[key], parent[key]]
    return d


@FUZZ
@given(kind=st.sampled_from(["trie", "base"]), page_count=st.integers(0, 6), tokens_per_page=st.integers(1, 3),
       steps=st.lists(valid_op, max_size=15), data=st.data())
def test_restore_refuses_a_corrupted_snapshot_or_gives_back_an_equal_cache(kind, page_count, tokens_per_page,
                                                                           steps, data):
    original = real_snapshot(kind, page_count, tokens_per_page, steps)
    d = mutate(original.to_dict(), data)
    with memory_cap(HEADROOM), alarm(SECONDS):
        try:
            snap = Snapshot.from_dict(d)
        except SnapshotFormatError:
            return
        try:
            restored = kvcore.restore(snap, verify=True)
        except KVCacheError:
            return
        assert restored.snapshot() == snap
        assert restored.check_invariants() == []


@settings(max_examples=30 * SCALE, deadline=None, database=None)
@given(kind=st.sampled_from(["trie", "base"]), page_count=st.integers(0, 6), tokens_per_page=st.integers(1, 3),
       steps=st.lists(valid_op, max_size=15))
def test_every_real_snapshot_restores_to_an_equal_cache(kind, page_count, tokens_per_page, steps):
    """The other half of the promise: verify never refuses what kvcore itself made."""
    original = real_snapshot(kind, page_count, tokens_per_page, steps)
    again = Snapshot.from_dict(json.loads(original.to_json()))
    assert kvcore.restore(again).snapshot() == original
    assert kvcore.restore(original).snapshot() == original


def test_a_pool_refuses_free_orders_that_hand_a_page_out_twice():
    """The fuzzers build pools only through caches; the pool's own guard, directly."""
    try:
        PagePool(3, free_order=[0, 0, 1])
    except KVCacheError:
        return
    raise AssertionError("PagePool(3, free_order=[0, 0, 1]) was accepted")


# ----------------------------------------- edges of the fields a key packs, huge pools

#: Values around the edges of the packed key's fields (kvcore/heap.py: last_access in 64 bits,
#: seq in 40) and of the pool (2**63 pages).
EDGE = st.one_of(*(st.integers(2**b - 3, 2**b + 3) for b in (39, 40, 63, 64)), st.integers(0, 2**70))


@FUZZ
@given(kind=st.sampled_from(["trie", "base", "hash"]), steps=st.lists(valid_op, max_size=10),
       field=st.sampled_from(["clock", "next_seq"]), value=EDGE, then=st.lists(valid_op, max_size=6))
def test_a_restored_clock_or_next_seq_is_refused_or_the_cache_keeps_its_invariants(kind, steps, field, value, then):
    """Bound: 150 examples (x KVVIZ_FUZZ_SCALE), pools of 6 pages, 16 ops; each under
    HEADROOM bytes and SECONDS."""
    import dataclasses

    from kvcore.verify import FIELD_LIMITS

    snap = dataclasses.replace(real_snapshot(kind, 6, 2, steps), **{field: value})
    with memory_cap(HEADROOM), alarm(SECONDS):
        try:
            restored = kvcore.restore(snap)
        except KVCacheError as exc:
            # Refused: at or past the packed key's edge, below the field's own floor (next_seq 0:
            # the root's id is taken), or inconsistent with the rest of the snapshot.
            assert (value >= FIELD_LIMITS[field] or "must be an integer from" in str(exc)
                    or "once restored" in str(exc) or "inconsistent" in str(exc)), exc
            return
        assert value < FIELD_LIMITS[field]
        handles: list = []
        for step in then:
            try:
                call(restored, handles, step)
            except KVCacheError:
                pass
            assert restored.check_invariants() == []


@settings(max_examples=40 * SCALE, deadline=None, database=None)
@given(kind=st.sampled_from(["trie", "base", "hash"]), page_count=st.integers(2**21 + 1, 2**63 - 1),
       form=st.sampled_from(["digest", "to_dict", "to_json"]))
def test_serialising_a_huge_pool_is_refused_within_a_memory_and_time_bound(kind, page_count, form):
    """Bound: 40 examples, pools from 2**21 + 1 to 2**63 - 1 pages; each refusal under HEADROOM
    bytes and SECONDS (a mutant that builds rows first never ends)."""
    from kvcore.snapshot import SnapshotTooLarge

    cache = kvcore.make_cache(kind, page_count, 4)
    cache.acquire_pages_for_tokens([1, 2, 3, 4, 5]).publish_pages_for_tokens()
    with memory_cap(HEADROOM), alarm(SECONDS):
        try:
            getattr(cache.snapshot(), form)()
        except SnapshotTooLarge as exc:
            assert "MAX_SERIALISED_PAGES" in str(exc)
            return
    raise AssertionError(f"{form}() of a {page_count}-page snapshot was not refused")


@FUZZ
@given(page_count=st.integers(0, 8), data=st.data(), kind=st.sampled_from(["trie", "base", "hash"]))
def test_a_cache_is_built_only_on_a_whole_pool_of_its_own(page_count, data, kind):
    """Bound: 150 examples, pools of up to 8 pages, free orders any subset in any order."""
    classes = {"trie": kvcore.TriePagedAttentionCache, "base": kvcore.BasePagedAttentionCache,
               "hash": kvcore.HashBlockPagedAttentionCache}
    order = data.draw(st.permutations(range(page_count)), label="order")
    order = order[:data.draw(st.integers(0, page_count), label="listed")]
    pool = PagePool(page_count, order)
    try:
        cache = classes[kind](pool, 2)
    except kvcore.InvalidConfiguration:
        assert len(order) < page_count
        return
    assert len(order) == page_count
    assert cache.check_invariants() == []
    try:
        classes[data.draw(st.sampled_from(sorted(classes)), label="second")](pool, 2)
    except kvcore.InvalidConfiguration:
        return
    raise AssertionError("a second cache was built on a pool the first one uses")
