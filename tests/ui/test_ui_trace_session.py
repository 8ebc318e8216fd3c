# SPDX-License-Identifier: Apache-2.0
"""A Mooncake trace opened in the UI (``kvviz trace FILE --ui``) says one thing in one unit:
a page is one block of 512 tokens in the header, the pool's title and the start's narration;
a request's name never runs into its status; "v broken" is offered only for a violation."""

from __future__ import annotations

from pathlib import Path

from textual.widgets._footer import FooterKey

from kvviz.core.session import Session
from kvviz.core.mooncake import read_trace
from kvviz.trace.replay import ReplayConfig
from kvviz.trace.to_kvs import trace_to_scenario
from kvviz.ui.widgets.allocation_table import AllocationTable

TRACE = Path(__file__).resolve().parents[3] / "shared" / "data" / "mooncake" / "conversation_trace.jsonl"


def trace_session() -> Session:
    loaded = read_trace(TRACE, block_tokens=512, first=20)
    config = ReplayConfig(capacity_tokens=280 * 512, page_tokens=512)
    converted = trace_to_scenario(loaded.requests, config, source=loaded.name)
    return Session.from_scenario(converted.scenario, lazy=True, units=converted.units)


async def test_a_trace_in_the_ui_words_its_pages_one_way_and_keeps_names_apart(app_on):
    session = trace_session()
    assert "1 page = 1 block of 512 tokens" in session.title
    assert "1 block of 512 tokens per page" in session.frame(0).explanation
    assert "1 token per page" not in session.frame(0).explanation
    released = next(i for i in range(1, len(session)) if session.frame(i).op.kind == "release")
    app = app_on(session, step=released)
    async with app.run_test(size=(120, 36)) as pilot:
        await pilot.pause()
        table = app.screen.query_one(AllocationTable)
        ghost = next(i for i, row in enumerate(table.rows) if getattr(row.data, "ghost", False))
        name = table.rows[ghost].data.allocation.label
        assert table.row_text(ghost).startswith(f"{name} released"), table.row_text(ghost)
        assert not any(s.violations for s in session.summaries)
        assert "broken" not in [key.description for key in app.screen.query(FooterKey)]
