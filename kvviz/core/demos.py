# SPDX-License-Identifier: Apache-2.0
"""The narrated demos shipped with kvviz (`kvviz demo NAME`).

In a wheel they live in ``kvviz/demos/``; in a source checkout (editable install) in the
top-level ``demos/`` folder.
"""

from __future__ import annotations

import re
from pathlib import Path

from kvviz.backends.registry import MUSEUM_PREFIXES as REGISTRY_MUSEUM
from kvviz.core.scenario import Scenario, parse_scenario_file
from kvviz.core.words import did_you_mean

_HERE = Path(__file__).resolve().parent


def demo_dir() -> Path:
    """The folder holding the demo ``.kvs`` files."""
    packaged = _HERE.parent / "demos"  # the wheel carries them as kvviz/demos
    if packaged.is_dir():
        return packaged
    return _HERE.parent.parent / "demos"  # a checkout: the repository's demos/


# The course: the lessons in teaching order, each building on the ones before it. What a
# prefix cache is for (sharing, and what no sharing costs); what vLLM's design does instead of
# a trie (hash blocks, one free queue, lazy eviction, duplicates that keep a chain reachable);
# what "published" means (only published pages are shared, and two copies of one prefix
# become one); what protects a page (references); what happens when the pool is full (LRU
# eviction, leaves first, and why the order must be total); what other eviction policies
# choose instead (the same requests under lru, lfu, fifo and slru; a priority that pins a
# system prompt); then requests that grow while decoding, and a chat that puts it all
# together. The only place the order is written down.
LESSONS = (
    "prefix-sharing",       # start here: one system prompt, many requests, pages computed once
    "base-vs-trie",         # the same requests without sharing: what the trie saves
    "hash-vs-trie",         # vLLM's hash blocks: duplicates, a free queue, lazy eviction, chains
    "progressive-publish",  # only published pages are visible to other requests
    "dedup",                # two requests computed the same prefix: the second publish adopts
    "refcount",             # referenced pages are never evicted; a full pool says no
    "lru",                  # who is evicted when the pool is full, and why
    "eviction-cascade",     # only leaves go: a chain is peeled from the leaves inward
    "heap-ties",            # why the eviction order must be total: (last_access, seq)
    "policies",             # the same requests under lru, lfu, fifo and slru: four different victims
    "priority",             # policy=priority: a pinned system prompt outlives newer idle requests
    "extend",               # decode growth: extra slots, extend, running out of room
    "multi-turn-chat",      # every turn reuses the whole conversation: all of it at once
)

# The bug museum's exhibits, kvcore's first (the registry names them by backend).
MUSEUM_PREFIXES = tuple(REGISTRY_MUSEUM.values())


def _natural(name: str) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _course_key(name: str) -> tuple:
    """Lessons in teaching order, then any lesson not yet placed (by name), then the museum
    by prefix and in natural order (b2 before b10)."""
    if name in LESSONS:
        return (0, LESSONS.index(name), [])
    museum = [i for i, prefix in enumerate(MUSEUM_PREFIXES) if name.startswith(prefix)]
    if not museum:
        return (1, 0, _natural(name))
    return (2, museum[0], _natural(name))


def is_lesson(name: str) -> bool:
    """True for a lesson of the course, False for an exhibit of the bug museum."""
    return not name.startswith(MUSEUM_PREFIXES)


def demo_names() -> list[str]:
    """Names of all demos, as a course: the lessons in teaching order (start with the first),
    then the bug museum in natural order (b2 before b10)."""
    return sorted((p.stem for p in demo_dir().glob("*.kvs")), key=_course_key)


def demo_path(name: str) -> Path:
    """The file of demo ``name``; KeyError with close suggestions if there is none."""
    path = demo_dir() / f"{name}.kvs"
    if not path.is_file():
        raise KeyError(f"no demo named {name!r}{did_you_mean(name, demo_names(), n=3, cutoff=0.5)} "
                       f"(`kvviz demo --list` lists them)")
    return path


def load_demo(name: str) -> Scenario:
    """The parsed scenario of demo ``name``."""
    return parse_scenario_file(demo_path(name))
