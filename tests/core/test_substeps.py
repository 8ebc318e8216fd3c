# SPDX-License-Identifier: Apache-2.0
"""Sub-steps: kvcore's own states inside every op, and what each sub-step says of them.

Three independent checks:

* **Replay equivalence**: the state after an op's last sub-step is the next frame's snapshot
  and the state before its first is the previous frame's, for every step of every demo and
  of random scenarios under every policy.
* **Each kind says what changed**: an oracle written here, per sub-step kind, takes the
  state before and after one sub-step and checks the change is exactly what the sub-step's
  event says (a swap exchanges exactly its two slots, a take moves the free list's front to
  the allocation, ...). A wrong sub-step, a missing one or one reported at the wrong moment
  fails it.
* **Heap truth**: the heap arrays are instrumented (a list that logs every write), so every
  sub-step's heap is compared with the array kvcore's heap really held at that moment, not
  with what the sub-steps say of themselves.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvcore
from kvcore import events as ev
from kvviz.backends.kvcore_backend import KvcoreBackend, kvcore_backend
from kvviz.core.demos import demo_names, load_demo
from kvviz.teach.generate import LEVELS, generate
from kvviz.core.scenario import Op, parse_scenario
from kvviz.core.session import Session
from kvviz.core import pseudocode as pc
from kvviz.core.substeps import SUBSTEP_KINDS
from tests.core.sessions import evicting_session


def _session(scenario, factory=kvcore_backend) -> Session:
    return Session.from_scenario(scenario, backend_factory=factory)


def _node(snap, node_id):
    return next((n for n in snap.nodes if n.id == node_id), None)


def _owner_pages(snap, allocation_id):
    a = next((a for a in snap.allocations if a.id == allocation_id), None)
    return None if a is None else a.pages


def _same_but(prev, nxt, *fields):
    """Every field of the two snapshots but ``fields`` (and the stats and clock) is equal."""
    for f in ("nodes", "allocations", "heap", "free", "pages", "next_seq"):
        if f not in fields:
            assert getattr(prev, f) == getattr(nxt, f), f"{f} changed"


def _check_transition(step, prev, nxt) -> None:
    """The oracle: the change from ``prev`` to ``nxt`` is what ``step`` says, no more."""
    e = step.event
    kind = step.kind
    if kind == "start":
        # The op begins: nothing has changed yet, the clock included (it ticks at the
        # "tick" sub-step); publish may already hold its longer tokens (checked first).
        assert nxt.clock == prev.clock == e.tick - 1
        _same_but(prev, nxt, "allocations")
        strip = [type(a)(a.id, a.name, (), a.pages, a.published, a.hit_tokens, a.released, a.priority)
                 for a in prev.allocations]
        after = [type(a)(a.id, a.name, (), a.pages, a.published, a.hit_tokens, a.released, a.priority)
                 for a in nxt.allocations]
        assert strip == after
        if e.op != "publish":
            assert prev.allocations == nxt.allocations
    elif kind == "tick":
        # The clock ticks once; an acquire counts its lookup and numbers its allocation,
        # an extend stores its tokens; nothing else.
        assert nxt.clock == e.tick == prev.clock + 1
        _same_but(prev, nxt, "allocations")
        if e.op != "extend":
            assert prev.allocations == nxt.allocations
        else:
            assert [a.id for a in prev.allocations] == [a.id for a in nxt.allocations]
        if e.op != "acquire":
            assert (prev.next_allocation_id, prev.stats) == (nxt.next_allocation_id, nxt.stats)
    elif kind == "match":
        # The allocation appears, its block table the matched pages.
        assert _owner_pages(prev, e.allocation) is None and _owner_pages(nxt, e.allocation) == e.pages
        _same_but(prev, nxt, "allocations")
    elif kind in ("walk", "stop", "uncandidate", "fail"):
        _same_but(prev, nxt)
        if kind == "walk":
            child = _node(prev, e.node)
            assert child is not None and child.parent == e.parent and child.tokens == e.tokens
        if kind == "stop":
            assert all(not (n.parent == e.parent and n.tokens == e.tokens) for n in prev.nodes)
        if kind == "uncandidate":
            assert e.node not in nxt.heap
    elif kind == "unheap":
        expected = list(prev.heap)
        assert expected[e.slot] == e.node
        last = expected.pop()
        if e.slot < len(expected):
            expected[e.slot] = last
            assert last == e.moved
        else:
            assert e.moved is None
        assert list(nxt.heap) == expected
        _same_but(prev, nxt, "heap")
    elif kind == "pop":
        assert prev.heap[0] == e.node
        if e.moved is None:
            assert nxt.heap == ()
        else:
            assert nxt.heap[0] == e.moved
            if e.moved in prev.heap:  # the last entry moved up
                assert list(nxt.heap) == [prev.heap[-1]] + list(prev.heap[1:-1])
            else:  # the victim's parent took its slot
                assert _node(prev, e.node).parent == e.moved
                assert list(nxt.heap) == [e.moved] + list(prev.heap[1:])
        _same_but(prev, nxt, "heap")
    elif kind == "swap":
        expected = list(prev.heap)
        assert expected[e.slot] == e.node and expected[e.other_slot] == e.other
        expected[e.slot], expected[e.other_slot] = expected[e.other_slot], expected[e.slot]
        assert list(nxt.heap) == expected
        assert (e.slot - 1) // 2 == e.other_slot if e.direction == "up" else (e.other_slot - 1) // 2 == e.slot
        assert (e.key < e.other_key) if e.direction == "up" else (e.key > e.other_key)
        _same_but(prev, nxt, "heap")
    elif kind == "push":
        assert list(nxt.heap) == list(prev.heap) + [e.node]
        assert e.slot == len(prev.heap)
        _same_but(prev, nxt, "heap")
    elif kind == "candidate":
        assert e.node in nxt.heap
        n = _node(nxt, e.node)
        assert n.ref == 0 and not any(m.parent == e.node for m in nxt.nodes)
        _same_but(prev, nxt)
    elif kind in ("ref", "unref") and prev.kind == "hash":  # a page's own count
        assert nxt.pages[e.page].ref == e.ref == prev.pages[e.page].ref + (1 if kind == "ref" else -1)
        _same_but(prev, nxt, "pages")
    elif kind == "dequeue":
        assert e.page in prev.free and tuple(nxt.free) == tuple(p for p in prev.free if p != e.page)
        _same_but(prev, nxt, "free", "pages")
    elif kind == "drop":
        assert any(b.id == e.block and b.page == e.page for b in prev.blocks)
        assert not any(b.id == e.block for b in nxt.blocks) and e.page in nxt.free  # lazily: still queued
        assert any(b.key == next(x.key for x in prev.blocks if x.id == e.block) for b in nxt.blocks) == e.still_cached
        _same_but(prev, nxt, "pages", "nodes")
    elif kind == "cache":
        b = next(b for b in nxt.blocks if b.id == e.block)
        assert b.page == e.page and b.tokens == e.tokens and not any(x.id == e.block for x in prev.blocks)
        assert (e.duplicate_of is not None) == any(x.key == b.key and x.page == e.duplicate_of for x in prev.blocks)
        published = {a.id: a.published for a in prev.allocations}
        assert next(a for a in nxt.allocations if a.id == e.allocation).published == published[e.allocation] + 1
        _same_but(prev, nxt, "pages", "nodes", "allocations", "next_seq")
    elif kind == "queue":
        # The allocation left as its pages joined the queue: unpublished ones at the head,
        # ref-0 cached ones at the tail in the event's order (its last block first).
        assert _owner_pages(prev, e.allocation) is not None and _owner_pages(nxt, e.allocation) is None
        k = len(e.head)
        assert set(nxt.free[:k]) == set(e.head) and tuple(nxt.free[len(nxt.free) - len(e.tail):]) == e.tail
        assert tuple(nxt.free[k:len(nxt.free) - len(e.tail)]) == tuple(prev.free)
        _same_but(prev, nxt, "free", "pages", "allocations")
    elif kind in ("ref", "unref"):
        before, after = _node(prev, e.node), _node(nxt, e.node)
        assert after.ref == e.ref == before.ref + (1 if kind == "ref" else -1)
        assert {n.id for n in prev.nodes} == {n.id for n in nxt.nodes}
        assert [n for n in prev.nodes if n.id != e.node] == [n for n in nxt.nodes if n.id != e.node] or kind == "ref"
        _same_but(prev, nxt, "nodes", "pages")
    elif kind == "touch":
        for node_id in e.nodes:
            assert _node(nxt, node_id).last_access == e.tick
        _same_but(prev, nxt, "nodes")
    elif kind == "take":
        k = len(e.pages)
        assert tuple(prev.free[:k]) == e.pages and tuple(nxt.free) == tuple(prev.free[k:])
        assert _owner_pages(nxt, e.allocation)[-k:] == e.pages
        _same_but(prev, nxt, "free", "pages", "allocations")
    elif kind == "evict":
        assert _node(prev, e.node) is not None and _node(nxt, e.node) is None
        assert _owner_pages(nxt, e.allocation)[-1] == e.page
        assert e.node not in nxt.heap
        _same_but(prev, nxt, "nodes", "pages", "allocations")
    elif kind == "create":
        n = _node(nxt, e.node)
        assert _node(prev, e.node) is None and n.parent == e.parent and n.page == e.page and n.tokens == e.tokens
        assert n.ref == 1
        _same_but(prev, nxt, "nodes", "pages", "allocations", "next_seq")
    elif kind == "dedup":
        pages = _owner_pages(nxt, e.allocation)
        assert pages[e.index] == e.page and _owner_pages(prev, e.allocation)[e.index] == e.own_page
        # The own copy goes back in the same move: never a state where it is nowhere.
        assert tuple(nxt.free) == tuple(prev.free) + (e.own_page,) and nxt.pages[e.own_page].state == "free"
        _same_but(prev, nxt, "pages", "allocations", "free")
    elif kind == "free":
        k = len(e.pages)
        assert tuple(nxt.free[-k:]) == e.pages and tuple(nxt.free[:-k]) == tuple(prev.free)
        for p in e.pages:
            assert nxt.pages[p].state == "free"
        _same_but(prev, nxt, "free", "pages", "allocations")
    elif kind == "release":
        assert _owner_pages(nxt, e.allocation) is None
        if prev.kind == "hash" and _owner_pages(prev, e.allocation) is None:
            assert prev == nxt  # the hash cache ends the allocation with its queue sub-step
        else:
            assert _owner_pages(prev, e.allocation) is not None
            _same_but(prev, nxt, "allocations", "pages")
    elif kind == "refused":
        assert prev == nxt
    else:  # pragma: no cover
        raise AssertionError(f"no oracle for sub-step kind {kind!r}")


def _check_session(session: Session) -> set[str]:
    kinds = set()
    for i in range(1, len(session)):
        subs = session.substeps(i)
        assert len(subs) >= 1
        assert subs.state(-1) == session.frame(i - 1).snapshot
        prev = subs.state(-1)
        for k, step in enumerate(subs):
            assert step.index == k and step.kind in SUBSTEP_KINDS and step.sentence
            nxt = subs.state(k)
            _check_transition(step, prev, nxt)
            kinds.add(step.kind)
            prev = nxt
        assert prev == session.frame(i).snapshot, f"step {i}: the last sub-step is not the next frame"
    return kinds


@pytest.mark.parametrize("name", [n for n in demo_names() if not n.startswith("shortfin-")])
def test_every_demo_step_replays_to_the_next_frame(name):
    _check_session(_session(load_demo(name)))


def test_the_demos_cover_every_kvcore_kind():
    kinds = set()
    for name in demo_names():
        if not name.startswith("shortfin-"):
            kinds |= _check_session(_session(load_demo(name)))
    kinds |= _check_session(_session(parse_scenario(generate(7, "hard"))))
    assert kinds >= set(SUBSTEP_KINDS) - {"call", "refused"}, set(SUBSTEP_KINDS) - kinds


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), level=st.sampled_from(sorted(LEVELS)), policy=st.sampled_from(kvcore.POLICIES))
def test_random_scenarios_replay_under_every_policy(seed, level, policy):
    text = re.sub(r"^cache trie ", f"cache trie policy={policy} ", generate(seed, level), count=1, flags=re.M)
    scenario = parse_scenario(text)
    assert scenario.config.policy == policy
    _check_session(_session(scenario))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), level=st.sampled_from(sorted(LEVELS)))
def test_random_scenarios_replay_on_the_hash_design(seed, level):
    text = generate(seed, level).replace("cache trie ", "cache hash ", 1)
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith(("expect", "[")))
    scenario = parse_scenario(text + "\n")
    assert scenario.config.kind == "hash"
    _check_session(_session(scenario))


def test_a_refused_op_is_one_substep_with_the_state_unchanged():
    scenario = parse_scenario("cache trie pages=4 tokens_per_page=2\n")
    session = _session(scenario)
    session.apply(Op("release", "nobody", None, text="release nobody"))  # the UI's prompt can do this
    subs = session.substeps(1)
    assert [s.kind for s in subs] == ["refused"] and "nobody" in subs[0].sentence
    assert subs.state(0) == session.frame(0).snapshot


def test_a_failed_acquire_says_why_and_changes_nothing():
    scenario = parse_scenario("cache trie pages=2 tokens_per_page=2\nacquire a 1..4\nacquire b 5..8\n")
    session = _session(scenario)
    subs = session.substeps(2)
    assert subs[-1].kind == "fail" and "needs 2 pages, 0 free + 0 evictable" in subs[-1].sentence
    assert subs.state(len(subs) - 1) == session.frame(1).snapshot


# -- the code's order: the clock ticks where the code ticks, lines never run backwards --------

# Every op of each design, a dedup, an eviction cascade and a failure among them.
EVERY_OP = """cache {kind} pages=4 tokens_per_page=2
acquire x 1 2
acquire a 1 2 3 4
publish a
publish x
extend a 1 2 3 4 5
release a
release x
acquire b 1 2 3 4 8 8
release b
acquire c 9 9 9 9 9 9 9 9
acquire d 1 2 3 4 5 6 7 8 9 10
"""


def _tick_line(step) -> bool:
    """The sub-step lights a line that ticks the clock."""
    return any("clock = clock + 1" in pc.ALGORITHMS[step.algorithm].lines[n - 1].text for n in step.lines)


@pytest.mark.parametrize("kind", ["trie", "base", "hash"])
def test_the_start_substep_keeps_the_old_clock_and_the_tick_is_a_substep_where_the_code_ticks(kind):
    session = _session(parse_scenario(EVERY_OP.format(kind=kind)))
    for i in range(1, len(session)):
        subs = session.substeps(i)
        if session.frame(i).error is not None:
            assert not any(s.kind in ("start", "tick") for s in subs)
            continue
        assert subs[0].kind == "start" and "clock" not in subs[0].sentence and not _tick_line(subs[0])
        assert subs.state(0).clock == subs.before.clock
        ticks = [k for k, s in enumerate(subs) if s.kind == "tick"]
        assert len(ticks) == 1, (i, [s.kind for s in subs])
        k = ticks[0]
        assert subs.state(k - 1).clock == subs.before.clock and subs.state(k).clock == subs.before.clock + 1
        assert _tick_line(subs[k]) and f"to {subs.before.clock + 1}" in subs[k].sentence
        assert not any(_tick_line(s) for s in subs if s.kind != "tick")


def _loop_heads(algorithm: str) -> list[tuple[int, int]]:
    """(first, last) line numbers of each loop of ``algorithm``: its head and its body."""
    lines = pc.ALGORITHMS[algorithm].lines
    indent = [len(line.text) - len(line.text.lstrip()) for line in lines]
    loops = []
    for i, line in enumerate(lines):
        if line.text.lstrip().startswith(("for ", "while ")):
            last = i
            while last + 1 < len(lines) and indent[last + 1] > indent[i]:
                last += 1
            loops.append((line.number, lines[last].number))
    return loops


# The kinds that begin a round of a loop: the walk's next block, a matched or adopted node's
# heap removal or ref, a publish's next block, a release's next node, the next victim, the
# next swap of a sift; the hash cache's next hit, next page taken, next block cached.
ROUND_STARTS = {"walk", "stop", "unheap", "ref", "dedup", "create", "unref", "pop", "swap", "dequeue", "drop",
                "cache"}


def _backwards(session: Session) -> list:
    """Pairs of consecutive sub-steps of one algorithm pass whose lit lines run backwards
    (the next one's first line above the last one's last) other than where a loop holding
    both begins its next round (:data:`ROUND_STARTS`)."""
    out = []
    for i in range(1, len(session)):
        subs = session.substeps(i)
        for prev, nxt in zip(subs, subs[1:]):
            if prev.algorithm != nxt.algorithm or not prev.lines or not nxt.lines:
                continue
            p, n = max(prev.lines), min(nxt.lines)
            if n >= p:
                continue
            loop = any(head <= n and p <= last for head, last in _loop_heads(nxt.algorithm))
            if not (loop and nxt.kind in ROUND_STARTS):
                out.append((i, prev.kind, prev.lines, nxt.kind, nxt.lines))
    return out


@pytest.mark.parametrize("name", [n for n in demo_names() if not n.startswith("shortfin-")])
def test_lit_lines_never_run_backwards_within_one_algorithm_pass_except_at_loop_heads(name):
    assert _backwards(_session(load_demo(name))) == []


@pytest.mark.parametrize("kind", ["trie", "base", "hash"])
def test_every_op_of_each_design_lights_its_lines_in_the_codes_order(kind):
    assert _backwards(_session(parse_scenario(EVERY_OP.format(kind=kind)))) == []


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10**6), level=st.sampled_from(sorted(LEVELS)), policy=st.sampled_from(kvcore.POLICIES))
def test_random_scenarios_light_their_lines_in_the_codes_order(seed, level, policy):
    text = re.sub(r"^cache trie ", f"cache trie policy={policy} ", generate(seed, level), count=1, flags=re.M)
    assert _backwards(_session(parse_scenario(text))) == []


def test_a_dedup_frees_its_own_copy_at_the_dedup_substep_and_nowhere_later():
    session = _session(parse_scenario(EVERY_OP.format(kind="trie")))
    subs = session.substeps(4)  # publish x: block 0 is a's, adopted
    kinds = [s.kind for s in subs]
    assert "dedup" in kinds and "free" not in kinds
    dedup = subs[kinds.index("dedup")]
    texts = [pc.ALGORITHMS[dedup.algorithm].lines[n - 1].text for n in dedup.lines]
    assert any("free_list.give([own])" in t for t in texts)
    assert dedup.event.own_page in subs.state(kinds.index("dedup")).free


def test_a_cascade_names_the_parent_a_candidate_after_the_victim_is_cut():
    session = _session(parse_scenario(EVERY_OP.format(kind="trie")))
    subs = session.substeps(len(session) - 2)  # c evicts the chain [1 2] [3 4]
    kinds = [s.kind for s in subs]
    assert "candidate" in kinds
    k = kinds.index("candidate")
    assert kinds[k - 1] == "evict" and max(subs[k - 1].lines) < min(subs[k].lines)


def test_a_hash_drop_names_the_place_its_page_holds_in_the_queue_shown_at_that_moment():
    text = """cache hash pages=5 tokens_per_page=2
acquire a 1 2
publish a
acquire h 7 7 7 7 7 7
release a
release h
acquire b 5 5 5 5 5 5 5 5 5 5
"""
    session = _session(parse_scenario(text))
    subs = session.substeps(len(session) - 1)
    drops = [k for k, s in enumerate(subs) if s.kind == "drop"]
    assert drops
    for k in drops:
        queue = list(subs.state(k - 1).free)
        place = queue.index(subs[k].event.page)
        assert place > 0  # the test means something: the page is not at the head
        assert f"q{place} of {len(queue)}" in subs[k].sentence and "at the queue's head" not in subs[k].sentence


# -- heap truth: the array kvcore's heap really held ----------------------------------------


class _LoggedList(list):
    """A heap array that logs its content (node ids) after every write."""

    def __init__(self, items, log):
        super().__init__(items)
        self.log = log

    def _record(self):
        self.log.append(tuple(n.seq for n in self))

    def __setitem__(self, i, v):
        super().__setitem__(i, v)
        self._record()

    def append(self, v):
        super().append(v)
        self._record()

    def pop(self, *a):
        v = super().pop(*a)
        self._record()
        return v


def test_every_substep_heap_is_the_array_kvcore_held():
    logs: list[list] = []

    def factory(config, snapshot):
        backend = kvcore_backend(config, snapshot)
        if snapshot is not None:
            log: list = []
            heap = backend.cache._heap
            heap._items = _LoggedList(heap._items, log)
            logs.append(log)
            orig_watch = backend.cache.watch

            def watch(callback, orig=orig_watch, backend=backend):
                if callback is None:
                    return orig(None)

                def tapped(event):  # the array kvcore's heap holds as the event is reported
                    log.append(("event", type(event).__name__, tuple(n.seq for n in backend.cache._heap._items)))
                    callback(event)
                orig(tapped)
            backend.cache.watch = watch
        return backend

    heap_kinds = {"swap", "pop", "push", "unheap"}
    checked = 0
    for name in ("lru", "eviction-cascade", "heap-ties"):
        session = _session(load_demo(name), factory)
        for i in range(1, len(session)):
            logs.clear()
            subs = session.substeps(i)
            for k, step in enumerate(subs):
                state = subs.state(k)
                log = logs[-1]
                events = [x for x in log if isinstance(x, tuple) and x and x[0] == "event"]
                assert events[k][1] == type(step.event).__name__
                assert state.heap == events[k][2], f"{name} step {i} sub-step {k}: not the array kvcore held"
                if step.kind in heap_kinds:
                    # The last write before the event is the array itself: nothing was
                    # reported between a write and its event.
                    at = log.index(events[k])
                    writes = [x for x in log[:at] if not (x and x[0] == "event")]
                    assert writes and writes[-1] == state.heap
                    checked += 1
    assert checked > 20


def test_watching_changes_nothing_on_the_hot_path():
    """The fast heap comes back when watching stops, on the same arrays."""
    cache = kvcore.make_cache("trie", 8, 2)
    heap = cache._heap
    cache.watch(lambda e: None)
    assert type(cache._heap) is not type(heap)
    cache.watch(None)
    assert type(cache._heap) is type(heap) and cache._events is None
    backend = KvcoreBackend(cache)
    backend.watch(lambda e: None)
    backend.watch(None)
    assert type(cache._heap) is type(heap) and cache._events == []


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["acquire", "publish", "release"]), st.integers(0, 5),
                              st.lists(st.integers(0, 3), min_size=0, max_size=9)), max_size=40),
       policy=st.sampled_from(kvcore.POLICIES), watched=st.booleans())
def test_a_watched_cache_ends_every_op_where_an_unwatched_one_does(ops, policy, watched):
    plain = kvcore.make_cache("trie", 6, 2, policy)
    seen = kvcore.make_cache("trie", 6, 2, policy)
    fine = []
    if watched:
        seen.watch(fine.append)
    else:
        seen.record_events(True)
    live: dict[int, tuple] = {}
    for kind, who, tokens in ops:
        for cache in (plain, seen):
            try:
                if kind == "acquire" and who not in live:
                    cache.acquire_pages_for_tokens(tokens, name=str(who))
                elif kind != "acquire" and who in live:
                    a = next(a for a in cache.allocations.values() if a.name == str(who))
                    (a.publish_pages_for_tokens if kind == "publish" else a.release_pages)()
            except kvcore.CacheAllocationFailure:
                pass
        names = {a.name for a in seen.allocations.values()}
        live = {int(n): () for n in names}
        assert plain.snapshot() == seen.snapshot()
        assert seen.check_invariants() == []
    assert all(not isinstance(e, ev.FINE_EVENTS) for e in seen.take_events()) or watched


# -- states built ahead: the building run's first window, and the prefetch -------------------


def _counting_starts(subs):
    """Wrap ``subs``' start() (a restore and a run of the op per call) to count its calls."""
    calls = []
    start = subs._start

    def counted():
        calls.append(1)
        return start()
    subs._start = counted
    return calls


def test_the_first_window_of_states_comes_from_the_run_that_built_the_substeps_and_equals_a_fresh_runs():
    from kvviz.core.substeps import STATE_WINDOW, OpSubSteps

    session = evicting_session()
    subs = session.substeps(len(session) - 1)
    assert len(subs) > 4 * STATE_WINDOW
    calls = _counting_starts(subs)
    first = [subs.state(k) for k in range(STATE_WINDOW)]
    assert calls == [], "a step into the op must not run it again for its first sub-steps' states"
    fresh = OpSubSteps(subs.frame_index, subs.op, subs.before, subs.after, subs.steps, subs.source, subs.note,
                       subs._start)
    assert first == [fresh.state(k) for k in range(STATE_WINDOW)]


def test_prefetch_builds_the_window_ahead_so_the_next_moves_run_nothing_and_see_the_same_states():
    from kvviz.core.substeps import STATE_WINDOW, OpSubSteps

    session = evicting_session()
    subs = session.substeps(len(session) - 1)
    plain = OpSubSteps(subs.frame_index, subs.op, subs.before, subs.after, subs.steps, subs.source, subs.note,
                       subs._start)
    calls = _counting_starts(subs)
    for k in range(3 * STATE_WINDOW):
        subs.prefetch(k)  # what the UI does once sub-step k is on screen
        moved = len(calls)
        assert subs.state(k + 1) == plain.state(k + 1), k
        assert len(calls) == moved, f"sub-step {k + 1} ran the op again after the prefetch at {k}"
    assert 0 < len(calls) <= 3, "one run per window ahead"
    back = OpSubSteps(subs.frame_index, subs.op, subs.before, subs.after, subs.steps, subs.source, subs.note,
                      subs._start)
    middle = len(back) // 2
    back.state(middle)  # the window around it: middle - 8 .. middle + 7
    assert back.prefetch(middle - 4) is True, "stepping back: the window before is missing"
    assert all(back._states.get(k) == plain.state(k) for k in range(middle - 12, middle + 8))
    assert back.prefetch(middle - 4) is False, "nothing missing any more around it"


def test_listing_the_substeps_with_one_state_at_once_keeps_one_and_the_rest_are_the_same_states():
    # The UI's step-in (UI_STATES_AT_ONCE): the listing run keeps only the state it shows; the
    # others are built on asking (or by the prefetch once drawn) and equal the whole window's.
    from kvviz.core.substeps import STATE_WINDOW, OpSubSteps

    session = evicting_session()
    last = len(session) - 1
    whole = session.substeps(last)
    lean = evicting_session().substeps(last, states_at_once=1)  # a session of its own: not the cached listing
    assert sorted(lean._states) == [0]
    assert sorted(whole._states) == list(range(STATE_WINDOW))
    calls = _counting_starts(lean)
    assert lean.state(0) == whole.state(0) and calls == []
    assert lean.prefetch(0) is True and len(calls) == 1  # one run for the rest of the window
    assert [lean.state(k) for k in range(STATE_WINDOW + 1)] == [whole.state(k) for k in range(STATE_WINDOW + 1)]
    fresh = OpSubSteps(whole.frame_index, whole.op, whole.before, whole.after, whole.steps, whole.source,
                       whole.note, whole._start)
    assert all(lean.state(k) == fresh.state(k) for k in range(0, len(lean), 7))
