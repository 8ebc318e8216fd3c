# SPDX-License-Identifier: Apache-2.0
"""Sessions the exercise tests practise on: every demo, and seeded random scenarios on every
policy, the base cache and the hash cache."""

from __future__ import annotations

import os
from dataclasses import replace

from kvviz.core.demos import demo_names, load_demo
from kvviz.teach.generate import generate
from kvviz.core.scenario import parse_scenario
from kvviz.core.session import Session

POLICIES = ("lru", "fifo", "lfu", "mru", "filo", "slru", "priority")
LEVELS = ("easy", "medium", "hard")
SOAK = os.environ.get("HYPOTHESIS_PROFILE") == "soak"


def demo_session(name: str) -> Session:
    return Session.from_scenario(load_demo(name))


def random_session(seed: int, level: str, design: str = "trie", policy: str = "lru") -> Session:
    scenario = parse_scenario(generate(seed, level), f"<seed {seed} {level}>")
    scenario = replace(scenario, config=replace(scenario.config, kind=design, policy=policy))
    return Session.from_scenario(scenario)


def random_cases(per_config: int) -> list[tuple[int, str, str, str]]:
    """(seed, level, design, policy): ``per_config`` seeds for each trie policy and for base
    and hash, the levels in turn."""
    configs = [("trie", p) for p in POLICIES] + [("base", "lru"), ("hash", "lru")]
    return [(seed, LEVELS[seed % 3], design, policy) for design, policy in configs for seed in range(per_config)]


def all_demos() -> list[str]:
    return demo_names()
