# SPDX-License-Identifier: Apache-2.0
"""`kvviz trace` through click's CliRunner: exit codes, tables, JSON, sweep plot, --to-kvs."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvviz.trace.command import parse_capacity, trace
from kvviz.trace.plot import hit_rate_plot
from kvviz.trace.replay import ReplayResult

DATA = Path(__file__).parents[2].parent / "shared" / "data" / "mooncake"
CONVERSATION = DATA / "conversation_trace.jsonl"

needs_data = pytest.mark.skipif(not CONVERSATION.exists(), reason=f"Mooncake traces not found in {DATA}")

GOOD = [
    '{"timestamp": 0, "input_length": 1500, "output_length": 5, "hash_ids": [1, 2, 3]}',
    '{"timestamp": 10, "input_length": 1300, "output_length": 5, "hash_ids": [1, 2, 4]}',
    '{"timestamp": 20, "input_length": 1536, "output_length": 5, "hash_ids": [1, 2, 3]}',
]


def run(*args):
    return CliRunner().invoke(trace, [str(a) for a in args], prog_name="kvviz trace")


@pytest.fixture
def small(tmp_path):
    path = tmp_path / "small.jsonl"
    path.write_text("\n".join(GOOD) + "\n")
    return path


@pytest.fixture
def broken(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text("\n".join([GOOD[0], '{"timestamp": 10, "input_length": 1300, "output_length": 5}', GOOD[2]]) + "\n")
    return path


def test_the_summary_names_every_measure(small):
    result = run(small, "--capacity-tokens", "3M")
    assert result.exit_code == 0, result.output
    for label in ("requests", "token hit rate", "prefix-reuse ratio", "pages evicted", "peak pages held",
                  "failed to fit", "wall time"):
        assert label in result.stdout
    assert "3,000,000 tokens = 5,859 pages" in result.stdout
    assert "59.0%" in result.stdout  # (1024 + 1536) / (1500 + 1300 + 1536)
    assert result.stderr == ""  # no progress bar off a terminal


def test_json_output_parses_and_carries_the_figures(small):
    result = run(small, "--capacity-tokens", "1024", "--json")  # 2 pages: every request fails to fit
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["trace"]["requests"] == 3
    assert data["trace"]["prefix_reuse_ratio"] == pytest.approx(2560 / 4336)
    assert data["result"]["page_count"] == 2
    assert (data["result"]["failed_to_fit"], data["result"]["token_hit_rate"]) == (3, 0.0)


def test_a_bad_line_stops_with_exit_code_2_and_one_line_naming_file_and_line(broken):
    result = run(broken)
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"kvviz: error: {broken}:2: missing field 'hash_ids'")
    assert lines[0].endswith("(use --on-error skip to leave bad lines out)")


def test_skip_replays_the_good_lines_and_warns_about_the_bad_one(broken):
    result = run(broken, "--on-error", "skip", "--json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["trace"]["requests"] == 2
    assert data["trace"]["skipped_lines"] == [{"line": 2, "message": data["trace"]["skipped_lines"][0]["message"]}]
    assert data["result"]["hit_tokens"] == 1536
    table = run(broken, "--on-error", "skip")
    assert table.stderr.splitlines()[:2] == [f"kvviz: warning: skipped 1 bad line in {broken}:",
                                              f"  {broken}:2: missing field 'hash_ids' (every line needs "
                                              "timestamp, input_length, output_length, hash_ids)"]


@pytest.mark.parametrize("args, message", [
    (["--capacity-tokens", "lots"], "'lots' is not a token count"),
    (["--on-error", "ignore"], "'ignore' is not one of 'stop', 'skip'"),
    (["--first", "0"], "0 is not in the range x>=1"),
    (["--ui", "--sweep"], "--ui opens one replay in the UI"),
    (["--sweep", "--to-kvs", "out.kvs"], "--sweep and --to-kvs do not combine"),
])
def test_bad_options_exit_with_code_2_and_say_why(small, args, message):
    result = run(small, *args)
    assert result.exit_code == 2
    assert message in result.stderr
    assert "Traceback" not in result.output


def test_a_missing_file_exits_with_code_2(tmp_path):
    result = run(tmp_path / "nope.jsonl")
    assert result.exit_code == 2
    assert "does not exist" in result.stderr


def test_a_file_without_requests_exits_with_code_2(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    result = run(empty)
    assert (result.exit_code, result.stderr) == (2, f"kvviz: error: {empty} has no valid requests\n")


@pytest.mark.parametrize("text, tokens", [
    ("3000000", 3_000_000), ("3_000_000", 3_000_000), ("3,000,000", 3_000_000), ("3e6", 3_000_000),
    ("3M", 3_000_000), ("1.5k", 1500), ("10G", 10**10), ("unlimited", None), ("inf", None),
    ("1e+3", 1000), ("1.0e3", 1000), ("1E3", 1000), ("15000e-3", 15), ("2.5e-1k", 250), ("0e-99999", 0),
    ("1e15", 10**15), ("1000T", 10**15), ("1000000000000000", 10**15),
])
def test_capacities_read_the_way_people_write_them(text, tokens):
    assert parse_capacity(text) == tokens


@pytest.mark.parametrize("text, message", [
    ("\u0663", "is not a token count"),  # ARABIC-INDIC DIGIT THREE: int() would read 3
    ("1\uff10", "is not a token count"),  # FULLWIDTH DIGIT ZERO
    ("1e16", "is more than 1,000,000,000,000,000 tokens"),
    ("1e99", "is more than 1,000,000,000,000,000 tokens"),
    ("1e999999999", "is more than"),  # refused from its digits, never computed
    ("1001T", "is more than"),
    ("1000000000000001", "is more than 1,000,000,000,000,000 tokens"),  # the limit plus one
    ("12345e-2", "is not a whole number"),
    ("1e-999999999", "is not a whole number"),
    ("nan", "is not a token count"),
    ("-5", "is not a token count"),
])
def test_capacities_outside_ascii_whole_numbers_up_to_the_limit_are_refused(text, message):
    with pytest.raises(ValueError, match=message):
        parse_capacity(text)


@pytest.mark.parametrize("args, message", [
    (["--capacity-tokens", "1e99"], "is more than 1,000,000,000,000,000 tokens"),
    (["--capacity-tokens", "\u0663"], "is not a token count"),
    (["--concurrency", "--prefill-ms-per-token", "nan"], "is not a number of milliseconds"),
    (["--concurrency", "--prefill-ms-per-token", "inf"], "is not a number of milliseconds"),
    (["--concurrency", "--decode-ms-per-token", "1e999"], "is not a number of milliseconds"),
    (["--concurrency", "--decode-ms-per-token", "\u0663"], "is not a number of milliseconds"),
    (["--first", "\u0663"], "is not a whole number (digits 0-9)"),
    (["--page-tokens", "\u0665\u0661\u0662"], "is not a whole number (digits 0-9)"),
])
def test_numbers_outside_finite_ascii_values_exit_with_code_2_and_no_traceback(small, args, message):
    result = run(small, *args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert "Traceback" not in result.output


def test_times_in_ascii_with_signed_exponents_are_read(small):
    result = run(small, "--concurrency", "--prefill-ms-per-token", "1e+1", "--decode-ms-per-token", ".5", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)["result"]
    assert (data["prefill_ms_per_token"], data["decode_ms_per_token"]) == (10.0, 0.5)


def test_a_capacity_far_beyond_the_trace_costs_memory_only_for_its_blocks(small):
    import tracemalloc

    from kvviz.core.mooncake import read_trace
    from kvviz.trace.replay import ReplayConfig, replay

    requests = read_trace(small).requests
    tracemalloc.start()
    try:
        huge = replay(requests, ReplayConfig(capacity_tokens=10**15))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 5_000_000  # a pool of 1.95e12 pages would need terabytes
    assert huge.page_count == 10**15 // 512
    unlimited = replay(requests, ReplayConfig())
    assert (huge.hit_tokens, huge.pages_evicted, huge.peak_pages_held) == (
        unlimited.hit_tokens, unlimited.pages_evicted, unlimited.peak_pages_held)
    result = run(small, "--capacity-tokens", "1e15", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["result"]["page_count"] == 1_953_125_000_000


def test_a_line_nested_a_thousand_deep_is_one_line_of_error_or_a_skipped_line(tmp_path):
    deep = tmp_path / "deep.jsonl"
    deep.write_text(GOOD[0] + "\n" + GOOD[1][:-1] + ', "x": ' + "[" * 1000 + "]" * 1000 + "}\n")
    stopped = run(deep)
    assert stopped.exit_code == 2
    assert stopped.stderr.startswith(f"kvviz: error: {deep}:2:")
    assert "nested more than 16 brackets deep" in stopped.stderr and len(stopped.stderr.splitlines()) == 1
    skipped = run(deep, "--on-error", "skip", "--json")
    assert skipped.exit_code == 0, skipped.output
    assert json.loads(skipped.stdout)["trace"]["requests"] == 1


def test_a_trace_beyond_the_block_limit_is_refused_before_the_replay(small, monkeypatch):
    import importlib

    import kvviz.core.mooncake

    replay_module = importlib.import_module("kvviz.trace.replay")  # kvviz.trace.replay is also a function

    monkeypatch.setattr(kvviz.core.mooncake, "MAX_TRACE_BLOCKS", 9)  # small.jsonl holds exactly 9 blocks
    assert run(small, "--json").exit_code == 0
    monkeypatch.setattr(kvviz.core.mooncake, "MAX_TRACE_BLOCKS", 8)
    result = run(small, "--on-error", "skip")
    assert result.exit_code == 2
    assert result.stderr == (f"kvviz: error: {small}:3: the trace holds more than 8 blocks up to here, more than "
                             "kvviz replays at once: read fewer requests (--first N)\n")
    monkeypatch.setattr(kvviz.core.mooncake, "MAX_TRACE_BLOCKS", 9)
    monkeypatch.setattr(replay_module, "MAX_TRACE_BLOCKS", 9)
    assert run(small, "--with-output").exit_code == 2  # 9 prompt blocks + output blocks
    assert "kvviz replays at most 9" in run(small, "--with-output").stderr


def test_to_kvs_refuses_to_replace_the_trace_it_reads(small):
    before = small.read_bytes()
    for target in (small, small.parent / ".." / small.parent.name / small.name):
        result = run(small, "--to-kvs", target)
        assert result.exit_code == 2
        assert "refusing to overwrite an input" in result.stderr
        assert small.read_bytes() == before


def test_to_kvs_never_writes_a_scenario_check_would_refuse(tmp_path):
    from kvviz.core.scenario import parse_scenario_file

    path = tmp_path / "max.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [9223372036854775807]}\n'
                    '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [9223372036854775808]}\n')
    out = tmp_path / "max.kvs"
    refused = run(path, "--to-kvs", out)
    assert refused.exit_code == 2
    assert refused.stderr.startswith(f"kvviz: error: {path}:2: 'hash_ids' item 0 is 9223372036854775808, above")
    assert not out.exists()
    assert run(path, "--to-kvs", out, "--first", "1").exit_code == 0
    assert parse_scenario_file(out).steps[0].op.tokens == (2**63 - 1,)


def test_to_kvs_writes_a_scenario_for_the_first_requests(small, tmp_path):
    out = tmp_path / "slice.kvs"
    result = run(small, "--first", "2", "--capacity-tokens", "2048", "--to-kvs", out)
    assert result.exit_code == 0
    assert result.stdout == f"wrote {out}: 2 requests, 6 ops (token hit rate 36.6%)\n"
    one = run(small, "--first", "1", "--to-kvs", tmp_path / "one.kvs")
    assert one.stdout == f"wrote {tmp_path / 'one.kvs'}: 1 request, 3 ops (token hit rate 0.0%)\n"
    text = out.read_text()
    assert "cache trie pages=4 tokens_per_page=1" in text
    assert "acquire q0002 1 2 4\nexpect hit q0002 2\n" in text
    assert "q0003" not in text


def fake_result(capacity, rate):
    return ReplayResult("trie", capacity, 0, 512, False, False, 1, 1, 0, 1000, round(rate * 1000),
                        0, 0, 1, 0.1)


def test_the_plot_marks_each_capacity_and_the_unlimited_line_in_plain_text():
    results = [fake_result(10**4, 0.0), fake_result(10**5, 0.1), fake_result(10**6, 0.3), fake_result(10**7, 0.37)]
    plot = hit_rate_plot(results, fake_result(None, 0.374))
    assert plot == """\
token hit rate vs cache capacity (trie cache, LRU eviction)
 40.0% |
       |- - - - - - - - - - -*-  unlimited 37.4%
 35.0% |
       |
 30.0% |               *
       |
 25.0% |
       |
 20.0% |
       |
 15.0% |
       |
 10.0% |         *
       |
  5.0% |
       |
  0.0% +---*-----+-----+-----+--
         1e4   1e5   1e6   1e7
        cache capacity in tokens (log scale)"""
    assert plot.isascii()


@needs_data
def test_sweep_prints_a_table_and_a_plot_and_json_with_every_capacity():
    result = run(CONVERSATION, "--first", "300", "--sweep")
    assert result.exit_code == 0
    assert "token hit rate vs cache capacity" in result.stdout
    assert "unlimited" in result.stdout and "1,000,000,000" in result.stdout
    data = json.loads(run(CONVERSATION, "--first", "300", "--sweep", "--json").stdout)
    assert [r["capacity_tokens"] for r in data["sweep"]][::2] == [10**4, 10**5, 10**6, 10**7, 10**8, 10**9]
    assert data["unlimited"]["token_hit_rate"] == pytest.approx(data["trace"]["prefix_reuse_ratio"])


@needs_data
def test_base_and_concurrency_flags_reach_the_replay():
    data = json.loads(run(CONVERSATION, "--first", "200", "--base", "--concurrency", "--with-output",
                          "--capacity-tokens", "3M", "--json").stdout)["result"]
    assert (data["cache"], data["concurrency"], data["with_output"], data["hit_tokens"]) == ("base", True, True, 0)
    assert data["peak_live_requests"] > 1
    assert (data["prefill_ms_per_token"], data["decode_ms_per_token"]) == (0.1, 30.0)


def test_ui_opens_a_lazy_timeline_of_the_first_requests(small, monkeypatch):
    import kvviz.trace.command

    opened = []
    monkeypatch.setattr(kvviz.trace.command, "launch_ui", lambda session, step=None: opened.append(session))
    monkeypatch.setattr(kvviz.trace.command, "require_terminal", lambda: None)
    result = run(small, "--ui", "--first", "2")
    assert result.exit_code == 0, result.output
    (session,) = opened
    assert session.config.tokens_per_page == 1
    assert [s.op.kind for s in session.steps] == ["acquire", "publish", "release"] * 2
    assert session.frame(len(session) - 1).violations == ()
    # The generated narration speaks in the trace's units: one token is one block of 512.
    assert session.units.block_tokens == 512
    acquires = [session.frame(i).explanation for i, s in enumerate(session.steps, 1) if s.op.kind == "acquire"]
    assert all("blocks (of 512 tokens)" in text or "block (of 512 tokens)" in text for text in acquires), acquires
    assert not any("full page" in text for text in acquires)


def test_ui_builds_its_timeline_with_the_collector_paused_and_runs_it_again_after(small, monkeypatch):
    # The collector's automatic passes walked every row built so far, again and again: a
    # quarter of the CPU time of opening a 3,000-step trace. The app settles the heap later.
    import gc

    import kvviz.trace.command

    collecting = []
    monkeypatch.setattr(kvviz.trace.command, "launch_ui",
                        lambda session, step=None: collecting.append(gc.isenabled()))
    monkeypatch.setattr(kvviz.trace.command, "require_terminal", lambda: None)
    assert gc.isenabled()
    result = run(small, "--ui", "--first", "2")
    assert result.exit_code == 0, result.output
    assert collecting == [False]
    assert gc.isenabled()


def test_ui_freezes_what_it_built_before_the_app_starts(small, monkeypatch):
    import kvviz.trace.command

    order = []
    monkeypatch.setattr(kvviz.trace.command, "freeze_heap", lambda: order.append("freeze"))
    monkeypatch.setattr(kvviz.trace.command, "launch_ui", lambda session, step=None: order.append(len(session)))
    monkeypatch.setattr(kvviz.trace.command, "require_terminal", lambda: None)
    assert run(small, "--ui", "--first", "2").exit_code == 0
    assert order == ["freeze", 7]  # the session of 6 ops was built before, and the app starts after


def test_the_ui_shows_each_steps_op_and_expects_in_the_scenario_language(small, monkeypatch):
    import kvviz.trace.command

    opened = []
    monkeypatch.setattr(kvviz.trace.command, "launch_ui", lambda session, step=None: opened.append(session))
    monkeypatch.setattr(kvviz.trace.command, "require_terminal", lambda: None)
    assert run(small, "--ui", "--capacity-tokens", "unlimited").exit_code == 0
    (session,) = opened
    assert [s.op_text for s in session.summaries[1:4]] == ["acquire q0001 1..3", "publish q0001", "release q0001"]
    frame = session.frame(4)  # built lazily: q0002 matches 2 blocks
    assert frame.op.text == "acquire q0002 1 2 4"
    assert [r.expect.text for r in frame.expects] == ["expect hit q0002 2"]
    assert session.title.startswith("small.jsonl: 1 page = 1 block of 512 tokens")


@needs_data
def test_the_ui_defaults_to_a_capacity_that_evicts_so_there_are_evictions_to_step_to(monkeypatch):
    import kvviz.trace.command

    opened = []
    monkeypatch.setattr(kvviz.trace.command, "launch_ui", lambda session, step=None: opened.append(session))
    monkeypatch.setattr(kvviz.trace.command, "require_terminal", lambda: None)
    assert run(CONVERSATION, "--ui", "--first", "300").exit_code == 0
    assert run(CONVERSATION, "--ui", "--first", "300", "--capacity-tokens", "unlimited").exit_code == 0
    default, unlimited = opened
    assert sum(s.evictions for s in default.summaries) > 0
    assert not any(s.interesting for s in unlimited.summaries)
    assert default.config.pages == 7814 // 2  # half of the 7,814 distinct blocks of the first 300 requests
    assert "the UI's default, half the excerpt's distinct blocks" in default.description
    assert sum(s.failed for s in default.summaries) == 0


def test_the_summary_counts_one_page_in_the_singular(small):
    result = run(small, "--capacity-tokens", "512")
    assert result.exit_code == 0, result.output
    assert "512 tokens = 1 page " in result.stdout


def test_a_file_of_only_bad_lines_is_one_line_of_error_even_when_skipping(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text("oops\n{}\n")
    result = run(path, "--on-error", "skip")
    assert result.exit_code == 2
    assert result.stderr == (f"kvviz: error: {path} has no valid requests: 2 bad lines skipped, the first "
                             f"{path}:1:1: not valid JSON (Expecting value)\n")


def test_ui_without_a_terminal_is_refused_before_the_trace_is_read(small, monkeypatch):
    import kvviz.trace.command

    read = []
    monkeypatch.setattr(kvviz.trace.command, "read_trace", lambda *a, **k: read.append(a))
    result = run(small, "--ui")
    assert (result.exit_code, read) == (2, [])
    assert result.stderr.startswith("kvviz: error: the UI needs a terminal") and "drop --ui" in result.stderr


def test_a_publish_of_many_blocks_is_narrated_as_ranges_not_page_by_page(tmp_path, monkeypatch):
    import kvviz.trace.command

    path = tmp_path / "long.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 6000, "output_length": 5, "hash_ids": '
                    f'{list(range(1, 13))}}}\n')
    opened = []
    monkeypatch.setattr(kvviz.trace.command, "launch_ui", lambda session, step=None: opened.append(session))
    monkeypatch.setattr(kvviz.trace.command, "require_terminal", lambda: None)
    assert run(path, "--ui", "--capacity-tokens", "unlimited").exit_code == 0
    (session,) = opened
    acquire, publish = session.frame(1).explanation, session.frame(2).explanation
    assert "took pages 0..11 from the free list" in acquire, acquire
    assert publish == "publish q0001: cached 12 blocks as nodes 1..12 on pages 0..11.", publish


def test_a_sweep_over_several_choices_keeps_its_title_on_one_line(small):
    result = run(small, "--sweep", "--policy", "lru,fifo")
    assert result.exit_code == 0, result.output
    first = result.stdout.splitlines()[0]
    assert first.startswith("Token hit rate vs capacity by choice: small.jsonl (3 requests)"), first


def test_a_refused_to_kvs_after_skipped_lines_is_one_error_line_and_no_warning(tmp_path):
    """Found by the trace fuzzer: skipped lines were reported before a conversion that was
    then refused, so exit 2 came with three lines on stderr instead of one."""
    path = tmp_path / "trace.jsonl"
    ids = list(range(14))
    path.write_text(f'{{"input_length": 6758, "output_length": 500, "hash_ids": {ids}}}\n'
                    f'{{"timestamp": 0, "input_length": 6758, "output_length": 1000000000, "hash_ids": {ids}}}\n')
    result = run(path, "--no-progress", "--with-output", "--concurrency", "--base",
                 "--on-error", "skip", "--to-kvs", tmp_path / "out.kvs")
    assert result.exit_code == 2
    assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("kvviz: error: cannot convert")
    assert not (tmp_path / "out.kvs").exists()


def test_to_kvs_dash_writes_the_scenario_to_stdout_and_no_file_named_dash(small, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = run(small, "--to-kvs", "-")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("# Excerpt of small.jsonl") and "\nacquire " in result.stdout
    assert result.stderr.startswith("wrote the scenario to stdout: 3 requests")
    assert not (tmp_path / "-").exists()
