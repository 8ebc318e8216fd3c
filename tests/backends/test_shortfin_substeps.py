# SPDX-License-Identifier: Apache-2.0
"""Sub-steps on the shortfin backend: one per call its reader can observe, ending where the
frame does; the note says they are calls, not the moves inside them."""

from __future__ import annotations

import pytest
from shortfin_guard import require_shortfin

require_shortfin()

from kvviz.backends import Call  # noqa: E402
from kvviz.backends.registry import make_backend_factory  # noqa: E402
from kvviz.core.demos import demo_names, load_demo  # noqa: E402
from kvviz.core.session import Session  # noqa: E402

SHORTFIN_CALLS = {"lookup", "allocate", "publish_pages_for_tokens", "release_pages", "free_allocated_pages", "record"}


@pytest.mark.parametrize("name", [n for n in demo_names() if n.startswith("shortfin-")] + ["lru", "dedup"])
def test_shortfin_substeps_are_its_calls_and_end_at_the_frame(name):
    session = Session.from_scenario(load_demo(name), backend_factory=make_backend_factory("shortfin"))
    for i in range(1, len(session)):
        subs = session.substeps(i)
        assert subs.source == "calls" and "between its calls" in subs.note
        assert subs.state(-1) == session.frame(i - 1).snapshot
        assert subs.state(len(subs) - 1) == session.frame(i).snapshot
        op = session.steps[i - 1].op
        for step in subs:
            if step.kind == "refused":
                continue
            assert step.kind == "call" and isinstance(step.event, Call) and step.event.method in SHORTFIN_CALLS
        methods = [s.event.method for s in subs if s.kind == "call"]
        if op.kind == "acquire" and methods:
            assert methods[0] == "lookup"
        if op.kind == "release" and methods:
            assert methods[0] == "release_pages"
