# SPDX-License-Identifier: Apache-2.0
"""The key footer (kvviz/ui/widgets/key_footer.py): Textual's compact footer that is rebuilt
only when the keys it shows change. It must show what Textual's own footer shows, follow
every change of the keys, and keep its widgets when a signal changes nothing."""

from __future__ import annotations

import re

from textual.widgets import Footer
from textual.widgets._footer import FooterKey

from kvviz.explore import timeline_screen
from kvviz.ui.widgets.key_footer import KeyFooter

SIZE = (140, 45)


def shown_keys(app) -> list[tuple[str, str, bool]]:
    """The footer's key widgets as they are now: key, description, enabled."""
    footer = app.screen.query_one(Footer)
    return [(key.key, key.description, not key.has_class("-disabled")) for key in footer.query(FooterKey)]


def footer_line(app) -> str:
    """The bottom row of the screen as text (where the footer is docked)."""
    svg = app.export_screenshot()
    rows = re.findall(r'<text[^>]*y="([\d.]+)"[^>]*>(.*?)</text>', svg.replace("&#160;", " "))
    bottom = max(float(y) for y, _ in rows)
    return "".join(re.sub(r"<[^>]+>", "", text) for y, text in rows if float(y) == bottom)


async def test_the_footer_draws_what_textuals_compact_footer_draws_with_help_and_quit_first(app_on, lru, monkeypatch):
    app = app_on(lru, step=27)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        ours = footer_line(app)
        assert isinstance(app.screen.query_one(Footer), KeyFooter)
        assert all(key.has_class("-compact") for key in app.screen.query(FooterKey))
    monkeypatch.setattr(timeline_screen, "KeyFooter", lambda: Footer(compact=True))
    plain = app_on(lru, step=27)
    async with plain.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert not isinstance(plain.screen.query_one(Footer), KeyFooter)
        theirs = footer_line(plain)
    assert ours.startswith("? helpq quit") and theirs.replace("? helpq quit", "") == ours.removeprefix("? helpq quit")
    assert "play" in ours


async def test_help_and_quit_stay_in_view_at_80x24_where_the_footer_cuts_its_other_keys(app_on, lru):
    app = app_on(lru, step=20)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        line = footer_line(app)
        assert line.startswith("? helpq quit"), line
        keys = {key.key: key.region for key in app.screen.query(FooterKey)}
        assert keys["question_mark"].right <= 80 and keys["q"].right <= 80


async def test_the_footer_follows_a_change_of_the_keys_and_keeps_its_widgets_when_none_changed(app_on, small):
    app = app_on(small)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        footer = app.screen.query_one(Footer)
        before = list(footer.query(FooterKey))
        assert ("space", "play", True) in shown_keys(app)

        # The same keys (a refresh of the bindings that changes nothing): the same widgets.
        app.screen.refresh_bindings()
        await pilot.pause()
        assert list(footer.query(FooterKey)) == before, "rebuilt though no key changed"

        # Playing swaps "play" for "pause": the footer is rebuilt and shows it.
        app.screen.action_play()
        await pilot.pause()
        assert app.playing
        assert ("space", "pause", True) in shown_keys(app)
        assert ("space", "play", True) not in shown_keys(app)
        app.screen.action_pause()
        await pilot.pause()
        assert ("space", "play", True) in shown_keys(app)
        assert [key.description for key in footer.query(FooterKey)] == [d for _, d, _ in shown_keys(app)]
