# SPDX-License-Identifier: Apache-2.0
"""Snapshots: frozen, comparable, exact JSON round trip, stable digests, faithful restore."""

import json
import os
import subprocess
import sys
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest

import kvcore
from kvcore import Snapshot, SnapshotFormatError, TriePagedAttentionCache

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import sys, kvcore
c = kvcore.make_cache(sys.argv[1], 6, 2)
held = []
for i, toks in enumerate([[1,2,3,4], [1,2,5,6], [7,8,9], [1,2,3,4,5], [9,9,9,9,9,9], [1,2]]):
    try:
        a = c.acquire_pages_for_tokens(toks, 1, name=f"r{i}")
    except kvcore.KVCacheError:
        continue
    a.publish_pages_for_tokens()
    if i % 2:
        a.release_pages()
    else:
        held.append(a)
print(c.snapshot().digest())
"""


def _workload(cache):
    """A small workload with sharing, dedup, eviction and a failure."""
    a = cache.acquire_pages_for_tokens([1, 2, 3, 4, 5, 6], name="a")
    b = cache.acquire_pages_for_tokens([1, 2, 3, 4, 7, 8], name="b")
    a.publish_pages_for_tokens()
    b.publish_pages_for_tokens()
    a.release_pages()
    c = cache.acquire_pages_for_tokens([9, 9, 9, 9, 9, 9, 9, 9], name="c")
    c.publish_pages_for_tokens()
    return [b, c]


def test_snapshot_is_frozen_and_equal_states_compare_equal():
    one = kvcore.make_cache("trie", 8, 2)
    two = kvcore.make_cache("trie", 8, 2)
    _workload(one)
    _workload(two)
    snap = one.snapshot()
    assert snap == two.snapshot()
    assert snap.digest() == two.snapshot().digest()
    with pytest.raises(FrozenInstanceError):
        snap.clock = 3


@pytest.mark.parametrize("kind", ["trie", "base"])
def test_to_dict_from_dict_round_trips_exactly(kind):
    cache = kvcore.make_cache(kind, 8, 2)
    _workload(cache)
    snap = cache.snapshot()
    d = json.loads(json.dumps(snap.to_dict()))
    back = Snapshot.from_dict(d)
    assert back == snap
    assert back.to_dict() == snap.to_dict()
    assert back.digest() == snap.digest()


def test_digest_changes_when_state_changes():
    cache = kvcore.make_cache("trie", 8, 2)
    before = cache.snapshot().digest()
    cache.acquire_pages_for_tokens([1, 2])
    assert cache.snapshot().digest() != before


@pytest.mark.parametrize("kind", ["trie", "base"])
def test_digest_is_identical_across_processes_and_hash_seeds(kind):
    digests = set()
    for seed in ("0", "1", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=str(ROOT))
        out = subprocess.run([sys.executable, "-c", SCRIPT, kind], env=env, capture_output=True, text=True,
                             check=True)
        digests.add(out.stdout.strip())
    assert len(digests) == 1


@pytest.mark.parametrize("kind", ["trie", "base"])
def test_restore_then_continue_equals_continue(kind):
    live = kvcore.make_cache(kind, 16, 2)
    held = _workload(live)
    restored = kvcore.restore(live.snapshot())
    assert restored.snapshot() == live.snapshot()
    assert sorted(restored.allocations) == sorted(live.allocations)

    def more(cache, held_ids):
        allocations = [cache.allocations[i] for i in held_ids]
        allocations[0].release_pages()
        d = cache.acquire_pages_for_tokens([1, 2, 3, 4, 7, 8, 1], 2, name="d")
        d.publish_pages_for_tokens()
        e = cache.acquire_pages_for_tokens([5, 5, 5, 5, 5], name="e")
        allocations[1].extend_allocation(list(allocations[1].tokens) + [1, 2])
        return d.id, e.id

    ids = [a.id for a in held]
    assert more(live, ids) == more(restored, ids)
    assert restored.snapshot() == live.snapshot()
    assert restored.check_invariants() == []


def test_restore_rejects_an_inconsistent_snapshot():
    cache = kvcore.make_cache("trie", 4, 2)
    _a = cache.acquire_pages_for_tokens([1, 2])
    d = cache.snapshot().to_dict()
    d["free"] = d["free"] + [0]  # page 0 both owned and free
    with pytest.raises(kvcore.InvalidOperation, match="page 0"):
        TriePagedAttentionCache.restore(Snapshot.from_dict(d))


@pytest.mark.parametrize(
    "mutate, field",
    [
        (lambda d: d.update(schema="kvcore.snapshot/99"), "schema"),
        (lambda d: d.pop("clock"), "clock"),
        (lambda d: d.update(clock="3"), "clock"),
        (lambda d: d["pages"].__setitem__(0, [0, "lost", None, None, 0]), "pages[0][1]"),
        (lambda d: d["nodes"].__setitem__(0, [0]), "nodes[0]"),
        (lambda d: d["allocations"][0].update(tokens=[1, "x"]), "allocations[0].tokens[1]"),
        (lambda d: d.update(kind="radix"), "kind"),
    ],
)
def test_from_dict_names_the_bad_field(mutate, field):
    cache = kvcore.make_cache("trie", 4, 2)
    cache.acquire_pages_for_tokens([1, 2, 3])
    d = cache.snapshot().to_dict()
    mutate(d)
    with pytest.raises(SnapshotFormatError) as info:
        Snapshot.from_dict(d)
    assert info.value.path == field


def test_from_dict_rejects_non_objects():
    with pytest.raises(SnapshotFormatError):
        Snapshot.from_dict([1, 2, 3])


@pytest.mark.parametrize("kind", ["trie", "base"])
def test_to_json_is_the_canonical_dump_of_to_dict_at_every_step(kind):
    """to_json builds its text from per-row texts it keeps between calls; it must equal the
    plain canonical dump of to_dict, step after step, whatever order snapshots are encoded
    in, and for snapshots that share no rows with any other (from_dict)."""
    import random

    def canonical(snap):
        return json.dumps(snap.to_dict(), sort_keys=True, separators=(",", ":"))

    rng = random.Random(5)
    cache = kvcore.make_cache(kind, 12, 2)
    names = ["a", "ünï", 'q"uote', "tab\t", "émoji 🙂", None]
    live = []
    older = []
    for step in range(300):
        roll = rng.random()
        try:
            if roll < 0.45 or not live:
                name = names[step % len(names)]
                tokens = [rng.randrange(4) for _ in range(rng.randrange(1, 9))]
                live.append(cache.acquire_pages_for_tokens(tokens, rng.randrange(3),
                                                           name=None if name is None else f"{name}{step}"))
            elif roll < 0.7:
                rng.choice(live).publish_pages_for_tokens()
            else:
                live.pop(rng.randrange(len(live))).release_pages()
        except kvcore.KVCacheError:
            pass
        snap = cache.snapshot()
        text = canonical(snap)
        assert snap.to_json() == text, step
        if older:  # encode an older snapshot in between: the kept row texts must not mix them
            old = rng.choice(older)
            assert old.to_json() == canonical(old)
            assert snap.to_json() == text
        assert Snapshot.from_dict(json.loads(text)).to_json() == text
        assert snap.digest() == __import__("hashlib").sha256(text.encode()).hexdigest()
        older.append(snap)
    assert cache.snapshot().stats.lookups > 60


# -- A pool too large to serialise is refused, in bounded memory ---------------


@pytest.mark.parametrize("kind", ["trie", "base", "hash"])
@pytest.mark.parametrize("form", ["digest", "to_dict", "to_json"])
def test_serialising_a_snapshot_of_a_10_to_the_12_page_pool_is_refused_at_once_naming_the_limit(kind, form):
    import tracemalloc

    from kvcore.snapshot import MAX_SERIALISED_PAGES, SnapshotTooLarge

    cache = kvcore.make_cache(kind, 10**12, 4)
    cache.acquire_pages_for_tokens([1, 2, 3, 4, 5], name="a").publish_pages_for_tokens()
    snap = cache.snapshot()
    tracemalloc.start()
    try:
        with pytest.raises(SnapshotTooLarge, match=rf"1,000,000,000,000 pages.*MAX_SERIALISED_PAGES "
                                                   rf"\({MAX_SERIALISED_PAGES:,}\)"):
            getattr(snap, form)()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000  # a refusal, not a terabyte of rows built first
    assert isinstance(SnapshotTooLarge("x"), kvcore.KVCacheError)


def test_a_snapshot_at_the_serialising_limit_serialises_and_one_page_more_is_refused(monkeypatch):
    import kvcore.rows as rows_module

    monkeypatch.setattr(rows_module, "MAX_SERIALISED_PAGES", 8)
    at_limit = kvcore.make_cache("trie", 8, 2).snapshot()
    assert Snapshot.from_dict(at_limit.to_dict()) == at_limit
    assert len(at_limit.digest()) == 64
    with pytest.raises(rows_module.SnapshotTooLarge, match="9 pages"):
        kvcore.make_cache("trie", 9, 2).snapshot().digest()


def test_a_huge_pool_is_still_checked_and_restored_without_serialising():
    cache = kvcore.make_cache("trie", 10**12, 4)
    cache.acquire_pages_for_tokens([1, 2, 3, 4, 5], name="a").publish_pages_for_tokens()
    snap = cache.snapshot()
    assert kvcore.check_snapshot(snap) == []
    assert kvcore.restore(snap).snapshot() == snap
