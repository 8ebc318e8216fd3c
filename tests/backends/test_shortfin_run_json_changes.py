# SPDX-License-Identifier: Apache-2.0
"""`kvviz run --backend shortfin --json`: shortfin's snapshots carry no account of what
changed, so the writer compares the rows itself; the states rebuilt from the changes are
still shortfin's own, step for step."""

from __future__ import annotations

import json

from shortfin_guard import require_shortfin

require_shortfin()

from click.testing import CliRunner  # noqa: E402

from kvviz.backends.registry import make_backend_factory  # noqa: E402
from kvviz.cli import cli  # noqa: E402
from kvviz.core.demos import load_demo  # noqa: E402
from kvviz.core.session import Session  # noqa: E402
from kvviz.report.timeline_json import read_states  # noqa: E402


def test_shortfin_states_rebuild_from_their_changes_step_for_step():
    result = CliRunner().invoke(cli, ["run", "lru", "--backend", "shortfin", "--json"], prog_name="kvviz")
    objects = [json.loads(line) for line in result.stdout.splitlines()]
    session = Session.from_scenario(load_demo("lru"), backend_factory=make_backend_factory("shortfin"))
    rebuilt = list(read_states(objects))
    assert len(rebuilt) == len(session)
    assert sum(obj["snapshot"] is not None for obj, _ in rebuilt) == 1  # the rest are changes
    for obj, snap in rebuilt:
        assert snap == session.frame(obj["step"]).snapshot, obj["step"]
