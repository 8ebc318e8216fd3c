# SPDX-License-Identifier: Apache-2.0
"""Exports of a step: the replayable JSON bundle, the Markdown report, plain text; and the
round trip export -> open for small scripts and every shipped demo, at every kind of step."""

import functools
import importlib.util
import json
import re

import pytest

from kvviz.core.demos import demo_names, load_demo
from kvviz.report import render_export, write_export
from kvviz.report.bundle import SCHEMA, dumps_bundle, make_bundle, open_bundle
from kvviz.core.scenario import parse_scenario
from kvviz.core.session import Session

STORIES = {
    "words-dedup-eviction": """\
title: words, dedup, failures and an eviction
description: a small story that has every kind of step.
cache trie pages=6 tokens_per_page=4
> Two requests compute the same system prompt before either publishes.
acquire a "you are a helpful assistant" 1..3
acquire b "you are a helpful assistant" 1..3 7
publish a
> b's copy of the prompt is a duplicate.
publish b
extend b 9 9 9
expect fail invalid
release a
release b
acquire big 1..40
expect fail alloc
acquire c 20..43
expect evictions 2
""",
    "base-cache": """\
cache base pages=3 tokens_per_page=2
acquire a 1..4
publish a
acquire b 1..4
expect fail alloc
release a
acquire b 1..4
""",
    "cascade": """\
cache trie pages=3 tokens_per_page=2
acquire a 1..6
publish a
release a
acquire b 7 8
acquire c 9 10 11 12
""",
}


@functools.cache
def session_for(key: str) -> Session:
    if key.startswith("demo-"):
        return Session.from_scenario(load_demo(key.removeprefix("demo-")))
    return Session.from_scenario(parse_scenario(STORIES[key]))


def step_kinds(session: Session) -> dict[str, int]:
    """The first step of each kind: initial, ok, failed, eviction."""
    kinds = {"initial": 0}
    for i in range(1, len(session)):
        frame = session.frame(i)
        kind = "failed" if frame.failed else "eviction" if frame.evictions else "ok"
        kinds.setdefault(kind, i)
    return kinds


def cases() -> list:
    keys = list(STORIES) + [f"demo-{name}" for name in demo_names()]
    return [pytest.param(key, step, id=f"{key}-{kind}")
            for key in keys for kind, step in step_kinds(session_for(key)).items()]


CASES = cases()


def squeezed(text: str) -> str:
    """Text without any whitespace, so wrapped lines compare equal to unwrapped ones."""
    return "".join(text.split())


def test_the_small_stories_have_every_kind_of_step():
    assert list(step_kinds(session_for("words-dedup-eviction"))) == ["initial", "ok", "failed", "eviction"]
    assert set(step_kinds(session_for("base-cache"))) == {"initial", "ok", "failed"}
    assert set(step_kinds(session_for("cascade"))) == {"initial", "ok", "eviction"}


# -- round trips --------------------------------------------------------------------------------


@pytest.mark.parametrize("key,step", CASES)
def test_a_json_bundle_opens_without_divergence_at_the_same_state(key, step, tmp_path):
    session = session_for(key)
    path = tmp_path / "report.json"
    write_export(session, step, path)
    opened = open_bundle(path)
    assert opened.divergence is None
    assert opened.step == step
    assert opened.session.frame(step).snapshot == session.frame(step).snapshot
    assert len(opened.session) == len(session)
    assert [s.op for s in opened.session.steps] == [s.op for s in session.steps]


@pytest.mark.parametrize("key,step", CASES)
def test_a_json_bundle_is_canonical(key, step, tmp_path):
    session = session_for(key)
    path = tmp_path / "report.json"
    write_export(session, step, path)
    text = path.read_text(encoding="utf-8")
    assert text == dumps_bundle(make_bundle(session, step)) == dumps_bundle(make_bundle(session, step))
    # Keys sorted at every level, two-space indent, a trailing newline: re-dumping changes nothing.
    assert json.dumps(json.loads(text), sort_keys=True, indent=2, ensure_ascii=False) + "\n" == text


@pytest.mark.parametrize("key,step", CASES)
def test_a_markdown_report_has_the_trie_as_mermaid_the_tables_and_the_script(key, step, tmp_path):
    session = session_for(key)
    path = tmp_path / "report.md"
    write_export(session, step, path)
    text = path.read_text(encoding="utf-8")
    snapshot = session.frame(step).snapshot
    if snapshot.kind == "trie":
        mermaid = text.split("```mermaid\n", 1)[1].split("\n```", 1)[0]
        assert mermaid.startswith("graph TD")
        for node in snapshot.nodes[1:]:
            assert f"  n{node.id}[" in mermaid
            assert f"page {node.page} · ref {node.ref}" in mermaid
            assert f"  n{node.parent} --> n{node.id}" in mermaid
    assert "| name | tokens | block table | published | hit tokens |" in text
    holder = "block" if snapshot.kind == "hash" else "node"  # a hash cache's pages hold blocks, not trie nodes
    assert f"| page | state | {holder} | owner | ref |" in text
    for page in snapshot.pages:
        assert f"\n| {page.page} | {page.state} |" in text
    script = text.split("## Script\n\n", 1)[1]
    for s in session.steps:
        assert s.op.text in script


@pytest.mark.parametrize("key,step", CASES)
def test_a_text_export_contains_the_narration(key, step, tmp_path):
    session = session_for(key)
    path = tmp_path / "report.txt"
    write_export(session, step, path)
    text = path.read_text(encoding="utf-8")
    frame = session.frame(step)
    assert f"step {step}/{len(session) - 1}" in text
    assert squeezed(frame.explanation) in squeezed(text)
    assert squeezed(frame.story) in squeezed(text)


# -- what a bundle holds ---------------------------------------------------------------------------


def test_a_bundle_holds_versions_config_script_digests_state_and_a_summary():
    session = session_for("words-dedup-eviction")
    failed = step_kinds(session)["failed"]
    bundle = json.loads(render_export(session, failed, ".json"))
    assert bundle["schema"] == SCHEMA
    assert set(bundle["versions"]) == {"kvviz", "kvcore", "python", "platform"}
    assert bundle["config"] == {"kind": "trie", "pages": 6, "tokens_per_page": 4, "policy": "lru"}
    assert bundle["step"] == failed and bundle["steps"] == len(session) - 1
    assert bundle["op"] == "extend b 9 9 9"
    assert bundle["error"]["kind"] == "InvalidOperation"
    assert bundle["digests"] == [session.frame(i).snapshot.digest() for i in range(len(session))]
    assert bundle["snapshot"] == session.frame(failed).snapshot.to_dict()
    assert bundle["violations"] == []
    assert parse_scenario(bundle["script"]).steps == parse_scenario(STORIES["words-dedup-eviction"]).steps
    assert bundle["summary"].startswith(f"Step {failed} of {len(session) - 1} of “words, dedup, failures")
    assert "which failed" in bundle["summary"] and "All invariants hold." in bundle["summary"]


def test_the_initial_step_bundle_has_no_op_and_no_error():
    bundle = json.loads(render_export(session_for("cascade"), 0, ".json"))
    assert bundle["op"] is None and bundle["error"] is None
    assert bundle["snapshot"]["clock"] == 0


def test_a_bundle_replays_words_as_the_same_tokens():
    session = session_for("words-dedup-eviction")
    bundle = json.loads(render_export(session, 3, ".json"))
    replayed = Session.from_scenario(parse_scenario(bundle["script"]))
    assert replayed.frame(3).snapshot.digest() == bundle["digests"][3]
    assert 'acquire a "you are a helpful assistant" 1..3' in bundle["script"]


# -- Markdown details ----------------------------------------------------------------------------


def test_the_markdown_report_marks_new_touched_and_evicted_nodes():
    session = session_for("cascade")
    publish = render_export(session, 2, ".md")
    assert "  class n1 new" in publish and "  class n3 new" in publish
    evicting = render_export(session, 4, ".md")
    assert session.frame(4).diff.nodes_evicted == (3,)
    assert "  class n3 evicted" in evicting and "page 2 · evicted" in evicting
    assert "  n2 -.-> n3" in evicting
    cascade = render_export(session, 5, ".md")
    assert session.frame(5).diff.nodes_evicted == (1, 2)
    assert "  class n1 evicted" in cascade and "  class n2 evicted" in cascade
    touched = render_export(Session.from_scenario(parse_scenario("acquire a 1..4\npublish a\nacquire b 1..4\n")),
                            3, ".md")
    assert "  class n1 touched" in touched


def test_the_markdown_report_keeps_tables_and_fences_intact_whatever_the_words():
    session = Session.from_scenario(parse_scenario(
        'title: a ``` in the title\ndescription: and one ``` here\ncache trie pages=4 tokens_per_page=2\n'
        '> narration with ``` too\nacquire a "x|y <s> `q`" 1\npublish a\n'))
    text = render_export(session, 2, ".md")
    row = next(line for line in text.splitlines() if line.startswith("| a |"))
    assert len(re.findall(r"(?<!\\)\|", row)) == 6  # five cells, none split by the word's pipe
    assert "<s>" not in row  # would strike through the rest of the row on GitHub
    fence = re.search(r"## Script\n\n(`{3,})\n", text)[1]
    body = text.split(f"## Script\n\n{fence}\n", 1)[1]
    assert body.rstrip("\n").endswith(fence)
    assert body[: -len(fence) - 1].count(fence) == 0  # the script's ``` does not close the fence
    mermaid = text.split("```mermaid\n", 1)[1].split("\n```", 1)[0]
    assert "`" not in mermaid  # backticks switch Mermaid labels to Markdown strings


def test_the_base_cache_report_has_no_trie_diagram():
    text = render_export(session_for("base-cache"), 1, ".md")
    assert "```mermaid" not in text
    assert "| a | 1 2 3 4 | 0 1 | 0 | 0 |" in text


# -- writing ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["report.xyz", "report", "report.JSONL"])
def test_an_unknown_export_suffix_is_refused_and_nothing_is_written(name, tmp_path):
    with pytest.raises(ValueError, match="unknown export format"):
        write_export(session_for("cascade"), 1, tmp_path / name)
    assert list(tmp_path.iterdir()) == []


def test_a_suffix_in_capitals_picks_the_same_format(tmp_path):
    write_export(session_for("cascade"), 1, tmp_path / "REPORT.JSON")
    assert json.loads((tmp_path / "REPORT.JSON").read_text())["schema"] == SCHEMA
    assert [p.name for p in tmp_path.iterdir()] == ["REPORT.JSON"]


def test_an_svg_export_is_drawn_by_the_ui_and_the_pure_exporter_says_so(tmp_path):
    path = tmp_path / "screen.svg"
    with pytest.raises(ValueError, match="picture of the UI"):
        write_export(session_for("cascade"), 1, path)
    assert not path.exists()
    from kvviz.explore.screenshot import screenshot_svg

    write_export(session_for("cascade"), 1, path, render_svg=screenshot_svg)
    assert "<svg" in path.read_text(encoding="utf-8")


def long_script(ops: int) -> str:
    """A script of ``ops`` ops on a small pool: acquires that share prefixes, publishes and
    releases in turn, so it evicts throughout."""
    lines = ["title: long", "cache trie pages=12 tokens_per_page=2"]
    for i in range(ops // 3):
        lines += [f"acquire r{i} {i % 5} {i % 7} {i % 3} {i}", f"publish r{i}", f"release r{i}"]
    return "\n".join(lines) + "\n"


def test_a_long_scripts_bundle_opens_lazily_and_still_finds_an_edited_digest(tmp_path):
    """Past LAZY_ABOVE steps a bundle opens without building every frame; the per-step
    digests are still all checked (from one quiet replay) and the first edited one is named."""
    from kvviz.report.bundle import LAZY_ABOVE

    scenario = parse_scenario(long_script(LAZY_ABOVE + 300))
    session = Session.from_scenario(scenario, lazy=True)
    assert len(session) > LAZY_ABOVE + 1
    step = len(session) - 40
    bundle = make_bundle(session, step)
    assert bundle["digests"] == [session.frame(i).snapshot.digest() for i in range(len(session))]
    path = tmp_path / "long.json"
    path.write_text(dumps_bundle(bundle))
    opened = open_bundle(path)
    assert opened.divergence is None
    assert opened.session.frame(step).snapshot == session.frame(step).snapshot
    edited = dict(bundle, digests=list(bundle["digests"]))
    edited["digests"][LAZY_ABOVE + 7] = "0" * 64
    path.write_text(dumps_bundle(edited))
    assert open_bundle(path).divergence.startswith(f"step {LAZY_ABOVE + 7} diverges")


# -- what export writes, open opens: one size limit on both sides ------------------------------

import os  # noqa: E402
import tracemalloc  # noqa: E402

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import kvviz.report.bundle as bundle_module  # noqa: E402
from kvviz.report.bundle import BundleTooLarge, bundle_size_floor  # noqa: E402
from kvviz.report.jsontext import dumps as canonical_dumps  # noqa: E402


def big_session(acquires: int, tokens: int, pages: int, tokens_per_page: int = 16) -> Session:
    lines = [f"cache trie pages={pages} tokens_per_page={tokens_per_page}"]
    lines += [f"acquire r{i} {i * tokens}..{(i + 1) * tokens - 1}" for i in range(acquires)]
    return Session.from_scenario(parse_scenario("\n".join(lines) + "\n"), lazy=True)


def test_four_acquires_of_a_million_tokens_are_refused_before_any_frame_is_built(tmp_path, monkeypatch):
    """Reproduction: 149 bytes of script exported a 75 MB bundle open refused."""
    session = big_session(4, 1_000_000, 1_000_000, tokens_per_page=4)
    monkeypatch.setattr(Session, "frame", lambda *a: pytest.fail("the bundle was built before it was refused"))
    out = tmp_path / "big.json"
    with pytest.raises(BundleTooLarge, match=r"would take at least [\d,]+ bytes \(4 steps, 1,000,000 pages\), more "
                                             r"than the 67,108,864 bytes `kvviz open` accepts; nothing was written"):
        write_export(session, 4, out)
    assert list(tmp_path.iterdir()) == []


def test_four_acquires_of_a_million_tokens_on_big_pages_are_refused_before_the_bundle_is_built(tmp_path, monkeypatch):
    """The same on 100 pages of 65,536 tokens: the pool is small, the token lists are not
    (they streamed to 64 MiB before being refused, in 11 s and 410 MB)."""
    session = big_session(4, 1_000_000, 100, tokens_per_page=65_536)
    monkeypatch.setattr(bundle_module, "make_bundle", lambda *a: pytest.fail("the bundle was built"))
    with pytest.raises(BundleTooLarge, match=r"\(4 steps, 100 pages, 4,000,000 tokens in live allocations\)"):
        write_export(session, 4, tmp_path / "big.json")
    assert list(tmp_path.iterdir()) == []


def test_a_bundle_bound_to_be_too_large_by_its_tokens_is_refused_from_counts(tmp_path, monkeypatch):
    session = big_session(4, 10_000, 5_000)
    floor = bundle_size_floor(session, 4)
    assert floor > 4 * 10_000 * 13  # every listed token takes at least 13 bytes
    monkeypatch.setattr(bundle_module, "MAX_BUNDLE_BYTES", floor - 1)
    monkeypatch.setattr(bundle_module, "make_bundle", lambda *a: pytest.fail("the bundle was built"))
    with pytest.raises(BundleTooLarge, match="40,000 tokens in live allocations"):
        write_export(session, 4, tmp_path / "big.json")
    assert list(tmp_path.iterdir()) == []


def test_the_size_floor_is_a_lower_bound_on_every_demo_bundle():
    for key in list(STORIES) + [f"demo-{name}" for name in demo_names()]:
        session = session_for(key)
        for step in step_kinds(session).values():
            size = len(render_export(session, step, ".json").encode())
            assert bundle_size_floor(session) <= bundle_size_floor(session, step) <= size, (key, step)


def test_a_bundle_at_the_limit_is_written_and_opens_and_one_byte_less_refuses_it_streaming(tmp_path, monkeypatch):
    session = session_for("words-dedup-eviction")
    size = len(render_export(session, 6, ".json").encode())
    out = tmp_path / "edge.json"
    monkeypatch.setattr(bundle_module, "MAX_BUNDLE_BYTES", size)
    write_export(session, 6, out)
    assert out.stat().st_size == size
    assert open_bundle(out).divergence is None  # the same limit, on the other side
    out.unlink()
    monkeypatch.setattr(bundle_module, "MAX_BUNDLE_BYTES", size - 1)
    assert bundle_size_floor(session, 6) < size - 1  # so it is the streaming cap that refuses
    with pytest.raises(BundleTooLarge, match=f"is more than {size - 1:,} bytes, the most `kvviz open` accepts"):
        write_export(session, 6, out)
    assert list(tmp_path.iterdir()) == []  # no bundle, no temporary file


def test_a_bundle_is_streamed_so_its_peak_memory_stays_a_few_times_its_size(tmp_path):
    """json.dumps with an indent kept every small string of the text alive, then joined them:
    nine times the bundle's size (ten acquires of 1M tokens peaked at 1.85 GB)."""
    session = Session.from_scenario(parse_scenario("cache trie pages=8000 tokens_per_page=16\nacquire r 0..79999\n"))
    session.frame(1)
    out = tmp_path / "peak.json"
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        write_export(session, 1, out)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    size = out.stat().st_size
    assert size > 2_000_000
    assert peak < 6 * size, f"peak {peak:,} bytes for a bundle of {size:,}"


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=30)


@settings(max_examples=150, deadline=None)
@given(JSON_VALUES)
def test_the_streamed_text_is_exactly_what_json_dumps_writes(value):
    assert canonical_dumps(value) == json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False)


# -- an export never replaces its input -----------------------------------------------------------


@pytest.mark.parametrize("suffix", [".json", ".md", ".txt"])
@pytest.mark.parametrize("spelling", ["same", "dotdot", "symlink", "hardlink"])
def test_an_export_onto_one_of_its_inputs_is_refused_and_the_input_survives(suffix, spelling, tmp_path):
    script = tmp_path / f"s{suffix}"
    script.write_text(STORIES["cascade"], encoding="utf-8")
    (tmp_path / "sub").mkdir()
    output = {"same": script, "dotdot": tmp_path / "sub" / ".." / script.name,
              "symlink": tmp_path / f"link{suffix}", "hardlink": tmp_path / f"hard{suffix}"}[spelling]
    if spelling == "symlink":
        output.symlink_to(script)
    elif spelling == "hardlink":
        os.link(script, output)
    before = sorted(tmp_path.iterdir())
    with pytest.raises(ValueError, match="refusing to overwrite an input of this command with its output"):
        write_export(session_for("cascade"), 1, output, inputs=[script])
    assert script.read_text(encoding="utf-8") == STORIES["cascade"]
    assert sorted(tmp_path.iterdir()) == before


def test_an_export_next_to_its_input_is_written(tmp_path):
    script = tmp_path / "s.kvs"
    script.write_text(STORIES["cascade"], encoding="utf-8")
    write_export(session_for("cascade"), 1, tmp_path / "s.md", inputs=[script, tmp_path / "missing.kvs"])
    assert (tmp_path / "s.md").read_text(encoding="utf-8").startswith("# kvviz report")


@pytest.mark.parametrize("suffix", [".json", ".md", ".txt"])
def test_an_existing_part_file_beside_the_output_survives_an_export(suffix, tmp_path):
    """Temporary names are unique (mkstemp): ``X.md.part`` is someone's file, not ours."""
    part = tmp_path / f"X{suffix}.part"
    part.write_text("someone's download", encoding="utf-8")
    write_export(session_for("cascade"), 1, tmp_path / f"X{suffix}")
    assert part.read_text(encoding="utf-8") == "someone's download"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f"X{suffix}", f"X{suffix}.part"])


# -- the headless text: a legend, and the UI's order ------------------------------------------------


SIBLINGS = """\
cache trie pages=16 tokens_per_page=2
acquire a 1 2 3 4
publish a
acquire b 1 2 9 9
publish b
acquire c 5 6
publish c
acquire d 1 2 3 4 7 7
publish d
release c
"""


def test_the_text_view_lists_siblings_in_the_order_the_ui_draws_them():
    from kvviz.core.view import FrameView
    from kvviz.ui.widgets.trie_view import TrieView

    session = Session.from_scenario(parse_scenario(SIBLINGS))
    frame = session.frame(len(session) - 1)
    view = TrieView()
    view.compress = False
    ui_order = [row.data.chain[0] for row in view.build_rows(FrameView(frame), 100)[1:]]
    text = render_export(session, len(session) - 1, ".txt")
    text_order = [int(m) for m in re.findall(r"\] page (\d+) ref", text)]
    assert text_order == [frame.snapshot.node(n).page for n in ui_order]
    assert text_order == [0, 1, 4, 2, 3]  # [1 2] > [3 4] > [7 7], then [9 9]; [5 6] last: creation order


def test_the_text_view_has_a_legend_for_its_marks_and_no_held_page_state():
    text = render_export(session_for("words-dedup-eviction"), 3, ".txt")
    for mark in ("pages: . free", "C2 cached, ref 2", "E evictable (cached, ref 0)", "+ taken, - freed, ! evicted"):
        assert squeezed(mark) in squeezed(text)
    assert squeezed("block table: 4 published · 4* published, shared with another allocation · (4) owned") \
        in squeezed(text)
    assert "(held)" not in text and "held" not in text.split("expect")[0]
    assert "(cached)" in text


def test_long_token_lists_are_abbreviated_in_text_and_markdown():
    session = Session.from_scenario(parse_scenario("cache trie pages=2000 tokens_per_page=64\nacquire a 0..99999\n"
                                                   "publish a\n"))
    for suffix, start, end in ((".txt", "\nclock ", None), (".md", "\nCache: ", "## Script")):
        text = render_export(session, 2, suffix)
        # What the narration says is narrate's and the script is the session's; the views are ours.
        views = text.split(start, 1)[1].split(end)[0] if end else text.split(start, 1)[1]
        assert "… +40 more" in views  # a node of 64 tokens
        assert len(views) < 200_000, suffix
        assert max(map(len, views.splitlines())) < 400, suffix
    assert "… +99976 more" in render_export(session, 2, ".md")  # the allocation's 100,000 tokens
