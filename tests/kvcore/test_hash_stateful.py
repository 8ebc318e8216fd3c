# SPDX-License-Identifier: Apache-2.0
"""The hash-block cache against its naive reference model, one random operation at a time.

Tokens come from {0, 1, 2} with 1 to 3 tokens per page, so keys collide; pools of 1 to 8
pages, so lazy evictions, unreachable blocks and allocation failures are frequent. Rules:
acquire / publish / extend / release with arguments sometimes wrong on purpose, the whole
request (acquire -> publish -> release), two requests racing to publish one prefix (vLLM
caches the duplicate), and a swap to a cache restored from a snapshot (sometimes through
JSON). After every step the whole state is compared with :mod:`tests.kvcore.refmodel_hash`
(free queue in order, cached blocks by page with their keys and reachability, refs, block
tables, hit tokens, stats), the pages taken and the blocks lazily evicted are compared
through kvcore's events, failures must agree with the model's and change nothing, and the
hash invariants must hold. ``HYPOTHESIS_PROFILE=soak`` runs 100,000 examples.
"""

from __future__ import annotations

import pytest

import json
import os

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from kvcore import CacheAllocationFailure, HashBlockPagedAttentionCache, KVCacheError, PagePool, Snapshot
from kvcore import events as ev

from .refmodel import ModelAllocationFailure, ModelInvalid
from .refmodel_hash import HashModel, model_view, snapshot_view, view_differences
from .test_stateful import ERROR_CLASSES, CacheMachine

pytestmark = pytest.mark.slow  # the hash cache's long state machine

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
# The ci budget: the planted hash bug (benchmarks/planted_bugs.py) fell after at most 42 passing
# examples over seeds 0-12 (median 4); 400 is nearly ten times that.
EXAMPLES = {"dev": 200, "ci": 400, "soak": 100_000}.get(PROFILE, 400)
STEPS = {"soak": 50}.get(PROFILE, 25)



class HashCacheMachine(RuleBasedStateMachine):
    """One hash cache and one reference model, driven by the same operations."""

    def __init__(self) -> None:
        super().__init__()
        self.cache: HashBlockPagedAttentionCache | None = None
        self.model: HashModel | None = None
        self.handles: list = []
        self.recording = False

    @initialize(page_count=st.integers(1, 8), tokens_per_page=st.integers(1, 3), recording=st.booleans(),
                recompute_last_token=st.booleans())
    def make_cache(self, page_count: int, tokens_per_page: int, recording: bool, recompute_last_token: bool) -> None:
        self.cache = HashBlockPagedAttentionCache(PagePool(page_count), tokens_per_page,
                                                  recompute_last_token=recompute_last_token)
        self.model = HashModel(page_count, tokens_per_page, recompute_last_token=recompute_last_token)
        self.recording = recording
        event(f"recompute_last_token={recompute_last_token}")
        self.cache.record_events(recording)

    # The trie machine's ways of drawing tokens and handles: fresh or sharing a prefix;
    # mostly live allocations, sometimes released ones.
    draw_tokens = CacheMachine.draw_tokens
    draw_handle = CacheMachine.draw_handle

    # -- running one operation on both sides -------------------------------------------

    def run(self, op: str, allocation_id: int | None, on_cache, on_model):
        before = self.cache.snapshot()
        try:
            result, error = on_cache(), None
        except KVCacheError as exc:
            result, error = None, exc
        try:
            on_model()
            expected = None
        except (ModelInvalid, ModelAllocationFailure) as exc:
            expected = exc
        if expected is None:
            assert error is None, f"{op}: kvcore raised {error!r}; the model succeeded"
        else:
            assert isinstance(error, ERROR_CLASSES[type(expected)]), f"{op}: kvcore {error!r}, model {expected!r}"
        event(f"{op}: {type(error).__name__ if error else 'ok'}")
        if error is not None:
            assert self.cache.snapshot() == before, f"failed {op} changed the cache"
            assert self.cache.take_events() == (), f"failed {op} emitted events"
            if isinstance(error, CacheAllocationFailure):
                assert (error.needed, error.free, error.evictable, error.held) == (
                    expected.needed, expected.free, expected.evictable, expected.held)
            return None
        if self.recording:
            self.check_events(op, allocation_id if allocation_id is not None else result.id)
        if self.model.last_evicted:
            event(f"{op} evicted lazily")
        return result

    def check_events(self, op: str, allocation_id: int) -> None:
        """The step's events: it started at the model's tick; the pages taken and the blocks
        lazily evicted are the model's, in order."""
        events = self.cache.take_events()
        assert events[0] == ev.OpStarted(op, allocation_id, self.model.clock)
        taken = [p for e in events if isinstance(e, ev.PagesTaken) for p in e.pages]
        assert taken == self.model.last_taken
        evicted = [(e.page, e.tokens) for e in events if isinstance(e, ev.BlockEvicted)]
        tpp = self.model.tokens_per_page
        assert evicted == [(page, prefix[-tpp:]) for page, prefix in self.model.last_evicted]

    # -- rules ----------------------------------------------------------------------------

    def do_acquire(self, tokens, extra: int, name: str | None = None):
        allocation = self.run("acquire", None,
                              lambda: self.cache.acquire_pages_for_tokens(list(tokens), extra, name=name),
                              lambda: self.model.acquire(tokens, extra, name))
        if allocation is not None:
            self.handles.append(allocation)
            model = self.model.allocations[allocation.id]
            assert (allocation.pages, allocation.hit_tokens) == (tuple(model.pages), model.hit_tokens)
        return allocation

    def do_publish(self, handle, tokens=None, incomplete: bool = False) -> None:
        self.run("publish", handle.id,
                 lambda: handle.publish_pages_for_tokens(tokens, publish_incomplete_page=incomplete),
                 lambda: self.model.publish(handle.id, tokens, incomplete))

    def do_release(self, handle) -> None:
        self.run("release", handle.id, handle.release_pages, lambda: self.model.release(handle.id))

    @rule(data=st.data(), extra=st.integers(0, 3), named=st.booleans())
    def acquire(self, data, extra: int, named: bool) -> None:
        self.do_acquire(self.draw_tokens(data), extra, f"r{len(self.handles)}" if named else None)

    @rule(data=st.data(), extra=st.integers(0, 2))
    def acquire_publish_release(self, data, extra: int) -> None:
        allocation = self.do_acquire(self.draw_tokens(data), extra)
        if allocation is not None:
            self.do_publish(allocation)
            self.do_release(allocation)

    @rule(data=st.data())
    def two_requests_race_to_publish(self, data) -> None:
        """Both acquire before either publishes: the second publish caches a duplicate."""
        tokens = self.draw_tokens(data)
        first = self.do_acquire(tokens, 0)
        second = self.do_acquire(tokens, 0)
        for allocation in (first, second):
            if allocation is not None:
                self.do_publish(allocation)
        if first is not None and second is not None and self.model.stats.dedups:
            event("duplicate cached")

    # The trie machine's rules that only draw a handle and call run, do_publish, do_release
    # and the model, with the same meaning here.
    publish = CacheMachine.publish
    extend = CacheMachine.extend
    release = CacheMachine.release

    @rule(through_json=st.booleans())
    def restore_and_continue(self, through_json: bool) -> None:
        """Carry on with a cache restored from a snapshot: same state, same future."""
        snap = self.cache.snapshot()
        if through_json:
            snap = Snapshot.from_dict(json.loads(snap.to_json()))
        restored = HashBlockPagedAttentionCache.restore(snap, recompute_last_token=self.model.recompute_last_token)
        assert restored.snapshot() == snap
        by_id = restored.allocations
        self.handles = [by_id.get(h.id, h) for h in self.handles]
        self.cache = restored
        self.cache.record_events(self.recording)

    # -- invariants -----------------------------------------------------------------------

    @invariant()
    def matches_the_reference_model(self) -> None:
        if self.cache is None:
            return
        differences = view_differences(snapshot_view(self.cache.snapshot()), model_view(self.model))
        assert not differences, "\n".join(differences)

    @invariant()
    def the_ops_never_leave_a_cached_block_unreachable(self) -> None:
        """A parent outlives its children here: every holder of a block holds a copy of its
        parent, a release queues the child ahead of the parent, and a match moves the parent
        behind. (vLLM's sliding windows and hit caps break this; a restored snapshot can
        too: see test_hashblock.) If a change makes unreachable blocks reachable by ops, this
        says so, and the demos can show one without a crafted snapshot."""
        if self.cache is not None:
            assert all(b.reachable for b in self.cache.snapshot().blocks)

    @invariant()
    def the_hash_invariants_hold(self) -> None:
        if self.cache is not None:
            assert self.cache.check_invariants() == []


TestHashCacheMachine = HashCacheMachine.TestCase
TestHashCacheMachine.settings = settings(max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None)
