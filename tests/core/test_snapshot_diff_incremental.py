# SPDX-License-Identifier: Apache-2.0
"""A diff from the cache's account of what changed equals the diff of every row compared."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvcore
from kvcore import POLICIES
from kvviz.core import snapshot_diff as diff_module
from kvviz.core.snapshot_diff import diff_snapshots

from tests.kvcore.test_stateful import apply_op, op_strategy


def _compared_row_by_row(before, after):
    return diff_module._diff(before, after, *diff_module._node_changes(before, after))


@pytest.mark.parametrize("kind, policy", [("trie", p) for p in POLICIES] + [("base", "lru")])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(page_count=st.integers(2, 8), tokens_per_page=st.integers(1, 3),
       ops=st.lists(op_strategy, min_size=1, max_size=30))
def test_the_diff_of_what_changed_is_the_diff_of_every_row(kind, policy, page_count, tokens_per_page, ops):
    cache = kvcore.make_cache(kind, page_count, tokens_per_page, policy)
    cache.record_events(True)
    handles: list = []
    before = cache.snapshot()
    from_changes = 0
    for op in ops:
        apply_op(cache, handles, op)
        after = cache.snapshot()
        from_changes += after._changes is not None and after._changes.before() is before
        assert diff_snapshots(before, after) == _compared_row_by_row(before, after)
        before = after
    assert from_changes == len(ops)  # every diff took the short way


def test_a_diff_between_snapshots_that_do_not_follow_each_other_compares_every_row():
    cache = kvcore.make_cache("trie", 6, 1)
    cache.record_events(True)
    first = cache.snapshot()
    a = cache.acquire_pages_for_tokens([1, 2, 3])
    cache.snapshot()
    a.publish_pages_for_tokens()
    third = cache.snapshot()  # its account is against the second snapshot, not the first
    diff = diff_snapshots(first, third)
    assert diff == _compared_row_by_row(first, third)
    assert diff.nodes_added == (1, 2, 3) and diff.allocations_added == (0,)
