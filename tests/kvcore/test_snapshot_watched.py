# SPDX-License-Identifier: Apache-2.0
"""A snapshot taken inside an op (from a watch callback) is the cache's real state right then.

Snapshots of a recording cache are built from the rows the previous snapshot kept plus what
each finished op noted; an op's first events (its start, its walk) come before its clock
ticks, so kept rows alone would show the state before the op at its Matched event (the new
allocation missing). The sub-steps kvviz animates are these snapshots.
"""

from __future__ import annotations

import pytest

import kvcore


@pytest.mark.parametrize("kind", ["trie", "base", "hash"])
def test_every_watched_snapshot_equals_the_live_structures(kind):
    cache = kvcore.make_cache(kind, 12, 4)
    cache.record_events(True)
    cache.snapshot()
    seen = []

    own_rows = type(cache).snapshot is kvcore.BasePagedAttentionCache.snapshot  # the hash cache has its own

    def check(event):
        seen.append(type(event).__name__)
        snap = cache.snapshot()
        if own_rows:
            assert snap == cache._snapshot_from_live(), f"stale snapshot at {type(event).__name__}"
        if isinstance(event, kvcore.events.Matched):  # the allocation appears at Matched
            assert event.allocation in {a.id for a in snap.allocations}

    cache.watch(check)
    a = cache.acquire_pages_for_tokens(list(range(1000, 1019)), name="a")
    a.publish_pages_for_tokens()
    b = cache.acquire_pages_for_tokens(list(range(1000, 1012)) + [7], name="b")
    a.release_pages()
    b.release_pages()
    cache.watch(None)
    assert "Matched" in seen
    after = cache.snapshot()
    assert not own_rows or after == cache._snapshot_from_live()
    assert after.stats.lookups == 2 and not after.allocations  # both released
