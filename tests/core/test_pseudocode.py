# SPDX-License-Identifier: Apache-2.0
"""The pseudo-code pane's data: algorithms a learner can read, a table that maps every
sub-step kind of the contract to lines that exist, every line reachable, and buggy variants
that differ from ours exactly where they say.

The contract (docs/substeps.md) is written out here on its own, not read from the
module under test, so a kind the table forgets fails. Pure and fast: the demos' own
sub-steps are checked in test_pseudocode_substeps.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvviz.core.demos import demo_names
from kvviz.backends.shortfin_code import SHORTFIN_CODE
from kvviz.core import pseudocode as pc
from tests.imported import foreign_modules_after

TRIE_CODE = pc.code_for("trie")

ROOT = Path(__file__).resolve().parents[2]

# SUBSTEPS.md's table: kind -> the ops it occurs in, on the trie cache ("refused" is the
# sub-step substeps.py adds for an op refused before anything happened: every op).
ALL = ("acquire", "publish", "extend", "release")
TRIE_CONTRACT = {
    "start": ALL, "refused": ALL, "tick": ALL, "walk": ("acquire",), "stop": ("acquire",), "match": ("acquire",),
    "unheap": ("acquire", "publish"), "uncandidate": ("acquire", "publish"), "ref": ("acquire", "publish"),
    "touch": ("acquire", "publish"), "take": ("acquire", "extend"), "pop": ("acquire", "extend"),
    "swap": ALL, "evict": ("acquire", "extend"), "candidate": ("acquire", "extend", "release"),
    "push": ("release",), "create": ("publish",), "dedup": ("publish",), "free": ("release",),
    "unref": ("release",), "release": ("release",), "fail": ("acquire", "extend"),
}
# What the base cache reports (kvcore/base.py): no walk, no heap, no nodes.
BASE_CONTRACT = {
    "start": ALL, "refused": ALL, "tick": ALL, "match": ("acquire",), "take": ("acquire", "extend"),
    "fail": ("acquire", "extend"), "free": ("release",), "release": ("release",),
}
# What the hash-block cache reports (kvcore/hashblock.py): blocks on pages, one free queue.
HASH_CONTRACT = {
    "start": ALL, "refused": ALL, "tick": ALL, "match": ("acquire",), "fail": ("acquire", "extend"),
    "dequeue": ("acquire",), "ref": ("acquire",), "drop": ("acquire", "extend"), "take": ("acquire", "extend"),
    "cache": ("publish",), "unref": ("release",), "queue": ("release",), "release": ("release",),
}
# The shortfin backend's calls per op, and "record": kvviz's adapter keeping the result.
SHORTFIN_CALLS = {"acquire": ("lookup", "allocate", "record"), "publish": ("publish_pages_for_tokens", "record"),
                  "extend": ("allocate", "record"), "release": ("release_pages", "free_allocated_pages", "record")}
# Contexts a sub-step may carry that change its lines (substeps.py's _Words gives them).
CONTEXTS = ({}, {"direction": "up"}, {"direction": "down"}, {"after": "unheap"}, {"after": "pop"},
            {"after": "push"}, {"cascade": True}, {"cascade": False})


def _pairs(contract):
    return [(op, kind) for kind, ops in contract.items() for op in ops]


# -- the algorithms ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(pc.ALGORITHMS))
def test_every_algorithm_is_10_to_30_readable_lines(name):
    algo = pc.ALGORITHMS[name]
    assert algo.name == name and algo.title and algo.source
    assert 10 <= len(algo.lines) <= 30, len(algo.lines)  # the pane scrolls to the lit lines
    assert [line.number for line in algo.lines] == list(range(1, len(algo.lines) + 1))
    for line in algo.lines:
        assert line.text.strip() and len(line.text) <= 76, line  # fits the pane beside the views
        assert "@" not in line.text and line.text == line.text.rstrip()


@pytest.mark.parametrize("name", sorted(pc.ALGORITHMS))
def test_anchors_are_unique_in_each_algorithm(name):
    anchors = [line.anchor for line in pc.ALGORITHMS[name].lines]
    assert len(anchors) == len(set(anchors)) and all(re.fullmatch(r"[a-z_?-]+", a) for a in anchors)


def test_a_block_with_a_repeated_or_missing_anchor_is_refused_at_import():
    with pytest.raises(ValueError, match="twice"):
        pc._parse("x", "t", "s", "a  @one\nb  @one")
    with pytest.raises(ValueError, match="no anchor"):
        pc._parse("x", "t", "s", "a  @one\nb")


def test_the_sources_named_are_real_files():
    for algo in pc.ALGORITHMS.values():
        for path in re.findall(r"[\w/]+\.py", algo.source):
            candidates = [ROOT / path, ROOT / "kvcore" / path]
            assert any(p.is_file() for p in candidates), (algo.name, path)


# -- the table --------------------------------------------------------------------------------


@pytest.mark.parametrize(("cache", "contract"), [("trie", TRIE_CONTRACT), ("base", BASE_CONTRACT),
                                                 ("hash", HASH_CONTRACT)])
def test_every_kind_of_the_contract_maps_to_existing_lines_in_every_op(cache, contract):
    for op, kind in _pairs(contract):
        for context in CONTEXTS:
            algorithm, lines = pc.lines_for(op, kind, cache_kind=cache, context=context)
            algo = pc.ALGORITHMS[algorithm]
            assert lines and all(1 <= n <= len(algo.lines) for n in lines), (op, kind, context)
            assert not any(algo.lines[n - 1].structural for n in lines), (op, kind, context)


def test_every_shortfin_call_maps_to_its_own_line():
    seen = set()
    for op, calls in SHORTFIN_CALLS.items():
        for call in calls:
            for cache in ("trie", "hash"):  # a call is the backend's whatever the snapshot's kind
                algorithm, lines = pc.lines_for(op, "call", cache_kind=cache, context={"call": call},
                                                code=SHORTFIN_CODE)
                assert algorithm == "shortfin" and len(lines) == 1
                text = SHORTFIN_CODE.algorithms["shortfin"].lines[lines[0] - 1].text
                assert (f"cache.{call}(" in text) if call != "record" else ("handles[name]" in text)
            seen.add((op, lines[0]))
        assert pc.lines_for(op, "start", code=SHORTFIN_CODE)[0] == "shortfin"
    assert len(seen) == sum(map(len, SHORTFIN_CALLS.values()))  # no two calls share a line


def test_eviction_inside_acquire_and_extend_is_the_evict_algorithm_with_its_caller():
    for op in ("acquire", "extend"):
        for kind, context in (("pop", {}), ("evict", {}), ("candidate", {}), ("swap", {"after": "pop"})):
            assert pc.lines_for(op, kind, context=context)[0] == "evict"
            outer, calls = TRIE_CODE.caller(op, "evict")
            assert outer == op
            assert [pc.ALGORITHMS[op].lines[n - 1].calls for n in calls] == ["evict"]
    assert pc.lines_for("release", "candidate")[0] == "release"  # release's own: no caller frame
    assert TRIE_CODE.caller("release", "release") is None
    assert TRIE_CODE.caller("extend", "evict") == ("extend", pc.ALGORITHMS["extend"].numbers("evict-call"))
    assert TRIE_CODE.caller("acquire", "acquire") is None and pc.code_for("base").caller("acquire", "base") is None


def test_the_context_picks_the_branch_that_ran():
    evict = pc.ALGORITHMS["evict"]
    assert pc.lines_for("acquire", "pop", context={"cascade": True})[1] == evict.numbers("top", "leaf?", "replace-top")
    assert pc.lines_for("acquire", "pop", context={"cascade": False})[1] == evict.numbers("top", "pop", "fill")
    # A swap after acquire's removal is acquire's line; after a pop, eviction's sift down.
    assert pc.lines_for("acquire", "swap", context={"after": "unheap"}) == ("acquire", pc.ALGORITHMS[
        "acquire"].numbers("swap"))
    assert pc.lines_for("acquire", "swap", context={"direction": "up"})[0] == "acquire"  # evictions sift down only
    assert pc.lines_for("acquire", "swap", context={"after": "pop", "direction": "down"})[0] == "evict"
    assert pc.lines_for("release", "swap", context={"direction": "up"}) == (
        "release", pc.ALGORITHMS["release"].numbers("sift-compare", "swap"))


def test_a_cache_without_pseudocode_gets_no_lines_and_an_impossible_pair_is_an_error():
    assert pc.lines_for("acquire", "take", cache_kind="radix") == pc.NO_LINES
    with pytest.raises(KeyError):
        pc.lines_for("acquire", "walk", cache_kind="hash")  # the hash cache has no trie to walk
    with pytest.raises(KeyError, match="walk"):
        pc.lines_for("release", "walk")
    with pytest.raises(KeyError):
        pc.lines_for("acquire", "walk", cache_kind="base")  # the base cache never walks


def test_the_table_knows_exactly_the_kinds_of_the_contract():
    assert {key[2] for key in pc.SUBSTEP_LINES} == set(TRIE_CONTRACT) | set(HASH_CONTRACT)
    assert {key[1] for key in SHORTFIN_CODE.rows} == {"start", "refused", "call"}  # the backend's own code


def _reachable() -> dict[str, set[int]]:
    lit: dict[str, set[int]] = {name: set() for name in [*pc.ALGORITHMS, *SHORTFIN_CODE.algorithms]}
    contracts = [("trie", TRIE_CONTRACT), ("base", BASE_CONTRACT), ("hash", HASH_CONTRACT)]
    for cache, contract in contracts:
        for op, kind in _pairs(contract):
            for context in CONTEXTS:
                _light(lit, pc.code_for(cache), op, pc.lines_for(op, kind, cache_kind=cache, context=context))
    for op, calls in SHORTFIN_CALLS.items():
        for kind, context in [("start", {})] + [("call", {"call": c}) for c in calls]:
            _light(lit, SHORTFIN_CODE, op, pc.lines_for(op, kind, context=context, code=SHORTFIN_CODE))
    return lit


def _light(lit: dict[str, set[int]], code, op: str, frame: tuple[str, tuple[int, ...]]) -> None:
    """Light a sub-step's lines and, as the code pane's title names it, the op's line that
    called its algorithm."""
    algorithm, lines = frame
    lit[algorithm].update(lines)
    caller = code.caller(op, algorithm)
    if caller is not None:
        lit[caller[0]].update(caller[1])


def test_every_line_is_lit_by_some_substep_or_is_marked_structural():
    lit = _reachable()
    for name, algo in [*pc.ALGORITHMS.items(), *SHORTFIN_CODE.algorithms.items()]:
        for line in algo.lines:
            assert (line.number in lit[name]) != line.structural, (name, line)


# -- the bug museum ---------------------------------------------------------------------------


@pytest.mark.parametrize("bug", sorted(pc.VARIANTS))
def test_each_buggy_variant_differs_from_ours_exactly_on_its_marked_lines(bug):
    v = pc.VARIANTS[bug]
    assert v.bug == bug and v.description == pc.BUGS[bug].description
    assert v.ours == pc.ALGORITHMS[v.algorithm].texts() and len(v.theirs) == len(v.ours)
    differ = tuple(i + 1 for i, (a, b) in enumerate(zip(v.ours, v.theirs)) if a != b)
    assert differ and v.ours_differ == differ == v.theirs_differ
    for n in differ:  # a replacement keeps our indentation, so the two columns line up
        if v.theirs[n - 1]:
            indent = len(v.ours[n - 1]) - len(v.ours[n - 1].lstrip())
            assert len(v.theirs[n - 1]) - len(v.theirs[n - 1].lstrip()) == indent
            assert len(v.theirs[n - 1]) <= 80


def test_every_bug_museum_demo_has_a_variant_or_says_why_not():
    museum = [n for n in demo_names() if n.startswith(("bug-", "shortfin-"))]
    assert len(museum) >= 15
    for name in museum:
        bug = pc.demo_bug(name)
        assert bug in pc.BUGS, name
        assert (bug in pc.VARIANTS) != (bug in pc.NO_VARIANT), name
        assert pc.buggy_variant(name) is pc.VARIANTS.get(bug)
    assert not set(pc.VARIANTS) & set(pc.NO_VARIANT) and set(pc.VARIANTS) | set(pc.NO_VARIANT) == set(pc.BUGS)


def test_demo_names_map_to_bug_ids_however_they_are_spelled():
    assert pc.demo_bug("bug-b4b-root-ref") == "B4b"
    assert pc.demo_bug("demos/shortfin-b9-lookup-no-ref.kvs") == "B9"
    assert pc.demo_bug("bug-s2-unlocked-node.kvs") == "S2"
    assert pc.demo_bug("lru") is None and pc.buggy_variant("eviction-cascade") is None
    assert pc.demo_bug("bug-b99-nothing") is None
    assert pc.buggy_variant("bug-b12-extend-self") is None  # BUGS.md gives only its effect


def test_the_bug_descriptions_are_the_bug_museum_pages_words():
    text = (ROOT / "docs" / "bugs.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| (\w+) \| (.+?) \|", text, flags=re.M))
    rows.pop("id", None)
    assert {b: d.description for b, d in pc.BUGS.items()} == rows


def _imported_by(module: str) -> set[str]:
    return foreign_modules_after(f"import {module}")


def test_the_pseudocode_is_pure_data_needing_only_the_standard_library():
    # The types the algorithms are written in, and a backend's code, need nothing else; the
    # lookups read the designs, whose event tables are keyed by kvcore's event classes.
    assert _imported_by("kvviz.backends.code") <= {"kvviz", "kvcore"}  # its package's protocol reads kvcore
    assert _imported_by("kvviz.backends.shortfin_code") <= {"kvviz", "kvcore"}  # no shortfin needed
    assert _imported_by("kvviz.core.pseudocode") == {"kvviz", "kvcore"}  # no textual or rich either


# -- true to kvcore: the counter, priority, the heap's pop ------------------------------------


def _body(algorithm: str, head: str, anchor: str) -> list[str]:
    """The texts of the lines from the line anchored ``head`` to the one anchored ``anchor``."""
    first, last = pc.ALGORITHMS[algorithm].numbers(head, anchor)
    return list(pc.ALGORITHMS[algorithm].texts()[first - 1:last])


def test_the_evictable_counter_has_one_name_and_drops_on_a_match_and_an_adoption():
    trie = [t for name in ("acquire", "publish", "extend", "release", "evict") for t in pc.ALGORITHMS[name].texts()]
    assert not any("ref0" in t for t in trie)
    # kvcore's acquire and publish do `_ref0 -= 1` for a ref-0 node they reference
    assert any("evictable -= 1" in t and "ref == 0" in t for t in _body("acquire", "refs", "ref"))
    assert any("evictable -= 1" in t and "ref == 0" in t for t in _body("publish", "found", "ref"))
    assert any("evictable += 1" in t for t in pc.ALGORITHMS["release"].texts())


def test_priority_is_in_the_pseudocode_where_kvcore_keeps_it():
    acquire, publish, evict = (pc.ALGORITHMS[n].texts() for n in ("acquire", "publish", "evict"))
    assert "priority" in acquire[0] and any("n.priority = max(n.priority, priority)" in t for t in acquire)
    assert any("child.priority = max(child.priority, allocation.priority)" in t for t in publish)
    assert "priority" in pc.ALGORITHMS["publish"].line("create").text
    assert any("priority (priority, last_access, seq)" in t for t in evict)


def test_the_heaps_pop_is_right_for_a_one_entry_heap():
    evict = pc.ALGORITHMS["evict"]
    assert not any("heap[0] = heap.pop()" in t for t in evict.texts())
    pop, fill = evict.line("pop"), evict.line("fill")
    assert "heap.pop()" in pop.text and fill.number == pop.number + 1
    assert fill.text.strip().startswith("if heap: heap[0] =")  # only when an entry is left


def test_b9s_variant_evicts_its_match_and_takes_the_ref_after_the_pages():
    v = pc.VARIANTS["B9"]
    acquire = pc.ALGORITHMS["acquire"]
    # the lines a failed kvcore acquire lights: the buggy code never raises there
    for n in pc.lines_for("acquire", "fail")[1]:
        assert "raise" not in v.theirs[n - 1] and v.theirs[n - 1].strip()
    assert "evict" in v.theirs[acquire.numbers("fits?")[0] - 1]
    pages = next(i for i, t in enumerate(v.theirs) if "acquire_free_pages" in t)
    ref = next(i for i, t in enumerate(v.theirs) if "ref += 1" in t)
    assert pages < ref  # 3.9.0 does take a reference, after acquire_free_pages: the order is the bug


def test_b1s_variant_raises_in_heapify_where_the_seeds_traceback_does():
    v = pc.VARIANTS["B1"]
    raising = [t for t in v.theirs if "TypeError" in t]
    assert len(raising) == 1 and "heapify" in raising[0]
    assert not any("TypeError" in t for t in v.theirs if "heappop" in t)


def test_b2s_variant_adds_only_the_last_node_to_the_leaf_set_after_the_loop():
    v = pc.VARIANTS["B2"]
    publish = pc.ALGORITHMS["publish"]
    loop = publish.numbers("loop")[0]
    adds = [i + 1 for i, t in enumerate(v.theirs) if "leaves.add" in t]
    assert len(adds) == 1 and adds[0] > loop
    line = v.theirs[adds[0] - 1]
    indent = len(line) - len(line.lstrip())
    assert indent <= len(v.ours[loop - 1]) - len(v.ours[loop - 1].lstrip())  # after the loop, not in it
    assert "leaves.add" not in v.theirs[publish.numbers("link")[0] - 1]
