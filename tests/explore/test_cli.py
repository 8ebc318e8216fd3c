# SPDX-License-Identifier: Apache-2.0
"""The `kvviz` command line: demos, run, check, export, open and help."""

import json
import re
import subprocess
import sys

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from kvviz.cli import cli
from kvviz.core.demos import demo_names, load_demo
from kvviz.core.scenario import SCENARIO_HELP

STORY = """\
title: a short story
description: one request publishes, another reuses its page.
cache trie pages=4 tokens_per_page=4
> r1 arrives.
acquire r1 1..8
expect free 2
publish r1
expect cached 2
> r2 shares the first page.
acquire r2 1..4 9
expect hit r2 4
release r1
"""

# The same story with every expect tagged as true of both kinds: checked on --base too (an
# untagged expect is written for the header's kind only, and left out on another).
BOTH_KINDS = re.sub(r"^expect ", "[trie base] expect ", STORY, flags=re.MULTILINE)

needs_lru = pytest.mark.skipif("lru" not in demo_names(), reason="the lru demo is not shipped yet")


def kvviz(*args: str):
    return CliRunner().invoke(cli, list(args), prog_name="kvviz", catch_exceptions=False)


@pytest.fixture
def story(tmp_path):
    path = tmp_path / "story.kvs"
    path.write_text(STORY, encoding="utf-8")
    return path


def step_headers(output: str) -> list[str]:
    return re.findall(r"^step \d+/\d+", output, flags=re.MULTILINE)


# -- demo ------------------------------------------------------------------------------------------


def demo_lines(output: str) -> list[str]:
    """The listing's demo lines (indented under their section headings)."""
    return [line.strip() for line in output.splitlines() if line.startswith("  ")]


def test_demo_list_shows_every_demo_with_its_title():
    result = kvviz("demo", "--list")
    assert result.exit_code == 0
    lines = demo_lines(result.stdout)
    assert [line.split()[0] for line in lines] == demo_names()
    for name, line in zip(demo_names(), lines):
        assert line.split(None, 1)[1] == load_demo(name).title


def test_the_demos_are_listed_as_a_course_lessons_in_teaching_order_then_the_museum():
    from kvviz.core.demos import LESSONS, is_lesson

    names = demo_names()
    lessons = [n for n in names if is_lesson(n)]
    assert names[:len(lessons)] == lessons  # no exhibit before a lesson
    assert [n for n in lessons if n in LESSONS] == [n for n in LESSONS if n in names]
    assert lessons[0] == "prefix-sharing"
    museum = names[len(lessons):]
    assert all(n.startswith(("bug-", "shortfin-", "sglang-")) for n in museum)
    assert museum.index("bug-b2-parent-leaf") < museum.index("bug-b10-zero-page-ref")  # natural order
    headings = [line for line in kvviz("demo").stdout.splitlines() if not line.startswith("  ")]
    assert headings[0] == "Lessons, in teaching order (start here: kvviz demo prefix-sharing):"
    assert headings[1].startswith("Bug museum:")


def test_demo_path_prints_where_the_installed_demo_file_is():
    from kvviz.core.demos import demo_path

    result = kvviz("demo", "--path", "lru")
    assert (result.exit_code, result.stdout) == (0, f"{demo_path('lru')}\n")
    assert load_demo("lru").source == demo_path("lru").read_text(encoding="utf-8")


def test_demo_path_of_an_unknown_demo_exits_2():
    result = CliRunner().invoke(cli, ["demo", "--path", "lur"], prog_name="kvviz")
    assert result.exit_code == 2
    assert "no demo named 'lur'" in result.stderr


def test_demo_without_a_name_prints_the_same_list():
    assert kvviz("demo").stdout == kvviz("demo", "--list").stdout


@needs_lru
def test_demo_print_shows_every_step_of_the_demo_with_its_narration():
    result = kvviz("demo", "lru", "--print")
    assert result.exit_code == 0
    steps = len(load_demo("lru").steps)
    assert step_headers(result.stdout) == [f"step {i}/{steps}" for i in range(steps + 1)]
    assert load_demo("lru").title in result.stdout


@needs_lru
def test_demo_print_with_a_step_shows_only_that_step():
    result = kvviz("demo", "lru", "--print", "--step", "2")
    assert result.exit_code == 0
    assert step_headers(result.stdout) == [f"step 2/{len(load_demo('lru').steps)}"]


# -- run -------------------------------------------------------------------------------------------


def test_run_print_shows_the_title_description_and_every_step(story):
    result = kvviz("run", str(story), "--print")
    assert result.exit_code == 0
    assert step_headers(result.stdout) == [f"step {i}/4" for i in range(5)]
    assert "a short story" in result.stdout
    assert "one request publishes, another reuses its page." in result.stdout
    assert "r2 shares the first page." in result.stdout
    assert "expect hit r2 4: ok" in result.stdout


@pytest.mark.parametrize("step", [0, 3, 4])
def test_run_print_with_a_step_shows_only_that_step(story, step):
    result = kvviz("run", str(story), "--print", "--step", str(step))
    assert result.exit_code == 0
    assert step_headers(result.stdout) == [f"step {step}/4"]


def test_run_print_step_shows_the_trie_pool_allocations_and_narration(story):
    output = kvviz("run", str(story), "--print", "--step", "3").stdout
    assert "step 3/4  acquire r2 1..4 9" in output
    assert "acquire r2: matched 1 of 1 full page (4 of 5 tokens)" in output
    assert "[1 2 3 4] page 0 ref 2" in output and "*touched" in output
    assert "clock 3 | free 1 | cached 2 (evictable 0) | owned 1" in output
    assert re.search(r"^r2\s+│ 1 2 3 4 9\s+│ 0\* \(2\)\s+│ 1\s+│ 4", output, flags=re.MULTILINE)  # 0* shared


def test_run_base_overrides_the_cache_kind_of_the_file(tmp_path):
    path = tmp_path / "both.kvs"
    path.write_text(BOTH_KINDS, encoding="utf-8")
    output = kvviz("run", str(path), "--print", "--step", "3", "--base").stdout
    assert "(base cache: no trie, nothing is shared)" in output
    assert "no sharing in the base cache" in output
    assert "expect hit r2 4: expected hit 4, got hit 0" in output


@needs_lru
def test_run_and_check_take_a_demo_name():
    from kvviz.core.demos import demo_path

    printed = kvviz("run", "lru", "--print", "--step", "2")
    assert printed.stdout == kvviz("demo", "lru", "--print", "--step", "2").stdout
    checked = kvviz("check", "lru")
    assert checked.exit_code == 0
    assert checked.stdout.startswith(f"ok   {demo_path('lru')}: {len(load_demo('lru').steps)} steps")


def test_a_file_wins_over_a_demo_of_the_same_name(tmp_path, monkeypatch):
    (tmp_path / "lru").write_text(STORY, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert "a short story" in kvviz("run", "lru", "--print").stdout
    assert kvviz("check", "lru").stdout == "ok   lru: 4 steps, 3 expects checked, invariants hold\n"


def test_print_of_a_session_whose_expects_fail_says_so_and_exits_1(story, tmp_path):
    wrong = tmp_path / "wrong.kvs"
    wrong.write_text(STORY.replace("expect hit r2 4", "expect hit r2 8"), encoding="utf-8")
    result = kvviz("run", str(wrong), "--print")
    assert result.exit_code == 1
    assert "expect hit r2 8: expected hit 8, got hit 4" in result.stdout
    assert result.stderr == "kvviz: check failed: 1 expect failed (step 3)\n"


def test_print_on_another_cache_kind_fails_on_the_expects_tagged_for_it(tmp_path):
    path = tmp_path / "both.kvs"
    path.write_text(BOTH_KINDS, encoding="utf-8")
    result = kvviz("run", str(path), "--print", "--base")
    assert result.exit_code == 1
    assert result.stderr == "kvviz: check failed: 2 expects failed (2 steps: 2, 3)\n"


@needs_lru
def test_print_of_the_lru_demo_on_the_base_cache_reports_no_failure_it_did_not_check():
    """lru's expects are written for the trie: on --base they are left out, not shown failing."""
    result = kvviz("demo", "lru", "--base", "--step", "24", "--print")
    assert (result.exit_code, result.stderr) == (0, "")
    assert "expected" not in result.stdout


def test_print_exits_0_when_the_printed_steps_hold(story):
    assert (kvviz("run", str(story), "--print").exit_code, kvviz("run", str(story), "--print").stderr) == (0, "")
    step_1 = kvviz("run", str(story), "--print", "--base", "--step", "1")  # expect free 2 holds on base too
    assert (step_1.exit_code, step_1.stderr) == (0, "")


def test_run_trie_overrides_a_base_cache_file(tmp_path):
    path = tmp_path / "base.kvs"
    path.write_text(BOTH_KINDS.replace("cache trie", "cache base"), encoding="utf-8")
    plain = kvviz("run", str(path), "--print", "--step", "3").stdout
    trie = kvviz("run", str(path), "--print", "--step", "3", "--trie").stdout
    assert "(base cache: no trie" in plain
    assert "(base cache: no trie" not in trie
    assert "expect hit r2 4: ok" in trie


# -- check -----------------------------------------------------------------------------------------


def test_check_exits_0_when_every_expect_and_invariant_holds(story):
    result = kvviz("check", str(story))
    assert result.exit_code == 0
    assert result.stdout == f"ok   {story}: 4 steps, 3 expects checked, invariants hold\n"


def test_check_exits_1_naming_the_step_and_expected_versus_actual(story, tmp_path):
    wrong = tmp_path / "wrong.kvs"
    wrong.write_text(STORY.replace("expect hit r2 4", "expect hit r2 8"), encoding="utf-8")
    result = kvviz("check", str(story), str(wrong))
    assert result.exit_code == 1
    assert f"ok   {story}:" in result.stdout
    assert f"FAIL {wrong}: 1 problem" in result.stdout.splitlines()
    assert f"  {wrong}:11: step 3 `expect hit r2 8`: expected hit 8, got hit 4" in result.stdout


def test_check_with_base_fails_the_expects_that_need_sharing(tmp_path):
    path = tmp_path / "both.kvs"
    path.write_text(BOTH_KINDS, encoding="utf-8")
    result = kvviz("check", "--base", str(path))
    assert result.exit_code == 1
    assert "expected hit 4, got hit 0" in result.stdout
    assert "expected cached 2, got cached 0" in result.stdout


def test_check_counts_in_the_right_number(tmp_path):
    one = tmp_path / "one.kvs"
    one.write_text("cache trie pages=2 tokens_per_page=2\nacquire a 1 2\nexpect free 1\n", encoding="utf-8")
    assert kvviz("check", str(one)).stdout == f"ok   {one}: 1 step, 1 expect checked, invariants hold\n"
    bundle = tmp_path / "one.json"
    kvviz("export", str(one), "-o", str(bundle))
    assert kvviz("open", str(bundle), "--print").stderr == "replayed 1 step: every digest matches\n"


# Four expects that hold on both kinds (no sharing involved), so that which of them a run
# checks is the only thing that changes its `check` line.
FREE_COUNTS = """\
cache {header} pages=4 tokens_per_page=4
acquire a 1..4
{0}expect free 3
acquire b 5..8
{1}expect free 2
release a
{2}expect free 3
release b
{3}expect free 4
"""

TAGS = {None: "", ("trie",): "[trie] ", ("base",): "[base] ", ("trie", "base"): "[trie base] "}


def test_check_on_another_kind_exits_0_counting_only_what_it_checked(tmp_path):
    """Untagged expects are written for the header's kind: `--base` on a trie script checks
    none of them, and says so, in the same line, rather than "4 expects"."""
    path = tmp_path / "trie-only.kvs"
    path.write_text(FREE_COUNTS.format("", "", "", "", header="trie"), encoding="utf-8")
    result = kvviz("check", "--base", str(path))
    assert result.exit_code == 0
    assert result.stdout == (f"ok   {path}: 4 steps, 0 expects checked (4 written for the trie cache not "
                             f"checked on base), invariants hold\n")
    assert kvviz("check", str(path)).stdout == f"ok   {path}: 4 steps, 4 expects checked, invariants hold\n"


@settings(max_examples=40, deadline=None)
@given(tags=st.lists(st.sampled_from(list(TAGS)), min_size=4, max_size=4), header=st.sampled_from(["trie", "base"]),
       flag=st.sampled_from([None, "trie", "base"]))
def test_checked_and_not_checked_expects_add_up_to_every_expect_line(tmp_path_factory, tags, header, flag):
    """A line applies to the kinds in its tag, an untagged one to the header's kind; what a run
    leaves out is counted under the kind it was written for."""
    path = tmp_path_factory.mktemp("tags") / "tagged.kvs"
    path.write_text(FREE_COUNTS.format(*(TAGS[t] for t in tags), header=header), encoding="utf-8")
    run_kind = flag or header
    written_for = [t if t is not None else (header,) for t in tags]
    checked = sum(run_kind in kinds for kinds in written_for)
    other = "base" if run_kind == "trie" else "trie"
    result = kvviz("check", str(path), *([f"--{flag}"] if flag else []))
    assert result.exit_code == 0
    note = f" ({4 - checked} written for the {other} cache not checked on {run_kind})" if checked < 4 else ""
    expects = "1 expect" if checked == 1 else f"{checked} expects"
    assert result.stdout == f"ok   {path}: 4 steps, {expects} checked{note}, invariants hold\n"


def test_a_failed_check_also_says_what_it_did_not_check(tmp_path):
    path = tmp_path / "mixed.kvs"
    path.write_text(STORY.replace("expect hit r2 4", "[trie base] expect hit r2 4"), encoding="utf-8")
    result = kvviz("check", "--base", str(path))
    assert result.exit_code == 1
    assert f"FAIL {path}: 1 problem (2 written for the trie cache not checked on base)" in result.stdout.splitlines()
    assert "expected hit 4, got hit 0" in result.stdout


@needs_lru
def test_check_of_the_lru_demo_on_base_says_none_of_its_expects_were_checked():
    from kvviz.core.demos import demo_path

    scenario = load_demo("lru")
    written = sum(len(step.expects) for step in scenario.steps)
    assert written > 0 and all(x.kinds is None for step in scenario.steps for x in step.expects)
    result = kvviz("check", "--base", "lru")
    assert result.exit_code == 0
    assert result.stdout == (f"ok   {demo_path('lru')}: {len(scenario.steps)} steps, 0 expects checked ({written} "
                             f"written for the trie cache not checked on base), invariants hold\n")


def test_check_exits_2_for_a_file_that_does_not_parse(story, tmp_path):
    bad = tmp_path / "bad.kvs"
    bad.write_text("acquire r1 1..x\n", encoding="utf-8")
    result = CliRunner().invoke(cli, ["check", str(story), str(bad)], prog_name="kvviz")
    assert result.exit_code == 2
    assert result.stderr == f"kvviz: error: {bad}:1:12: bad token '1..x' (expected: an integer, a range like " \
                            f"1..8, or \"quoted words\")\n"


def test_check_without_files_is_a_usage_error():
    result = CliRunner().invoke(cli, ["check"], prog_name="kvviz")
    assert result.exit_code == 2
    assert "Missing argument 'FILES...'" in result.stderr


@pytest.mark.skipif(not demo_names(), reason="no demos shipped yet")
def test_check_passes_on_a_shipped_demo():
    from kvviz.core.demos import demo_path

    name = "lru" if "lru" in demo_names() else demo_names()[0]
    assert kvviz("check", str(demo_path(name))).exit_code == 0


# -- export and open ---------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".json", ".md", ".txt"])
def test_export_writes_the_format_its_suffix_names(story, tmp_path, suffix):
    out = tmp_path / f"report{suffix}"
    result = kvviz("export", str(story), "--step", "3", "-o", str(out))
    assert result.exit_code == 0
    assert result.stdout == f"wrote {out} (step 3)\n"
    text = out.read_text(encoding="utf-8")
    if suffix == ".json":
        assert json.loads(text)["step"] == 3
    elif suffix == ".md":
        assert text.startswith("# kvviz report: a short story — step 3 of 4")
    else:
        assert text.startswith("step 3/4  acquire r2 1..4 9")


def test_export_without_a_step_exports_the_last(story, tmp_path):
    out = tmp_path / "last.json"
    assert kvviz("export", str(story), "-o", str(out)).stdout == f"wrote {out} (step 4)\n"
    assert json.loads(out.read_text())["op"] == "release r1"


@needs_lru
def test_export_takes_a_demo_name(tmp_path):
    out = tmp_path / "lru.json"
    result = kvviz("export", "lru", "--step", "1", "-o", str(out))
    assert result.exit_code == 0
    assert json.loads(out.read_text())["title"] == load_demo("lru").title


def test_open_print_replays_the_bundle_and_shows_the_bundled_step(story, tmp_path):
    out = tmp_path / "report.json"
    kvviz("export", str(story), "--step", "2", "-o", str(out))
    result = kvviz("open", str(out), "--print")
    assert result.exit_code == 0
    assert result.stderr == "replayed 4 steps: every digest matches\n"
    assert step_headers(result.stdout) == ["step 2/4"]
    assert "publish r1: cached [1 2 3 4] as node 1 on page 0" in result.stdout


# -- help --------------------------------------------------------------------------------------


def test_help_on_the_script_language_prints_its_reference():
    result = kvviz("help", "scenarios")
    assert result.exit_code == 0
    assert result.stdout == SCENARIO_HELP + "\n"
    assert "expect evicted P [P ...]" in result.stdout


def test_help_without_a_topic_lists_every_topic_with_what_it_covers():
    from kvviz.help import TOPICS

    result = kvviz("help")
    assert result.exit_code == 0
    listed = [line.split()[0] for line in result.stdout.splitlines() if line.startswith("  ")]
    assert listed == list(TOPICS)
    assert {"scenarios", "json", "keys", "quiz", "compare", "trace"} <= set(TOPICS)
    assert "kvviz help TOPIC" in result.stdout


@pytest.mark.parametrize("topic", ["scenarios", "json", "keys", "quiz", "compare", "trace"])
def test_every_help_topic_prints_its_page(topic):
    result = kvviz("help", topic)
    assert result.exit_code == 0
    assert len(result.stdout.splitlines()) >= 8, result.stdout


def test_help_keys_lists_every_key_the_app_s_help_screen_lists():
    from kvviz.ui.screens.help_screen import KEYS

    text = kvviz("help", "keys").stdout
    for key, what in KEYS:
        assert f"{key}" in text and what in text


def test_help_quiz_names_every_question_kind():
    from kvviz.teach.quiz import KINDS

    text = kvviz("help", "quiz").stdout
    for kind in KINDS.values():
        assert kind.title in text


def test_help_compare_and_trace_name_their_commands_and_exit_codes():
    compare_text, trace_text = kvviz("help", "compare").stdout, kvviz("help", "trace").stdout
    assert "kvviz compare FILE --right KIND[:POLICY]" in compare_text and "exit 1" in compare_text
    assert "kvviz trace FILE" in trace_text and "--to-kvs" in trace_text and "--design hash" in trace_text


def test_python_m_kvviz_help_lists_the_commands():
    result = subprocess.run([sys.executable, "-m", "kvviz", "--help"], capture_output=True, text=True, check=False)
    assert result.returncode == 0
    assert result.stdout.startswith("Usage: kvviz [OPTIONS] COMMAND [ARGS]...")
    commands = re.findall(r"^  (\w+)\s", result.stdout.split("Commands:")[1], flags=re.MULTILINE)
    assert {"demo", "run", "check", "export", "open", "help"} <= set(commands)


def test_version_names_the_package():
    result = kvviz("--version")
    assert result.exit_code == 0
    assert re.fullmatch(r"kvviz, version \d+\.\d+\.\d+\S*\n", result.stdout)


# -- An exit 2 about a file names FILE:LINE:COL -----------------------------------

LOCATED = re.compile(r"^kvviz: error: (?P<path>[^:\s]+\.kvs):(?P<line>\d+):(?P<col>\d+): ")


def in_process(*args: str):
    return CliRunner().invoke(cli, list(args), prog_name="kvviz", catch_exceptions=True)


def assert_located_at(result, path: str, source_word: str) -> None:
    """Exit 2, one line, located at the cache line's column where ``source_word`` starts."""
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    found = LOCATED.match(lines[0])
    assert found, lines[0]
    assert found["path"] == path
    text = open(path, encoding="utf-8").read().splitlines()[int(found["line"]) - 1]
    assert text.lstrip().startswith("cache ")
    assert text[int(found["col"]) - 1:].startswith(source_word), (text, found["col"])


def test_check_on_shortfin_of_a_priority_scenario_names_the_policy_on_the_cache_line():
    from kvviz.core.demos import demo_path

    path = str(demo_path("priority"))
    assert_located_at(in_process("check", path, "--backend", "shortfin"), path, "policy=priority")


def test_diff_of_a_hash_scenario_names_the_kind_on_its_cache_line():
    from kvviz.core.demos import demo_path

    path = str(demo_path("hash-vs-trie"))
    assert_located_at(in_process("diff", "hash-vs-trie"), path, "hash")


def test_quiz_of_a_hash_scenario_asks_the_hash_caches_questions():
    result = in_process("quiz", "hash-vs-trie", "--plain", "--no-state")  # no longer refused
    assert result.exit_code == 0 and "Question 1 of" in result.output


@pytest.mark.parametrize("command", [["check", "--backend", "shortfin"], ["run", "--print", "--backend", "shortfin"],
                                     ["export", "-o", "{tmp}/x.md", "--backend", "shortfin"], ["diff"]])
def test_every_demo_a_command_refuses_is_refused_at_a_file_line_and_column(command, tmp_path):
    """Every demo through the commands that refuse a scenario's cache (the shortfin backend:
    lru tries only): each exit 2 starts with the demo file's FILE:LINE:COL."""
    pytest.importorskip("shortfin")  # a missing backend is an install problem, not the file's
    refused = 0
    for name in demo_names():
        args = [a.replace("{tmp}", str(tmp_path)) for a in command]
        result = in_process(args[0], name, *args[1:])
        if result.exit_code == 2:
            refused += 1
            assert LOCATED.match(result.stderr), (name, result.stderr)
    assert refused >= 1  # priority and hash-vs-trie at least


# -- A hash replay converts to a `cache hash` scenario ----------------------------

TRACE = ('{"timestamp": 0, "input_length": 1500, "output_length": 5, "hash_ids": [1, 2, 3]}\n'
         '{"timestamp": 10, "input_length": 1300, "output_length": 5, "hash_ids": [1, 2, 4]}\n'
         '{"timestamp": 20, "input_length": 1536, "output_length": 5, "hash_ids": [1, 2, 3]}\n'
         '{"timestamp": 30, "input_length": 2048, "output_length": 5, "hash_ids": [7, 8, 9, 10]}\n')


@pytest.mark.parametrize("capacity", ["unlimited", "2048"])
def test_trace_to_kvs_with_the_hash_design_writes_a_hash_scenario_that_checks(capacity, tmp_path):
    from kvviz.core.scenario import parse_scenario_file

    trace = tmp_path / "t.jsonl"
    trace.write_text(TRACE)
    out = tmp_path / "t.kvs"
    result = kvviz("trace", str(trace), "--design", "hash", "--capacity-tokens", capacity, "--to-kvs", str(out))
    assert result.exit_code == 0, result.output
    scenario = parse_scenario_file(out)
    assert scenario.config.kind == "hash"
    assert "hash cache" in scenario.description
    checked = kvviz("check", str(out))
    assert checked.exit_code == 0, checked.output  # every expect hit / evictions the replay measured holds
    assert "invariants hold" in checked.stdout


def test_the_hash_scenario_of_a_trace_differs_from_the_trie_one_only_in_its_cache_where_they_agree(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text(TRACE)
    texts = {}
    for design in ("trie", "hash"):
        out = tmp_path / f"{design}.kvs"
        assert kvviz("trace", str(trace), "--design", design, "--to-kvs", str(out)).exit_code == 0
        texts[design] = out.read_text()
    assert "cache hash " in texts["hash"] and "cache trie " in texts["trie"]
    ops = [[line for line in text.splitlines() if line.split()[:1] in (["acquire"], ["publish"], ["release"])]
           for text in texts.values()]
    assert ops[0] == ops[1]  # one op sequence: the replay's


# -- Check fails on a misuse the script does not expect ----------------------------

MISUSE = """\
cache trie pages=4 tokens_per_page=4
acquire r1 1..4
expect ok
publish r1 5..8
"""

UNEXPECTED_FULL = """\
cache trie pages=2 tokens_per_page=4
acquire r1 1..8
acquire r2 9..12
expect free 0
release r1
"""


def test_check_fails_on_a_misuse_the_script_does_not_expect_naming_its_line(tmp_path):
    path = tmp_path / "misuse.kvs"
    path.write_text(MISUSE)
    result = kvviz("check", str(path))
    assert result.exit_code == 1, result.output
    assert result.stdout.startswith(f"FAIL {path}: 1 problem")
    assert f"{path}:4: step 2 `publish r1 5..8`: InvalidOperation" in result.stdout
    assert "no `expect fail`" in result.stdout


def test_check_passes_a_misuse_the_script_expects():
    script = MISUSE + "expect fail invalid\n"
    result = kvviz_text("check", script)
    assert result.exit_code == 0, result.output


def test_check_reports_an_unexpected_allocation_failure_in_its_summary_without_failing(tmp_path):
    path = tmp_path / "full.kvs"
    path.write_text(UNEXPECTED_FULL)
    result = kvviz("check", str(path))
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"ok   {path}: 3 steps, 1 expect checked, invariants hold; 1 op failed to fit without an "
        f"`expect fail` (step 2, line 3)"]


def kvviz_text(command: str, script: str):
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "s.kvs"
        path.write_text(script)
        return kvviz(command, str(path))


def test_every_shipped_demo_still_checks_ok():
    for name in demo_names():
        result = kvviz("check", name)
        assert result.exit_code == 0, (name, result.output)


# -- Run --json bounds its step snapshots before the first line -------------------

HUGE_POOL = "cache trie pages=1000000 tokens_per_page=4\nacquire a 1..8\npublish a\nrelease a\n"


def test_run_json_refuses_step_snapshots_beyond_the_limit_before_writing_a_line(tmp_path):
    import tracemalloc

    from kvviz.core.limits import MAX_STEP_STATE_PAGES

    path = tmp_path / "huge.kvs"
    path.write_text(HUGE_POOL)
    tracemalloc.start()
    try:
        result = CliRunner().invoke(cli, ["run", str(path), "--json", "--snapshots"], catch_exceptions=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    line = result.stderr.strip()
    assert "4 step snapshots of 1,000,000 pages" in line and f"MAX_STEP_STATE_PAGES ({MAX_STEP_STATE_PAGES:,}" in line
    assert "--step N" in line
    assert peak < 50_000_000  # refused, not 140 MB of step lines built first


def test_run_json_writes_step_snapshots_up_to_the_limit_and_refuses_one_more(tmp_path, monkeypatch):
    from kvviz.core import limits

    path = tmp_path / "s.kvs"
    path.write_text("cache trie pages=8 tokens_per_page=4\nacquire a 1..8\npublish a\nrelease a\n")  # 4 steps
    monkeypatch.setattr(limits, "MAX_STEP_STATE_PAGES", 32)  # 4 snapshots x 8 pages
    at_limit = kvviz("run", str(path), "--json", "--snapshots")
    assert at_limit.exit_code == 0
    assert len(at_limit.stdout.splitlines()) == 5  # the run header, then 4 steps
    monkeypatch.setattr(limits, "MAX_STEP_STATE_PAGES", 31)
    refused = CliRunner().invoke(cli, ["run", str(path), "--json", "--snapshots"], catch_exceptions=True)
    assert refused.exit_code == 2 and refused.stdout == ""
    one = CliRunner().invoke(cli, ["run", str(path), "--json", "--step", "2"], catch_exceptions=True)
    assert one.exit_code == 0 and len(one.stdout.splitlines()) == 2


def test_help_json_documents_the_step_snapshot_limit():
    assert "MAX_STEP_STATE_PAGES" in kvviz("help", "json").stdout
