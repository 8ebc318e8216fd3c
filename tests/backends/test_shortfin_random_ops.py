# SPDX-License-Identifier: Apache-2.0
"""Random op sequences on kvcore and on shortfin: every divergence must be a known issue.

Hypothesis draws a small cache and a sequence of acquires, publishes (whole or a prefix),
extends and releases over a tiny alphabet, so prefixes are shared, pages run out and
eviction happens often. Each sequence runs on both backends (``run_diff``). The shortfin
backend reports the known issues it sees (``KNOWN_ISSUES``: BUGS.md defects, defects found
by these runs, differences by design); a divergence with none seen at or before it, or a
violation of the invariants in shortfin's terms before any, fails the test and shrinks to
a minimal scenario, printed as a script.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import event, given
from hypothesis import strategies as st
from shortfin_guard import require_shortfin

require_shortfin()

from kvviz.backends.shortfin_backend import KNOWN_ISSUES  # noqa: E402
from kvviz.compare.engine import format_compare, run_diff  # noqa: E402
from kvviz.core.scenario import CacheConfig, Op, Scenario, Step, format_op, format_scenario  # noqa: E402

NAMES = ("a", "b", "c", "d")
ALPHABET = (1, 2, 3, 5)
STEMS = ((1, 2, 3, 5) * 3, (1, 2, 1, 2) * 3)


@st.composite
def scenarios(draw) -> Scenario:
    tpp = draw(st.integers(1, 4))
    pages = draw(st.integers(1, 7))
    # Tokens are a prefix of one of two stems plus a random tail, so full pages are shared often.
    stem = st.sampled_from(STEMS).flatmap(lambda s: st.integers(0, 3 * tpp).map(lambda k: s[:k]))
    tail = st.lists(st.sampled_from(ALPHABET), max_size=tpp).map(tuple)
    word = st.tuples(stem, tail).map(lambda parts: parts[0] + parts[1])
    live: dict[str, tuple] = {}  # what the script believes each live allocation holds
    steps = []
    for _ in range(draw(st.integers(3, 30))):
        kind = draw(st.sampled_from(("acquire", "acquire", "publish", "extend", "release")))
        if kind == "acquire" or not live:
            free = [n for n in NAMES if n not in live]
            if not free:
                continue
            name = draw(st.sampled_from(free))
            tokens = draw(word)
            op = Op("acquire", name, tokens, draw(st.sampled_from((0, 0, 1, tpp))))
            live[name] = tokens
        else:
            name = draw(st.sampled_from(sorted(live)))
            if kind == "publish":
                cut = draw(st.none() | st.integers(0, len(live[name])))
                op = Op("publish", name, None if cut is None else live[name][:cut])
            elif kind == "extend":
                more = draw(st.lists(st.sampled_from(ALPHABET), max_size=2 * tpp).map(tuple))
                op = Op("extend", name, more, draw(st.sampled_from((0, 0, 1))), True)
                live[name] += more
            else:
                op = Op("release", name, None)
                del live[name]
        steps.append(Step(replace(op, text=format_op(op))))
    return Scenario(title="random ops", config=CacheConfig("trie", pages, tpp), steps=tuple(steps))


@given(scenarios())
def test_every_divergence_between_kvcore_and_shortfin_is_a_known_issue(scenario):
    run = run_diff(scenario)
    script = format_scenario(scenario)
    for i in range(1, len(run)):
        kv, sf = run.frames(i)
        assert not kv.violations, f"kvcore broke an invariant at step {i}:\n{script}"
        if sf.violations and not run.findings_until(i):
            raise AssertionError(f"shortfin broke an invariant at step {i} with no known issue seen: "
                                 f"{[str(v) for v in sf.violations]}\n{script}")
    for code in {f.code for fs in run.right.findings for f in fs}:
        assert code in KNOWN_ISSUES
        event(f"seen {code}")
    d = run.divergence
    if d is None:
        event("no divergence")
        return
    assert d.explained, f"unexplained divergence:\n{format_compare(run)}\n{script}"
    event(f"first divergence explained by {'+'.join(sorted(d.known))}")
