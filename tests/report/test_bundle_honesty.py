# SPDX-License-Identifier: Apache-2.0
"""A bundle that opens says only what its script does: every recorded value is held to the
replay (a disagreement is a divergence, exit 1), every field is of the schema's shape and
there are no others (else the bundle is malformed, exit 2), and junk that cannot run is
refused with one line, never a traceback."""

import importlib.util
import json

import pytest
from click.testing import CliRunner

import kvcore
from kvviz.cli import cli
from kvviz.report import write_export
from kvviz.report.bundle import OLDER_SCHEMAS, SCHEMA, BundleError, make_bundle, open_bundle
from kvviz.core.scenario import parse_scenario
from kvviz.core.session import Session

# Step 4 evicts; step 5 fails (alloc); step 6 fails (invalid): the step of interest.
SCRIPT = """\
title: honest
cache trie pages=3 tokens_per_page=2
acquire a 1..4
expect pages a 0 1
publish a
release a
acquire b 1 2 5 6 7 8
expect evictions 1
acquire c 1..40
expect fail alloc
extend b 9 9
expect fail invalid
"""
STEP = 6


@pytest.fixture
def bundle(tmp_path):
    """The bundle of SCRIPT at STEP as a dict, and a path to write edited copies to."""
    path = tmp_path / "honest.json"
    write_export(Session.from_scenario(parse_scenario(SCRIPT)), STEP, path)
    return json.loads(path.read_text(encoding="utf-8")), tmp_path / "edited.json"


def write(path, data) -> str:
    path.write_text(json.dumps(data, sort_keys=True, indent=2), encoding="utf-8")
    return str(path)


def divergence(path, data) -> str | None:
    return open_bundle(write(path, data)).divergence


def kvviz_open(path) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["open", str(path), "--print"], prog_name="kvviz", catch_exceptions=True)
    assert not isinstance(result.exception, Exception) or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.stderr


def test_the_untouched_bundle_opens_and_re_exports_to_itself(bundle):
    data, path = bundle
    opened = open_bundle(write(path, data))
    assert opened.divergence is None and opened.notes == ()
    again = make_bundle(opened.session, opened.step)
    assert again == data  # a fixed point: open derives every value the bundle holds
    assert data["schema"] == SCHEMA
    assert data["expects"] == [{"expect": "expect fail invalid", "ok": True}]
    assert data["expect_count"] == 4


# -- claims that disagree with the replay: divergences ------------------------------------------


@pytest.mark.parametrize("field,edit", [
    ("violations", lambda d: d["violations"].append(
        {"invariant": 1, "message": "made up", "pages": [0], "nodes": [], "allocations": []})),
    ("summary", lambda d: d.update(summary=d["summary"].replace("All invariants hold.", "2 invariant violation(s)."))),
    ("config", lambda d: d["config"].update(pages=8)),
    ("config", lambda d: d["config"].update(kind="base")),
    ("config", lambda d: d["config"].update(policy="fifo")),
    ("title", lambda d: d.update(title="a far more reassuring title")),
    ("steps", lambda d: d.update(steps=7)),
    ("op", lambda d: d.update(op="extend b 8 8")),  # another failing op, same state
    ("op", lambda d: d.update(op=None)),
    ("error", lambda d: d.update(error=None)),
    ("error", lambda d: d["error"].update(kind="CacheAllocationFailure")),
    ("error", lambda d: d["error"].update(message="nothing to see")),
    ("expects", lambda d: d.update(expects=[])),
    ("expects", lambda d: d["expects"][0].update(ok=False)),
    ("expects", lambda d: d["expects"][0].update(expect="expect fail alloc")),
    ("expects", lambda d: d["expects"].append({"expect": "expect free 0", "ok": True})),
    ("expect_count", lambda d: d.update(expect_count=3)),
    ("backend.version", lambda d: d["backend"].update(version="9.9.9")),
])
def test_an_edited_claim_is_a_divergence_naming_the_field(bundle, field, edit):
    data, path = bundle
    edit(data)
    found = divergence(path, data)
    assert found is not None and f": {field}" in found.split("at step 6", 1)[1], found
    assert "\n" not in found


def test_the_divergence_exits_1_at_the_command_line_and_never_says_every_digest_matches(bundle):
    data, path = bundle
    data["violations"] = []
    data["expects"][0]["ok"] = False
    code, stderr = kvviz_open(write(path, data))
    assert code == 1
    assert "every digest matches" not in stderr
    assert "replay diverges from the bundle: the bundle's claims disagree" in stderr


def test_a_script_whose_failed_op_became_another_failed_op_diverges(bundle):
    """The state is the same (a failed op changes nothing), so every digest matches; the op
    at the step, its error and the summary do not."""
    data, path = bundle
    data["script"] = data["script"].replace("extend b 9 9", "extend b 8 8")
    found = divergence(path, data)
    assert found is not None and "op: the bundle records 'extend b 9 9', the replay gives 'extend b 8 8'" in found
    assert "also wrong: error, summary" in found


@pytest.mark.parametrize("deleted,field", [("expect fail invalid", "expects"), ("expect evictions 1", "expect_count"),
                                           ("expect", "expects")])
def test_a_script_with_its_expects_deleted_diverges(bundle, deleted, field):
    """The step's own expects are evaluated and compared; the others are counted."""
    data, path = bundle
    data["script"] = "".join(line for line in data["script"].splitlines(keepends=True)
                             if not line.startswith(deleted))
    found = divergence(path, data)
    assert found is not None and f": {field}: the bundle records " in found


def test_a_script_with_another_cache_header_diverges(bundle):
    data, path = bundle
    data["script"] = data["script"].replace("pages=3", "pages=4")
    assert divergence(path, data) is not None


def test_a_script_with_another_title_diverges_on_the_title(bundle):
    data, path = bundle
    data["script"] = data["script"].replace("title: honest", "title: calm")
    found = divergence(path, data)
    assert found is not None and ": title: the bundle records 'honest', the replay gives 'calm'" in found


@pytest.mark.skipif(importlib.util.find_spec("shortfin_apps") is None, reason="needs shortfin")
def test_a_shortfin_bundle_claiming_no_violations_where_the_replay_finds_some_diverges(tmp_path):
    from kvviz.backends.registry import make_backend_factory
    from kvviz.core.demos import load_demo

    session = Session.from_scenario(load_demo("shortfin-b9-lookup-no-ref"),
                                    backend_factory=make_backend_factory("shortfin"))
    step = next(i for i in range(len(session)) if session.frame(i).violations)
    path = tmp_path / "b9.json"
    write_export(session, step, path)
    data = json.loads(path.read_text())
    assert open_bundle(path).divergence is None
    data["violations"] = []
    data["summary"] = data["summary"].split(" invariant violation(s)")[0].rsplit(" ", 1)[0] + " All invariants hold."
    found = divergence(tmp_path / "edited.json", data)
    assert found is not None and ": violations: the bundle records [], the replay gives [{" in found
    assert "also wrong: summary" in found


# -- versions: not derivable, checked for shape and reported -----------------------------------


def test_faked_versions_open_with_a_note_saying_what_recorded_them(bundle):
    data, path = bundle
    data["versions"].update(kvviz="99.0", kvcore="98.0")
    data["backend"]["version"] = "98.0"  # kvcore's version is recorded twice; both faked alike
    opened = open_bundle(write(path, data))
    assert opened.divergence is None
    assert opened.notes == ("recorded with kvviz '99.0', replayed with " + __import__("kvviz").__version__,
                            f"recorded with kvcore '98.0', replayed with {kvcore.__version__}")


def test_kvviz_open_prints_the_version_notes_and_still_exits_0(bundle):
    from click.testing import CliRunner

    from kvviz.cli import cli

    data, path = bundle
    data["versions"].update(kvviz="99.0")
    result = CliRunner().invoke(cli, ["open", str(write(path, data)), "--print"])
    assert result.exit_code == 0, result.output
    assert "kvviz: note: recorded with kvviz '99.0', replayed with" in result.stderr
    assert result.stderr.splitlines()[0].endswith("steps: every digest matches")


def test_a_divergence_says_when_another_version_recorded_the_bundle(bundle):
    data, path = bundle
    data["versions"]["kvcore"] = data["backend"]["version"] = "0.0.1"
    data["title"] = "edited"
    assert "(recorded with kvcore '0.0.1', replayed with" in divergence(path, data)


# -- malformed bundles: exit 2, one line -------------------------------------------------------


@pytest.mark.parametrize("edit,fragment", [
    (lambda d: d.update(colour="blue"), "the bundle has unknown field(s) 'colour'"),
    (lambda d: d["versions"].update(os="beos"), "field 'versions' has unknown field(s) 'os'"),
    (lambda d: d["config"].update(extra=4), "field 'config' has unknown field(s) 'extra'"),
    (lambda d: d["backend"].update(build="x"), "field 'backend' has unknown field(s) 'build'"),
    (lambda d: d["error"].update(trace="..."), "field 'error' has unknown field(s) 'trace'"),
    (lambda d: d["expects"][0].update(why="because"), "field 'expects[0]' has unknown field(s) 'why'"),
    (lambda d: d["snapshot"]["pages"][0].append("hidden"), "snapshot.pages[0]: 6 fields where kvcore.snapshot/1 has 5"),
    (lambda d: d["snapshot"]["nodes"][1].append(0), "snapshot.nodes[1]: 10 fields"),  # 9: node 1 has hits
    (lambda d: d["snapshot"]["allocations"][0].update(secret=1), "snapshot.allocations[0]: unknown field 'secret'"),
    (lambda d: d["snapshot"]["stats"].update(bonus=1), "snapshot.stats: unknown field 'bonus'"),
    (lambda d: d["snapshot"].update(note="x"), "snapshot: unknown field 'note'"),
    (lambda d: d.pop("expects"), "field 'expects' is missing"),
    (lambda d: d.pop("expect_count"), "field 'expect_count' is missing"),
    (lambda d: d.pop("summary"), "field 'summary' is missing"),
    (lambda d: d.update(versions="0.1"), "field 'versions' is missing or not a dict"),
    (lambda d: d["versions"].update(kvviz=1), "field 'versions.kvviz' is missing or not a str"),
    (lambda d: d["versions"].update(kvviz="9" * 5000), "field 'versions.kvviz' is 5000 characters"),
    (lambda d: d.update(steps="6"), "field 'steps' is missing or not a int"),
    (lambda d: d.update(op=5), "field 'op' is missing or not a str or null"),
    (lambda d: d.update(error="boom"), "field 'error' is missing or not a null or dict"),
    (lambda d: d["expects"][0].update(ok=1), "field 'expects[0].ok' is missing or not a bool"),
    (lambda d: d["violations"].append([1]), "field 'violations[0]' is not a dict"),
    (lambda d: d["digests"].append(7), "field 'digests[7]' is not a str"),
    (lambda d: d.update(title=None), "field 'title' is missing or not a str"),
])
def test_a_malformed_bundle_is_refused_with_one_line_and_exit_2(bundle, edit, fragment):
    data, path = bundle
    edit(data)
    with pytest.raises(BundleError, match=None) as raised:
        open_bundle(write(path, data))
    assert fragment in str(raised.value) and str(raised.value).startswith(f"{path}: ")
    code, stderr = kvviz_open(path)
    assert code == 2 and stderr.count("\n") == 1 and fragment in stderr


def test_a_bundle_recorded_on_shortfin_with_a_base_cache_script_is_refused_not_a_traceback(bundle):
    data, path = bundle
    data["backend"] = {"name": "shortfin", "version": "3.9.0"}
    data["script"] = data["script"].replace("cache trie", "cache base")
    code, stderr = kvviz_open(write(path, data))
    assert code == 2 and stderr.count("\n") == 1
    assert str(path) in stderr and "shortfin" in stderr


# -- the older schema -------------------------------------------------------------------------


def test_an_older_schema_without_expects_opens_with_every_field_it_has_verified(bundle):
    data, path = bundle
    assert OLDER_SCHEMAS == ("kvviz.bundle/2", "kvviz.bundle/1")
    data["schema"] = "kvviz.bundle/1"
    del data["expects"], data["expect_count"], data["substep"]
    assert divergence(path, data) is None
    data["violations"] = [{"invariant": 2, "message": "x", "pages": [], "nodes": [], "allocations": []}]
    assert ": violations:" in divergence(path, data)


def test_an_older_schema_has_no_expects_field(bundle):
    data, path = bundle
    data["schema"] = "kvviz.bundle/1"
    del data["substep"]
    with pytest.raises(BundleError, match="unknown field\\(s\\) 'expect_count', 'expects'"):
        open_bundle(write(path, data))
