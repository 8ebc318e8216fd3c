# SPDX-License-Identifier: Apache-2.0
"""The hash cache's vLLM rule in the scenario language and the session: ``cache hash ...
recompute_last_token=yes`` is read, written back, refused where it means nothing, and kept by
every cache the session builds (snapshots hold state, not rules)."""

from __future__ import annotations

import pytest

from kvviz.core.scenario import ScenarioError, format_scenario, parse_scenario
from kvviz.core.session import Session


def test_the_scenario_language_writes_and_reads_the_rule():
    text = "cache hash pages=8 tokens_per_page=4 recompute_last_token=yes\n\nacquire a 0..7\n"
    scenario = parse_scenario(text)
    assert scenario.config.recompute_last_token and format_scenario(scenario) == text
    assert not parse_scenario("cache hash pages=8 recompute_last_token=no\nacquire a 1\n").config.recompute_last_token
    with pytest.raises(ScenarioError, match="hash cache's rule"):
        parse_scenario("cache trie pages=8 recompute_last_token=yes\n")
    with pytest.raises(ScenarioError, match="yes or no"):
        parse_scenario("cache hash pages=8 recompute_last_token=1\n")


def test_a_session_keeps_the_rule_across_keyframes_and_rebuilt_frames():
    lines = ["cache hash pages=8 tokens_per_page=4 recompute_last_token=yes", "acquire a 0..7", "publish a",
             "release a"]
    for i in range(6):
        lines += [f"acquire r{i} 0..7", f"expect hit r{i} 4", f"publish r{i}", f"release r{i}"]
    session = Session.from_scenario(parse_scenario("\n".join(lines) + "\n"), keyframe_every=4, lazy=True)
    frames = [session.frame(i) for i in range(len(session) - 1, 0, -1)]  # rebuilt from keyframes
    assert all(not f.expect_failures and not f.violations for f in frames)
