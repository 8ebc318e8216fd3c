# SPDX-License-Identifier: Apache-2.0
"""A hash cache's diff from the cache's account of what changed (block ids, pages,
allocations) equals the diff of every row compared, on runs that evict, duplicate and leave
blocks unreachable (a restored cache whose free queue puts parents ahead of children)."""

import dataclasses

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvcore
from kvcore import HashBlockPagedAttentionCache, Snapshot
from kvviz.core import snapshot_diff as diff_module
from kvviz.core.snapshot_diff import diff_snapshots

from tests.kvcore.test_stateful import apply_op, op_strategy


def _compared_row_by_row(before, after):
    return diff_module._diff(before, after, *diff_module._block_changes(before, after))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(page_count=st.integers(2, 8), tokens_per_page=st.integers(1, 2),
       warm_up=st.lists(op_strategy, max_size=12), ops=st.lists(op_strategy, min_size=1, max_size=30),
       data=st.data())
def test_the_diff_of_what_a_hash_cache_changed_is_the_diff_of_every_row(page_count, tokens_per_page, warm_up, ops,
                                                                        data):
    cache = kvcore.make_cache("hash", page_count, tokens_per_page)
    handles: list = []
    for op in warm_up:
        apply_op(cache, handles, op)
    d = cache.snapshot().to_dict()
    d["free"] = data.draw(st.permutations(d["free"]), label="free queue")  # parents ahead of children too
    cache = HashBlockPagedAttentionCache.restore(Snapshot.from_dict(d))
    cache.record_events(True)
    handles = [cache.allocations[i] for i in sorted(cache.allocations)]
    before = cache.snapshot()
    told = 0
    for op in ops:
        apply_op(cache, handles, op)
        cache.take_events()
        after = cache.snapshot()
        told += after._changes is not None and after._changes.before() is before
        assert diff_snapshots(before, after) == _compared_row_by_row(before, after)
        before = after
    assert told == len(ops)  # every diff took the short way


def test_a_hash_diff_of_a_copy_without_the_account_compares_every_row():
    cache = kvcore.make_cache("hash", 6, 1)
    cache.record_events(True)
    first = cache.snapshot()
    a = cache.acquire_pages_for_tokens([1, 2, 3])
    a.publish_pages_for_tokens()
    after = cache.snapshot()
    copy = dataclasses.replace(after)  # no account
    assert copy._changes is None
    assert diff_snapshots(first, copy) == diff_snapshots(first, after) == _compared_row_by_row(first, after)
    assert diff_snapshots(first, after).nodes_added == (1, 2, 3)
