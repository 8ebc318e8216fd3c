"""`kvviz trace` through click's CliRunner: exit codes, tables, JSON, sweep plot, --to-kvs."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvviz.cli.trace_command import parse_capacity, trace
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
])
def test_capacities_read_the_way_people_write_them(text, tokens):
    assert parse_capacity(text) == tokens


def test_to_kvs_writes_a_scenario_for_the_first_requests(small, tmp_path):
    out = tmp_path / "slice.kvs"
    result = run(small, "--first", "2", "--capacity-tokens", "2048", "--to-kvs", out)
    assert result.exit_code == 0
    assert result.stdout == f"wrote {out}: 2 requests, 6 ops (token hit rate 36.6%)\n"
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
    import kvviz.cli.trace_command

    opened = []
    monkeypatch.setattr(kvviz.cli.trace_command, "launch_ui", lambda session, step=None: opened.append(session))
    result = run(small, "--ui", "--first", "2")
    assert result.exit_code == 0, result.output
    (session,) = opened
    assert session.config.tokens_per_page == 1
    assert [s.op.kind for s in session.steps] == ["acquire", "publish", "release"] * 2
    assert session.frame(len(session) - 1).violations == ()
