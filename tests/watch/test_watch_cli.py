# SPDX-License-Identifier: Apache-2.0
"""``kvviz watch`` on the command line: headless summaries of both shared recordings held to an
independent decode, exports (a watch bundle that ``kvviz open`` replays and verifies, tampering
caught; a Markdown report), bad input located, the missing extra in one line, a live watch of a
publisher process of our own."""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

pytest.importorskip("msgspec", reason="the watch extra is not installed")  # the CI installs it

from kvviz.cli import cli  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from watch_expected import event_fields, expected_figures, unpack  # noqa: E402

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "kv-events"
VLLM = DATA / "vllm-0.33.0-conversation-400.jsonl"
SGLANG = DATA / "sglang-0.5.23-conversation-400.jsonl"
RECORDINGS = pytest.mark.parametrize("recording", [VLLM, SGLANG], ids=["vllm", "sglang"])
EXTRA_LINE = 'kvviz: error: kvviz watch needs the watch extra: install it with: pip install -e ".[watch]"'
PUBLISHER = Path(__file__).parent / "publisher.py"
DEADLINE_S = 60


def run(*args: str):
    return CliRunner().invoke(cli, ["watch", *args], catch_exceptions=False)


def json_lines(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines()]


def first_lines(path: Path, n: int, out: Path) -> Path:
    out.write_text("".join(path.read_text().splitlines(keepends=True)[:n]))
    return out


# -- headless ----------------------------------------------------------------------------------


@RECORDINGS
def test_json_summary_of_a_shared_recording_matches_an_independent_decode(recording):
    result = run("--replay-file", str(recording), "--json")
    assert result.exit_code == 0, result.output
    (summary,) = json_lines(result.output)
    expected = expected_figures(recording)
    assert {key: summary[key] for key in expected} == expected
    assert summary["type"] == "summary" and summary["schema"] == "kvviz.watch-summary/1"
    assert summary["gaps"] == summary["restarts"] == summary["undecodable"] == 0
    line = result.output.splitlines()[0]
    assert line == json.dumps(summary, sort_keys=True, separators=(",", ":"))  # canonical


def test_every_n_prints_a_progress_line_per_n_messages_then_the_summary(tmp_path):
    result = run("--replay-file", str(VLLM), "--json", "--every", "150")
    records = json_lines(result.output)
    assert [r["type"] for r in records] == ["progress", "progress", "progress", "summary"]
    assert [r["step"] for r in records[:3]] == [150, 300, 400]
    for r in records[:3]:  # each progress line is the independent decode of the recording so far
        expected = expected_figures(first_lines(VLLM, r["step"], tmp_path / f"first-{r['step']}.jsonl"))
        assert r["cached_blocks"] == expected["cached_blocks"] and r["peak_blocks"] == expected["peak_blocks"]
    assert sum(r["stored"] for r in records[:3]) == records[3]["blocks_stored"]
    assert sum(r["removed"] for r in records[:3]) == records[3]["blocks_removed"]


def test_print_says_the_summary_in_lines():
    result = run("--replay-file", str(SGLANG), "--print", "--every", "200")
    lines = result.output.splitlines()
    assert result.exit_code == 0
    assert lines[0].startswith("step 200 (seq 199): ") and lines[1].startswith("step 400 (seq 399): ")
    assert "events: 480 (AllBlocksCleared 1, BlockRemoved 119, BlockStored 360)" in lines
    assert "cached at the end: 2,907 blocks (peak 3,000; 0 orphans, 0 stored as orphans)" in lines
    assert lines[-1] == "(not shown: the stream carries no reference counts, eviction order or owners)"


def test_the_json_help_documents_every_field_the_records_have():
    from kvviz.watch.json_output import WATCH_JSON_HELP

    records = json_lines(run("--replay-file", str(VLLM), "--json", "--every", "400").output)
    documented = {line.split()[0] for line in WATCH_JSON_HELP.splitlines() if line.startswith("  ") and line.split()}
    for record in records:
        assert set(record) <= documented, set(record) - documented


# -- exports -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bundle") / "step-300.json"
    result = run("--replay-file", str(VLLM), "--export-step", "300", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert result.output == f"wrote {out} (step 300 of 400)\n"
    return out


def open_bundle(path: Path):
    return CliRunner().invoke(cli, ["open", str(path), "--print"], catch_exceptions=False)


def test_a_recording_whose_late_attach_history_came_last_exports_a_bundle_that_opens_verified(tmp_path):
    # The vLLM recording as a late watch received it: seqs 100-149 live, then 0-99 replayed.
    lines = VLLM.read_text().splitlines()[:150]
    marked = [line[:-1] + ', "replayed": true}' for line in lines[:100]]
    recording = tmp_path / "late.jsonl"
    recording.write_text("\n".join(lines[100:] + marked) + "\n")
    out = tmp_path / "late.json"
    result = run("--replay-file", str(recording), "--export-step", "150", "-o", str(out))
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert [m["seq"] for m in data["messages"]] == list(range(150))  # the history put back first, marked
    assert sum(m.get("replayed", False) for m in data["messages"]) == 100
    assert data["summary"]["restarts"] == 0 and data["summary"]["replayed"] == 100
    opened = open_bundle(out)
    assert opened.exit_code == 0, opened.output
    assert "replayed 150 messages: every digest matches" in opened.output
    in_order = tmp_path / "in-order.jsonl"
    in_order.write_text("\n".join(lines) + "\n")
    assert summary_of(recording)["digest"] == summary_of(in_order)["digest"]


def summary_of(recording: Path) -> dict:
    result = run("--replay-file", str(recording), "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output.splitlines()[-1])


def test_a_watch_bundle_holds_the_messages_up_to_its_step_and_opens_verified(bundle):
    data = json.loads(bundle.read_text())
    assert bundle.read_text().startswith('{\n  "schema": "kvviz.watch-bundle/2"')
    recorded = [json.loads(line) for line in VLLM.read_text().splitlines()[:300]]
    assert data["messages"] == recorded  # base64 as the recording has it
    assert [s for s, _ in data["digests"]] == list(range(301))  # a digest after every step
    result = open_bundle(bundle)
    assert result.exit_code == 0, result.output
    assert "replayed 300 messages: every digest matches" in result.output
    assert result.output.splitlines()[1].startswith("Batch 300 (seq 299): ")


def tampered(bundle: Path, tmp_path: Path, change) -> Path:
    data = json.loads(bundle.read_text())
    change(data)
    out = tmp_path / "tampered.json"
    out.write_text(json.dumps(data))  # keys in any order: still a watch bundle by its schema
    return out


def test_a_bundle_whose_messages_were_changed_diverges(bundle, tmp_path):
    def swap(data):  # batch 271 (messages[270]) replaced by batch 272's bytes
        data["messages"][270]["payload"] = data["messages"][271]["payload"]

    result = open_bundle(tampered(bundle, tmp_path, swap))
    assert result.exit_code == 1
    assert "replay diverges from the bundle: step 271 diverges: replay gives digest" in result.output


@pytest.mark.parametrize("change, words", [
    (lambda d: d["digests"].__setitem__(256, [256, "0" * 64]), "step 256 diverges"),
    (lambda d: d["digests"].pop(1), "records digests at steps 0, 2, 3"),
    (lambda d: d["summary"].__setitem__("peak_blocks", 12), "summary disagrees with its replay: peak_blocks"),
    (lambda d: d.__setitem__("narration", "nothing happened"), "narration of step 300"),
], ids=["digest", "digest-dropped", "summary", "narration"])
def test_a_bundle_whose_claims_were_edited_diverges(bundle, tmp_path, change, words):
    result = open_bundle(tampered(bundle, tmp_path, change))
    assert result.exit_code == 1 and words in result.output, result.output


@pytest.mark.parametrize("change, words", [
    (lambda d: d.__setitem__("extra", 1), "unknown field(s) 'extra'"),
    (lambda d: d["messages"][3].__setitem__("payload", "not base64!"), "messages[3].payload is not valid base64"),
    (lambda d: d["messages"][3].__setitem__("payload", 7), "messages[3].payload must be a base64 string"),
    (lambda d: d["messages"][3].__setitem__("topic_b64", "a!"), "messages[3].topic_b64 is not valid base64"),
    (lambda d: d["messages"].pop(), "field 'step' is 300 but the bundle holds 299 messages"),
], ids=["unknown-field", "base64", "base64-not-a-string", "topic-base64", "count"])
def test_a_malformed_bundle_is_bad_input(bundle, tmp_path, change, words):
    result = open_bundle(tampered(bundle, tmp_path, change))
    assert result.exit_code == 2 and words in result.output, result.output
    assert len(result.output.splitlines()) == 1


def test_the_markdown_report_draws_the_forest_bounded_with_the_steps_chains(tmp_path):
    out = tmp_path / "step-120.md"
    result = run("--replay-file", str(VLLM), "--export-step", "120", "-o", str(out))
    assert result.exit_code == 0, result.output
    text = out.read_text()
    line = VLLM.read_text().splitlines()[119]
    _ts, events, _rank = unpack(base64.b64decode(json.loads(line)["payload"]))
    stored_here = sum(len(f["block_hashes"]) for kind, f in map(event_fields, events) if kind == "BlockStored")
    cached = expected_figures(first_lines(VLLM, 120, tmp_path / "first.jsonl"))["cached_blocks"]
    assert "```mermaid\ngraph LR\n" in text
    assert text.count(" new\n") == stored_here > 0  # every block the step stored is drawn, green
    assert f'more["… and {cached - 200:,} more blocks"]' in text
    assert f"| GPU | {cached:,} |" in text and "| blocks cached now | " in text
    assert "#lt;br/#gt;" not in text


def test_the_markdown_report_draws_the_blocks_a_clear_took_out_as_removed():
    import msgspec

    from kvviz.watch.recording import Message
    from kvviz.watch.wire import key_label
    from kvviz.watch.markdown import forest_mermaid
    from kvviz.watch.timeline import WatchTimeline

    def stored(keys, parent=None):
        return {"type": "BlockStored", "block_hashes": keys, "parent_block_hash": parent,
                "token_ids": list(range(len(keys))), "block_size": 1, "medium": "GPU"}

    batches = [[stored([11, 12])], [stored([13], 12), {"type": "AllBlocksCleared"}, stored([14])]]
    timeline = WatchTimeline.from_messages(Message(b"kv", seq, msgspec.msgpack.encode([1.0, events, 0]))
                                           for seq, events in enumerate(batches))
    graph = forest_mermaid(timeline, 2)
    lines = graph.splitlines()
    for key in (11, 12, 13):  # cached before the clear, or stored by the batch before it
        node = next(line.split("[")[0].strip() for line in lines if f"{key_label(key)} · cleared" in line)
        assert f"  class {node} removed" in lines
    assert key_label(14) in graph and f"{key_label(14)} · cleared" not in graph  # stored after it: cached


def test_an_export_never_overwrites_its_recording_and_names_its_formats(tmp_path):
    copy = first_lines(VLLM, 20, tmp_path / "rec.json")
    before = copy.read_text()
    result = run("--replay-file", str(copy), "-o", str(copy))
    assert result.exit_code == 2 and "refusing to overwrite an input" in result.output
    assert copy.read_text() == before
    result = run("--replay-file", str(copy), "-o", str(tmp_path / "x.svg"))
    assert result.exit_code == 2 and "a watch exports as .json or .md" in result.output


# -- bad input ---------------------------------------------------------------------------------


def test_a_bad_recording_line_is_located_as_file_line_column(tmp_path):
    bad = tmp_path / "bad.jsonl"
    lines = VLLM.read_text().splitlines()[:3]
    bad.write_text(lines[0] + "\n" + lines[1] + "\n" + '{"topic": "kv", "seq": 2, "payload": }\n')
    result = run("--replay-file", str(bad), "--json")
    assert result.exit_code == 2
    assert result.output.startswith(f"kvviz: error: {bad}:3:") and len(result.output.splitlines()) == 1


def test_a_recording_cut_off_mid_line_replays_with_one_warning_naming_the_line(tmp_path):
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(VLLM.read_bytes()[:100_000])
    whole = VLLM.read_bytes()[:100_000].count(b"\n")
    result = run("--replay-file", str(cut), "--json")
    assert result.exit_code == 0
    assert result.stderr == (f"{cut}:{whole + 1}: the last line is cut off "
                             "(a recording whose writer stopped mid-line): ignored\n")
    (summary,) = json_lines(result.stdout)
    assert summary["messages"] == whole


def test_record_into_an_existing_file_is_refused_in_one_line_and_the_file_kept(tmp_path, monkeypatch):
    from kvviz.watch import subscriber

    def no_socket(*args, **kwargs):
        raise AssertionError("subscribed before refusing --record")
    monkeypatch.setattr(subscriber, "Subscriber", no_socket)
    shared = tmp_path / "shared.jsonl"
    shared.write_text(VLLM.read_text())
    shared.chmod(0o444)
    result = run(f"tcp://127.0.0.1:{free_port()}", "--print", "--count", "1", "--record", str(shared))
    assert (result.exit_code, result.output) == (
        2, f"kvviz: error: {shared} exists: kvviz never overwrites a recording; remove it or name another\n")
    assert shared.read_text() == VLLM.read_text()


def test_ranks_past_the_open_files_limit_are_one_line_of_bad_input_not_a_traceback():
    import resource

    def few_files():
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
    done = subprocess.run(
        [sys.executable, "-m", "kvviz", "watch", f"tcp://127.0.0.1:{free_port()}", "--ranks", "200",
         "--print", "--count", "1", "--max-seconds", "5"],
        capture_output=True, text=True, timeout=DEADLINE_S, preexec_fn=few_files, start_new_session=True)
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert len(done.stderr.splitlines()) == 1 and "open files" in done.stderr and "Traceback" not in done.stderr


def test_ranks_past_the_bound_are_refused_before_any_socket():
    result = run(f"tcp://127.0.0.1:{free_port()}", "--ranks", "257", "--print", "--count", "1", "--max-seconds", "3")
    assert result.exit_code == 2 and "257" in result.output


def test_an_undecodable_payload_is_counted_not_fatal(tmp_path):
    rec = tmp_path / "garbage.jsonl"
    lines = VLLM.read_text().splitlines()[:3]
    garbage = json.dumps({"topic": "kv", "seq": 3, "payload": base64.b64encode(b"\xc1\x00").decode()})
    rec.write_text("\n".join(lines + [garbage]) + "\n")
    (summary,) = json_lines(run("--replay-file", str(rec), "--json").output)
    assert summary["undecodable"] == 1 and summary["undecodable_list"][0]["seq"] == 3 and summary["messages"] == 4


@pytest.mark.parametrize("args, words", [
    ([], "give an ENDPOINT"),
    (["tcp://127.0.0.1:1", "--replay-file", "x"], "not both"),
    (["--replay-file", "x", "--every", "3"], "--every needs --print or --json"),
    (["--replay-file", "x", "--print", "--json"], "exclude each other"),
    (["--replay-file", "x", "--count", "3", "--print"], "--count subscribe(s) to a live server"),
    (["tcp://127.0.0.1:1", "-o", "x.json"], "work(s) on a recording"),
    (["tcp://127.0.0.1:1", "--count", "3"], "add --print or --json"),
    (["--replay-file", "x", "--export-step", "3"], "--export-step needs -o"),
    (["--replay-file", "/nonexistent/rec.jsonl", "--print"], "no such file"),
], ids=lambda value: value if isinstance(value, str) else None)
def test_flags_that_cannot_go_together_are_one_line_of_bad_input(args, words):
    result = run(*args)
    assert result.exit_code == 2 and words in result.output, result.output
    assert len(result.output.splitlines()) == 1


def test_the_ui_without_a_terminal_is_refused_naming_print():
    result = run("--replay-file", str(VLLM))
    assert result.exit_code == 2 and "--print" in result.output and "terminal" in result.output


def test_against_a_scenario_that_is_missing_or_not_for_a_hash_cache_is_bad_input(tmp_path):
    result = run("--replay-file", str(VLLM), "--against", str(tmp_path / "none.kvs"))
    assert result.exit_code == 2 and "no such file" in result.output
    trie = tmp_path / "trie.kvs"
    trie.write_text("cache trie pages=4 tokens_per_page=2\nacquire a 1 2\n")
    result = run("--replay-file", str(VLLM), "--against", str(trie))
    assert result.exit_code == 2 and len(result.output.splitlines()) == 1, result.output


@pytest.mark.parametrize("option, noun, special, missing", [
    ("--against", "scenario", "a .kvs scenario", "a .kvs scenario"),
    ("--explain", "prompt", "a prompt file (token ids, or text with --tokenizer)",
     "a prompt: token ids, or text with --tokenizer"),
])
def test_a_scenario_or_prompt_file_that_is_missing_a_folder_or_too_large_is_refused_in_one_line(
        tmp_path, monkeypatch, option, noun, special, missing):
    from kvviz.core import limits

    def refusal(path) -> str:
        result = run("--replay-file", str(VLLM), option, str(path), "--print")
        assert result.exit_code == 2 and len(result.output.splitlines()) == 1, result.output
        return result.output.strip().removeprefix("kvviz: error: ")

    assert refusal(tmp_path / "none") == f"{tmp_path / 'none'}: no such file (expected {missing})"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert refusal(fifo) == f"{fifo}: is a FIFO (named pipe), not a regular file (expected {special})"
    big = tmp_path / "big"
    big.write_text("1 2 3 4 5 6 7 8 9 10\n")
    monkeypatch.setattr(limits, "MAX_SOURCE_BYTES", 12)
    assert refusal(big) == f"{big}: 21 bytes is more than a {noun} may have (12, MAX_SOURCE_BYTES)"


def test_an_against_scenario_that_is_not_utf8_is_refused_at_its_byte(tmp_path):
    scenario = tmp_path / "latin1.kvs"
    scenario.write_bytes(b"# caf\xe9\n")
    result = run("--replay-file", str(VLLM), "--against", str(scenario), "--print")
    assert result.exit_code == 2 and result.output == (
        f"kvviz: error: {scenario}: not UTF-8 text at byte 5 (expected a .kvs scenario)\n"), result.output


def test_to_kvs_writes_the_recording_as_a_scenario(tmp_path):
    out = tmp_path / "rec.kvs"
    result = run("--replay-file", str(first_lines(VLLM, 5, tmp_path / "five.jsonl")), "--to-kvs", str(out))
    assert result.exit_code == 0, result.output
    assert "cache hash" in out.read_text()


@pytest.mark.parametrize("missing, args", [
    ("msgspec", ["--replay-file", str(VLLM), "--print"]),
    ("zmq", ["tcp://127.0.0.1:9", "--print", "--count", "1"]),
], ids=["msgspec", "zmq"])
def test_without_the_watch_extra_watch_says_how_to_install_it_in_one_line(missing, args):
    code = (f"import sys; sys.modules[{missing!r}] = None\n"
            "from kvviz.cli import main\n"
            f"sys.argv = ['kvviz', 'watch', *{args!r}]\n"
            "main()\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=DEADLINE_S)
    assert (done.returncode, done.stderr, done.stdout) == (2, EXTRA_LINE + "\n", "")


# -- live --------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_live_watch_follows_a_publisher_records_what_it_received_and_sums_it_up(tmp_path):
    pub, router = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"steps": [{"send": 40}, {"skip": 3}, {"send": 10}]}))
    publisher = subprocess.Popen(
        [sys.executable, str(PUBLISHER), "--pub", pub, "--router", router, "--recording", str(VLLM),
         "--script", str(script), "--deadline", str(DEADLINE_S)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    record = tmp_path / "live.jsonl"
    try:
        watch = subprocess.run(
            [sys.executable, "-m", "kvviz", "watch", pub, "--topic", "kv", "--json", "--count", "50",
             "--max-seconds", str(DEADLINE_S - 10), "--record", str(record)],
            capture_output=True, text=True, timeout=DEADLINE_S)
    finally:
        if publisher.poll() is None:
            os.killpg(publisher.pid, signal.SIGKILL)
        publisher.wait(timeout=DEADLINE_S)
    assert watch.returncode == 0, watch.stderr
    (summary,) = json_lines(watch.stdout)
    recorded = [json.loads(line) for line in record.read_text().splitlines()]
    original = [json.loads(line) for line in VLLM.read_text().splitlines()]
    assert [r["seq"] for r in recorded] == list(range(40)) + list(range(43, 53))
    assert [r["payload"] for r in recorded] == [o["payload"] for o in original[:40] + original[43:53]]
    expected = expected_figures(record)  # the independent decode of what was received
    assert {key: summary[key] for key in expected} == expected
    assert summary["gaps"] == 1 and summary["missing_messages"] == 3
    assert summary["gap_list"] == [{"step": 41, "rank": 0, "first": 40, "last": 42}]


def publish(tmp_path: Path, steps: list[dict]):
    """A publisher process playing ``steps`` of the vLLM recording; its address."""
    pub, router = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"steps": steps}))
    publisher = subprocess.Popen(
        [sys.executable, str(PUBLISHER), "--pub", pub, "--router", router, "--recording", str(VLLM),
         "--script", str(script), "--deadline", str(DEADLINE_S)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    return pub, publisher


def end(publisher) -> None:
    if publisher.poll() is None:
        os.killpg(publisher.pid, signal.SIGKILL)
    publisher.wait(timeout=DEADLINE_S)


def test_ctrl_c_with_messages_received_but_not_polled_sums_up_what_the_recording_holds(tmp_path, monkeypatch):
    """Ctrl-C lands while the subscriber holds 83 messages (recorded, queued, not yet polled):
    the summary counts the 83 the recording has, not what the loop had taken."""
    from kvviz.watch.subscriber import Subscriber
    from kvviz.watch import command as watch_command

    real_start, real_poll = watch_command._start, Subscriber.poll
    interrupted = []

    def start_then_wait_for_all(subscriber):
        real_start(subscriber)
        deadline = time.monotonic() + DEADLINE_S - 10
        while subscriber.stats.messages < 83 and time.monotonic() < deadline:
            time.sleep(0.01)  # a bounded poll, not synchronisation by sleeping

    def poll_interrupted_once(subscriber, max_items=1000):
        if not interrupted:
            interrupted.append(True)
            raise KeyboardInterrupt
        return real_poll(subscriber, max_items)

    monkeypatch.setattr(watch_command, "_start", start_then_wait_for_all)
    monkeypatch.setattr(Subscriber, "poll", poll_interrupted_once)
    pub, publisher = publish(tmp_path, [{"send": 83}])
    record = tmp_path / "live.jsonl"
    try:
        result = run(pub, "--topic", "kv", "--json", "--record", str(record))
    finally:
        end(publisher)
    assert result.exit_code == 0 and interrupted
    (summary,) = json_lines(result.stdout)
    assert len(record.read_text().splitlines()) == 83 and summary["messages"] == 83


def test_count_records_the_messages_it_counts_no_more(tmp_path):
    pub, publisher = publish(tmp_path, [{"send": 83}])
    record = tmp_path / "live.jsonl"
    try:
        watch = subprocess.run(
            [sys.executable, "-m", "kvviz", "watch", pub, "--topic", "kv", "--json", "--count", "50",
             "--max-seconds", str(DEADLINE_S - 10), "--record", str(record)],
            capture_output=True, text=True, timeout=DEADLINE_S)
    finally:
        end(publisher)
    (summary,) = json_lines(watch.stdout)
    recorded = [json.loads(line)["seq"] for line in record.read_text().splitlines()]
    assert recorded == list(range(50)) and summary["messages"] == 50


def test_a_live_watch_that_received_nothing_says_what_to_check_and_exits_1():
    from kvviz.watch.subscriber import NOTHING_ARRIVED_HINT

    silent = f"tcp://127.0.0.1:{free_port()}"  # nothing listens there: no handshake
    watch = subprocess.run([sys.executable, "-m", "kvviz", "watch", silent, "--print", "--max-seconds", "0.3"],
                           capture_output=True, text=True, timeout=DEADLINE_S)
    assert watch.returncode == 1
    assert watch.stderr == f"kvviz: no messages arrived from {silent} (not connected): {NOTHING_ARRIVED_HINT}\n"
    assert "0 messages" in watch.stdout  # the summary still comes


def test_a_live_watch_of_a_wrong_topic_says_it_connected_but_nothing_came(tmp_path):
    pub, publisher = publish(tmp_path, [{"send": 5}])
    try:
        watch = subprocess.run([sys.executable, "-m", "kvviz", "watch", pub, "--topic", "nope", "--json",
                                "--max-seconds", "1.5"], capture_output=True, text=True, timeout=DEADLINE_S)
    finally:
        end(publisher)
    assert watch.returncode == 1 and f"from {pub} (connected): the usual causes" in watch.stderr


def requests_kvs(tmp_path: Path, **options) -> Path:
    """The scenario of the requests that made the vLLM recording (H5's recipe, README of the data)."""
    from kvviz.watch.to_kvs import requests_scenario
    from kvviz.core.mooncake import read_trace

    requests = read_trace(DATA.parent / "mooncake" / "conversation_trace.jsonl", first=400).requests
    out = tmp_path / "requests.kvs"
    out.write_text(requests_scenario(requests, **options))
    return out


def test_against_the_requests_that_made_the_vllm_recording_agrees_and_exits_0(tmp_path):
    result = run("--replay-file", str(VLLM), "--against", str(requests_kvs(tmp_path)))
    assert result.exit_code == 0, result.output
    assert "batches agreeing event for event: 400 of 400" in result.output.splitlines()


def test_against_a_smaller_cache_than_the_servers_disagrees_and_exits_1(tmp_path):
    result = run("--replay-file", str(VLLM), "--against", str(requests_kvs(tmp_path, gpu_blocks=1000)), "--json")
    assert result.exit_code == 1, result.output
    (report,) = json_lines(result.output)
    assert report["agrees"] is False and report["first_divergence"] is not None


TRACE = DATA.parent / "mooncake" / "conversation_trace.jsonl"


def test_against_trace_builds_the_recordings_requests_itself_and_agrees_with_vllm():
    result = run("--replay-file", str(VLLM), "--against-trace", str(TRACE))  # --first: one per message
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert "batches agreeing event for event: 400 of 400" in lines
    assert "2,999 pages of 16 tokens, recompute_last_token" in lines[0]


def test_against_trace_names_the_trace_once_and_no_server_on_the_sglang_recording():
    result = run("--replay-file", str(SGLANG), "--against-trace", str(TRACE), "--print")
    first = result.output.splitlines()[0]
    assert first.count(str(TRACE)) == 1 and "vLLM" not in first, first


def test_to_kvs_on_pages_of_one_token_says_1_token(tmp_path):
    out = tmp_path / "one.kvs"
    result = run("--replay-file", str(VLLM), "--to-kvs", str(out), "--tokens-per-page", "1")
    assert result.exit_code == 0 and "pages of 1 token;" in result.output and "1 tokens" not in out.read_text()


def test_against_trace_sized_as_another_server_disagrees_and_exits_1():
    result = run("--replay-file", str(VLLM), "--against-trace", str(TRACE), "--first", "400", "--pages", "999",
                 "--json")
    assert result.exit_code == 1, result.output
    (report,) = json_lines(result.output)
    assert report["agrees"] is False and report["first_divergence"] is not None


def test_to_kvs_of_mixed_block_sizes_says_the_page_size_it_chose_and_takes_the_one_given(tmp_path):
    recording = tmp_path / "mixed.jsonl"
    batches = [[1.0, [{"type": "BlockStored", "block_hashes": [1], "parent_block_hash": None,
                       "token_ids": list(range(16)), "block_size": 16, "medium": "GPU"}], 0],
               [2.0, [{"type": "BlockStored", "block_hashes": [2], "parent_block_hash": None,
                       "token_ids": list(range(32)), "block_size": 32, "medium": "cpu"}], 0],
               [3.0, [{"type": "BlockStored", "block_hashes": [3], "parent_block_hash": 1,
                       "token_ids": list(range(16, 32)), "block_size": 16, "medium": "GPU"}], 0]]
    import msgspec

    recording.write_text("".join(json.dumps({"topic": "kv", "seq": seq, "payload": base64.b64encode(
        msgspec.msgpack.encode(batch)).decode()}) + "\n" for seq, batch in enumerate(batches)))
    out = tmp_path / "mixed.kvs"
    converted = run("--replay-file", str(recording), "--to-kvs", str(out))
    assert converted.exit_code == 0, converted.output
    assert "pages of 16 tokens (the size most chains have)" in converted.stderr
    assert "--tokens-per-page N for another" in converted.stderr
    assert CliRunner().invoke(cli, ["check", str(out)]).exit_code == 0
    given = run("--replay-file", str(recording), "--to-kvs", str(out), "--tokens-per-page", "32", "--pages", "7")
    assert given.exit_code == 0, given.output
    assert "cache hash pages=7 tokens_per_page=32" in out.read_text()


@pytest.mark.parametrize("args, word", [
    (["--pages", "9"], "--pages sizes the cache of --to-kvs OUT or --against-trace TRACE"),
    (["--first", "9"], "--first N counts the requests of --against-trace TRACE"),
    (["--against-trace", "t.jsonl", "--against", "s.kvs"], "does not combine with --against, -o or --to-kvs"),
])
def test_sizing_and_trace_flags_out_of_place_are_bad_input_in_one_line(args, word):
    result = run("--replay-file", str(VLLM), *args)
    assert result.exit_code == 2 and word in result.output and len(result.output.strip().splitlines()) == 1


def test_to_kvs_dash_writes_the_scenario_to_stdout_and_no_file_named_dash(tmp_path, monkeypatch):
    five = first_lines(VLLM, 5, tmp_path / "five.jsonl")
    monkeypatch.chdir(tmp_path)
    result = run("--replay-file", str(five), "--to-kvs", "-")
    assert result.exit_code == 0, result.output
    assert "cache hash" in result.stdout and result.stderr.startswith("wrote the scenario to stdout (5 messages")
    assert not (tmp_path / "-").exists()


def batch_line(seq: int, events: list[dict]) -> str:
    import msgspec

    payload = msgspec.msgpack.encode([float(seq), events, 0])
    return json.dumps({"topic": "kv", "seq": seq, "payload": base64.b64encode(payload).decode()})


def chain(seq: int, tokens: list[int]) -> dict:
    return {"type": "BlockStored", "block_hashes": [seq + 1], "parent_block_hash": None, "token_ids": tokens,
            "block_size": len(tokens), "lora_id": None, "medium": "GPU"}


def test_a_changed_message_whose_effect_is_gone_a_step_later_diverges_at_its_own_step(tmp_path):
    # Step 2 stores block 2, step 3 removes it: the forest after step 3 is the same whatever
    # tokens step 2 stored, so only a digest of step 2 itself can tell the change.
    lines = [batch_line(0, [chain(0, [1, 2])]), batch_line(1, [chain(1, [3, 4])]),
             batch_line(2, [{"type": "BlockRemoved", "block_hashes": [2], "medium": "GPU"}]),
             batch_line(3, [chain(3, [7, 8])])]
    recording = tmp_path / "r.jsonl"
    recording.write_text("\n".join(lines) + "\n")
    out = tmp_path / "b.json"
    assert run("--replay-file", str(recording), "-o", str(out)).exit_code == 0

    def other_tokens(data):
        data["messages"][1] = json.loads(batch_line(1, [chain(1, [5, 6])]))

    result = open_bundle(tampered(out, tmp_path, other_tokens))
    assert result.exit_code == 1
    assert "replay diverges from the bundle: step 2 diverges" in result.output


def test_writing_and_opening_a_bundle_never_serialises_a_whole_forest(tmp_path, monkeypatch):
    from kvviz.watch.forest import ForestState

    def whole_forest(_state):
        raise AssertionError("an O(blocks) serialisation of a forest")

    monkeypatch.setattr(ForestState, "to_dict", whole_forest)  # the digest must not need it
    out = tmp_path / "b.json"
    assert run("--replay-file", str(VLLM), "-o", str(out)).exit_code == 0
    result = open_bundle(out)
    assert result.exit_code == 0 and "replayed 400 messages: every digest matches" in result.output


def test_a_bundle_past_the_step_limit_is_refused_before_any_replay_on_both_sides(bundle, tmp_path, monkeypatch):
    from kvviz.watch import bundle as watch_bundle
    from kvviz.watch.timeline import WatchTimeline

    def no_replay(*_args, **_kwargs):
        raise AssertionError("replayed before the bound was checked")

    monkeypatch.setattr(watch_bundle, "MAX_WATCH_BUNDLE_STEPS", 299)
    result = run("--replay-file", str(VLLM), "--export-step", "300", "-o", str(tmp_path / "x.json"))
    assert result.exit_code == 2 and "more than the 299 steps `kvviz open` replays" in result.output
    assert not (tmp_path / "x.json").exists()
    monkeypatch.setattr(WatchTimeline, "from_messages", no_replay)
    result = open_bundle(bundle)
    assert result.exit_code == 2 and "field 'step' is 300, more than the 299 steps" in result.output
    assert len(result.output.splitlines()) == 1


def test_a_bundle_of_an_earlier_schema_is_refused_with_the_reason_not_called_a_divergence(bundle, tmp_path):
    result = open_bundle(tampered(bundle, tmp_path, lambda d: d.__setitem__("schema", "kvviz.watch-bundle/1")))
    assert result.exit_code == 2 and "is an earlier kvviz's" in result.output and "--export-step" in result.output
    assert len(result.output.splitlines()) == 1
