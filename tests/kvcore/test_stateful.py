# SPDX-License-Identifier: Apache-2.0
"""kvcore against the naive reference model, one random operation at a time.

The rules are the four operations (acquire / publish / extend / release) on tokens from
the alphabet {0, 1, 2} with 2 or 3 tokens per page, so prefixes collide; pools of 2 to 8
pages, so evictions and allocation failures are frequent. Arguments are sometimes wrong on
purpose (shorter, longer, disagreeing or non-extending tokens, ``publish_incomplete_page``,
released handles) to exercise every ``InvalidOperation``. Two whole-request rules
(acquire → publish → release, and two requests racing to publish one prefix) make cached
evictable blocks and dedups common; one rule swaps in a cache restored from a snapshot
(sometimes through JSON) and carries on with it.

After every step the whole state is compared with :mod:`tests.kvcore.refmodel` (free list in
order, cached blocks by token path, ref counts, last_access, seq, block tables, eviction
candidates, stats), the eviction victims and dedups of the step are compared with the
model's (through kvcore's events), each of DESIGN's six invariants is its own
``@invariant`` (a failure names it) and every failed operation must leave ``snapshot()``
unchanged.

Budget: the ci profile (the default) runs 1,200 examples of the trie machine; ``pytest --soak
tests/kvcore/test_stateful.py`` (or ``HYPOTHESIS_PROFILE=soak``) runs 200,000. benchmarks/planted_bugs.py
plants kvcore bugs and shows the ci budget catches each. The trie machine's three planted bugs
fell after at most 304 passing examples (cascade_parent, seeds 0-42, median 45), 207
(protected_first_page, seeds 0-42, median 46) and 63 (dedup_touched, seeds 0-12, median 9),
measured with Hypothesis 6.170.17 (with 6.155.2: 338, 207 and 99, medians 45, 46 and 9):
1,200 is 3.9 times the worst seen. (3,500 was sized for a dedup onto a node a lookup has hit,
missed in 3,500 examples until the race rule let a third request in between the publishes.)
"""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from kvcore import (
    BasePagedAttentionCache,
    CacheAllocationFailure,
    InvalidOperation,
    KVCacheError,
    PagePool,
    Snapshot,
    TriePagedAttentionCache,
)
from kvcore import events as ev

from .refmodel import (
    ModelAllocationFailure,
    ModelInvalid,
    POLICIES,
    ReferenceCache,
    model_view,
    snapshot_view,
    view_differences,
)

pytestmark = pytest.mark.slow  # the trie's long state machine

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
# Examples per machine and profile. The trie machine is the one that matters; the base
# cache has no trie, so fewer examples cover it.
TRIE_EXAMPLES = {"dev": 300, "ci": 1_200, "soak": 200_000}.get(PROFILE, 1_200)
BASE_EXAMPLES = {"dev": 100, "ci": 300, "soak": 20_000}.get(PROFILE, 300)
RESTORE_EXAMPLES = {"dev": 50, "ci": 500, "soak": 50_000}.get(PROFILE, 500)
# Steps per example: 25 (about 23 ms of CPU an example of the trie machine); the soak goes deeper.
STEPS = {"soak": 50}.get(PROFILE, 25)

token = st.integers(0, 2)
# Mostly the default; a few levels so the priority policy sees ties and overtakes.
priorities = st.sampled_from((0, 0, 0, 1, 2))
extra_slots = st.integers(0, 3)
PUBLISH_MODES = ("none", "same", "shorter", "longer", "disagree", "incomplete")
EXTEND_MODES = ("grow", "grow", "same", "shorter", "disagree")

ERROR_CLASSES = {ModelInvalid: InvalidOperation, ModelAllocationFailure: CacheAllocationFailure}


def disagreeing(tokens: tuple[int, ...], position: int) -> tuple[int, ...]:
    """``tokens`` with the token at ``position`` changed."""
    changed = list(tokens)
    changed[position] = (changed[position] + 1) % 3
    return tuple(changed)


def failure_message(failure: ModelAllocationFailure) -> str:
    """The numbers a CacheAllocationFailure message must state."""
    pages = "page" if failure.needed == 1 else "pages"
    return (f"need {failure.needed} {pages}: {failure.free} free, {failure.evictable} evictable, "
            f"{failure.held} held by live allocations")


class CacheMachine(RuleBasedStateMachine):
    """One kvcore cache and one reference model, driven by the same operations."""

    cache_class: type = TriePagedAttentionCache
    kind = "trie"

    def __init__(self) -> None:
        super().__init__()
        self.cache = None
        self.model: ReferenceCache | None = None
        self.handles: list = []  # every allocation ever acquired, released ones too
        self.recording = False

    @initialize(page_count=st.integers(2, 8), tokens_per_page=st.integers(2, 3), recording=st.booleans(),
                policy=st.sampled_from(POLICIES))
    def make_cache(self, page_count: int, tokens_per_page: int, recording: bool, policy: str = "lru") -> None:
        if self.kind == "base":
            policy = "lru"  # the base cache never evicts: the shared rule draws a policy, it takes lru
        self.cache = (self.cache_class(PagePool(page_count), tokens_per_page, policy) if self.kind == "trie"
                      else self.cache_class(PagePool(page_count), tokens_per_page))
        self.model = ReferenceCache(self.kind, page_count, tokens_per_page, policy)
        event(f"policy {policy}")
        self.recording = recording
        self.cache.record_events(recording)

    # -- drawing arguments ----------------------------------------------------------------

    def draw_tokens(self, data) -> tuple[int, ...]:
        """Fresh tokens, or a prefix of a known allocation's tokens plus a tail: sharing."""
        tpp = self.model.tokens_per_page
        tail = tuple(data.draw(st.lists(token, max_size=2 * tpp + 1), label="tail"))
        if self.handles and data.draw(st.booleans(), label="share a prefix"):
            base = data.draw(st.sampled_from(self.handles), label="prefix of").tokens
            cut = data.draw(st.integers(0, len(base)), label="prefix length")
            return base[:cut] + tail
        return tail

    def draw_handle(self, data):
        """Mostly a live allocation; sometimes any, released ones included; None if none yet."""
        if not self.handles:
            return None
        live = [h for h in self.handles if not h.released]
        if live and data.draw(st.integers(0, 9), label="live?") > 0:
            return data.draw(st.sampled_from(live), label="allocation")
        return data.draw(st.sampled_from(self.handles), label="any allocation")

    # -- running one operation on both sides -------------------------------------------

    def run(self, op: str, allocation_id: int | None, on_cache, on_model):
        before = self.cache.snapshot()
        try:
            result = on_cache()
            error = None
        except KVCacheError as exc:
            result, error = None, exc
        try:
            on_model()
            expected_error = None
        except (ModelInvalid, ModelAllocationFailure) as exc:
            expected_error = exc

        if expected_error is None:
            assert error is None, f"{op}: kvcore raised {error!r}; the model succeeded"
        else:
            assert isinstance(error, ERROR_CLASSES[type(expected_error)]), (
                f"{op}: kvcore gave {error!r}; the model raised {expected_error!r}")
        event(f"{op}: {type(error).__name__ if error else 'ok'}")
        if error is not None:
            assert self.cache.snapshot() == before, f"failed {op} changed the cache"
            assert self.cache.take_events() == (), f"failed {op} emitted events"
            if isinstance(error, CacheAllocationFailure):
                m = expected_error
                assert (error.needed, error.free, error.evictable, error.held) == (
                    m.needed, m.free, m.evictable, m.held)
                assert failure_message(m) in str(error)
            return None
        if self.recording:
            self.check_events(op, allocation_id if allocation_id is not None else result.id)
        self.check_victims(before)
        if self.model.last_victims:
            event(f"{op} evicted {min(len(self.model.last_victims), 3)}+ nodes")
        if self.model.last_dedups:
            event(f"{op} deduplicated")
        return result

    def check_events(self, op: str, allocation_id: int) -> None:
        events = self.cache.take_events()
        assert events[0] == ev.OpStarted(op, allocation_id, self.model.clock)
        evicted = [(e.node, e.page) for e in events if isinstance(e, ev.Evicted)]
        assert evicted == [(seq, page) for _, seq, page in self.model.last_victims]
        taken = [p for e in events if isinstance(e, ev.PagesTaken) for p in e.pages]
        assert taken + [page for _, page in evicted] == self.model.last_taken
        assert all(e.allocation == allocation_id for e in events if isinstance(e, ev.Evicted))
        dedup_nodes = [e.node for e in events if isinstance(e, ev.Deduplicated)]
        assert dedup_nodes == [self.model.nodes[path].seq for path in self.model.last_dedups]
        if op == "release":
            assert events[-1] == ev.Released(allocation_id)

    def check_victims(self, before: Snapshot) -> None:
        after_ids = {n.id for n in self.cache.snapshot().nodes}
        gone = {n.id for n in before.nodes} - after_ids
        assert gone == {seq for _, seq, _ in self.model.last_victims}

    # -- operations -------------------------------------------------------------------------

    def do_acquire(self, tokens: tuple[int, ...], extra: int, name: str | None, priority: int = 0):
        caller_list = list(tokens)
        handle = self.run(
            "acquire", None,
            lambda: self.cache.acquire_pages_for_tokens(caller_list, extra, name=name, priority=priority),
            lambda: self.model.acquire(tokens, extra, name=name, priority=priority),
        )
        if handle is not None:
            caller_list.append(0)  # the cache keeps a copy, never the caller's list (B7)
            assert handle.tokens == tokens
            self.handles.append(handle)
        return handle

    def do_publish(self, handle, tokens, incomplete: bool = False) -> None:
        self.run(
            "publish", handle.id,
            lambda: handle.publish_pages_for_tokens(tokens, publish_incomplete_page=incomplete)
            if incomplete else handle.publish_pages_for_tokens(tokens),
            lambda: self.model.publish(handle.id, tokens, publish_incomplete_page=incomplete),
        )

    def do_release(self, handle) -> None:
        self.run("release", handle.id, handle.release_pages, lambda: self.model.release(handle.id))

    # -- rules ------------------------------------------------------------------------------

    @rule(data=st.data(), extra=extra_slots, named=st.booleans(), priority=priorities)
    def acquire(self, data, extra: int, named: bool, priority: int) -> None:
        self.do_acquire(self.draw_tokens(data), extra, f"r{len(self.handles)}" if named else None, priority)

    @rule(data=st.data(), extra=extra_slots, priority=priorities)
    def acquire_publish_release(self, data, extra: int, priority: int) -> None:
        """A whole request, as a server runs it: what fills the cache with evictable blocks."""
        handle = self.do_acquire(self.draw_tokens(data), extra, None, priority)
        if handle is not None:
            self.check_everything()
            self.do_publish(handle, None)
            self.check_everything()
            self.do_release(handle)

    @rule(data=st.data(), extra=extra_slots, third=st.sampled_from(("none", "holds", "done")))
    def two_requests_race_to_publish(self, data, extra: int, third: str) -> None:
        """Both acquire the same prefix before either publishes: the second publish dedups.
        Sometimes a third request arrives between the two publishes and matches the first's
        blocks (and holds them, or is done and releases them): the second then dedups onto
        nodes a lookup has hit (and, when the third released and the first already did,
        onto eviction candidates)."""
        tokens = self.draw_tokens(data)
        first = self.do_acquire(tokens, extra, None)
        if first is None:
            return
        self.check_everything()
        second = self.do_acquire(tokens + tuple(data.draw(st.lists(token, max_size=2), label="tail")), 0, None)
        if second is None:
            return
        self.check_everything()
        self.do_publish(first, None)
        self.check_everything()
        if third != "none":
            if data.draw(st.booleans(), label="first done first"):
                self.do_release(first)
                self.check_everything()
            late = self.do_acquire(tokens, 0, None)
            if late is not None and third == "done":
                self.check_everything()
                self.do_release(late)
            self.check_everything()
        self.do_publish(second, None)

    @rule(data=st.data(), mode=st.sampled_from(PUBLISH_MODES))
    def publish(self, data, mode: str) -> None:
        handle = self.draw_handle(data)
        if handle is None:
            return
        tokens, incomplete = handle.tokens, False
        if mode == "none":
            tokens = None
        elif mode == "shorter":
            tokens = tokens[: data.draw(st.integers(0, len(tokens)), label="shorter")]
        elif mode == "longer":
            # Decode wrote into the extra slots; sometimes more than the pages can hold.
            tokens = tokens + tuple(data.draw(st.lists(token, min_size=1, max_size=4), label="decoded"))
        elif mode == "disagree" and tokens:
            tokens = disagreeing(tokens, data.draw(st.integers(0, len(tokens) - 1), label="at"))
        elif mode == "incomplete":
            incomplete = True
        self.do_publish(handle, tokens, incomplete)

    @rule(data=st.data(), mode=st.sampled_from(EXTEND_MODES), extra=extra_slots)
    def extend(self, data, mode: str, extra: int) -> None:
        handle = self.draw_handle(data)
        if handle is None:
            return
        tokens = handle.tokens
        if mode == "grow":
            tokens = tokens + tuple(data.draw(st.lists(token, max_size=5), label="new tokens"))
        elif mode == "shorter" and tokens:
            tokens = tokens[:-1]
        elif mode == "disagree" and tokens:
            tokens = disagreeing(tokens, data.draw(st.integers(0, len(tokens) - 1), label="at")) + (1,)
        self.run(
            "extend", handle.id,
            lambda: handle.extend_allocation(list(tokens), extra),
            lambda: self.model.extend(handle.id, tokens, extra),
        )

    @rule(data=st.data())
    def release(self, data) -> None:
        handle = self.draw_handle(data)
        if handle is not None:
            self.do_release(handle)

    @rule(through_json=st.booleans())
    def restore_and_continue(self, through_json: bool) -> None:
        """From here on drive a restored copy: it must behave exactly like the original."""
        snap = self.cache.snapshot()
        if through_json:
            snap = Snapshot.from_dict(json.loads(snap.to_json()))
        restored = self.cache_class.restore(snap)
        assert restored.snapshot() == self.cache.snapshot()
        assert set(restored.allocations) == set(self.cache.allocations)
        # Released handles stay as they are: using them is still an InvalidOperation.
        self.handles = [restored.allocations.get(h.id, h) for h in self.handles]
        self.cache = restored
        self.cache.record_events(self.recording)

    # -- after every step ---------------------------------------------------------------
    #
    # One @invariant for the reference model and one per DESIGN invariant, so a failure
    # names what broke. ``check_invariants()`` runs once per state (not six times): its
    # violations are kept for the cache object and clock they were computed at (every
    # successful op ticks the clock, a failed one changes nothing, and ``run`` asserts so).

    def violations_of(self, invariant_number: int) -> list:
        """This state's violations of one DESIGN invariant (kvcore's checker, run once per state)."""
        key = (self.cache, self.cache.clock)
        memo = getattr(self, "_violations_memo", None)
        if memo is None or memo[0][0] is not key[0] or memo[0][1] != key[1]:
            memo = self._violations_memo = (key, self.cache.check_invariants())
        return [v for v in memo[1] if v.invariant == invariant_number]

    def check_everything(self) -> None:
        """Every check at once, for the middle of a multi-operation rule."""
        self.matches_the_reference_model()
        for check in SIX_INVARIANTS:
            check(self)

    @invariant()
    def matches_the_reference_model(self) -> None:
        """The whole state equals the model's and the handles agree with it."""
        if self.cache is None:
            return
        snap = self.cache.snapshot()
        differences = view_differences(snapshot_view(snap), model_view(self.model))
        assert differences == [], "\n".join(differences)
        assert self.model.self_check() == []
        assert self.cache.clock == self.model.clock
        assert self.cache.page_pool.available_page_count() == len(self.model.free)

        assert list(self.cache.allocations) == sorted(self.model.allocations)
        for handle in self.handles:
            expected = self.model.allocations.get(handle.id)
            if expected is None:
                assert handle.released and handle.pages == () and handle.published == 0
                continue
            assert self.cache.allocations[handle.id] is handle
            assert not handle.released
            assert (handle.tokens, handle.pages, handle.published, handle.hit_tokens, handle.name) == (
                expected.tokens, tuple(expected.pages), expected.published, expected.hit_tokens, expected.name)

    @invariant()
    def every_page_is_in_exactly_one_place(self) -> None:
        """DESIGN invariant 1: the free list, one trie node, or one live allocation's tail."""
        if self.cache is not None:
            assert self.violations_of(1) == []

    @invariant()
    def each_ref_counts_the_live_allocations_whose_path_holds_the_node(self) -> None:
        """DESIGN invariant 2."""
        if self.cache is not None:
            assert self.violations_of(2) == []

    @invariant()
    def the_heap_holds_exactly_the_childless_ref0_nodes_in_heap_order(self) -> None:
        """DESIGN invariant 3 (with the live heap positions and the evictable counter)."""
        if self.cache is not None:
            assert self.violations_of(3) == []

    @invariant()
    def the_trie_is_well_shaped(self) -> None:
        """DESIGN invariant 4: links agree, keys are full pages, no page twice."""
        if self.cache is not None:
            assert self.violations_of(4) == []

    @invariant()
    def published_pages_are_the_trie_path_of_the_tokens(self) -> None:
        """DESIGN invariant 5 (and the pages hold the tokens)."""
        if self.cache is not None:
            assert self.violations_of(5) == []

    @invariant()
    def nothing_is_touched_after_the_clock_and_released_allocations_hold_nothing(self) -> None:
        """DESIGN invariant 6."""
        if self.cache is not None:
            assert self.violations_of(6) == []


#: The six DESIGN invariants, in order (DESIGN.md, "Invariants").
SIX_INVARIANTS = (
    CacheMachine.every_page_is_in_exactly_one_place,
    CacheMachine.each_ref_counts_the_live_allocations_whose_path_holds_the_node,
    CacheMachine.the_heap_holds_exactly_the_childless_ref0_nodes_in_heap_order,
    CacheMachine.the_trie_is_well_shaped,
    CacheMachine.published_pages_are_the_trie_path_of_the_tokens,
    CacheMachine.nothing_is_touched_after_the_clock_and_released_allocations_hold_nothing,
)


class BaseCacheMachine(CacheMachine):
    cache_class = BasePagedAttentionCache
    kind = "base"


TestTrieCacheAgainstModel = CacheMachine.TestCase
TestTrieCacheAgainstModel.settings = settings(max_examples=TRIE_EXAMPLES, stateful_step_count=STEPS)
TestBaseCacheAgainstModel = BaseCacheMachine.TestCase
TestBaseCacheAgainstModel.settings = settings(max_examples=BASE_EXAMPLES, stateful_step_count=STEPS)


# ---------------------------------------------------------------- restore, then continue
#
# Independent of the model: a cache restored from a snapshot taken mid-run must produce,
# step for step, the same snapshots (and the same successes and failures) as the original.

op_strategy = st.one_of(
    st.tuples(st.just("acquire"), st.lists(token, max_size=8), extra_slots, priorities),
    st.tuples(st.just("publish"), st.integers(0, 20), st.sampled_from(PUBLISH_MODES[:4])),
    st.tuples(st.just("extend"), st.integers(0, 20), st.lists(token, max_size=4), extra_slots),
    st.tuples(st.just("release"), st.integers(0, 20)),
)


def apply_op(cache, handles: list, op: tuple) -> str:
    """Apply one generated op; return 'ok' or the error class name."""
    try:
        if op[0] == "acquire":
            handles.append(cache.acquire_pages_for_tokens(op[1], op[2], priority=op[3]))
            return "ok"
        if not handles:
            return "skipped"
        handle = handles[op[1] % len(handles)]
        if op[0] == "publish":
            tokens = {"none": None, "same": handle.tokens, "shorter": handle.tokens[:-1],
                      "longer": handle.tokens + (1,)}[op[2]]
            handle.publish_pages_for_tokens(tokens)
        elif op[0] == "extend":
            handle.extend_allocation(handle.tokens + tuple(op[2]), op[3])
        else:
            handle.release_pages()
        return "ok"
    except KVCacheError as exc:
        return type(exc).__name__


@pytest.mark.parametrize("cache_class", [TriePagedAttentionCache, BasePagedAttentionCache])
@settings(max_examples=RESTORE_EXAMPLES)
@given(
    page_count=st.integers(2, 6),
    tokens_per_page=st.integers(2, 3),
    ops=st.lists(op_strategy, min_size=1, max_size=30),
    cut=st.integers(0, 30),
    policy=st.sampled_from(POLICIES),
)
def test_restore_then_continue_equals_continue(cache_class, page_count, tokens_per_page, ops, cut, policy):
    cut = min(cut, len(ops))

    def make():
        if cache_class is BasePagedAttentionCache:
            return cache_class(PagePool(page_count), tokens_per_page)
        return cache_class(PagePool(page_count), tokens_per_page, policy)

    original, original_handles = make(), []
    outcomes, snapshots = [], []
    for op in ops:
        outcomes.append(apply_op(original, original_handles, op))
        snapshots.append(original.snapshot())

    prefix, handles = make(), []
    for op in ops[:cut]:
        apply_op(prefix, handles, op)
    restored = cache_class.restore(Snapshot.from_dict(json.loads(prefix.snapshot().to_json())))
    handles = [restored.allocations.get(h.id, h) for h in handles]
    for i in range(cut, len(ops)):
        assert apply_op(restored, handles, ops[i]) == outcomes[i]
        assert restored.snapshot() == snapshots[i]
        assert restored.snapshot().digest() == snapshots[i].digest()
    assert restored.check_invariants() == []


# ------------------------------------------- a broken cache fails the invariant it breaks


def _machine_with_history() -> CacheMachine:
    """A machine driven by hand: a live allocation on a published page, an evictable leaf."""
    machine = CacheMachine()
    machine.make_cache(page_count=6, tokens_per_page=2, recording=False)
    live = machine.do_acquire((1, 2, 3), 0, "live")
    machine.do_publish(live, None)
    gone = machine.do_acquire((7, 8), 0, None)
    machine.do_publish(gone, None)
    machine.do_release(gone)
    machine.check_everything()
    return machine


def _node_with_tokens(cache, tokens):
    return next(n for n in cache._iter_nodes() if n.tokens == tokens)


@pytest.mark.parametrize("corrupt, failing", [
    (lambda c: c._pool.give([c.allocations[0].pages[0]]), "every_page_is_in_exactly_one_place"),
    (lambda c: setattr(_node_with_tokens(c, (1, 2)), "ref", 2),
     "each_ref_counts_the_live_allocations_whose_path_holds_the_node"),
    (lambda c: setattr(c._heap.peek(), "hpos", 3), "the_heap_holds_exactly_the_childless_ref0_nodes_in_heap_order"),
    (lambda c: setattr(_node_with_tokens(c, (1, 2)), "last_access", c.clock + 5),
     "nothing_is_touched_after_the_clock_and_released_allocations_hold_nothing"),
    (lambda c: c.allocations[0]._pages.__setitem__(0, c.allocations[0]._pages[1]),
     "published_pages_are_the_trie_path_of_the_tokens"),
])
def test_a_broken_invariant_fails_the_check_named_after_it(corrupt, failing):
    @settings(max_examples=1, database=None)
    @given(st.none())
    def drive(_):  # inside a hypothesis test: the machine's rules record events
        machine = _machine_with_history()
        getattr(machine, failing)()  # holds before the corruption
        corrupt(machine.cache)
        machine._violations_memo = None  # the corruption did not tick the clock
        with pytest.raises(AssertionError):
            getattr(machine, failing)()

    assert failing in [check.__name__ for check in SIX_INVARIANTS]
    drive()
