# SPDX-License-Identifier: Apache-2.0
"""A design is one entry: a toy cache of this test's own, one Design registered
for it and one panes row, and kvviz narrates it, steps into its ops, lights its pseudo-code and
exports it in the design's words, with no kvviz file touched. Also: every kvcore event class
has one row per kvcore design that reports it, and the tables that used to disagree agree."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kvcore import BasePagedAttentionCache, PagePool
from kvcore import events as ev
from kvviz.backends.kvcore_backend import KvcoreBackend
from kvviz.report import markdown, text
from kvviz.core import designs
from kvviz.core.designs import Design, EventWords, Focus, Nouns
from kvviz.core.designs.base import DESIGN as BASE
from kvviz.backends.code import Code, parse, rows
from kvviz.core.narrate import describe_event, evicts
from kvviz.core.scenario import parse_scenario
from kvviz.core.session import EVICTION_EVENTS, Session
from kvviz.ui import panes


class SlabCache(BasePagedAttentionCache):
    """The toy: kvcore's base cache under a kind of its own, so only its design speaks for it."""

    kind = "slab"


def slab_backend(config, snapshot):
    if snapshot is not None:
        return KvcoreBackend(SlabCache.restore(snapshot, verify=False))
    return KvcoreBackend(SlabCache(PagePool(config.pages), config.tokens_per_page))


def _took(context, e):
    return (f"the slab hands out slab{'s' if len(e.pages) != 1 else ''} {', '.join(map(str, e.pages))}",
            Focus(pages=e.pages, allocation=context.name(e.allocation)), {})


def _narrate(design, op_kind, events, after, label, units):
    taken = [p for e in events if isinstance(e, ev.PagesTaken) for p in e.pages]
    return [design.clause("took", slabs=", ".join(map(str, taken)))] if taken else []


_SLAB_CODE = parse("slab", "the slab cache: one slab per page", "tests/core/test_design_entry.py", "\n".join([
    "def acquire(tokens):                      @acquire",
    "    now = clock = clock + 1               @tick",
    "    allocation.slabs = slabs.take(needed)  @take",
    "def release(allocation):                  @release",
    "    slabs.give(allocation.slabs)          @give",
]))

SLAB = Design(
    name="slab",
    title="a toy slab cache",
    nouns=Nouns(entry="slab", entries="slabs", structure="slab row", removed="evicted", free="slab list",
                step="op"),
    events={**BASE.events,  # its events are the base cache's; it words one of them its own way
            ev.PagesTaken: EventWords("take", lambda e, c: f"slabs {list(e.pages)} handed out", substep=_took)},
    clauses={**BASE.clauses, "took": "handed out slabs {slabs}", "no_structure": "(slabs: nothing shared)",
             "holder": "slab"},
    shares=False,
    views=("slabs", "heap"),
    code=Code({"slab": _SLAB_CODE}, {op: "slab" for op in ("acquire", "publish", "extend", "release")},
              {**rows("acquire", "slab", {"start": ("acquire",), "tick": ("tick",), "match": ("acquire",),
                                          "take": ("take",), "refused": ("acquire",)}),
               **rows("release", "slab", {"start": ("release",), "tick": ("release",), "free": ("give",),
                                          "release": ("give",), "refused": ("release",)})}),
    narrate=_narrate,
)

SCRIPT = "cache base pages=4 tokens_per_page=2\nacquire a 1 2 3\nrelease a\n"


@pytest.fixture
def slab(monkeypatch):
    designs.register(SLAB)
    monkeypatch.setitem(panes.PANES, "slabs", panes.TRIE_PANES)  # its one panes row
    yield SLAB
    designs.unregister("slab")


def _session() -> Session:
    return Session.from_scenario(parse_scenario(SCRIPT), backend_factory=slab_backend)


def test_a_registered_toy_design_is_narrated_in_its_own_words(slab):
    session = _session()
    assert session.frame(1).snapshot.kind == "slab"
    assert session.frame(1).explanation == "acquire a: handed out slabs 0, 1."
    taken = next(e for e in session.frame(1).events if isinstance(e, ev.PagesTaken))
    assert describe_event(taken, design=slab) == "slabs [0, 1] handed out"


def test_a_registered_toy_design_is_stepped_into_on_its_own_pseudo_code(slab):
    session = _session()
    subs = session.substeps(1)
    take = next(s for s in subs if s.kind == "take")
    assert take.sentence == "the slab hands out slabs 0, 1"
    assert (take.algorithm, take.lines) == ("slab", (3,))
    assert {s.algorithm for s in subs} == {"slab"}


def test_a_registered_toy_design_is_exported_and_gets_its_panes_row(slab, monkeypatch):
    monkeypatch.setitem(text.STRUCTURE_SECTIONS, "slabs", lambda frame, session: text.Text("slab row: 2 slabs"))
    monkeypatch.setitem(markdown.SECTIONS, "slabs", lambda frame, session: ["## Slabs", ""])
    session = _session()
    frame = session.frame(1)
    out = text.frame_text(frame, session)
    assert "handed out slabs 0, 1" in out and "slab row: 2 slabs" in out
    report = markdown.frame_markdown(frame, session, SCRIPT, "summary")
    assert "## Slabs" in report and "| page | state | slab | owner | ref |" in report
    assert "## Trie" not in report
    assert panes.panes_for("slab") is panes.TRIE_PANES


def test_an_unregistered_kind_is_refused_by_name_and_kvviz_own_names_cannot_be_taken():
    with pytest.raises(KeyError, match="no cache design 'slab'"):
        designs.design("slab")
    with pytest.raises(ValueError, match="one of kvviz's own"):
        designs.register(Design("trie", "x", SLAB.nouns, {}, {}))


def test_every_kvcore_design_colours_its_own_eviction_as_one():
    # The narration log's colour and the step's eviction count read one flag: a trie's
    # Evicted and a hash cache's BlockEvicted alike (the log used to colour only the first).
    trie, hash_ = designs.design("trie"), designs.design("hash")
    assert trie.words(ev.Evicted).evicts and hash_.words(ev.BlockEvicted).evicts
    assert evicts(ev.BlockEvicted(0, 1, 2, "k", (1, 2), False)) and not evicts(ev.Released(0))
    assert set(EVICTION_EVENTS) == {ev.Evicted, ev.BlockEvicted}


@pytest.mark.parametrize("name", designs.KVCORE_DESIGNS)
def test_every_kvcore_design_words_every_sub_step_kind_it_lights(name):
    d = designs.design(name)
    kinds = {row[1] for row in d.code.rows}
    walks = (ev.Walked(0, 1, 0, 3, ()), ev.Walked(0, 1, 0, None, ()))  # found a child, found none
    worded = {w.kind for w in d.events.values()} | {w.kind_of(e) for w in d.events.values() if w.kind_of
                                                    for e in walks}
    assert kinds - {"refused"} <= worded  # every sub-step it has a line for comes from an event it words
    if name != "base":  # base shares the trie's table and reports only part of it
        assert worded <= kinds  # every event it words has a line


KVVIZ = Path(__file__).resolve().parents[2] / "kvviz"
REGISTRY = KVVIZ / "core" / "designs"
KEYWORD_TABLE = (KVVIZ / "core" / "scenario" / "values.py", "CACHE_KINDS")
"""Where a design's name may be a string of its own: the registry's modules, and the scenario
language's one table of cache-kind keywords (that assignment only, not the rest of its module)."""


def _design_name_literals(path: Path) -> list[tuple[int, str]]:
    """The string constants of ``path`` equal to a kvcore design's name, as (line, value)."""
    names = set(designs.KVCORE_DESIGNS)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    allowed: set[int] = set()
    if path == KEYWORD_TABLE[0]:
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == KEYWORD_TABLE[1] for t in node.targets):
                allowed |= {id(c) for c in ast.walk(node.value)}
    return sorted((node.lineno, node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and node.value in names and id(node) not in allowed)


def test_design_names_are_string_literals_only_in_the_registry_and_the_keyword_table():
    """Every other module names a design through TRIE/BASE/HASH (or DesignKind for a type), so
    the state changes, the panes and the exports read a snapshot's tables from its design and
    a design's name is spelled in one place."""
    found = {str(path.relative_to(KVVIZ.parent)): literals
             for path in sorted(KVVIZ.rglob("*.py")) if REGISTRY not in path.parents
             for literals in [_design_name_literals(path)] if literals}
    assert found == {}, f"design names spelled outside the registry: {found}"


def test_the_keyword_table_spells_the_registrys_names():
    from kvviz.core.scenario.values import CACHE_KINDS

    assert CACHE_KINDS == designs.KVCORE_DESIGNS
