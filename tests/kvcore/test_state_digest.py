# SPDX-License-Identifier: Apache-2.0
"""``Snapshot.state_digest()``: the set digest of a state (kvcore.state-digest/1), the oracle
``kvviz run --json`` keeps up to date step by step.

It must name the state: equal states give one digest, and changing any one thing a snapshot
holds (a field, a row of each table, the free list's order, a heap slot) gives another. Its
definition is the docstring's: a test re-implements it from the words alone.
"""

from __future__ import annotations

import copy
import hashlib
import json

import pytest

import kvcore
from kvcore import Snapshot
from kvcore.state_digest import STATE_DIGEST_SCHEME, StateDigest, state_elements


def digest_of(state: dict) -> str:
    return StateDigest.of_state(state).hexdigest()


def trie_state(policy: str = "lru") -> dict:
    """A trie with shared nodes, a heap of several candidates, a free list of several pages
    and a live allocation."""
    cache = kvcore.make_cache("trie", 16, 2, policy)
    for i, tokens in enumerate([[1, 2, 3, 4], [1, 2, 5, 6], [7, 8, 9, 10], [11, 12, 13, 14]]):
        a = cache.acquire_pages_for_tokens(tokens, name=f"r{i}")
        a.publish_pages_for_tokens()
        a.release_pages()
    cache.acquire_pages_for_tokens([1, 2, 3, 4, 20], name="live", priority=3)
    state = cache.snapshot().to_dict()
    assert len(state["heap"]) >= 3 and len(state["free"]) >= 3 and len(state["nodes"]) >= 4
    return state


def hash_state() -> dict:
    cache = kvcore.make_cache("hash", 8, 2)
    a = cache.acquire_pages_for_tokens([1, 2, 3, 4, 5], name="a")
    a.publish_pages_for_tokens()
    a.release_pages()
    cache.acquire_pages_for_tokens([1, 2, 9, 9], name="b")
    state = cache.snapshot().to_dict()
    assert state["blocks"] and len(state["free"]) >= 3
    return state


# -- the definition -----------------------------------------------------------------------------


def test_the_state_digest_is_what_its_docstring_says_reimplemented_from_the_words():
    state = trie_state()
    canonical = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode
    elements = [canonical(["field", name, state[name]]) for name in (
        "schema", "kind", "policy", "tokens_per_page", "page_count", "clock", "next_seq", "next_allocation_id",
        "stats")]
    elements += [canonical(["pages", i, row]) for i, row in enumerate(state["pages"])]
    elements += [canonical(["nodes", row]) for row in state["nodes"]]
    elements += [canonical(["allocations", row]) for row in state["allocations"]]
    chain = [None] + state["free"] + [None]
    elements += [canonical(["free", a, b]) for a, b in zip(chain, chain[1:])]
    elements += [canonical(["heap", i, node]) for i, node in enumerate(state["heap"])]
    assert sorted(state_elements(state)) == sorted(elements)
    tag = b"kvcore.state-digest/1\n"
    total = sum(int.from_bytes(hashlib.shake_256(tag + e.encode()).digest(256), "big") for e in elements) % 2**2048
    expected = hashlib.sha256(tag + total.to_bytes(256, "big")).hexdigest()
    assert Snapshot.from_dict(state).state_digest() == expected == digest_of(state)
    assert STATE_DIGEST_SCHEME == "kvcore.state-digest/1"


def test_a_hash_snapshot_counts_its_blocks_and_a_trie_snapshot_has_none():
    state = hash_state()
    assert sum(e.startswith('["blocks",') for e in state_elements(state)) == len(state["blocks"])
    trie = trie_state()
    assert not any(e.startswith('["blocks",') for e in state_elements(trie))


def test_equal_states_have_one_digest_across_restore_and_json():
    cache = kvcore.make_cache("trie", 16, 2)
    a = cache.acquire_pages_for_tokens([1, 2, 3, 4, 5, 6], name="a")
    a.publish_pages_for_tokens()
    snap = cache.snapshot()
    back = Snapshot.from_dict(json.loads(snap.to_json()))
    restored = kvcore.TriePagedAttentionCache.restore(snap).snapshot()
    assert snap.state_digest() == back.state_digest() == restored.state_digest()


def test_adding_then_removing_an_element_gives_the_digest_back():
    digest = StateDigest.of_state(trie_state())
    before = digest.hexdigest()
    digest.add('["pages",99,[99,"free",null,null,0]]')
    assert digest.hexdigest() != before
    digest.remove('["pages",99,[99,"free",null,null,0]]')
    assert digest.hexdigest() == before


# -- a tamper of each element kind changes it ------------------------------------------------------


def swap(items: list, i: int, j: int) -> None:
    items[i], items[j] = items[j], items[i]


TAMPERS = {
    "a scalar field (clock)": lambda s: s.__setitem__("clock", s["clock"] + 1),
    "a stats counter": lambda s: s["stats"].__setitem__("lookups", s["stats"]["lookups"] + 1),
    "the policy": lambda s: s.__setitem__("policy", "fifo"),
    "a page row's ref": lambda s: s["pages"][3].__setitem__(4, s["pages"][3][4] + 1),
    "two page rows' places": lambda s: swap(s["pages"], 0, 1),
    "a node row's last_access": lambda s: s["nodes"][2].__setitem__(5, s["nodes"][2][5] + 1),
    "an allocation row's tokens": lambda s: s["allocations"][0]["tokens"].append(7),
    "a node row gone": lambda s: s["nodes"].pop(),
    "the free list's order (two neighbours)": lambda s: swap(s["free"], 0, 1),
    "the free list's order (head and tail)": lambda s: swap(s["free"], 0, -1),
    "a free page gone": lambda s: s["free"].pop(1),
    "a heap slot": lambda s: swap(s["heap"], 0, 1),
    "the heap's last slot gone": lambda s: s["heap"].pop(),
}


@pytest.mark.parametrize("tamper", TAMPERS, ids=list(TAMPERS))
def test_changing_any_one_thing_of_a_trie_state_changes_its_digest(tamper):
    state = trie_state()
    changed = copy.deepcopy(state)
    TAMPERS[tamper](changed)
    assert changed != state
    assert digest_of(changed) != digest_of(state)


@pytest.mark.parametrize("where", ["block key", "block reachable", "queue order", "page ref"])
def test_changing_any_one_thing_of_a_hash_state_changes_its_digest(where):
    state = hash_state()
    changed = copy.deepcopy(state)
    if where == "block key":
        changed["blocks"][0][2] = "0" * 64
    elif where == "block reachable":
        changed["blocks"][0][5] = not changed["blocks"][0][5]
    elif where == "queue order":
        swap(changed["free"], 0, len(changed["free"]) - 1)
    else:
        changed["pages"][0][4] += 1
    assert digest_of(changed) != digest_of(state)


def test_a_free_list_listing_a_page_twice_is_read_by_position_so_two_orders_differ():
    # [1,2,1,3,1] and [1,3,1,2,1] have the same neighbour pairs: pairs alone would not tell
    # them apart. Only a broken cache lists a page twice; its digest reads positions.
    state = trie_state()
    one, two = copy.deepcopy(state), copy.deepcopy(state)
    one["free"], two["free"] = [1, 2, 1, 3, 1], [1, 3, 1, 2, 1]
    assert digest_of(one) != digest_of(two)
    assert any(e.startswith('["free-at",') for e in state_elements(one))


def test_a_table_out_of_id_order_is_read_by_position_so_its_order_counts():
    state = trie_state()
    one, two = copy.deepcopy(state), copy.deepcopy(state)
    swap(two["nodes"], 1, 2)
    assert digest_of(one) != digest_of(two)
    assert any(e.startswith('["nodes-at",') for e in state_elements(two))


def test_an_empty_free_list_has_one_element_between_head_and_tail():
    state = trie_state()
    state["free"] = []
    assert [e for e in state_elements(state) if e.startswith('["free')] == ['["free",null,null]']


@pytest.mark.parametrize("kind", ["trie", "base", "hash"])
def test_the_digest_made_from_a_snapshots_rows_is_the_one_made_from_its_dict(kind):
    cache = kvcore.make_cache(kind, 10, 2)
    a = cache.acquire_pages_for_tokens([1, 2, 3, 4, 5], name="a")
    a.publish_pages_for_tokens()
    a.release_pages()
    cache.acquire_pages_for_tokens([1, 2, 7, 7], name="b")
    snap = cache.snapshot()
    expected = StateDigest.of_state(snap.to_dict()).hexdigest()
    assert StateDigest.of_snapshot(snap).hexdigest() == expected  # rows encoded afresh
    snap.to_json()
    assert StateDigest.of_snapshot(snap).hexdigest() == expected  # rows to_json encoded, reused
    import dataclasses

    reordered = dataclasses.replace(snap, allocations=snap.allocations[::-1], free=snap.free + snap.free[:1])
    assert StateDigest.of_snapshot(reordered).hexdigest() == StateDigest.of_state(reordered.to_dict()).hexdigest()


def test_the_digest_made_from_a_huge_pools_lazy_rows_is_the_one_made_from_its_dict():
    cache = kvcore.make_cache("trie", 70_000, 2)
    cache.acquire_pages_for_tokens([1, 2, 3], name="a").release_pages()
    snap = cache.snapshot()
    assert StateDigest.of_snapshot(snap).hexdigest() == snap.state_digest()
