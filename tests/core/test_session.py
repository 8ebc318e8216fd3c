# SPDX-License-Identifier: Apache-2.0
"""Sessions and timelines: one frame per op, any frame by index, keyframe replay, branching,
invalid ops as frames, and expect lines evaluated against frames."""

import gc
import random
import weakref

import pytest

import kvcore
import kvcore.events
from kvcore import InvalidOperation, Violation
from kvviz.backends import ALL_EVENTS, Backend, BackendError, BackendFactory, UnknownAllocation
from kvviz.backends.kvcore_backend import KvcoreBackend, kvcore_backend
from kvviz.core.expect import evaluate
from kvviz.core.scenario import CacheConfig, Expect, Op, parse_command, parse_scenario
from kvviz.core.session import JUMP_CHECKS_AT_MOST, Session, WhyIndex
from kvviz.core.why import why_evicted, why_short_match

SCRIPT = """\
title: a small story
description: two requests share a prefix, one is released, a big one evicts.
cache trie pages=5 tokens_per_page=4
> a arrives.
acquire a 1..8 extra=2
publish a
acquire b 1..4 9..12
release a
acquire big 1..40
acquire c 20..31
release b
"""


def session_of(text: str, **kwargs) -> Session:
    return Session.from_scenario(parse_scenario(text), **kwargs)


def command(text: str) -> Op:
    """An op as the command bar would parse it, without the live-name check (so invalid ops
    reach the session)."""
    return parse_command(text, live_names=None)


# -- one frame per op -------------------------------------------------------------------------


def test_a_session_has_one_frame_per_op_plus_the_initial_state():
    session = session_of(SCRIPT)
    assert len(session) == 8
    assert session.frame(0).op is None
    assert [session.frame(i).op.text for i in range(1, 8)] == [
        "acquire a 1..8 extra=2", "publish a", "acquire b 1..4 9..12", "release a", "acquire big 1..40",
        "acquire c 20..31", "release b"]
    assert [f.index for f in map(session.frame, range(8))] == list(range(8))


def test_a_failed_op_is_a_frame_that_records_the_error_and_changes_nothing():
    session = session_of(SCRIPT)
    failed = session.frame(5)
    assert failed.op.text == "acquire big 1..40"
    assert failed.failed
    assert failed.error.kind == "CacheAllocationFailure"
    assert "need 8 pages" in failed.error.message
    assert failed.snapshot == session.frame(4).snapshot
    assert failed.diff.empty
    assert failed.violations == ()
    assert session.summaries[5].failed and session.summaries[5].interesting


def test_the_script_narration_goes_with_its_op_and_the_description_with_the_initial_frame():
    session = session_of(SCRIPT)
    assert session.frame(1).story == "a arrives."
    assert session.frame(1).narration == "a arrives."
    assert session.frame(2).story == ""
    assert session.frame(2).narration == session.frame(2).explanation
    assert session.frame(0).story == "two requests share a prefix, one is released, a big one evicts."


def test_any_frame_is_reachable_by_index_and_negative_indices_count_from_the_end():
    session = session_of(SCRIPT)
    assert session.frame(-1) is session.last
    assert session.frame(-1).index == 7
    assert session.frame(-8).index == 0
    assert session.frame(-3).snapshot == session.frame(5).snapshot


@pytest.mark.parametrize("index", [8, 100, -9])
def test_a_frame_outside_the_timeline_is_an_index_error_naming_the_range(index):
    session = session_of(SCRIPT)
    with pytest.raises(IndexError, match=r"0\.\.7"):
        session.frame(index)


def test_the_last_frame_is_the_live_state_of_the_backend():
    session = session_of(SCRIPT)
    assert session.last.snapshot == session.backend.snapshot()
    assert session.live_names() == ["c"]


# -- keyframes ----------------------------------------------------------------------------------


def random_steps(seed: int, count: int) -> list[tuple[Op, str, tuple[Expect, ...]]]:
    """A seeded mix of ops (mostly valid, some invalid, some failing for lack of pages),
    narration and expects. Ops are chosen against a session run alongside, so most of
    them name live allocations."""
    rng = random.Random(seed)
    session = replayed([])
    steps = []
    # Two allocations compute the same block before either publishes: a dedup.
    for text in ("acquire p 7 7 7", "acquire q 7 7 7 8", "publish p", "publish q"):
        steps.append((command(text), "", ()))
        session.apply(command(text))
    for i in range(count):
        live = session.live_names()
        tokens = " ".join(str(rng.randrange(3)) for _ in range(rng.randint(1, 9)))
        roll = rng.random()
        if roll < 0.08:
            text = rng.choice(["release ghost", "publish ghost", "extend ghost + 1"] +
                              [f"acquire {name} 1 2" for name in live])
        elif not live or roll < 0.35:
            text = f"acquire n{i} {tokens} extra={rng.choice([0, 0, 3])}"
        elif roll < 0.6:
            text = f"publish {rng.choice(live)}"
        elif roll < 0.75:
            text = f"extend {rng.choice(live)} + {tokens[:5]}"
        else:
            text = f"release {rng.choice(live)}"
        expects = (Expect("free", values=(rng.randrange(7),)), Expect("ok"),
                   Expect("hit", name=rng.choice(live or ["n0"]), values=(2,)))
        step = (command(text), f"step {i}" if i % 3 == 0 else "", expects)
        session.apply(*step)
        steps.append(step)
    return steps


def replayed(steps, **kwargs) -> Session:
    session = Session(CacheConfig("trie", 10, 2), title="random", description="random ops", **kwargs)
    for op, narration, expects in steps:
        session.apply(op, narration, expects)
    return session


def test_the_random_ops_cover_failures_invalid_ops_evictions_and_dedups():
    # The keyframe test below is only as good as the timeline it replays.
    session = replayed(random_steps(11, 120))
    kinds = {f.error.kind for f in map(session.frame, range(len(session))) if f.error}
    assert kinds == {"CacheAllocationFailure", "InvalidOperation"}
    assert sum(s.evictions for s in session.summaries) > 10
    assert session.last.snapshot.stats.dedups > 0
    assert any(r.ok for f in map(session.frame, range(len(session))) for r in f.expects)
    assert any(not r.ok for f in map(session.frame, range(len(session))) for r in f.expects)


def test_frames_rebuilt_from_keyframes_equal_the_frames_recorded_when_the_ops_ran():
    steps = random_steps(11, 120)
    recorded = replayed(steps, cached_frames=10_000)
    rebuilt = replayed(steps, keyframe_every=3, cached_frames=2)
    n = len(recorded)
    order = list(range(n)) + list(reversed(range(n))) + random.Random(5).sample(range(n), n)
    for index in order:
        want, got = recorded.frame(index), rebuilt.frame(index)
        assert got.index == want.index == index
        assert got.op == want.op
        assert got.snapshot == want.snapshot, index
        assert got.events == want.events, index
        assert got.diff == want.diff, index
        assert got.explanation == want.explanation, index
        assert got.story == want.story, index
        assert got.violations == want.violations, index
        assert got.error == want.error, index
        assert got.expects == want.expects, index
        assert got == want


@pytest.mark.parametrize("pages", [10, 4096])  # plain tuples, and a PageTable above _EXPLICIT_PAGES
def test_a_cache_restored_unverified_makes_the_same_snapshots_as_the_cache_it_was_restored_from(pages):
    # A keyframe restore (verify=False) starts its snapshots from the keyframe's rows instead
    # of walking the trie: every later snapshot must still equal the original cache's, and
    # the one a walk of the live structures makes.
    steps = random_steps(23, 150)
    original = KvcoreBackend.fresh("trie", pages, 2)
    for op, _, _ in steps[:60]:
        try:
            original.apply(op)
        except kvcore.KVCacheError:
            pass
    original.take_events()
    previous = original.snapshot()
    restored = KvcoreBackend.from_snapshot(previous, verify=False)
    for op, _, _ in steps[60:]:
        outcomes = []
        for backend in (original, restored):
            try:
                backend.apply(op)
                outcomes.append(None)
            except kvcore.KVCacheError as exc:
                outcomes.append(str(exc))
        assert outcomes[0] == outcomes[1], op.text
        assert restored.take_events() == original.take_events(), op.text
        snap = restored.snapshot()
        assert snap == original.snapshot(), op.text
        assert snap == restored.cache._snapshot_from_live(), op.text
        assert snap._changes is not None and snap._changes.before() is previous  # made from the kept rows
        previous = snap
    assert restored.check_full(restored.snapshot()) == []


POISON_TICK = 40


class PoisonedAtTick(KvcoreBackend):
    """kvcore with a planted bug: the op that ticks the clock to POISON_TICK adds one to the
    ref of the oldest node on a live path (and notes it, so every later snapshot shows it,
    restored keyframes included). Deterministic, so rebuilt frames are the recorded ones."""

    def apply(self, op):
        before = self.cache.clock
        super().apply(op)
        if before < POISON_TICK <= self.cache.clock:
            node = min((n for n in self.cache._iter_nodes() if n.parent is not None and n.ref > 0),
                       key=lambda n: n.seq)
            node.ref += 1
            if self.cache._rows is not None:
                self.cache._rows.touch([node])


def poisoned_backend(config, snapshot):
    return PoisonedAtTick(kvcore_backend(config, snapshot).cache)


@pytest.mark.parametrize("lazy", [False, True], ids=["applied", "lazy"])
def test_every_jumped_to_frame_has_the_full_checks_violations_before_and_after_a_planted_bug(lazy):
    # A jump trusts a keyframe an earlier check found healthy and re-checks only the replayed
    # ops' changes: the full check stays the oracle, on healthy frames and broken ones.
    session = Session(CacheConfig("trie", 10, 2), backend_factory=poisoned_backend, keyframe_every=3,
                      cached_frames=2)
    for op, narration, expects in random_steps(11, 120):
        (session.append if lazy else session.apply)(op, narration, expects)
    n = len(session)
    broken = 0
    for index in random.Random(3).sample(range(n), n) + list(reversed(range(n))):
        frame = session.frame(index)
        assert list(frame.violations) == kvcore.check_snapshot(frame.snapshot), index
        broken += bool(frame.violations)
    assert 0 < broken < 2 * n  # healthy frames before the bug, broken ones after it
    keyframes = sorted(session._keyframes)
    assert 0 < len(session._healthy_keyframes) < len(keyframes)  # trusted only while healthy


def poisoned_lazy_session(keyframe_every: int = 3) -> Session:
    session = Session(CacheConfig("trie", 10, 2), backend_factory=poisoned_backend, keyframe_every=keyframe_every,
                      cached_frames=2)
    for op, narration, expects in random_steps(11, 120):
        session.append(op, narration, expects)
    return session


def full_check_verdicts(session: Session) -> dict[int, int]:
    """The oracle: each keyframe's violation count by the full check of its snapshot."""
    return {i: len(kvcore.check_snapshot(snap)) for i, snap in sorted(session._keyframes.items())}


def test_lazily_appended_keyframes_are_checked_by_idle_work_with_the_full_checks_verdicts():
    # The first paint does not wait for the keyframes' checks; idle work does them later, a
    # few at a time, and each verdict is still the full check's (healthy and broken ones).
    session = poisoned_lazy_session()
    oracle = full_check_verdicts(session)
    assert session.deferred_checks == len(oracle) - 1  # all but frame 0, checked by the constructor
    assert all(session.summaries[i].violations == 0 for i in oracle)  # nothing known yet
    marked = []
    while True:
        progress = session.idle_work(keyframes=2)
        marked += progress.marked
        if not progress.left:
            break
    assert session.deferred_checks == 0
    assert {i: session.summaries[i].violations for i in oracle} == oracle
    assert marked == [i for i, found in oracle.items() if found]  # the timeline's new markers, in order
    assert session._healthy_keyframes == {i for i, found in oracle.items() if not found}
    assert 0 < len(marked) < len(oracle)  # the planted bug breaks the later keyframes only
    assert session.idle_work() == type(progress)(0, ())  # nothing left: nothing done


def test_idle_work_checks_exactly_as_many_keyframes_as_it_is_given():
    session = poisoned_lazy_session()
    left = session.deferred_checks
    assert session.idle_work(keyframes=0).left == left
    assert session.idle_work(keyframes=-3).left == left
    assert session.idle_work(keyframes=5).left == left - 5
    assert session.idle_work(keyframes=10**6).left == 0


def test_deferred_keyframe_checks_give_the_verdicts_of_checks_made_as_the_ops_ran():
    # Checked as the ops are applied (every frame, on the session's own backend) or later by
    # idle work: the same summary for every keyframe, the same keyframes trusted by jumps.
    applied = Session(CacheConfig("trie", 10, 2), backend_factory=poisoned_backend, keyframe_every=3,
                      cached_frames=2)
    for op, narration, expects in random_steps(11, 120):
        applied.apply(op, narration, expects)
    lazy = poisoned_lazy_session()
    while lazy.idle_work().left:
        pass
    assert sorted(lazy._keyframes) == sorted(applied._keyframes)
    assert [lazy.summaries[i].violations for i in sorted(lazy._keyframes)] == \
        [applied.summaries[i].violations for i in sorted(applied._keyframes)]
    assert lazy._healthy_keyframes == applied._healthy_keyframes


def test_a_jump_before_idle_work_checks_the_few_keyframes_left_up_to_the_one_it_restores():
    session = poisoned_lazy_session()
    oracle = full_check_verdicts(session)
    early = session.frame(10)  # restores keyframe 9, healthy: checked now (with 3 and 6), and trusted
    assert list(early.violations) == kvcore.check_snapshot(early.snapshot) == []
    assert list(session._unchecked_keyframes) == [i for i in oracle if i > 9]
    assert {3, 6, 9} <= session._healthy_keyframes
    step = 3 * JUMP_CHECKS_AT_MOST
    frame = session.frame(9 + step + 1)  # exactly JUMP_CHECKS_AT_MOST left up to its keyframe
    assert list(frame.violations) == kvcore.check_snapshot(frame.snapshot)
    assert list(session._unchecked_keyframes) == [i for i in oracle if i > 9 + step]
    assert {i: session.summaries[i].violations for i in oracle if i <= 9 + step} == \
        {i: n for i, n in oracle.items() if i <= 9 + step}


def test_a_far_jump_before_idle_work_checks_its_frame_whole_and_leaves_the_keyframes_to_idle():
    session = poisoned_lazy_session()
    left = list(session._unchecked_keyframes)
    assert len([i for i in left if i <= 120]) > JUMP_CHECKS_AT_MOST
    for index in (121, 100, 2):  # broken, broken, healthy
        frame = session.frame(index)
        assert list(frame.violations) == kvcore.check_snapshot(frame.snapshot), index
    assert session.frame(121).violations and not session.frame(2).violations
    assert list(session._unchecked_keyframes) == left
    assert session._healthy_keyframes == {0}  # nothing trusted that was not checked


@pytest.mark.parametrize("seed", range(4))
def test_the_verdicts_do_not_depend_on_when_idle_work_ran(seed):
    # Jumps, steps and idle work interleaved at random: every frame's violations are the full
    # check's, and the summaries end as those of idle work run alone.
    rng = random.Random(seed)
    alone = poisoned_lazy_session()
    while alone.idle_work().left:
        pass
    session = poisoned_lazy_session()
    for _ in range(60):
        if rng.random() < 0.3:
            session.idle_work(keyframes=rng.randint(1, 5))
        else:
            frame = session.frame(rng.randrange(len(session)))
            assert list(frame.violations) == kvcore.check_snapshot(frame.snapshot), frame.index
    while session.idle_work().left:
        pass
    assert [s.violations for i, s in enumerate(session.summaries) if i in session._keyframes] == \
        [s.violations for i, s in enumerate(alone.summaries) if i in alone._keyframes]
    assert session._healthy_keyframes == alone._healthy_keyframes


def test_an_op_applied_after_lazy_appends_first_checks_the_keyframes_left():
    # The live backend's checker sees the keyframes in order before the new state, as if they
    # had been checked as they were appended (the last frame, 124, is a keyframe: building it
    # as the frame before the op checks only those before it).
    session = poisoned_lazy_session(keyframe_every=4)
    assert len(session) - 1 in session._keyframes
    oracle = full_check_verdicts(session)
    frame = session.apply(command("acquire late 1 2"))
    assert session.deferred_checks == 0
    assert {i: session.summaries[i].violations for i in oracle} == oracle
    assert list(frame.violations) == kvcore.check_snapshot(frame.snapshot)


def test_truncating_a_lazy_timeline_drops_the_unchecked_keyframes_after_the_branch():
    session = poisoned_lazy_session()
    session.truncate(50)
    assert session.deferred_checks == 0
    assert sorted(session._keyframes) == [i for i in range(0, 51, 3)]
    assert {i: session.summaries[i].violations for i in session._keyframes} == full_check_verdicts(session)
    for op, narration, expects in random_steps(5, 20):
        session.append(op, narration, expects)
    assert session.deferred_checks > 0
    while session.idle_work().left:
        pass
    assert {i: session.summaries[i].violations for i in session._keyframes} == full_check_verdicts(session)


def test_a_backend_a_jump_leaves_behind_is_freed_without_the_cyclic_collector():
    # A rebuilt frame's backend (a restored cache of thousands of nodes that point at their
    # parents and children) was freed by the collector, a pause in a later jump; discarded,
    # reference counting frees it when the jump lets go of it.
    session = Session(CacheConfig("trie", 10, 2), keyframe_every=8, cached_frames=2)
    for op, narration, expects in random_steps(11, 120):
        session.append(op, narration, expects)
    session.frame(60)
    left_behind = weakref.ref(session._cursor[1].cache)
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        session.frame(20)  # far from 60: another keyframe restored
        assert left_behind() is None
    finally:
        if was_enabled:
            gc.enable()


def test_a_discarded_kvcore_backend_leaves_no_cycle_for_the_collector():
    def cache_left(discard: bool):
        backend = KvcoreBackend.fresh("trie", 10, 2)
        for op, _, _ in random_steps(3, 60):
            try:
                backend.apply(op)
            except kvcore.KVCacheError:
                pass
        backend.take_events()
        backend.checked_healthy(backend.snapshot())
        cache = weakref.ref(backend.cache)
        if discard:
            backend.discard()
        del backend
        return cache()

    was_enabled = gc.isenabled()
    gc.disable()
    try:
        assert cache_left(discard=True) is None
        assert cache_left(discard=False) is not None  # the cycles this undoes: the test can fail
    finally:
        gc.collect()
        if was_enabled:
            gc.enable()


def test_the_why_index_reads_events_by_exact_class_so_no_event_class_may_extend_another():
    # WhyIndex.record dispatches on type(e) (an isinstance chain cost ~40 ms of opening a
    # 3,000-step trace): a subclass of an event it reads would go unrecorded.
    classes = list(kvcore.events.EVENT_TYPES.values())
    assert [c.__name__ for c in classes if any(base in classes for base in c.__mro__[1:])] == []


def test_lazily_appended_ops_record_each_events_facts_and_evictions():
    # The oracle reads every frame's events by isinstance, as the why index once did.
    steps = random_steps(11, 120)
    applied = replayed(steps, cached_frames=10_000)
    expected = WhyIndex()
    for frame in map(applied.frame, range(1, len(applied))):
        for e in frame.events:
            if isinstance(e, kvcore.events.NodeCreated):
                expected.created.setdefault((e.parent, e.tokens), []).append((e.node, frame.index))
                expected.node_created_at[e.node] = frame.index
            elif isinstance(e, kvcore.events.Evicted):
                expected.node_evicted_at[e.node] = frame.index
                expected.page_evicted_at.setdefault(e.page, []).append(frame.index)
            elif isinstance(e, kvcore.events.OpStarted) and e.op == "acquire":
                expected.acquired_at[e.allocation] = frame.index
    lazy = Session(CacheConfig("trie", 10, 2), title="random", description="random ops")
    for op, narration, expects in steps:
        lazy.append(op, narration, expects)
    assert lazy.why_index == expected
    assert [s.evictions for s in lazy.summaries] == [len(applied.frame(i).evictions) for i in range(len(applied))]
    assert sum(s.evictions for s in lazy.summaries) > 10 and expected.node_evicted_at and expected.acquired_at


def test_frames_of_lazily_appended_ops_equal_the_frames_of_applied_ops():
    steps = random_steps(17, 80)
    applied = replayed(steps, cached_frames=10_000)
    lazy = Session(CacheConfig("trie", 10, 2), title="random", description="random ops", keyframe_every=5,
                   cached_frames=3)
    for op, narration, expects in steps:
        lazy.append(op, narration, expects)
    assert len(lazy) == len(applied)
    assert [s.failed for s in lazy.summaries] == [s.failed for s in applied.summaries]
    assert [s.evictions for s in lazy.summaries] == [s.evictions for s in applied.summaries]
    for index in reversed(range(len(applied))):
        assert lazy.frame(index) == applied.frame(index), index
    assert lazy.summaries == applied.summaries  # expect failures are known once frames are built
    assert lazy.last == applied.last


def test_the_state_before_a_jumped_to_frame_comes_from_the_same_rebuild_and_equals_the_frame_before():
    steps = random_steps(13, 60)
    recorded = replayed(steps, cached_frames=10_000)
    restores = []

    def counting(config, snapshot):
        restores.append(snapshot is not None)
        return kvcore_backend(config, snapshot)

    lazy = Session(CacheConfig("trie", 10, 2), title="random", description="random ops", keyframe_every=8,
                   cached_frames=4, backend_factory=counting)
    for op, narration, expects in steps:
        lazy.append(op, narration, expects)
    for index in (50, 21, 37, 3, 60):
        restores.clear()
        before = lazy.snapshot_before(index)
        assert before == recorded.frame(index - 1).snapshot, index
        assert lazy.frame(index) == recorded.frame(index), index
        assert restores.count(True) <= 1, f"frame {index} and the state before it took {restores.count(True)} restores"
    with pytest.raises(IndexError, match="initial state"):
        lazy.snapshot_before(0)


def test_a_session_keeps_only_its_cache_of_frames_and_every_kth_snapshot():
    session = replayed(random_steps(3, 40), keyframe_every=8, cached_frames=4)
    assert len(session._frames) == 4
    assert sorted(session._keyframes) == [0, 8, 16, 24, 32, 40]


# -- branching ---------------------------------------------------------------------------------


def test_truncating_and_continuing_gives_the_same_timeline_as_a_fresh_session_of_the_branch():
    steps = random_steps(23, 60)
    new_ops = [command(t) for t in ("acquire z 0 1 0 1 2 2 extra=2", "publish z", "release z",
                                    "acquire y 0 1 0 1 2 2 0", "release a", "acquire w 2 2 2 2 2 2 2 2 2 2")]
    last = len(steps)
    for keep in (0, 1, 17, 24, last - 1, last):
        branched = replayed(steps, keyframe_every=4, cached_frames=3)
        branched.frame(min(keep + 1, last))  # a cached frame after the branch point
        branched.truncate(keep)
        assert len(branched) == keep + 1
        for op in new_ops:
            branched.apply(op)
        fresh = replayed(steps[:keep], keyframe_every=4, cached_frames=3)
        for op in new_ops:
            fresh.apply(op)
        assert len(branched) == len(fresh) == keep + 1 + len(new_ops)
        for index in range(len(fresh)):
            want, got = fresh.frame(index), branched.frame(index)
            assert got.snapshot == want.snapshot, (keep, index)
            assert got.events == want.events, (keep, index)
            assert got.explanation == want.explanation, (keep, index)
            assert got.error == want.error, (keep, index)
        assert branched.summaries == fresh.summaries
        assert branched.live_names() == fresh.live_names()
        assert [s.op for s in branched.steps] == [s.op for s in fresh.steps]


def test_the_quiet_snapshot_replay_gives_every_frames_snapshot_also_after_a_branch():
    """``Session.snapshots()`` (what bundle digests come from) replays on a backend of its
    own: it must give frame i's snapshot for every i, before and after a branch, and leave
    the session's own frames alone."""
    session = replayed(random_steps(31, 80), keyframe_every=4, cached_frames=3)
    session.frame(37)  # park the session's cursor mid-timeline
    assert list(session.snapshots()) == [session.frame(i).snapshot for i in range(len(session))]
    session.truncate(50)
    session.apply(command("acquire q 0 1 2 0 1 2 0 1"))
    quiet = list(session.snapshots())
    assert len(quiet) == len(session) == 52
    assert quiet == [session.frame(i).snapshot for i in range(len(session))]


def test_why_answers_after_a_branch_forget_the_dropped_steps():
    session = session_of(SCRIPT)
    evicting = session_of(SCRIPT + "acquire d 40..47\n")
    assert evicting.last.evictions
    page = evicting.last.evictions[0].page
    evicting.truncate(len(session) - 1)  # back to before the evicting acquire
    assert why_evicted(evicting, len(evicting) - 1, page).step is None
    assert why_evicted(evicting, len(evicting) - 1, page).title == why_evicted(session, len(session) - 1, page).title


def test_truncating_to_a_frame_that_does_not_exist_is_an_index_error():
    session = session_of(SCRIPT)
    with pytest.raises(IndexError):
        session.truncate(8)
    with pytest.raises(IndexError):
        session.truncate(-1)
    assert len(session) == 8


# -- invalid ops -----------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["publish ghost", "extend ghost + 1 2", "release ghost", "publish a 9 9 9 9"])
def test_an_op_on_an_unknown_allocation_or_a_bad_one_is_an_invalid_operation_frame(text):
    session = session_of("acquire a 1..4\n")
    before = session.last.snapshot
    frame = session.apply(command(text))
    assert frame.index == 2 and len(session) == 3
    assert frame.error.kind == "InvalidOperation"
    assert frame.snapshot == before
    assert frame.violations == ()
    assert "Nothing changed" in frame.explanation


def test_an_unknown_allocation_error_lists_the_live_allocations():
    session = session_of("acquire a 1..4\nacquire b 5..8\n")
    frame = session.apply(command("release ghost"))
    assert "'ghost'" in frame.error.message and "a, b" in frame.error.message


def test_a_second_acquire_of_a_live_name_is_an_invalid_operation_frame():
    session = session_of("acquire a 1..4\n")
    frame = session.apply(command("acquire a 5..8"))
    assert frame.error.kind == "InvalidOperation"
    assert "already live" in frame.error.message
    assert frame.snapshot == session.frame(1).snapshot
    assert session.live_names() == ["a"]


def test_a_released_name_can_be_acquired_again_and_a_second_release_is_invalid():
    session = session_of("acquire a 1..4\nrelease a\n")
    assert session.apply(command("release a")).error.kind == "InvalidOperation"
    assert session.apply(command("acquire a 1..4")).error is None
    assert session.live_names() == ["a"]


# -- the backend seam --------------------------------------------------------------------------


def test_the_kvcore_backend_and_its_factory_keep_to_the_declared_seam():
    backend = kvcore_backend(CacheConfig(), None)
    assert isinstance(backend, Backend) and isinstance(kvcore_backend, BackendFactory)
    assert (backend.name, backend.version) == ("kvcore", kvcore.__version__)
    assert backend.can_restore is True and backend.observes == ALL_EVENTS
    assert backend.take_findings() == ()
    assert backend.check(backend.snapshot()) == []


class ReplayOnlyBackend(KvcoreBackend):
    """kvcore, but declaring that it cannot be restored: the session must replay it from frame 0."""

    can_restore = False


def replay_only_factory(config, snapshot):
    if snapshot is not None:
        raise AssertionError("asked to restore a backend that declared can_restore = False")
    return ReplayOnlyBackend.fresh(config.kind, config.pages, config.tokens_per_page)


def test_a_backend_that_cannot_restore_is_replayed_from_frame_0_with_identical_frames():
    steps = random_steps(11, 60)
    restored = replayed(steps, keyframe_every=4, cached_frames=2)
    replay_only = replayed(steps, backend_factory=replay_only_factory, keyframe_every=4, cached_frames=2)
    assert list(replay_only._keyframes) == [0] and len(restored._keyframes) > 1
    for i in range(len(restored)):
        assert replay_only.frame(i) == restored.frame(i), f"frame {i}"
    replay_only.truncate(30)
    assert replay_only.backend.snapshot() == restored.frame(30).snapshot


class SelfCheckingBackend(KvcoreBackend):
    """kvcore, with an invariant check of its own that always finds one problem."""

    def check(self, snapshot):
        return [Violation(6, f"checked in this backend's own terms at clock {snapshot.clock}")]


def test_the_session_checks_every_frame_with_the_backends_own_check():
    session = Session(CacheConfig(), backend_factory=lambda config, snap: SelfCheckingBackend.fresh("trie", 8, 4))
    frame = session.apply(command("acquire a 1..4"))
    assert [v.message for v in session.frame(0).violations] == ["checked in this backend's own terms at clock 0"]
    assert [v.message for v in frame.violations] == ["checked in this backend's own terms at clock 1"]


class NoSuchRequest(UnknownAllocation):
    """A backend's own kind of unknown allocation."""


class RequestBackend(KvcoreBackend):
    def allocation(self, name):
        raise NoSuchRequest(f"no request {name!r}")


def test_any_unknown_allocation_error_is_shown_as_an_invalid_operation_by_its_type():
    session = Session(CacheConfig(), backend_factory=lambda config, snap: RequestBackend.fresh("trie", 8, 4))
    frame = session.apply(command("release ghost"))
    assert (frame.error.kind, frame.error.message) == ("InvalidOperation", "no request 'ghost'")
    assert issubclass(UnknownAllocation, InvalidOperation)


@pytest.mark.parametrize("config, message", [
    (CacheConfig("radix", 8, 4), "the kvcore backend runs a trie, a base or a hash cache, not 'radix'"),
    (CacheConfig("trie", 8, 4, "arc"),
     "the kvcore backend evicts by lru, fifo, lfu, mru, filo, slru or priority, not 'arc'"),
])
def test_a_config_the_kvcore_backend_cannot_run_is_a_backend_error_before_any_op(config, message):
    with pytest.raises(BackendError) as info:
        Session(config)
    assert str(info.value) == message


def test_from_scenario_raises_the_backend_error_of_a_kind_the_backend_cannot_run():
    with pytest.raises(BackendError, match="not 'radix'"):
        Session.from_scenario(parse_scenario("acquire a 1..4\n"), kind="radix")


# -- expects ---------------------------------------------------------------------------------

EXPECT_SCRIPT = """\
cache trie pages=5 tokens_per_page=4
acquire a 1..8 extra=2
publish a
acquire b 1..4 9..12
release a
acquire c 20..31
acquire big 1..40
"""
# Frame 5 (acquire c): free 0; node 1 (page 0) cached with ref 1 (b); page 1 (node 2) evicted
# for c; owned: b's page 3 and c's pages 4 2 1; c matched nothing. Frame 6 failed (alloc).


def test_the_expect_fixture_is_the_state_the_table_below_assumes():
    frame = session_of(EXPECT_SCRIPT).frame(5)
    assert frame.snapshot.allocation_named("c").pages == (4, 2, 1)
    assert frame.diff.pages_evicted == (1,)


EXPECTS = [
    # (frame, expect, holds)
    (5, Expect("ok"), True),
    (6, Expect("ok"), False),
    (6, Expect("fail"), True),
    (6, Expect("fail", detail="alloc"), True),
    (6, Expect("fail", detail="invalid"), False),
    (5, Expect("fail"), False),
    (5, Expect("free", values=(0,)), True),
    (5, Expect("free", values=(1,)), False),
    (5, Expect("cached", values=(1,)), True),
    (5, Expect("cached", values=(2,)), False),
    (4, Expect("evictable", values=(1,)), True),
    (5, Expect("evictable", values=(1,)), False),
    (5, Expect("owned", values=(4,)), True),
    (5, Expect("owned", values=(3,)), False),
    (3, Expect("hit", name="b", values=(4,)), True),
    (3, Expect("hit", name="b", values=(8,)), False),
    (5, Expect("hit", name="a", values=(0,)), False),  # a is released: not live
    (5, Expect("pages", name="c", values=(4, 2, 1)), True),
    (5, Expect("pages", name="c", values=(1, 2, 4)), False),
    (2, Expect("published", name="a", values=(2,)), True),
    (1, Expect("published", name="a", values=(2,)), False),
    (5, Expect("evicted", values=(1,)), True),
    (5, Expect("evicted", values=(0,)), False),
    (5, Expect("evictions", values=(1,)), True),
    (4, Expect("evictions", values=(1,)), False),
    (5, Expect("ref", values=(0, 1)), True),
    (3, Expect("ref", values=(0, 1)), False),
    (5, Expect("ref", values=(3, 0)), False),  # page 3 is an owned tail, not a node
    (5, Expect("live", names=("c", "b")), True),
    (5, Expect("live", names=("a", "b", "c")), False),
    (5, Expect("violations", values=(0,)), True),
    (5, Expect("violations", values=(1,)), False),
]


@pytest.mark.parametrize("index,expect,holds", EXPECTS,
                         ids=[f"{x.kind}-{'right' if ok else 'wrong'}-{i}" for i, (_, x, ok) in enumerate(EXPECTS)])
def test_an_expect_holds_exactly_when_the_frame_agrees(index, expect, holds):
    session = session_of(EXPECT_SCRIPT)
    result = evaluate(expect, session.frame(index))
    assert result.ok is holds
    assert (result.message == "ok") is holds


def test_a_wrong_expect_says_what_was_expected_and_what_was_found():
    session = session_of(EXPECT_SCRIPT)
    assert evaluate(Expect("free", values=(3,)), session.frame(5)).message == "expected free 3, got free 0"
    assert evaluate(Expect("pages", name="c", values=(1, 2)), session.frame(5)).message == (
        "expected pages [1 2], got pages [4 2 1]")
    assert evaluate(Expect("ok"), session.frame(6)).message == (
        "expected success, got failure CacheAllocationFailure")
    assert evaluate(Expect("fail", detail="invalid"), session.frame(6)).message == (
        "expected InvalidOperation, got CacheAllocationFailure")
    missing = evaluate(Expect("hit", name="a", values=(0,)), session.frame(5))
    assert "'a'" in missing.message and "live: b, c" in missing.message


def test_expect_lines_of_a_script_are_evaluated_at_their_step_and_summarised():
    session = session_of(EXPECT_SCRIPT.replace("acquire c 20..31\n", "acquire c 20..31\nexpect free 0\n"
                                               "expect free 2\nexpect evicted 1\n"))
    frame = session.frame(5)
    assert [r.ok for r in frame.expects] == [True, False, True]
    assert [r.expect.text for r in frame.expect_failures] == ["expect free 2"]
    assert session.summaries[5].expect_failures == 1


def test_the_same_step_answers_why_the_same_after_its_frame_was_rebuilt():
    text = EXPECT_SCRIPT + "release b\nacquire d 1..4 5..8\n"
    cached = session_of(text)
    rebuilt = session_of(text, keyframe_every=2, cached_frames=2)
    for index in range(len(cached)):
        rebuilt.frame(index)
    assert why_evicted(rebuilt, 7, 1).text() == why_evicted(cached, 7, 1).text()
    assert why_short_match(rebuilt, 8, "d").text() == why_short_match(cached, 8, "d").text()


def test_on_frame_sees_each_applied_frame_once_in_order_and_check_never_rebuilds_one(monkeypatch, tmp_path):
    from click.testing import CliRunner

    from kvviz.cli import cli
    from kvviz.core.demos import demo_path

    scenario = parse_scenario(demo_path("eviction-cascade").read_text(encoding="utf-8"))
    seen = []
    session = Session.from_scenario(scenario, on_frame=seen.append, cached_frames=2)
    assert [f.index for f in seen] == list(range(1, len(session)))
    rebuilt = Session.from_scenario(scenario, cached_frames=2)
    assert all(f.snapshot == rebuilt.frame(f.index).snapshot and f.narration == rebuilt.frame(f.index).narration
               for f in seen)
    with pytest.raises(ValueError):
        Session.from_scenario(scenario, lazy=True, on_frame=seen.append)

    def no_rebuilds(self, index):
        raise AssertionError(f"kvviz check rebuilt frame {index}: it should read frames as the run makes them")

    # Longer than the frame cache (256 frames): reading frames back afterwards would rebuild.
    long = tmp_path / "long.kvs"
    long.write_text("cache trie pages=8 tokens_per_page=2\n" + "".join(
        f"acquire r{i} {i} {i + 1} {i + 2}\npublish r{i}\nrelease r{i}\n" for i in range(100)), encoding="utf-8")
    monkeypatch.setattr(Session, "_rebuild", no_rebuilds)
    result = CliRunner().invoke(cli, ["check", str(long)])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("ok")
