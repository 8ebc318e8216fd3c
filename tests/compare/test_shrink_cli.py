# SPDX-License-Identifier: Apache-2.0
"""``kvviz shrink`` and ``kvviz fuzz`` at the command line: outputs, files, exit codes."""

from __future__ import annotations

import json
import sys

from click.testing import CliRunner

from kvviz.cli import cli
from kvviz.report.bundle import open_bundle
from kvviz.compare.failure import DIFF, first_failure
from kvviz.core.scenario import parse_scenario

from .helpers import require_shortfin

require_shortfin()


def kvviz(*args):
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_shrink_prints_a_minimal_scenario_that_parses_and_fails_as_the_demo_did(tmp_path):
    out, bundle = tmp_path / "min.kvs", tmp_path / "min.json"
    code, stdout, stderr = kvviz("shrink", "shortfin-b9-lookup-no-ref", "--diff", "-o", str(out),
                                 "--bundle", str(bundle), "--max-runs", "5000")
    assert code == 1, stderr
    assert "\r" not in stderr  # no progress bar when stderr is not a terminal
    printed = parse_scenario(stdout)  # the report lines are # comments: the whole output is a scenario
    assert stdout.startswith(out.read_text() + "\n# fails")  # -o holds the scenario, without the report
    assert "# fails kvcore vs shortfin (diff): the caches diverge first on outcome, after known issue B9" in stdout
    assert "# before: 7 ops," in stdout and "# after:  4 ops," in stdout  # the pool went with its filler
    assert f"# wrote {out}" in stdout and f"# wrote {bundle} (step 4, sub-step " in stdout
    demo_failure = first_failure(parse_scenario((tmp_path / "min.kvs").read_text()), DIFF).failure
    assert demo_failure.identity.cause == "B9" and first_failure(printed, DIFF).failure.identity == demo_failure.identity
    opened = open_bundle(bundle)
    assert opened.divergence is None and opened.step == 4 and opened.substep is not None
    assert opened.data["substep"]["count"] == len(opened.session.substeps(4))


def test_shrink_is_deterministic():
    first = kvviz("shrink", "bug-b4b-root-ref", "--backend", "shortfin", "--keep", "violation")
    assert first[0] == 1 and "invariant 2 broken, after known issue B4b" in first[1]
    assert kvviz("shrink", "bug-b4b-root-ref", "--backend", "shortfin", "--keep", "violation") == first


def test_a_scenario_that_does_not_fail_exits_0_and_says_so():
    code, stdout, stderr = kvviz("shrink", "lru")
    assert code == 0 and stdout == ""
    assert stderr.endswith("lru.kvs: does not fail on kvcore: nothing to shrink\n")


def test_bad_input_exits_2_with_one_line(tmp_path):
    bad = tmp_path / "bad.kvs"
    bad.write_text("this is not a scenario\n")
    scenario = tmp_path / "s.kvs"
    scenario.write_text("cache trie pages=2 tokens_per_page=2\nacquire a 1 2\nexpect free 9\n")
    for args, words in (
        (["shrink", str(bad)], f"{bad}:1:1: unknown op"),
        (["shrink", str(tmp_path / "none.kvs")], "no such file"),
        (["shrink", str(scenario), "--diff", "--backend", "kvcore"], "a diff compares kvcore with another backend"),
        (["shrink", str(scenario), "-o", str(scenario)], "refusing to overwrite an input"),
        (["shrink", str(scenario), "-o", str(tmp_path / "x.txt")], "is a .kvs file"),
        (["shrink", str(scenario), "--bundle", str(tmp_path / "x.kvs")], "is a .json file"),
        (["shrink", str(scenario), "--max-seconds", "0"], "--max-seconds 0"),
        (["shrink", str(tmp_path / "base.kvs")], "no such file"),
        (["fuzz", "--diff", "--backend", "kvcore"], "--diff --backend kvcore: a diff compares kvcore with another"),
        (["fuzz", "--out", str(scenario)], "is a file"),
        (["fuzz", "--kind", "hash", "--policy", "lfu"], "the hash cache takes lru only"),
        (["fuzz", "--diff", "--backend", "vllm", "--kind", "trie"], "a diff against vllm runs kvcore's hash design"),
        (["fuzz", "--backend", "shortfin", "--policy", "lfu", "--runs", "2"], "evicts by LRU only"),
    ):
        code, stdout, stderr = kvviz(*args)
        assert code == 2 and stderr.count("\n") == 1 and words in stderr, (args, stderr)
        assert stdout == ""
    assert scenario.read_text().endswith("expect free 9\n")  # never overwritten


def test_a_base_cache_cannot_be_diffed_and_says_where(tmp_path):
    base = tmp_path / "base.kvs"
    base.write_text("cache base pages=2 tokens_per_page=2\nacquire a 1 2 3 4 5\n")
    code, _, stderr = kvviz("shrink", str(base), "--diff")
    assert code == 2 and f"{base}:1:7: a diff compares kvcore's trie cache with shortfin's" in stderr


def test_a_missing_backend_gives_the_usual_install_message(monkeypatch):
    for name in [n for n in sys.modules if n.split(".")[0] in ("shortfin", "shortfin_apps")] + ["shortfin_apps"]:
        monkeypatch.setitem(sys.modules, name, None)  # as if shortfin were not installed
    monkeypatch.delitem(sys.modules, "kvviz.backends.shortfin_backend", raising=False)
    code, stdout, stderr = kvviz("shrink", "shortfin-b9-lookup-no-ref", "--backend", "shortfin")
    assert code == 2 and stdout == "" and stderr.count("\n") == 1
    assert "the shortfin backend needs shortfin 3.9.0" in stderr and "install them with: pip install" in stderr


def test_fuzz_prints_a_table_of_classes_and_writes_each_once(tmp_path):
    out = tmp_path / "found"
    code, stdout, stderr = kvviz("fuzz", "--backend", "shortfin", "--runs", "40", "--out", str(out))
    assert code == 1, stderr
    lines = stdout.splitlines()
    assert lines[0].startswith("kvviz fuzz on shortfin, seed 0: 40 runs of 40 ops,")
    assert lines[1].split() == ["class", "known", "count", "first", "run", "shrunk", "what", "fails"]
    rows = {line.split()[0]: line.split() for line in lines[2:] if not line.strip().startswith("wrote")}
    for name in ("B4b", "B9", "B10", "SF1", "SF2", "SF3"):
        assert rows[name][1] == "defect", stdout
        assert (out / f"{name}.kvs").is_file() and (out / f"{name}.json").is_file()
        assert open_bundle(out / f"{name}.json").divergence is None
    before = {p.name: p.read_text() for p in out.iterdir()}
    code, stdout, _ = kvviz("fuzz", "--backend", "shortfin", "--runs", "40", "--out", str(out))
    assert code == 1 and f"{out / 'B9.kvs'} exists: not overwritten" in stdout
    assert {p.name: p.read_text() for p in out.iterdir()} == before


def test_fuzz_on_kvcore_exits_0():
    code, stdout, _ = kvviz("fuzz", "--runs", "20", "--ops", "30", "--seed", "5")
    assert code == 0 and "20 passed, 0 failed, 0 classes" in stdout and "no failure" in stdout


def test_export_points_at_a_substep_and_open_returns_to_it(tmp_path):
    bundle, md = tmp_path / "b.json", tmp_path / "b.md"
    code, stdout, stderr = kvviz("export", "shortfin-b9-lookup-no-ref", "--step", "5", "--substep", "2",
                                 "-o", str(bundle))
    assert code == 0 and stdout == f"wrote {bundle} (step 5, sub-step 2)\n", stderr
    data = json.loads(bundle.read_text())
    assert data["schema"] == "kvviz.bundle/3" and data["substep"]["index"] == 1
    code, stdout, _ = kvviz("open", str(bundle), "--print")
    assert code == 0 and f"sub-step 2/{data['substep']['count']} {data['substep']['kind']}: " in stdout
    assert kvviz("export", "shortfin-b9-lookup-no-ref", "--step", "5", "--substep", "2", "-o", str(md))[0] == 0
    assert f"At sub-step 2 of {data['substep']['count']} ({data['substep']['kind']})" in md.read_text()


def test_export_refuses_a_substep_the_op_does_not_have(tmp_path):
    code, _, stderr = kvviz("export", "lru", "--step", "1", "--substep", "99", "-o", str(tmp_path / "x.json"))
    assert code == 2 and "sub-step 99 does not exist: step 1's op has sub-steps 1.." in stderr
    code, _, stderr = kvviz("export", "lru", "--step", "0", "--substep", "1", "-o", str(tmp_path / "x.json"))
    assert code == 2 and "step 0 is the initial state" in stderr
    assert not (tmp_path / "x.json").exists()


def test_a_bundle_whose_substep_was_edited_diverges(tmp_path):
    bundle = tmp_path / "b.json"
    assert kvviz("export", "lru", "--step", "2", "--substep", "1", "-o", str(bundle))[0] == 0
    data = json.loads(bundle.read_text())
    data["substep"]["index"] = data["substep"]["count"] - 1  # another moment of the same op
    bundle.write_text(json.dumps(data))
    code, _, stderr = kvviz("open", str(bundle), "--print")
    assert code == 1 and "substep" in stderr
    data["substep"]["index"] = 10_000  # an index past the op's sub-steps: bounded before use
    bundle.write_text(json.dumps(data))
    code, _, stderr = kvviz("open", str(bundle), "--print")
    assert code == 2 and stderr.count("\n") == 1 and "field 'substep': sub-step 10000 does not exist" in stderr


def test_shrink_checks_every_output_can_be_written_before_it_starts(tmp_path, monkeypatch):
    from kvviz.compare import shrink as shrink_module

    def no_work(*_args, **_kwargs):
        raise AssertionError("shrank before checking the outputs")

    monkeypatch.setattr(shrink_module, "shrink", no_work)
    scenario = tmp_path / "s.kvs"
    scenario.write_text("cache trie pages=2 tokens_per_page=2\nacquire a 1 2\nexpect free 9\n")
    ok, missing = tmp_path / "ok.kvs", tmp_path / "no-such-folder" / "b.json"
    not_a_folder = scenario / "b.json"  # its folder is a file
    for args in (["-o", str(ok), "--bundle", str(missing)], ["-o", str(ok), "--bundle", str(not_a_folder)],
                 ["-o", str(tmp_path / "no-such-folder" / "m.kvs")]):
        code, stdout, stderr = kvviz("shrink", str(scenario), *args)
        assert code == 2 and stderr.count("\n") == 1 and "cannot be written" in stderr, (args, stderr)
        assert stdout == "" and not ok.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.kvs"]  # no probe left behind


def test_the_progress_bar_is_drawn_on_stderr_only_when_it_is_a_terminal(monkeypatch):
    import io

    from kvviz.compare.shrink_command import Progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    for stream, drawn in ((io.StringIO(), False), (Terminal(), True)):
        monkeypatch.setattr(sys, "stderr", stream)
        progress = Progress("shrinking")
        progress("[##......] 3 of 9 ops left, 12 runs")
        progress.done()
        assert ("\r" in stream.getvalue()) == drawn
        assert ("3 of 9 ops left" in stream.getvalue()) == drawn


def test_diff_with_backend_shortfin_is_diff_alone_as_kvviz_diff_reads_it():
    alone = kvviz("shrink", "shortfin-b9-lookup-no-ref", "--diff", "--max-runs", "300")
    named = kvviz("shrink", "shortfin-b9-lookup-no-ref", "--diff", "--backend", "shortfin", "--max-runs", "300")
    assert alone[0] == 1 and "# fails kvcore vs shortfin (diff)" in alone[1]
    assert named == alone
