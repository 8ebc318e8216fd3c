# SPDX-License-Identifier: Apache-2.0
"""Bad input at the command line: broken script files and broken bundles give one clear line
naming the place, exit code 2 (1 for a bundle whose replay diverges), no traceback, and
nothing written. A script with several mistakes lists the others after that line, each on a
located line of its own."""

import json
import os
import random
import re
import subprocess
import sys

import pytest
from click.testing import CliRunner

import kvviz.report.bundle as bundle_module
from kvviz.cli import cli
from kvviz.core.limits import MAX_SCENARIO_ERRORS
from kvviz.core.scenario import ScenarioError, parse_scenario_file

# Step 4 evicts a's second page; step 5 fails.
GOOD = b"""\
title: good
cache trie pages=3 tokens_per_page=2
acquire a 1..4
publish a
release a
acquire b 1 2 5 6 7 8
acquire c 1..40
expect fail alloc
"""

# name -> (file content, line:column of the error, a fragment of the message)
BROKEN = {
    "malformed-cache-line": (b"cache trie pages=zero\n", "1:18", "bad pages 'zero'"),
    "truncated-in-quoted-words": (b'cache trie pages=8\nacquire r1 "you are', "2:12", "unterminated quoted words"),
    "truncated-in-a-range": (b"acquire r1 1..", "1:12", "bad token '1..'"),
    "truncated-in-a-keyword": (b"acquire r1 1..4\nrel", "2:1", "unknown op 'rel'; did you mean 'release'?"),
    "truncated-before-the-name": (b"acquire r1 1..4\nrelease", "2:8", "missing allocation name"),
    "unknown-op": (b"acquire r1 1..4\nevict r1\n", "2:1", "unknown op 'evict'"),
    "unknown-expect": (b"acquire a 1..4\nexpect frees 3\n", "2:8", "unknown expect 'frees'; did you mean 'free'?"),
    "bad-token": (b"acquire r1 1..x\n", "1:12", "bad token '1..x'"),
    "negative-token": (b"acquire r1 -3\n", "1:12", "bad token '-3'"),
    "descending-range": (b"acquire r1 8..1\n", "1:12", "descending range '8..1'"),
    "huge-range": (b"acquire r1 0..99999999999\n", "1:12", "too many tokens"),
    "huge-page-count": (b"cache trie pages=99999999999999999999999\n", "1:18", "is too large"),
    "huge-number": (b"acquire r1 " + b"9" * 5000 + b"\n", "1:12", "is too large"),
    "binary-garbage": (bytes(range(256)) * 4, "2:118", "bytes that are not UTF-8"),
    "random-bytes": (random.Random(1).randbytes(4000), None, "not UTF-8"),
    "nul-in-text": (b"acquire r1 1\x00 2\n", "1:13", "NUL character"),
    "non-utf8": (b"acquire r1 1..4\nacquire r2 \xff\xfe 3\n", "2:12", "bytes that are not UTF-8 (b'\\xff')"),
    "latin-1-text": ("title: caf\u00e9\n".encode("latin-1"), "1:11", "not UTF-8"),
    "unknown-allocation": (b"acquire a 1..4\npublish ghost\n", "2:9", "unknown allocation 'ghost'"),
    "second-acquire-of-a-live-name": (b"acquire a 1..4\nacquire a 5..8\n", "2:9", "'a' is already live"),
    "expect-before-any-op": (b"expect free 3\n", "1:1", "expect before the first op"),
    "narration-without-an-op": (b"acquire a 1\n> trailing\n", "2:1", "narration with no op after it"),
    "empty-extra": (b"acquire a 1 extra=\n", "1:19", "missing extra"),
}


def kvviz(*args: str):
    """Run the CLI in-process; stdout and stderr stay apart."""
    return CliRunner().invoke(cli, list(args), prog_name="kvviz", catch_exceptions=True)


def assert_bad_input(result, *fragments: str, code: int = 2) -> str:
    """Exit ``code``, no escaped exception (so no traceback), one line on stderr holding every
    fragment; returns that line."""
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0]
    return lines[0]


@pytest.fixture
def broken(request, tmp_path):
    content, place, fragment = BROKEN[request.param]
    path = tmp_path / f"{request.param}.kvs"
    path.write_bytes(content)
    return path, place, fragment


# -- script files -------------------------------------------------------------------------------


@pytest.mark.parametrize("broken", list(BROKEN), indirect=True)
@pytest.mark.parametrize("command", [["run", "--print"], ["check"]])
def test_a_broken_script_file_exits_2_with_one_line_naming_file_line_and_column(command, broken):
    path, place, fragment = broken
    line = assert_bad_input(kvviz(*command, str(path)), fragment)
    if place is not None:
        assert line.startswith(f"kvviz: error: {path}:{place}: ")
    else:
        assert re.match(rf"kvviz: error: {re.escape(str(path))}:\d+:\d+: ", line)


@pytest.mark.parametrize("broken", list(BROKEN), indirect=True)
@pytest.mark.parametrize("suffix", [".json", ".md", ".txt"])
def test_exporting_a_broken_script_file_exits_2_and_writes_nothing(suffix, broken, tmp_path):
    path, _, fragment = broken
    out = tmp_path / f"out{suffix}"
    before = set(tmp_path.iterdir())
    assert_bad_input(kvviz("export", str(path), "-o", str(out)), fragment, f"{path}:")
    assert not out.exists()
    assert set(tmp_path.iterdir()) == before


# Three mistakes on lines 2, 3 and 4; the parser keeps going after each.
THREE_MISTAKES = b"""\
cache trie pages=4 tokens_per_page=4
acquire r1 1..x
publish
expect frob 3
release r1
"""


@pytest.mark.parametrize("command", [["run", "{path}", "--print"], ["check", "{path}"],
                                     ["export", "{path}", "-o", "{out}"]], ids=lambda c: c[0])
def test_a_script_with_three_mistakes_names_all_three_first_as_the_error_line(command, tmp_path):
    """The first line is the error as before; each further problem follows on a located line
    of its own, so one run shows everything to fix."""
    path = tmp_path / "three.kvs"
    path.write_bytes(THREE_MISTAKES)
    out = tmp_path / "out.json"
    result = kvviz(*[a.format(path=path, out=out) for a in command])
    assert result.exit_code == 2
    assert (result.stdout, "Traceback" in result.output) == ("", False)
    lines = result.stderr.splitlines()
    assert len(lines) == 3, result.stderr
    assert lines[0].startswith(f"kvviz: error: {path}:2:12: bad token '1..x'")
    assert lines[1].startswith(f"{path}:3:8: missing allocation name (expected: ")
    assert lines[2].startswith(f"{path}:4:8: unknown expect 'frob' (expected: ")
    with pytest.raises(ScenarioError) as raised:
        parse_scenario_file(path)
    assert result.stderr == f"kvviz: error: {raised.value.report()}\n"
    assert not out.exists()


def test_a_script_with_too_many_mistakes_lists_the_first_ones_and_counts_the_rest(tmp_path):
    path = tmp_path / "many.kvs"
    mistakes = MAX_SCENARIO_ERRORS + 5
    path.write_bytes(b"cache trie pages=4\n" + b"evict r1\n" * mistakes)
    result = kvviz("check", str(path))
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert lines[0].startswith(f"kvviz: error: {path}:2:1: unknown op 'evict'")
    assert [line.split(": ", 1)[0] for line in lines[1:MAX_SCENARIO_ERRORS]] == [
        f"{path}:{n}:1" for n in range(3, MAX_SCENARIO_ERRORS + 2)]
    assert lines[MAX_SCENARIO_ERRORS:] == ["\u2026 and 5 more errors"]


def test_check_refuses_every_file_before_running_any_when_one_is_broken(tmp_path):
    good = tmp_path / "good.kvs"
    good.write_bytes(GOOD)
    bad = tmp_path / "bad.kvs"
    bad.write_bytes(b"acquire a 1..4\nevict a\n")
    result = kvviz("check", str(good), str(bad))
    assert_bad_input(result, f"{bad}:2:1")
    assert "ok" not in result.stdout


def test_a_missing_script_file_exits_2_naming_it(tmp_path):
    path = tmp_path / "missing.kvs"
    for command in (["run", "--print"], ["check"]):
        assert_bad_input(kvviz(*command, str(path)), f"{path}: no such file")
    out = tmp_path / "out.json"
    assert_bad_input(kvviz("export", str(path), "-o", str(out)), f"{path}: no such file")
    assert not out.exists()


def test_a_step_outside_the_script_exits_2_and_writes_nothing(tmp_path):
    good = tmp_path / "good.kvs"
    good.write_bytes(GOOD)
    out = tmp_path / "out.md"
    assert_bad_input(kvviz("export", str(good), "--step", "99", "-o", str(out)),
                     "step 99 does not exist: the scenario has steps 0..5")
    assert not out.exists()
    assert_bad_input(kvviz("run", str(good), "--print", "--step", "-1"), "step -1 does not exist")


@pytest.mark.parametrize("name", ["out.xyz", "out", "out.json.gz"])
def test_an_unknown_export_suffix_exits_2_and_writes_nothing(name, tmp_path):
    good = tmp_path / "good.kvs"
    good.write_bytes(GOOD)
    before = set(tmp_path.iterdir())
    assert_bad_input(kvviz("export", str(good), "-o", str(tmp_path / name)), "unknown export format",
                     ".json, .md, .txt, .svg")
    assert set(tmp_path.iterdir()) == before


def test_an_export_into_a_missing_folder_exits_2_and_leaves_nothing_behind(tmp_path):
    good = tmp_path / "good.kvs"
    good.write_bytes(GOOD)
    out = tmp_path / "no" / "such" / "folder" / "out.json"
    assert_bad_input(kvviz("export", str(good), "-o", str(out)), f"{out}: cannot write the export")
    assert not (tmp_path / "no").exists()


def test_binary_garbage_through_python_m_kvviz_prints_no_traceback(tmp_path):
    path = tmp_path / "garbage.kvs"
    path.write_bytes(random.Random(7).randbytes(10_000))
    out = tmp_path / "out.json"
    for command in (["run", "--print", str(path)], ["check", str(path)], ["export", str(path), "-o", str(out)]):
        result = subprocess.run([sys.executable, "-m", "kvviz", *command], capture_output=True, text=True,
                                check=False)
        assert result.returncode == 2
        assert "Traceback" not in result.stderr + result.stdout
        assert re.fullmatch(rf"kvviz: error: {re.escape(str(path))}:\d+:\d+: [^\n]*\n", result.stderr)
    assert not out.exists()


# -- unknown names -------------------------------------------------------------------------------


def test_an_unknown_demo_name_suggests_close_ones():
    line = assert_bad_input(kvviz("demo", "lur", "--print"), "no demo named 'lur'")
    assert "did you mean" in line and "lru" in line
    line = assert_bad_input(kvviz("demo", "prefix-shraing", "--print"), "did you mean 'prefix-sharing'")


def test_an_unknown_demo_name_without_close_ones_points_to_the_list():
    assert_bad_input(kvviz("demo", "zzzzzzzz", "--print"), "no demo named 'zzzzzzzz'", "kvviz demo --list")


def test_exporting_an_unknown_demo_name_exits_2_and_writes_nothing(tmp_path):
    out = tmp_path / "out.json"
    assert_bad_input(kvviz("export", "lur", "-o", str(out)), "no demo named 'lur'", "lru")
    assert not out.exists()


def test_an_unknown_help_topic_exits_2():
    assert_bad_input(kvviz("help", "bundles"), "no help topic 'bundles'")


# -- bundles ----------------------------------------------------------------------------------


@pytest.fixture
def bundle(tmp_path):
    """A good bundle of the GOOD script at its eviction step (4), as a dict, and where to write it."""
    script = tmp_path / "good.kvs"
    script.write_bytes(GOOD)
    path = tmp_path / "good.json"
    result = kvviz("export", str(script), "--step", "4", "-o", str(path))
    assert result.exit_code == 0, result.output
    return json.loads(path.read_text(encoding="utf-8")), tmp_path / "edited.json"


def write_json(path, data) -> str:
    path.write_text(json.dumps(data, sort_keys=True, indent=2), encoding="utf-8")
    return str(path)


def test_a_good_bundle_opens_and_every_digest_matches(bundle):
    data, path = bundle
    result = kvviz("open", write_json(path, data), "--print")
    assert result.exit_code == 0, result.output
    assert "replayed 5 steps: every digest matches" in result.stderr
    assert "step 4/5" in result.stdout
    assert "evicted page 1 [3 4]" in result.stdout


@pytest.mark.parametrize("schema,fragment", [
    ("kvviz.bundle/99", f"schema is 'kvviz.bundle/99', expected {bundle_module.SCHEMA!r}"),  # a later version
    ("kvcore.snapshot/1", "schema is 'kvcore.snapshot/1'"),
    (None, "schema is None"),
    ("x" * 10_000, "schema is 'xxxx"),
])
def test_a_bundle_of_another_schema_or_version_exits_2(bundle, schema, fragment):
    data, path = bundle
    data["schema"] = schema
    line = assert_bad_input(kvviz("open", write_json(path, data)), f"{path}: ", fragment)
    assert len(line) < 300


def test_a_bundle_with_an_edited_digest_reports_the_divergence_and_exits_1(bundle):
    data, path = bundle
    data["digests"][3] = "0" * 64
    result = kvviz("open", write_json(path, data), "--print")
    assert_bad_input(result, "replay diverges from the bundle: step 3 diverges", "bundle recorded 000000000000",
                     code=1)


def test_a_bundle_with_a_missing_digest_reports_the_divergence_and_exits_1(bundle):
    data, path = bundle
    del data["digests"][-1]
    assert_bad_input(kvviz("open", write_json(path, data), "--print"),
                     "the bundle lists 5 digests but the script has 6 frames", code=1)


def test_a_bundle_with_an_edited_snapshot_reports_the_divergence_and_exits_1(bundle):
    data, path = bundle
    data["snapshot"]["nodes"][1][4] += 1  # a node's ref
    assert_bad_input(kvviz("open", write_json(path, data), "--print"),
                     "the bundled snapshot differs from the replayed state at step 4", code=1)


def test_a_bundle_with_an_edited_script_reports_the_divergence_and_exits_1(bundle):
    data, path = bundle
    data["script"] = data["script"].replace("acquire b 1 2 5..8", "acquire b 1 2 5..7")
    assert "acquire b 1 2 5..7" in data["script"]
    assert_bad_input(kvviz("open", write_json(path, data), "--print"), "step 4 diverges", code=1)


@pytest.mark.parametrize("edit,fragment", [
    (lambda d: d.pop("script"), "field 'script' is missing or not a str"),
    (lambda d: d.update(step="5"), "field 'step' is missing or not a int"),
    (lambda d: d.update(step=True), "field 'step' is missing"),
    (lambda d: d.update(digests={}), "field 'digests'"),
    (lambda d: d.update(step=99), "step 99 is outside the script's 5 steps"),
    (lambda d: d.update(step=-1), "step -1 is outside"),
    (lambda d: d.update(script="acquire a 1\nevict a\n"), "the bundled script does not parse"),
    (lambda d: d["snapshot"].update(pages="all of them"), "the bundled snapshot is malformed: pages"),
    (lambda d: d["snapshot"]["pages"][0].__setitem__(4, "x"), "pages[0][4]: expected an integer"),
])
def test_a_bundle_with_missing_or_mistyped_fields_exits_2(bundle, edit, fragment):
    data, path = bundle
    edit(data)
    assert_bad_input(kvviz("open", write_json(path, data)), f"{path}: ", fragment)


@pytest.mark.parametrize("content,fragment", [
    pytest.param(None, "not valid JSON", id="truncated"),  # the good bundle, cut short
    pytest.param(b"", "not valid JSON", id="empty"),
    pytest.param(b"this is not json", ":1:1: not valid JSON", id="prose"),
    pytest.param(b"[1, 2, 3]", f"expected a JSON object with schema {bundle_module.SCHEMA!r}, got list", id="array"),
    pytest.param(b"\"a string\"", "got str", id="string"),
    pytest.param(bytes(range(256)), "not UTF-8 text at byte 128", id="binary"),
    pytest.param(b"[" * 100_000 + b"]" * 100_000, "too deeply nested", id="nested-100000-deep"),
    pytest.param(b'{"schema": ' + b"9" * 5000 + b"}", ":1:12: an integer of 5,000 digits", id="5000-digit-number"),
])
def test_a_bundle_that_is_not_json_or_not_an_object_exits_2(bundle, content, fragment):
    data, path = bundle
    if content is None:
        content = json.dumps(data).encode()[:400]
    path.write_bytes(content)
    assert_bad_input(kvviz("open", str(path)), f"{path}", fragment)


def test_an_oversized_bundle_exits_2_without_reading_it(bundle, monkeypatch):
    data, path = bundle
    write_json(path, data)
    monkeypatch.setattr(bundle_module, "MAX_BUNDLE_BYTES", 1000)
    assert_bad_input(kvviz("open", str(path)), f"{path}: ", "is too large for a bundle (limit 1000)")


def test_a_missing_bundle_exits_2(tmp_path):
    assert_bad_input(kvviz("open", str(tmp_path / "nope.json")), "nope.json: cannot read")


# -- files that are not regular files -------------------------------------------------------------


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "pipe.kvs"
    os.mkfifo(path)
    return path


def test_open_refuses_a_fifo_instead_of_blocking_on_it(fifo):
    """A real process: reading a FIFO nobody writes to would block this test forever."""
    result = subprocess.run([sys.executable, "-m", "kvviz", "open", str(fifo), "--print"], capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert result.stderr == f"kvviz: error: {fifo}: is a FIFO (named pipe), not a regular file (expected a .json " \
                            f"bundle)\n"


# `open` on a FIFO is tested in a process above: before the fix it blocks forever.
@pytest.mark.parametrize(("command", "special"), [
    pytest.param(command, special, id=f"{special}-{command[0]}")
    for command in (["run", "--print"], ["check"], ["export", "-o", "{out}"], ["diff"], ["open"])
    for special in ("fifo", "device", "folder") if (command[0], special) != ("open", "fifo")])
def test_every_command_refuses_a_file_that_is_not_a_regular_file(command, special, fifo, tmp_path):
    path = {"fifo": str(fifo), "device": os.devnull, "folder": str(tmp_path)}[special]
    out = tmp_path / "out.md"
    args = [command[0], path, *[a.format(out=out) for a in command[1:]]]
    message = {"fifo": f"{path}: is a FIFO (named pipe), not a regular file (expected a ",
               "device": f"{path}: is a device, not a regular file (expected a ",
               "folder": f"File '{path}' is a directory"}[special]  # click's own check, in one line
    assert_bad_input(kvviz(*args), message)
    assert not out.exists()


# -- an export never replaces its input ------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".md", ".txt", ".json"])
@pytest.mark.parametrize("spelling", ["same", "symlink", "dotdot", "relative"])
def test_an_export_onto_its_own_input_exits_2_and_leaves_the_input_alone(suffix, spelling, tmp_path, monkeypatch):
    script = tmp_path / f"s{suffix}"  # a scenario file may have any name: `export s.md -o s.md`
    script.write_bytes(GOOD)
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path)
    if spelling == "symlink":
        output = tmp_path / f"link{suffix}"
        output.symlink_to(script)
    else:
        output = {"same": script, "dotdot": tmp_path / "sub" / ".." / script.name,
                  "relative": script.name}[spelling]
    before = set(tmp_path.iterdir())
    assert_bad_input(kvviz("export", str(script), "-o", str(output)), "refusing to overwrite an input")
    assert script.read_bytes() == GOOD
    assert set(tmp_path.iterdir()) == before


# -- The one atomic writer replaces regular files only --------------------------

TRACE_LINES = ('{"timestamp": 0, "input_length": 1500, "output_length": 5, "hash_ids": [1, 2, 3]}\n'
               '{"timestamp": 10, "input_length": 1300, "output_length": 5, "hash_ids": [1, 2, 4]}\n')


def _special_target(tmp_path, what: str, name: str = "target"):
    """A path that exists and is not a regular file: (path, how to tell it is untouched)."""
    import stat

    path = tmp_path / name
    if what == "fifo":
        os.mkfifo(path)
        return path, lambda: stat.S_ISFIFO(os.lstat(path).st_mode)
    if what == "device":
        try:
            os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 3))  # a second /dev/null
        except PermissionError:
            pytest.skip("creating a device node needs root (CAP_MKNOD)")
        return path, lambda: stat.S_ISCHR(os.lstat(path).st_mode)
    if what == "symlink":
        real = tmp_path / "real-file"
        real.write_text("precious\n")
        path.symlink_to(real)
        return path, lambda: os.path.islink(path) and real.read_text() == "precious\n"
    if what == "dangling-symlink":
        path.symlink_to(tmp_path / "nowhere")
        return path, lambda: os.path.islink(path) and not (tmp_path / "nowhere").exists()
    raise AssertionError(what)


SPECIAL = ["fifo", "device", "symlink", "dangling-symlink"]
WORDS = {"fifo": "a FIFO (named pipe)", "device": "a device", "symlink": "a symbolic link",
         "dangling-symlink": "a symbolic link"}


@pytest.mark.parametrize("what", SPECIAL)
@pytest.mark.parametrize("writer", ["export .md", "export .json", "export .svg", "quiz --save", "trace --to-kvs"])
def test_every_command_that_writes_refuses_a_target_that_is_not_a_regular_file(writer, what, tmp_path):
    suffix = writer.split()[-1] if writer.startswith("export") else ".kvs"  # the suffix picks the format
    target, untouched = _special_target(tmp_path, what, f"out{suffix}")
    if writer.startswith("export"):
        result = kvviz("export", "lru", "-o", str(target))
    elif writer == "quiz --save":
        result = kvviz("quiz", "--random", "--seed", "3", "--save", str(target), "--plain")
    else:
        trace = tmp_path / "t.jsonl"
        trace.write_text(TRACE_LINES)
        result = kvviz("trace", str(trace), "--to-kvs", str(target))
    line = assert_bad_input(result, str(target), WORDS[what], "not a regular file")
    assert "wrote" not in result.stdout
    assert os.path.lexists(target) and untouched(), f"{writer} replaced the {what}: {line}"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".part")] == []


@pytest.mark.parametrize("what", SPECIAL)
def test_the_writer_the_ui_saves_with_refuses_special_files_as_an_os_error(what, tmp_path):
    from kvviz.report.atomic import NotARegularFile, write_text_atomic

    target, untouched = _special_target(tmp_path, what)
    with pytest.raises(OSError) as raised:
        write_text_atomic(target, "acquire a 1\n")
    assert isinstance(raised.value, (NotARegularFile, ValueError))
    assert WORDS[what] in str(raised.value) and untouched()


def test_the_ui_save_of_the_script_refuses_a_fifo_and_says_why(tmp_path):
    from kvviz.core.session import Session
    from kvviz.core.demos import load_demo
    from kvviz.explore.app import make_app

    target, untouched = _special_target(tmp_path, "fifo", "saved.kvs")  # with its suffix: kept as named
    app = make_app(Session.from_scenario(load_demo("lru")), 0)
    with pytest.raises(OSError, match="FIFO"):
        app.save_script(target)
    assert untouched()


def test_a_regular_file_and_a_missing_one_are_still_written(tmp_path):
    existing = tmp_path / "old.md"
    existing.write_text("old\n")
    for path in (existing, tmp_path / "new.md"):
        result = kvviz("export", "lru", "-o", str(path))
        assert result.exit_code == 0, result.output
        assert path.read_text(encoding="utf-8").startswith("#")


RECORDING = "../shared/data/kv-events/vllm-0.33.0-conversation-400.jsonl"


@pytest.mark.parametrize("kind, make, command", [
    ("a Mooncake request trace", lambda tmp: _write(tmp / "t.jsonl", '{"timestamp": 0, "input_length": 9, '
                                                     '"output_length": 1, "hash_ids": [0]}\n' * 20), "kvviz trace"),
    ("a recording of KV events", lambda tmp: _write(tmp / "r.jsonl", open(RECORDING).read(4000).rsplit("\n", 1)[0]),
     "kvviz watch --replay-file"),
    ("a kvviz bundle", lambda tmp: _bundle(tmp / "b.json"), "kvviz open"),
])
def test_a_trace_recording_or_bundle_given_as_a_scenario_is_named_with_its_command_in_one_line(tmp_path, kind, make,
                                                                                               command):
    path = make(tmp_path)
    for args in (["run", str(path)], ["check", str(path)], ["export", str(path), "-o", str(tmp_path / "x.md")]):
        result = CliRunner().invoke(cli, args, prog_name="kvviz")
        assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.stderr
        assert result.stderr.startswith(f"kvviz: error: {path}:1:1: {kind}"), result.stderr
        assert result.stderr.endswith(f", not a .kvs scenario: read it with {command} {path}\n"), result.stderr


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def _bundle(path):
    assert CliRunner().invoke(cli, ["export", "lru", "--step", "3", "-o", str(path)]).exit_code == 0
    return path


def test_every_misspelt_name_gets_the_same_did_you_mean(tmp_path):
    scenario = tmp_path / "typo.kvs"
    scenario.write_text("cache trie pages=4 tokens_per_page=2\nrelase a\n", encoding="utf-8")
    lines = [CliRunner().invoke(cli, args, prog_name="kvviz").stderr for args in (
        ["run", str(scenario), "--print"], ["demo", "lur", "--print"],
        ["compare", "lru", "--right", "trie:lruu", "--print"])]
    for line, name in zip(lines, ("release", "lru", "lru")):
        assert re.search(rf"; did you mean (?:'[\w-]+', )*'{name}'(?: or '[\w-]+')?\?", line), line
