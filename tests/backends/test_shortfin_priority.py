# SPDX-License-Identifier: Apache-2.0
"""shortfin has no priorities: an acquire with one is refused (kvcore would keep it, and a
diff would show a difference that is not shortfin's), one without runs."""

from __future__ import annotations

from shortfin_guard import require_shortfin

require_shortfin()

from kvviz.backends.registry import make_backend_factory  # noqa: E402
from kvviz.core.scenario import parse_scenario  # noqa: E402
from kvviz.core.session import Session  # noqa: E402


def test_an_acquire_with_a_priority_is_refused_and_changes_nothing():
    scenario = parse_scenario("cache trie pages=4 tokens_per_page=2\nacquire a 1..4 priority=3\nacquire b 1..4\n")
    session = Session.from_scenario(scenario, backend_factory=make_backend_factory("shortfin"))
    first, second = session.frame(1), session.frame(2)
    assert first.error is not None and first.error.kind == "InvalidOperation"
    assert "no priorities" in first.error.message and "priority=3" in first.error.message
    assert first.snapshot == session.frame(0).snapshot
    assert second.error is None and second.snapshot.allocations[0].name == "b"
