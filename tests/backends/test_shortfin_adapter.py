# SPDX-License-Identifier: Apache-2.0
"""The shortfin backend's op mapping, clock, pool and error handling, call by call."""

from __future__ import annotations

import re
import time

import pytest

from shortfin_guard import require_shortfin

trie_module = require_shortfin()

from shortfin_apps.llm.components.kvcache.page_pool import PagePool  # noqa: E402

import kvcore.base  # noqa: E402
from kvcore import CacheAllocationFailure, InvalidOperation  # noqa: E402
from kvcore import events as ev  # noqa: E402
from kvviz.backends import ALL_EVENTS, Backend, BackendError, BackendFactory  # noqa: E402
from kvviz.backends import foreign  # noqa: E402
from kvviz.backends import shortfin_backend as shortfin_backend_module  # noqa: E402
from kvviz.backends.kvcore_backend import KvcoreBackend  # noqa: E402
from kvviz.backends.registry import make_backend_factory  # noqa: E402
from kvviz.backends.shortfin_backend import (  # noqa: E402
    CpuPagePool,
    LogicalClock,
    ShortfinBackend,
    ShortfinError,
    logical_time,
)
from kvviz.core.scenario import CacheConfig, Op, parse_scenario  # noqa: E402
from kvviz.core.session import Session  # noqa: E402


class SpyCache(trie_module.TriePagedAttentionCache):
    """shortfin's trie cache, recording every call the backend makes and the clock it sees."""

    def __init__(self, pool, tokens_per_page):
        self.calls = []
        super().__init__(pool, tokens_per_page)

    def lookup(self, tokens):
        self.calls.append(("lookup", list(tokens), trie_module.time))
        return super().lookup(tokens)

    def allocate(self, tokens, cache_info=None, allocation_block_size=0, evict=True):
        self.calls.append(("allocate", list(tokens), cache_info, allocation_block_size))
        return super().allocate(tokens, cache_info, allocation_block_size, evict)

    def publish_pages_for_tokens(self, cache_info, publish_incomplete_page=False):
        self.calls.append(("publish_pages_for_tokens", list(cache_info.tokens), cache_info, publish_incomplete_page))
        return super().publish_pages_for_tokens(cache_info, publish_incomplete_page)

    def release_pages(self, cache_info):
        self.calls.append(("release_pages", cache_info))
        return super().release_pages(cache_info)

    def free_allocated_pages(self, page_ids):
        self.calls.append(("free_allocated_pages", list(page_ids)))
        return super().free_allocated_pages(page_ids)


def spy_backend(pages=4, tokens_per_page=4) -> ShortfinBackend:
    return ShortfinBackend(pages, tokens_per_page, cache_class=SpyCache)


def names(calls):
    return [c[0] for c in calls]


# -- acquire --------------------------------------------------------------------------------


def test_acquire_is_a_lookup_then_an_allocate_of_the_unmatched_tokens():
    backend = spy_backend()
    backend.apply(Op("acquire", "a", (1, 2, 3, 4, 5, 6), 0, False))
    backend.apply(Op("publish", "a", None, 0, False))
    backend.cache.calls.clear()

    backend.apply(Op("acquire", "b", (1, 2, 3, 4, 9), 0, False))

    (lookup, allocate) = backend.cache.calls
    assert lookup[:2] == ("lookup", [1, 2, 3, 4, 9])
    assert allocate[0] == "allocate" and allocate[1] == [9]  # only what the lookup did not match
    assert allocate[2].num_tokens == 4 and allocate[3] == 0
    handle = backend.handle("b")
    assert [p.index for p in handle.info.pages][0] == [p.index for p in backend.handle("a").info.pages][0]
    assert handle.hit_tokens == 4 and handle.info.number_of_published_pages == 1


def test_acquire_with_extra_slots_asks_allocate_for_a_block_of_pages():
    backend = spy_backend(pages=6)
    backend.apply(Op("acquire", "a", (1, 2, 3), 6, False))
    (_, allocate) = backend.cache.calls
    assert allocate[3] == 3  # ceil((3 + 6) / 4)
    assert len(backend.snapshot().allocation_named("a").pages) == 3


def test_an_acquire_that_shortfin_cannot_serve_is_a_kvcore_allocation_failure():
    backend = spy_backend(pages=2)
    with pytest.raises(CacheAllocationFailure, match="cannot acquire 12 tokens.*2 free") as info:
        backend.apply(Op("acquire", "a", tuple(range(12)), 0, False))
    assert info.value.needed == 3 and info.value.free == 2
    assert backend.live_names() == []


def test_acquiring_a_live_name_is_refused_before_shortfin_is_called():
    backend = spy_backend()
    backend.apply(Op("acquire", "a", (1,), 0, False))
    backend.cache.calls.clear()
    backend.take_events()
    before = backend.snapshot()
    with pytest.raises(InvalidOperation, match="already live"):
        backend.apply(Op("acquire", "a", (2,), 0, False))
    with pytest.raises(InvalidOperation, match="no live allocation named 'zz'"):
        backend.apply(Op("publish", "zz", None, 0, False))
    with pytest.raises(InvalidOperation, match="extra_token_slots"):
        backend.apply(Op("acquire", "b", (2,), -1, False))
    assert backend.cache.calls == [] and backend.snapshot() == before and backend.take_events() == ()


@pytest.mark.parametrize("extra", [True, False, -1, 1.5, "2"])
@pytest.mark.parametrize("kind", ["acquire", "extend"])
def test_bad_extra_slots_are_refused_by_both_backends_with_kvcores_message(kind, extra):
    """One check serves both backends: a copy in the shortfin backend once accepted extra=True."""
    messages = []
    for backend in (KvcoreBackend.fresh("trie", 4, 4), ShortfinBackend(4, 4)):
        backend.apply(Op("acquire", "a", (1, 2)))
        before = backend.snapshot()
        backend.take_events()
        with pytest.raises(InvalidOperation) as info:
            backend.apply(Op(kind, "b" if kind == "acquire" else "a", (1, 2, 3), extra))
        assert backend.snapshot() == before and backend.take_events() == ()
        messages.append(str(info.value))
    assert messages[0] == messages[1] == f"{kind}: extra_token_slots must be a non-negative integer, got {extra!r}"


JUNK_TOKENS = [(1.0, 2), (1, True), ("x",), [[1]], 5, "12", (2**63, 1.5)]


@pytest.mark.parametrize("tokens", JUNK_TOKENS, ids=repr)
@pytest.mark.parametrize("kind, name, append", [("acquire", "b", False), ("extend", "a", False),
                                                ("extend", "a", True), ("publish", "a", False)])
def test_tokens_that_are_not_integers_are_refused_by_both_backends_alike(kind, name, append, tokens):
    """kvcore refuses them before any change; the shortfin backend calls the same check, so a
    script (or a caller of the seam) gets the same InvalidOperation from either."""
    messages = []
    for backend in (KvcoreBackend.fresh("trie", 4, 4), ShortfinBackend(4, 4)):
        backend.apply(Op("acquire", "a", (1, 2)))
        before = backend.snapshot()
        backend.take_events()
        with pytest.raises(InvalidOperation) as info:
            backend.apply(Op(kind, name, tokens, 0, append))
        assert backend.snapshot() == before and backend.take_events() == ()
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    assert messages[0].startswith(kind) and "integers" in messages[0]


def test_the_shortfin_backend_sizes_pages_with_kvcores_own_function():
    assert shortfin_backend_module.pages_for is kvcore.base.pages_for


# -- publish --------------------------------------------------------------------------------


def test_publish_passes_the_handle_and_keeps_the_info_shortfin_returns():
    backend = spy_backend()
    backend.apply(Op("acquire", "a", (1, 2, 3, 4, 5), 0, False))
    old = backend.handle("a").info
    backend.cache.calls.clear()

    backend.apply(Op("publish", "a", None, 0, False))

    ((name, tokens, info, incomplete),) = backend.cache.calls
    assert name == "publish_pages_for_tokens" and info is old and incomplete is False
    new = backend.handle("a").info
    assert new is not old and new.number_of_published_pages == 1
    assert new.last_cached_node.tokens == (1, 2, 3, 4)


def test_publishing_a_prefix_publishes_its_full_pages_and_keeps_the_allocations_tokens():
    backend = spy_backend(pages=4, tokens_per_page=2)
    backend.apply(Op("acquire", "a", (1, 2, 3, 4, 5, 6), 0, False))
    backend.cache.calls.clear()
    backend.apply(Op("publish", "a", (1, 2, 3), 0, False))
    assert backend.cache.calls[0][1] == [1, 2, 3]  # shortfin saw only the prefix
    snap = backend.snapshot()
    assert snap.allocation_named("a").published == 1
    assert snap.allocation_named("a").tokens == (1, 2, 3, 4, 5, 6)


def test_publish_tokens_that_disagree_or_do_not_fit_are_refused_like_kvcore():
    backend = spy_backend()
    backend.apply(Op("acquire", "a", (1, 2, 3), 0, False))
    with pytest.raises(InvalidOperation, match="disagree with the allocation's at position 1"):
        backend.apply(Op("publish", "a", (1, 9), 0, False))
    with pytest.raises(InvalidOperation, match="do not fit in its 1 pages"):
        backend.apply(Op("publish", "a", (1, 2, 3, 4, 5), 0, False))
    backend.apply(Op("publish", "a", (1, 2, 3, 4), 0, False))  # decode wrote into the spare slot
    assert backend.snapshot().allocation_named("a").published == 1


# -- extend ---------------------------------------------------------------------------------


def test_extend_allocates_the_new_tokens_against_the_current_info():
    backend = spy_backend(pages=4)
    backend.apply(Op("acquire", "a", (1, 2, 3, 4), 0, False))
    info = backend.handle("a").info
    backend.cache.calls.clear()
    backend.apply(Op("extend", "a", (5, 6), 0, True))
    ((name, tokens, given, block),) = backend.cache.calls
    assert (name, tokens, given, block) == ("allocate", [5, 6], info, 1)
    assert backend.snapshot().allocation_named("a").tokens == (1, 2, 3, 4, 5, 6)
    assert len(backend.snapshot().allocation_named("a").pages) == 2


def test_extend_within_the_last_page_calls_nothing_and_appends_the_tokens():
    backend = spy_backend()
    backend.apply(Op("acquire", "a", (1, 2), 0, False))
    backend.cache.calls.clear()
    backend.apply(Op("extend", "a", (1, 2, 3, 4), 0, False))
    assert backend.cache.calls == []
    a = backend.snapshot().allocation_named("a")
    assert a.tokens == (1, 2, 3, 4) and len(a.pages) == 1


def test_extend_with_tokens_that_do_not_start_with_the_allocations_is_refused():
    backend = spy_backend()
    backend.apply(Op("acquire", "a", (1, 2), 0, False))
    with pytest.raises(InvalidOperation, match="must start with the allocation's 2 tokens"):
        backend.apply(Op("extend", "a", (2, 2, 3), 0, False))


def test_extend_that_shortfin_sizes_by_the_new_tokens_alone_is_reported_as_d3():
    backend = spy_backend(pages=4)
    backend.apply(Op("acquire", "a", (1,), 0, False))  # 3 slots left in its page
    backend.take_findings()
    backend.apply(Op("extend", "a", (2, 3, 4, 5, 6), 0, True))  # 6 tokens: 2 pages in all, 1 more
    assert [f.code for f in backend.take_findings()] == ["D3"]
    assert len(backend.snapshot().allocation_named("a").pages) == 3  # shortfin took 2


def test_shortfins_findings_are_the_foreign_backends_findings_read_in_shortfins_catalogue():
    backend = spy_backend(pages=4)
    backend.apply(Op("acquire", "a", (1,), 0, False))
    backend.apply(Op("extend", "a", (2, 3, 4, 5, 6), 0, True))
    (finding,) = backend.take_findings()
    assert type(finding) is foreign.Finding
    assert finding.issue is shortfin_backend_module.KNOWN_ISSUES["D3"]
    assert type(finding.issue) is foreign.KnownIssue


# -- release --------------------------------------------------------------------------------


def test_release_drops_the_reference_then_frees_the_unpublished_pages():
    backend = spy_backend()
    backend.apply(Op("acquire", "a", (1, 2, 3, 4, 5), 0, False))
    backend.apply(Op("publish", "a", None, 0, False))
    info = backend.handle("a").info
    tail = info.pages[1].index
    backend.cache.calls.clear()
    backend.apply(Op("release", "a", None, 0, False))
    assert backend.cache.calls == [("release_pages", info), ("free_allocated_pages", [tail])]
    snap = backend.snapshot()
    assert snap.allocations == () and snap.free_count == 3 and snap.evictable_count == 1


def test_without_the_callers_half_of_the_contract_the_unpublished_page_is_lost():
    backend = ShortfinBackend(4, 4, free_unpublished_on_release=False)
    backend.apply(Op("acquire", "a", (1, 2, 3, 4, 5), 0, False))
    backend.apply(Op("publish", "a", None, 0, False))
    backend.apply(Op("release", "a", None, 0, False))
    violations = backend.check(backend.snapshot())
    assert [v.invariant for v in violations] == [1]
    assert "nowhere" in violations[0].message


def test_releasing_twice_is_refused():
    backend = spy_backend()
    backend.apply(Op("acquire", "a", (1,), 0, False))
    backend.apply(Op("release", "a", None, 0, False))
    with pytest.raises(InvalidOperation, match="no live allocation named 'a'"):
        backend.apply(Op("release", "a", None, 0, False))


# -- clock, pool, crashes -------------------------------------------------------------------


def test_shortfin_sees_a_logical_clock_during_an_op_and_the_real_one_after():
    backend = spy_backend()
    backend.apply(Op("acquire", "a", (1, 2, 3, 4), 0, False))
    assert isinstance(backend.cache.calls[0][2], LogicalClock)
    assert trie_module.time is time
    backend.apply(Op("publish", "a", None, 0, False))
    backend.apply(Op("acquire", "b", (1, 2, 3, 4), 0, False))  # the lookup touches the node
    node = backend.snapshot().node(1)
    assert (backend.clock.now, node.last_access) == (3, 3)  # root at 1, created at 2, touched at 3
    assert trie_module.time is time


def test_shortfins_clock_is_the_foreign_backends_logical_clock():
    assert LogicalClock is foreign.LogicalClock


def test_the_real_clock_comes_back_even_when_shortfin_raises():
    clock = LogicalClock()
    with pytest.raises(RuntimeError):
        with logical_time(clock):
            assert trie_module.time.monotonic() == 1
            assert trie_module.time.sleep is time.sleep  # everything else is the real module
            raise RuntimeError("boom")
    assert trie_module.time is time


def test_the_cpu_pool_behaves_like_shortfins_page_pool():
    pool = CpuPagePool(4)
    assert isinstance(pool, PagePool)
    assert (pool.available_page_count(), pool.total_page_count()) == (4, 4)
    taken = pool.acquire_free_pages(3)
    assert [p.index for p in taken] == [3, 2, 1]  # from the end of the free list
    assert pool.acquire_free_pages(2) is None
    pool.free_pages([taken[0], taken[0]])  # a page already free is not listed twice
    assert [p.index for p in pool.available_pages] == [0, 3]


def test_shutdown_is_shortfins_own_leak_check_on_our_pool():
    backend = ShortfinBackend(4, 4)
    backend.apply(Op("acquire", "a", (1, 2, 3, 4, 5), 0, False))
    backend.apply(Op("publish", "a", None, 0, False))
    backend.apply(Op("release", "a", None, 0, False))
    assert backend.shutdown() is None
    assert backend.snapshot().free_count == 4

    leaky = ShortfinBackend(4, 4)
    leaky.apply(Op("acquire", "a", (1, 2, 3, 4), 0, False))
    leaky.apply(Op("publish", "a", None, 0, False))  # still referenced: shutdown cannot free it
    assert leaky.shutdown() == "Pages lost: 1 of 4 unfreed"


def test_an_unexpected_exception_inside_shortfin_is_a_shortfin_error_frame():
    class Crashing(trie_module.TriePagedAttentionCache):
        def publish_pages_for_tokens(self, cache_info, publish_incomplete_page=False):
            raise KeyError((1, 2, 3, 4))

    backend = ShortfinBackend(4, 4, cache_class=Crashing)
    backend.apply(Op("acquire", "a", (1, 2, 3, 4), 0, False))
    with pytest.raises(ShortfinError, match="publish a: shortfin 3.9.0's publish_pages_for_tokens raised KeyError"):
        backend.apply(Op("publish", "a", None, 0, False))
    session = Session(parse_scenario("cache trie pages=4 tokens_per_page=4\n").config,
                      backend_factory=lambda config, snap: ShortfinBackend(4, 4, cache_class=Crashing))
    session.apply(parse_scenario("acquire a 1..4\n").steps[0].op)
    frame = session.apply(parse_scenario("acquire a 1..4\npublish a\n").steps[1].op)
    assert frame.error.kind == "ShortfinError"


# -- the seam -------------------------------------------------------------------------------


def test_events_are_synthesised_from_the_state_before_and_after():
    backend = ShortfinBackend(4, 4)
    backend.apply(Op("acquire", "a", (1, 2, 3, 4, 5), 0, False))
    kinds = [type(e).__name__ for e in backend.take_events()]
    assert kinds == ["OpStarted", "Matched", "PagesTaken", "RefTaken"]  # RefTaken: on the root
    backend.apply(Op("publish", "a", None, 0, False))
    events = backend.take_events()
    created = [e for e in events if isinstance(e, ev.NodeCreated)]
    assert [(e.node, e.parent, e.page, e.tokens) for e in created] == [(1, 0, 3, (1, 2, 3, 4))]
    backend.apply(Op("release", "a", None, 0, False))
    events = backend.take_events()
    assert [e.pages for e in events if isinstance(e, ev.PagesFreed)] == [(2,)]
    assert isinstance(events[-1], ev.Released)


def test_the_session_replays_shortfin_from_frame_0_and_gets_identical_frames():
    factory = make_backend_factory("shortfin")
    scenario = parse_scenario("cache trie pages=3 tokens_per_page=2\n" + "\n".join(
        f"acquire r{i} {i % 3} {i % 2} 7\npublish r{i}\nrelease r{i}" for i in range(8)))
    session = Session.from_scenario(scenario, backend_factory=factory, keyframe_every=4, cached_frames=2)
    assert session.backend.can_restore is False
    assert list(session._keyframes) == [0]  # nothing to restore from: every rebuild replays from 0
    live = [session.frame(i) for i in range(len(session))]  # mostly rebuilt by replay
    again = Session.from_scenario(scenario, backend_factory=factory)
    for i, frame in enumerate(live):
        assert frame.snapshot.digest() == again.frame(i).snapshot.digest(), f"frame {i}"
    session.truncate(5)
    assert session.last.snapshot == again.frame(5).snapshot
    assert session.backend.snapshot() == again.frame(5).snapshot


def test_the_session_checks_shortfin_frames_in_shortfins_terms():
    """One reference per allocation on its deepest node is not a violation on shortfin."""
    scenario = parse_scenario("cache trie pages=4 tokens_per_page=2\nacquire a 1..6\npublish a\n")
    session = Session.from_scenario(scenario, backend_factory=make_backend_factory("shortfin"))
    snap = session.last.snapshot
    assert [n.ref for n in snap.nodes] == [0, 0, 0, 1]  # root, [1 2], [3 4], [5 6]
    assert session.last.violations == ()


def test_the_shortfin_backend_keeps_to_the_declared_seam():
    factory = make_backend_factory("shortfin")
    backend = factory(parse_scenario("").config, None)
    assert isinstance(backend, Backend) and isinstance(factory, BackendFactory)
    assert (backend.name, backend.version, backend.can_restore) == ("shortfin", "3.9.0", False)
    assert backend.observes < ALL_EVENTS and "CandidateAdded" not in backend.observes


def test_every_event_kind_the_shortfin_backend_reports_is_one_it_declares():
    run = Session.from_scenario(parse_scenario("cache trie pages=3 tokens_per_page=2\n" + "\n".join(
        f"acquire r{i} {i % 3} {i % 2} 7 extra=1\npublish r{i}\nextend r{i} + 1 2\nrelease r{i}" for i in range(8))),
        backend_factory=make_backend_factory("shortfin"))
    seen = {type(e).__name__ for i in range(len(run)) for e in run.frame(i).events}
    assert {"Evicted", "NodeCreated", "RefTaken", "PagesFreed"} <= seen <= run.backend.observes


BASE = "cache base pages=4 tokens_per_page=4\nacquire a 1..4\n"


@pytest.mark.parametrize("build", [
    lambda factory: Session.from_scenario(parse_scenario(BASE), backend_factory=factory),
    lambda factory: Session.from_scenario(parse_scenario("acquire a 1..4\n"), kind="base", backend_factory=factory),
    lambda factory: Session.from_scenario(parse_scenario(BASE), backend_factory=factory, lazy=True),
    lambda factory: Session(CacheConfig("base", 4, 4), backend_factory=factory),
], ids=["from_scenario", "kind_override", "lazy", "constructor"])
def test_a_base_cache_on_the_shortfin_backend_is_a_one_line_backend_error_in_every_path(build):
    """What `kvviz open` meets with a bundle naming backend shortfin and a `cache base` script."""
    with pytest.raises(BackendError) as info:
        build(make_backend_factory("shortfin"))
    message = str(info.value)
    assert "\n" not in message and "a 'base' cache runs on kvcore" in message


@pytest.mark.parametrize("config, snapshot, message", [
    (CacheConfig("trie", 4, 4, "fifo"), None, "evicts by LRU only; a 'fifo' policy runs on kvcore"),
    (CacheConfig("trie", 4, 0), None, "needs tokens_per_page to be an integer >= 1, got 0"),
    (CacheConfig("trie", -1, 4), None, "needs pages to be an integer >= 0, got -1"),
    (CacheConfig("trie", 4, 4), "snapshot", "cannot restore a snapshot"),
])
def test_configs_shortfin_cannot_run_are_backend_errors_from_its_factory(config, snapshot, message):
    factory = make_backend_factory("shortfin")
    snap = Session(CacheConfig("trie", 4, 4)).last.snapshot if snapshot else None
    with pytest.raises(BackendError, match=re.escape(message)):
        factory(config, snap)
