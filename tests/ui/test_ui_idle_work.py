# SPDX-License-Identifier: Apache-2.0
"""The app's idle work: a lazily built timeline's keyframe checks run after the
first paint, a bounded piece at a time (:meth:`KvvizApp.work_while_idle`), their violations
reach the timeline bar, and the hook the CLI settles the heap in is called once, when they
are done. Driven by calling the method, never by waiting for the idle chain."""

from __future__ import annotations

import kvcore
from kvviz.backends.kvcore_backend import KvcoreBackend, kvcore_backend
from kvviz.core.scenario import CacheConfig, parse_command
from kvviz.core.session import Session

SIZE = (120, 40)
PLANTED_AT_TICK = 30


class RefBumpedAtTick(KvcoreBackend):
    """kvcore with a planted bug: the op that ticks the clock past PLANTED_AT_TICK adds one
    to the ref of the oldest node, which no request holds then: every later keyframe is broken."""

    def apply(self, op):
        before = self.cache.clock
        super().apply(op)
        if before < PLANTED_AT_TICK <= self.cache.clock:
            node = min((n for n in self.cache._iter_nodes() if n.parent is not None), key=lambda n: n.seq)
            node.ref += 1
            if self.cache._rows is not None:
                self.cache._rows.touch([node])


def planted_backend(config, snapshot):
    return RefBumpedAtTick(kvcore_backend(config, snapshot).cache)


def lazy_planted_session() -> Session:
    """60 ops of requests that share a prefix, appended lazily (as ``trace --ui`` builds)."""
    session = Session(CacheConfig("trie", 12, 2), backend_factory=planted_backend, keyframe_every=4)
    for i in range(20):
        for text in (f"acquire r{i} 1 2 3 4 {5 + i % 3} {6 + i % 5}", f"publish r{i}", f"release r{i}"):
            session.append(parse_command(text, live_names=None))
    return session


def drain(app, bound: int = 200) -> int:
    """Call the idle work until the session has none left (at most ``bound`` calls)."""
    calls = 0
    while app.session.deferred_checks and calls < bound:
        app.work_while_idle()
        calls += 1
    assert app.session.deferred_checks == 0, f"still {app.session.deferred_checks} keyframes after {bound} calls"
    return calls


async def test_idle_work_puts_the_violations_of_the_checked_keyframes_on_the_timeline_bar(app_on):
    session = lazy_planted_session()
    broken = [i for i, snap in sorted(session._keyframes.items()) if kvcore.check_snapshot(snap)]
    assert broken and session.deferred_checks  # the test needs both
    app = app_on(session)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        drain(app)
        await pilot.pause()
        assert app.step == 0  # the bar is redrawn for the markers, not because the step moved
        shown = app.timeline.timeline.summaries
        assert [i for i, s in enumerate(shown) if i in session._keyframes and s.violations] == broken
        assert all(shown[i].violations == len(kvcore.check_snapshot(session._keyframes[i])) for i in broken)


async def test_a_jump_before_the_idle_work_ends_shows_the_full_checks_violations(app_on):
    session = lazy_planted_session()
    app = app_on(session)
    async with app.run_test(size=SIZE) as pilot:
        app.go_to(58)
        await pilot.pause()
        frame = session.frame(58)
        assert list(frame.violations) == kvcore.check_snapshot(frame.snapshot) != []
        assert app.view.frame.violations == frame.violations


async def test_the_after_idle_work_hook_is_called_once_when_the_deferred_checks_are_done(app_on):
    session = lazy_planted_session()
    seen = []
    app = app_on(session, after_idle_work=lambda: seen.append(session.deferred_checks))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        drain(app)
        app.work_while_idle()
        app.work_while_idle()
        await pilot.pause()
    assert seen == [0]


async def test_a_timeline_with_nothing_deferred_calls_the_hook_after_the_first_paint(app_on, lru):
    seen = []
    app = app_on(lru, after_idle_work=lambda: seen.append(lru.deferred_checks))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        app.work_while_idle()
        await pilot.pause()  # the hook runs after the next refresh
    assert seen == [0]


async def test_the_first_paint_starts_the_idle_work(app_on, monkeypatch):
    # Textual's Ready (the first frame is on screen) is what starts it: polled, with a bound.
    from kvviz.explore.app import KvvizApp

    started = []
    monkeypatch.setattr(KvvizApp, "work_while_idle", lambda app: started.append(app.session.deferred_checks))
    session = lazy_planted_session()
    app = app_on(session)
    async with app.run_test(size=SIZE) as pilot:
        for _ in range(50):
            if started:
                break
            await pilot.pause()
    assert started == [session.deferred_checks] and started[0] > 0  # called once, nothing done by anyone else


async def test_v_and_brackets_before_the_idle_work_ends_answer_for_the_whole_timeline(app_on, monkeypatch):
    # The moment after a lazily built trace opens, before idle work has checked a keyframe:
    # v must not say "no violations", and ] must stop where it stops once all are checked.
    # The footer does not offer "v broken" for a violation not known yet: v is its silent twin.
    checked = lazy_planted_session()
    checked.finish_deferred_checks()
    first_broken = next(s.index for s in checked.summaries if s.violations)
    first_interesting = next(s.index for s in checked.summaries[1:] if s.interesting)
    for action, expected in (("no_violation", first_broken), ("next_interesting", first_interesting)):
        session = lazy_planted_session()
        app = app_on(session)
        monkeypatch.setattr(type(app), "work_while_idle", lambda self: None)  # idle work never runs
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            assert session.deferred_checks, "the test needs keyframes still unchecked"
            assert app.main_screen.check_action("first_violation", ()) is False  # none known: not offered
            assert app.main_screen.check_action("no_violation", ()) is True
            getattr(app.main_screen, f"action_{action}")()
            await pilot.pause()
            assert app.step == expected, action
            assert session.deferred_checks == 0
            shown = app.timeline.timeline.summaries
            assert shown[first_broken].violations  # the marker is on the bar


async def test_the_footer_offers_v_broken_only_once_a_violation_is_known(app_on, monkeypatch):
    from textual.widgets._footer import FooterKey

    session = lazy_planted_session()
    app = app_on(session)
    monkeypatch.setattr(type(app), "work_while_idle", lambda self: None)  # not yet: the checks wait
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        monkeypatch.undo()
        assert session.deferred_checks and not any(s.violations for s in session.summaries)
        assert "broken" not in [key.description for key in app.screen.query(FooterKey)]
        drain(app)
        await pilot.pause()
        assert "broken" in [key.description for key in app.screen.query(FooterKey)]
