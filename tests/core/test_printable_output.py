# SPDX-License-Identifier: Apache-2.0
"""No file, stream or bundle can write to the terminal: control sequences fed through every
field of every input format (scenario, bundle, trace, KV-event recording, progress file) come
out of ``--print``, the error lines and the Markdown export as escapes, never raw; an error
stays one line. ``--json`` is JSON, which escapes them itself."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvviz.cli import cli
from kvviz.printable import first_control, printable

# A window title, a cleared screen, a fake prompt; a newline; a right-to-left override; a C1 CSI.
HOSTILE = "\x1b]0;kvviz pwned\x07\x1b[2J\x1b[H$ rm -rf ~ # \n\u202e\x9b31m"


def raw_controls(text: str) -> list[str]:
    """The characters of ``text`` a terminal would act on (its own line breaks aside)."""
    return sorted({char for char in text if char != "\n" and printable(char) != char})


def invoke(*args: str, env: dict | None = None):
    return CliRunner().invoke(cli, list(args), prog_name="kvviz", env=env)


def assert_harmless(result, one_line: bool = True) -> None:
    """Nothing raw on either stream; a refusal is one line (a scenario lists its other
    problems after it, one located line each); never a traceback."""
    out = result.stdout + result.stderr
    assert raw_controls(out) == [], out
    assert "Traceback" not in out and result.exit_code in (0, 1, 2), (result.exit_code, result.exception, out)
    if result.exit_code == 2:
        assert result.stderr.startswith("kvviz: error: "), result.stderr
        assert result.stderr.count("\n") == 1 or not one_line, result.stderr


# -- the sanitizer ---------------------------------------------------------------------------------


def test_printable_escapes_controls_separators_and_bidi_overrides_and_keeps_the_rest():
    assert printable("a\x1b[2Jb\nc\u202ed\x9b\u2028") == "a\\x1b[2Jb\\nc\\u202ed\\x9b\\u2028"
    assert printable("café · 1\u00a02 ✓ 日本 👩\u200d💻 \U00018cd6") == "café · 1\u00a02 ✓ 日本 👩\u200d💻 \U00018cd6"
    assert first_control("title\tok", allowed="\t") == -1 and first_control("ab\x1b") == 2
    assert first_control("a bidi \u202e override is text a file may hold") == -1


# -- scenarios -------------------------------------------------------------------------------------

SCENARIO = """\
title: a title
description: a description
cache trie pages=4 tokens_per_page=2

# a comment
> a narration line
acquire a 1 2
expect ok
publish a
release a
expect evictable 1
"""


def _injected(text: str, line: int) -> str:
    lines = text.split("\n")
    lines[line] = lines[line] + HOSTILE.replace("\n", " ")  # a newline in a scenario is a line break
    return "\n".join(lines)


@pytest.mark.parametrize("line", range(len(SCENARIO.split("\n")) - 1))
def test_control_sequences_in_any_scenario_line_are_refused_where_they_are(tmp_path, line):
    path = tmp_path / "hostile.kvs"
    path.write_text(_injected(SCENARIO, line), encoding="utf-8")
    for args in (["run", str(path), "--print"], ["check", str(path)], ["export", str(path), "-o",
                                                                      str(tmp_path / "x.md")]):
        result = invoke(*args)
        assert_harmless(result, one_line=False)
        assert result.exit_code == 2 and result.stderr.startswith(f"kvviz: error: {path}:{line + 1}:"), result.stderr
    assert not (tmp_path / "x.md").exists()


# -- bundles ---------------------------------------------------------------------------------------


def _string_places(value, path=()):
    """Every (path, string) in a JSON value, keys included (as a path ending in ``KEY``)."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        yield path + ("KEY",), None
        for key, item in value.items():
            yield from _string_places(item, path + (key,))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _string_places(item, path + (i,))


def _poisoned(data, path):
    data = json.loads(json.dumps(data))
    box = data
    for key in path[:-1]:
        box = box[key]
    if path[-1] == "KEY":
        box[HOSTILE] = 1
    else:
        box[path[-1]] = HOSTILE + box[path[-1]][1:]
    return data


@pytest.fixture(scope="module")
def scenario_bundle(tmp_path_factory):
    path = tmp_path_factory.mktemp("bundle") / "b.json"
    assert invoke("export", "lru", "--step", "5", "-o", str(path)).exit_code == 0
    return json.loads(path.read_text(encoding="utf-8"))


def test_control_sequences_in_any_field_of_a_bundle_never_reach_the_terminal(tmp_path, scenario_bundle):
    places = [p for p, _ in _string_places(scenario_bundle)]
    assert len(places) > 30 and ("digests", 0) in places and ("script",) in places
    for place in places:
        path = tmp_path / "poisoned.json"
        path.write_text(json.dumps(_poisoned(scenario_bundle, place)), encoding="utf-8")
        assert_harmless(invoke("open", str(path), "--print"))


def test_a_newline_in_a_bundled_digest_keeps_the_divergence_on_one_line(tmp_path, scenario_bundle):
    data = json.loads(json.dumps(scenario_bundle))
    data["digests"][0] = "\n" + data["digests"][0][1:]
    path = tmp_path / "b.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    result = invoke("open", str(path), "--print")
    assert result.exit_code == 1 and result.stderr.count("\n") == 1, result.stderr
    assert f"bundle recorded \\n{data['digests'][0][1:12]}…" in result.stderr


# -- traces ----------------------------------------------------------------------------------------

REQUEST = {"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": [0, 1]}


@pytest.mark.parametrize("field", [None, *REQUEST])
def test_control_sequences_in_any_field_of_a_trace_never_reach_the_terminal(tmp_path, field):
    poisoned = {**REQUEST, HOSTILE: 1} if field is None else {**REQUEST, field: HOSTILE}
    for line in (json.dumps(poisoned, ensure_ascii=False), HOSTILE.replace("\n", " ")):
        path = tmp_path / "trace.jsonl"
        path.write_text(json.dumps(REQUEST) + "\n" + line + "\n", encoding="utf-8")
        for args in (["trace", str(path)], ["trace", str(path), "--on-error", "skip"]):
            assert_harmless(invoke(*args))


# -- KV-event recordings ---------------------------------------------------------------------------

msgspec = pytest.importorskip("msgspec")


def _stored(**fields):
    return {"type": "BlockStored", "block_hashes": [7], "parent_block_hash": None, "token_ids": [1, 2],
            "block_size": 2, "lora_id": None, "medium": "GPU", **fields}


EVENT_POISONS = {
    "medium": [_stored(medium=HOSTILE), {"type": "BlockRemoved", "block_hashes": [7], "medium": HOSTILE}],
    "lora_name": [_stored(lora_name=HOSTILE)],
    "an unknown field": [_stored(**{HOSTILE: 1})],
    "an event type": [{"type": HOSTILE}],
    "a cleared medium": [_stored(), {"type": "AllBlocksCleared", "medium": HOSTILE}],
}


def _record(topic="kv", seq=0, payload=None, **extra):
    return json.dumps({"topic": topic, "seq": seq, "payload": payload, **extra}, ensure_ascii=False)


def _payload(events) -> str:
    return base64.b64encode(msgspec.msgpack.encode([1.0, events, 0])).decode()


def _recordings():
    for what, events in EVENT_POISONS.items():
        yield what, [_record(payload=_payload(events)), _record(seq=1, payload=_payload([_stored()]))]
    good = _payload([_stored()])
    yield "the topic", [_record(topic=HOSTILE, payload=good)]
    yield "the seq", [_record(seq=HOSTILE, payload=good)]
    yield "the payload", [_record(payload=HOSTILE)]
    yield "the payload's bytes", [_record(payload=base64.b64encode(HOSTILE.encode()).decode())]
    yield "a key", [_record(payload=good, **{HOSTILE: 1})]
    yield "a whole line", [_record(payload=good), HOSTILE.replace("\n", " ")]


@pytest.mark.parametrize("what, lines", list(_recordings()), ids=[what for what, _ in _recordings()])
def test_control_sequences_in_any_field_of_a_recording_never_reach_the_terminal(tmp_path, what, lines):
    recording = tmp_path / "r.jsonl"
    recording.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert_harmless(invoke("watch", "--replay-file", str(recording), "--print"))
    report = tmp_path / "r.md"
    result = invoke("watch", "--replay-file", str(recording), "--export-step", "1", "-o", str(report))
    assert_harmless(result)
    if report.exists():
        assert raw_controls(report.read_text(encoding="utf-8")) == []
    bundle = tmp_path / "r.json"
    if invoke("watch", "--replay-file", str(recording), "--export-step", "1", "-o", str(bundle)).exit_code == 0:
        assert_harmless(invoke("open", str(bundle), "--print"))


def test_the_json_summary_escapes_a_hostile_medium_as_json_does(tmp_path):
    recording = tmp_path / "r.jsonl"
    recording.write_text(_record(payload=_payload([_stored(medium=HOSTILE)])) + "\n", encoding="utf-8")
    result = invoke("watch", "--replay-file", str(recording), "--json")
    assert result.exit_code == 0 and raw_controls(result.stdout) == []
    assert json.loads(result.stdout.splitlines()[-1])["per_medium"] == {HOSTILE: 1}


# -- progress files --------------------------------------------------------------------------------

ROUND = {"lesson": "lru", "stage": "demo", "seed": 1, "moves": 6, "right": 5, "misses": {}}


@pytest.mark.parametrize("field", ["lesson", "stage", "review", "misses", "reviews", "schema", "line"])
def test_control_sequences_in_any_field_of_a_progress_file_never_reach_the_terminal(tmp_path, field):
    data = {"schema": "kvviz.progress/1", "rounds": [dict(ROUND)], "reviews": {}}
    if field in ("lesson", "stage", "review"):
        data["rounds"][0][field] = HOSTILE
    elif field == "misses":
        data["rounds"][0]["misses"] = {HOSTILE: 1}
    elif field == "reviews":
        data["reviews"] = {HOSTILE: {"step": 0, "due": 1}}
    elif field == "schema":
        data["schema"] = HOSTILE
    folder = tmp_path / "kvviz"
    folder.mkdir()
    text = HOSTILE if field == "line" else json.dumps(data, ensure_ascii=False)
    (folder / "progress.json").write_text(text, encoding="utf-8")
    assert_harmless(invoke("progress", env={"XDG_DATA_HOME": str(tmp_path)}))
