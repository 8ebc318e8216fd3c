# SPDX-License-Identifier: Apache-2.0
"""`kvviz run --print --substeps` and `kvviz run --json`: the headless sub-steps and the
timeline as JSON lines.

Expected lines are computed from the model (the session's own frames and sub-steps), not
pasted; a few anchors a human checked against the demos' narration pin what they must say.
Pseudo-code lines are whatever the session's sub-steps carry (``kvviz.core.pseudocode``
fills them once wired in), so these tests hold before and after that wiring.
"""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from kvcore import Snapshot
from kvcore.events import event_from_dict
from kvviz.core import limits
from kvviz.cli import cli
from kvviz.core.demos import load_demo
from kvviz.core.session import Session
from kvviz.core.substeps import SUBSTEP_KINDS
from kvviz.report.timeline_json import JSON_HELP, SCHEMA, read_states

DEMOS = ["lru", "eviction-cascade"]

# A failed op (does not fit), a failed expect, and a refused op: r2 never became live.
TROUBLE = """\
title: trouble
cache trie pages=4 tokens_per_page=4
acquire r1 1..8
publish r1
acquire r2 1..40
expect free 3
release r2
release r1
"""


def kvviz(*args: str):
    return CliRunner().invoke(cli, list(args), prog_name="kvviz", catch_exceptions=False)


def session_of(name: str) -> Session:
    return Session.from_scenario(load_demo(name))


@pytest.fixture
def trouble(tmp_path):
    path = tmp_path / "trouble.kvs"
    path.write_text(TROUBLE, encoding="utf-8")
    return path


# -- --print --substeps -----------------------------------------------------------------------


def step_blocks(output: str) -> dict[int, list[str]]:
    """The printed output's lines, split at each ``step i/N`` header: step -> its lines."""
    blocks: dict[int, list[str]] = {}
    current = None
    for line in output.splitlines():
        m = re.match(r"^step (\d+)/\d+", line)
        if m:
            current = int(m.group(1))
            blocks[current] = []
        if current is not None:
            blocks[current].append(line)
    return blocks


SUBSTEP_LINE = re.compile(r"^    +(\d+)  (\S+) +(\S+):(\S+) {2,}(\S.*)$")


def parse_lines(text: str) -> tuple[int, ...]:
    """``4-5,9`` -> (4, 5, 9); ``-`` -> ()."""
    if text == "-":
        return ()
    numbers: list[int] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        numbers += range(int(first), int(last or first) + 1)
    return tuple(numbers)


def printed_substeps(block: list[str]) -> list[tuple[int, str, str, tuple[int, ...], str]]:
    """(index, kind, algorithm, lines, sentence) of each sub-step line of one step's block."""
    rows = []
    for line in block:
        m = SUBSTEP_LINE.match(line)
        if m and m.group(2) in SUBSTEP_KINDS:
            rows.append((int(m.group(1)), m.group(2), m.group(3), parse_lines(m.group(4)), m.group(5)))
    return rows


def expected_substeps(session: Session, i: int):
    """What ``--print --substeps`` lists for step ``i``: each sub-step numbered from 1."""
    return [(s.index + 1, s.kind, s.algorithm, tuple(sorted(set(s.lines))), s.sentence) for s in session.substeps(i)]


@pytest.mark.parametrize("name", DEMOS)
def test_print_substeps_prints_each_ops_substeps_under_it_in_order(name):
    result = kvviz("run", name, "--print", "--substeps")
    assert result.exit_code == 0, result.output
    blocks = step_blocks(result.stdout)
    session = session_of(name)
    assert sorted(blocks) == list(range(len(session)))
    for i in range(1, len(session)):
        subs = session.substeps(i)
        assert printed_substeps(blocks[i]) == expected_substeps(session, i), i
        assert any(subs.note in line for line in blocks[i])
    assert printed_substeps(blocks[0]) == [] and any("no sub-steps" in line for line in blocks[0])


def test_print_substeps_keeps_the_frame_text_of_print():
    plain = kvviz("run", "lru", "--print").stdout
    with_substeps = kvviz("run", "lru", "--print", "--substeps").stdout
    added = [line for line in with_substeps.splitlines()
             if SUBSTEP_LINE.match(line) or re.match(r"^  (\d+ sub-steps? \(|no sub-steps: )", line)]
    kept = [line for line in with_substeps.splitlines() if line not in added]
    assert added
    assert kept == plain.splitlines()


@given(st.lists(st.integers(1, 40), max_size=12))
def test_pseudo_code_lines_print_as_ranges_that_read_back_to_the_same_lines(lines):
    from kvviz.explore.commands import _lines_text

    text = _lines_text(tuple(lines))
    assert parse_lines(text) == tuple(sorted(set(lines)))
    assert (text == "-") == (not lines)
    assert re.fullmatch(r"-|\d+(-\d+)?(,\d+(-\d+)?)*", text)


def test_pseudo_code_lines_in_a_row_print_as_one_range():
    from kvviz.explore.commands import _lines_text

    assert [_lines_text(x) for x in [(4, 5), (2, 3, 4, 7), (3,), ()]] == ["4-5", "2-4,7", "3", "-"]


def test_eviction_cascade_step_7_pops_node_3_evicts_it_then_its_parent_becomes_a_candidate():
    # Checked by hand against the demo's narration: x takes free page 4, then the oldest
    # leaf, node 3, is popped and evicted, which leaves node 2 a candidate, evicted next.
    block = step_blocks(kvviz("run", "eviction-cascade", "--print", "--substeps", "--step", "7").stdout)[7]
    rows = printed_substeps(block)
    kinds = [kind for _, kind, *_ in rows]
    first_pop = kinds.index("pop")
    assert kinds[first_pop:first_pop + 3] == ["pop", "evict", "candidate"]
    assert kinds.index("take") < first_pop
    pop, evict, candidate = (rows[first_pop + k][4] for k in range(3))
    assert "node 3" in pop and "victim" in pop
    assert evict.startswith("evict node 3") and "page 2 goes to x" in evict
    assert candidate.startswith("node 2 (page 1)") and "candidate" in candidate
    assert kinds.count("evict") == 2
    # pseudocode.lines_for puts an eviction inside acquire in the `evict` algorithm
    algorithms = [algorithm for _, _, algorithm, *_ in rows]
    assert algorithms[kinds.index("take")] == "acquire"
    assert algorithms[first_pop:first_pop + 3] == ["evict"] * 3


def test_lru_big_acquire_evicts_three_pages_each_popped_first():
    # Step 29 (`acquire big 9000..9011`) needs 3 pages with none free: three victims.
    session = session_of("lru")
    assert session.frame(29).op.text.startswith("acquire big")
    rows = printed_substeps(step_blocks(kvviz("run", "lru", "--print", "--substeps", "--step", "29").stdout)[29])
    kinds = [kind for _, kind, *_ in rows]
    assert kinds.count("pop") == kinds.count("evict") == 3
    pops = [k for k, kind in enumerate(kinds) if kind == "pop"]
    evicts = [k for k, kind in enumerate(kinds) if kind == "evict"]
    assert all(p < e for p, e in zip(pops, evicts)) and all(e < p for e, p in zip(evicts, pops[1:]))


@pytest.mark.parametrize("step", [1, 7, 12])
def test_print_substeps_with_a_step_prints_only_that_op(step):
    result = kvviz("run", "eviction-cascade", "--print", "--substeps", "--step", str(step))
    assert result.exit_code == 0
    blocks = step_blocks(result.stdout)
    assert list(blocks) == [step]
    session = session_of("eviction-cascade")
    assert printed_substeps(blocks[step]) == expected_substeps(session, step)
    all_rows = [line for line in result.stdout.splitlines() if SUBSTEP_LINE.match(line)]
    assert len(all_rows) == len(session.substeps(step))


def test_print_substeps_of_a_failed_op_and_of_a_refused_one(trouble):
    result = kvviz("run", str(trouble), "--print", "--substeps")
    assert result.exit_code == 1  # the failed expect, as --print says
    blocks = step_blocks(result.stdout)
    kinds = {i: [kind for _, kind, *_ in printed_substeps(blocks[i])] for i in blocks}
    assert "fail" in kinds[3]
    assert kinds[4] == ["refused"]
    assert result.stderr.count("\n") == 1 and "check failed" in result.stderr


# -- --json -----------------------------------------------------------------------------------


def json_objects(result) -> list[dict]:
    lines = result.stdout.splitlines()
    objects = [json.loads(line) for line in lines]
    for line, obj in zip(lines, objects):  # canonical: sorted keys, no whitespace, ASCII
        assert line == json.dumps(obj, sort_keys=True, separators=(",", ":"))
    return objects


def states_of(objects) -> dict[int, Snapshot]:
    """Each step object's state, rebuilt from the first whole one and the changes after it."""
    return {obj["step"]: snap for obj, snap in read_states(objects)}


@pytest.mark.parametrize("name", DEMOS)
def test_json_has_a_header_then_one_object_per_step_whose_state_round_trips(name):
    result = kvviz("run", name, "--json")
    assert result.exit_code == 0, result.stderr
    header, *steps = json_objects(result)
    session = session_of(name)
    assert header["type"] == "run" and header["schema"] == SCHEMA and header["changes"] == "changes/1"
    assert (header["steps"], header["pages"], header["kind"]) == (len(session) - 1, session.config.pages, "trie")
    assert [s["step"] for s in steps] == list(range(len(session)))
    states = states_of(steps)
    for obj in steps:
        frame = session.frame(obj["step"])
        assert obj["type"] == "step"
        # The first state whole, every later one as its changes.
        assert (obj["snapshot"] is None) == (obj["step"] > 0) and (obj["changes"] is None) == (obj["step"] == 0)
        assert states[obj["step"]] == frame.snapshot
        assert obj["state_digest"] == frame.snapshot.state_digest()
        assert obj["digest"] == (frame.snapshot.digest() if obj["step"] in (0, len(session) - 1) else None)
        assert obj["narration"] == frame.narration and obj["explanation"] == frame.explanation
        assert obj["error"] is None and obj["violations"] == [] and obj["substeps"] is None
        assert obj["op"] == (None if frame.op is None else {
            "text": frame.op.text, "line": frame.op.line, "kind": frame.op.kind, "name": frame.op.name,
            "tokens": list(frame.op.tokens) if frame.op.tokens is not None else None, "extra": frame.op.extra,
            "append": frame.op.append, "priority": frame.op.priority})
        assert [(e["text"], e["ok"], e["message"]) for e in obj["expects"]] == [
            (r.expect.text, r.ok, r.message) for r in frame.expects]


def test_json_of_failures_carries_the_error_the_failed_expect_and_exits_1(trouble):
    result = kvviz("run", str(trouble), "--json")
    assert result.exit_code == 1
    assert result.stderr.startswith("kvviz: check failed: 1 expect failed") and result.stderr.count("\n") == 1
    objects = json_objects(result)
    steps = {o["step"]: o for o in objects if o["type"] == "step"}
    states = states_of(objects)
    assert steps[3]["error"]["kind"] == "CacheAllocationFailure"
    assert states[3] == states[2] and steps[3]["state_digest"] == steps[2]["state_digest"]  # a failed op changes nothing
    assert all(steps[3]["changes"][rows] == [] for rows in ("pages", "nodes", "nodes_gone", "allocations",
                                                             "allocations_gone", "free", "heap"))
    assert [e["ok"] for e in steps[3]["expects"]] == [False]
    assert steps[4]["error"]["kind"] == "InvalidOperation" and "'r2'" in steps[4]["error"]["message"]


@pytest.mark.parametrize("name", DEMOS)
def test_json_substeps_follow_their_step_and_match_the_sessions_substeps(name):
    result = kvviz("run", name, "--json", "--substeps", "--states")
    assert result.exit_code == 0, result.stderr
    header, *objects = json_objects(result)
    assert header["substeps"] is True and header["states"] is True
    session = session_of(name)
    step = None
    seen: dict[int, list[dict]] = {}
    for obj in objects:
        if obj["type"] == "step":
            step = obj
            seen[step["step"]] = []
            continue
        assert obj["type"] == "substep" and obj["step"] == step["step"]
        seen[step["step"]].append(obj)
    steps = {o["step"]: o for o in objects if o["type"] == "step"}
    states = states_of(objects)
    assert seen[0] == [] and steps[0]["substeps"] is None
    for i in range(1, len(session)):
        subs = session.substeps(i)
        got = seen[i]
        assert steps[i]["substeps"] == {"count": len(subs), "source": "events", "note": subs.note}
        assert [o["index"] for o in got] == list(range(len(subs)))
        for o, sub in zip(got, subs):
            assert (o["kind"], o["sentence"], o["algorithm"], tuple(o["lines"])) == (
                sub.kind, sub.sentence, sub.algorithm, sub.lines)
            assert o["focus"] == {"nodes": list(sub.focus.nodes), "pages": list(sub.focus.pages),
                                  "slots": list(sub.focus.slots), "allocation": sub.focus.allocation}
            assert event_from_dict(o["event"]) == sub.event
            assert Snapshot.from_dict(o["state"]) == subs.state(sub.index)
        # The last sub-step ends where the step does: the step's own state.
        assert Snapshot.from_dict(got[-1]["state"]) == states[i] == session.frame(i).snapshot


def test_json_substeps_without_states_have_a_null_state():
    objects = json_objects(kvviz("run", "eviction-cascade", "--json", "--substeps"))
    subs = [o for o in objects if o["type"] == "substep"]
    assert subs and all(o["state"] is None for o in subs)
    assert objects[0]["states"] is False


def test_json_of_a_refused_op_has_one_refused_substep_with_no_event(trouble):
    objects = json_objects(kvviz("run", str(trouble), "--json", "--substeps", "--states", "--step", "4"))
    assert [o["type"] for o in objects] == ["run", "step", "substep"]
    refused = objects[2]
    assert (refused["kind"], refused["event"]) == ("refused", None)
    assert refused["state"] == objects[1]["snapshot"]


def test_json_with_a_step_prints_only_that_step_and_its_substeps():
    session = session_of("eviction-cascade")
    objects = json_objects(kvviz("run", "eviction-cascade", "--json", "--substeps", "--step", "7"))
    assert objects[0]["step"] == 7
    assert [o["step"] for o in objects[1:]] == [7] * (1 + len(session.substeps(7)))
    assert [o["kind"] for o in objects[2:]] == [s.kind for s in session.substeps(7)]


def test_json_output_is_the_same_bytes_every_run():
    first = kvviz("run", "lru", "--json", "--substeps", "--states").stdout
    assert first == kvviz("run", "lru", "--json", "--substeps", "--states").stdout


def test_timeline_lines_build_each_frame_only_when_its_line_is_taken(monkeypatch):
    from kvviz.report.timeline_json import timeline_lines

    session = Session.from_scenario(load_demo("eviction-cascade"), lazy=True)
    built = []
    real = session.frame
    monkeypatch.setattr(session, "frame", lambda i: built.append(i) or real(i))
    lines = timeline_lines(session, range(len(session)))
    next(lines), next(lines)
    assert sorted(set(built)) == [0, 1]


def test_json_lines_are_written_as_they_come_not_gathered_first(monkeypatch):
    import kvviz.report.timeline_json as timeline_json

    def fail_at_step_2(self, frame):
        if frame.index == 2:
            raise RuntimeError("the third line is never built")
        yield f'{{"type":"step","step":{frame.index}}}'
    monkeypatch.setattr(timeline_json.TimelineWriter, "lines", fail_at_step_2)
    applied = []
    real = Session.apply
    monkeypatch.setattr(Session, "apply", lambda self, *a, **k: applied.append(1) or real(self, *a, **k))
    result = CliRunner().invoke(cli, ["run", "lru", "--json"], prog_name="kvviz")
    assert isinstance(result.exception, RuntimeError)
    assert result.stdout.splitlines()[1:] == ['{"type":"step","step":0}', '{"type":"step","step":1}']
    assert len(applied) == 2  # written as the session applies each op: op 3 never ran


def test_every_field_the_json_has_is_documented_in_help_json(trouble):
    keys: set[str] = set()

    def collect(value, path=""):
        if isinstance(value, dict):
            for key, inner in value.items():
                keys.add(key)
                if key == "changes" and isinstance(inner, dict):
                    keys.update(inner)  # its rows are the snapshot's, documented by reference
                elif key not in ("snapshot", "state", "event"):  # documented by reference
                    collect(inner)
        elif isinstance(value, list):
            for inner in value:
                collect(inner)
    for args in (["lru", "--json", "--substeps", "--states"], [str(trouble), "--json", "--substeps"]):
        for obj in json_objects(kvviz("run", *args)):
            collect(obj)
    help_text = kvviz("help", "json").stdout
    assert help_text == JSON_HELP
    documented = set()
    for line in help_text.splitlines():
        m = re.match(r"^ {2,}([a-z_]+(?:, [a-z_]+)*) ", line)
        if m:
            documented.update(m.group(1).split(", "))
    assert keys - documented == set()
    assert set(SUBSTEP_KINDS) <= documented
    assert "kvviz help json" in kvviz("run", "--help").stdout


# -- bad combinations and the bound ---------------------------------------------------------


@pytest.mark.parametrize("flags,fragment", [
    (["--print", "--json"], "--print and --json exclude each other"),
    (["--json", "--print", "--substeps"], "--print and --json exclude each other"),
    (["--substeps"], "--substeps needs --print or --json"),
    (["--states", "--json"], "--states needs --json --substeps"),
    (["--states", "--print", "--substeps"], "--states needs --json --substeps"),
], ids=lambda a: " ".join(a) if isinstance(a, list) else None)
def test_a_conflicting_combination_is_one_line_and_exit_2(flags, fragment):
    result = CliRunner().invoke(cli, ["run", "lru", *flags], prog_name="kvviz")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("kvviz: error: ")
    assert fragment in result.stderr


def test_a_step_that_does_not_exist_is_refused_before_any_json():
    result = CliRunner().invoke(cli, ["run", "lru", "--json", "--step", "999"], prog_name="kvviz")
    assert (result.exit_code, result.stdout) == (2, "")
    assert "step 999 does not exist" in result.stderr


def test_states_are_bounded_before_the_first_line_at_the_limits_edge(monkeypatch):
    session = session_of("eviction-cascade")
    states = sum(len(session.substeps(i)) for i in range(1, len(session)))
    need = states * session.config.pages
    monkeypatch.setattr(limits, "MAX_SUBSTEP_STATE_PAGES", need)
    fits = kvviz("run", "eviction-cascade", "--json", "--substeps", "--states")
    assert fits.exit_code == 0 and sum(json.loads(x)["type"] == "substep" for x in fits.stdout.splitlines()) == states
    monkeypatch.setattr(limits, "MAX_SUBSTEP_STATE_PAGES", need - 1)
    refused = CliRunner().invoke(cli, ["run", "eviction-cascade", "--json", "--substeps", "--states"],
                                 prog_name="kvviz")
    assert (refused.exit_code, refused.stdout) == (2, "")
    assert refused.stderr.count("\n") == 1 and "MAX_SUBSTEP_STATE_PAGES" in refused.stderr
    assert "--step N" in refused.stderr
    # Fewer ops than the bound's states, but more ops than it allows: refused without building them.
    monkeypatch.setattr(limits, "MAX_SUBSTEP_STATE_PAGES", session.config.pages)
    refused = CliRunner().invoke(cli, ["run", "eviction-cascade", "--json", "--substeps", "--states"],
                                 prog_name="kvviz")
    assert refused.exit_code == 2 and "at least 12 sub-step states" in refused.stderr


def test_one_ops_states_are_bounded_too_and_then_the_hint_is_to_drop_states(monkeypatch):
    session = session_of("eviction-cascade")
    monkeypatch.setattr(limits, "MAX_SUBSTEP_STATE_PAGES", (len(session.substeps(7)) - 1) * session.config.pages)
    refused = CliRunner().invoke(cli, ["run", "eviction-cascade", "--json", "--substeps", "--states", "--step", "7"],
                                 prog_name="kvviz")
    assert (refused.exit_code, refused.stdout) == (2, "")
    assert "drop --states" in refused.stderr and "--step N" not in refused.stderr
    without = kvviz("run", "eviction-cascade", "--json", "--substeps", "--step", "7")
    assert without.exit_code == 0


def test_the_substeps_list_the_export_and_the_ui_number_a_sub_step_alike(tmp_path):
    from kvviz.core.view import SubStepView

    listed = kvviz("run", "eviction-cascade", "--print", "--substeps", "--step", "7").stdout.splitlines()
    rows = [line.split() for line in listed[listed.index(next(l for l in listed if "sub-steps (" in l)) + 1:]]
    numbers, kinds = [int(row[0]) for row in rows], [row[1] for row in rows]
    assert numbers == list(range(1, len(rows) + 1))  # from 1, as the UI's "sub-step k/n"
    subs = session_of("eviction-cascade").substeps(7)
    labels = [SubStepView(sub, len(subs)).label for sub in subs]  # the UI's "sub-step 6/10 pop"
    assert labels == [f"{n}/{len(rows)} {kind}" for n, kind in zip(numbers, kinds)]
    pop = kinds.index("pop") + 1
    out = tmp_path / "x.json"
    assert kvviz("export", "eviction-cascade", "--step", "7", "--substep", str(pop), "-o", str(out)).exit_code == 0
    assert json.loads(out.read_text())["substep"]["kind"] == "pop"
