# SPDX-License-Identifier: Apache-2.0
"""``kvviz watch --explain``: why a prompt would hit or miss, checked against an independent replay
of the shared vLLM recording (a dictionary of chain contents, written here from the README's
wire format), and on small streams for the causes the recording never shows."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import pytest

msgspec = pytest.importorskip("msgspec", reason="the watch extra is not installed")  # the CI installs it

from kvviz.watch.recording import Message, read_recording  # noqa: E402
from kvviz.watch.timeline import WatchTimeline  # noqa: E402
from kvviz.watch.explain import CAUSES, PromptError, explain, read_prompt  # noqa: E402
from kvviz.watch.to_kvs import scaled_prompt  # noqa: E402

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
VLLM = DATA / "kv-events" / "vllm-0.33.0-conversation-400.jsonl"
TRACE = DATA / "mooncake" / "conversation_trace.jsonl"
B = 16


@lru_cache(maxsize=1)
def vllm_timeline() -> WatchTimeline:
    return WatchTimeline.from_messages(read_recording(VLLM), source=str(VLLM))


@lru_cache(maxsize=1)
def requests() -> list[dict]:
    with open(TRACE, encoding="utf-8") as lines:
        return [json.loads(line) for _, line in zip(range(400), lines)]


def prompt_of(i: int) -> tuple[int, ...]:
    request = requests()[i]
    return scaled_prompt(request["hash_ids"], request["input_length"], B)


@lru_cache(maxsize=1)
def independent_replay() -> list[tuple[int, str, int]]:
    """Every (step, "stored"|"removed", content) of the recording, where a block's content is the
    tuple (parent's content, its tokens) interned as an int, decoded straight from msgpack."""
    ids: dict[tuple, int] = {}
    by_hash: dict[int, int] = {}
    out = []
    with open(VLLM, encoding="utf-8") as lines:
        for step, line in enumerate(lines, start=1):
            import base64
            _ts, events, _rank = msgspec.msgpack.decode(base64.b64decode(json.loads(line)["payload"]))
            for event in events:
                if event["type"] == "BlockStored":
                    parent = event.get("parent_block_hash")
                    content = None if parent is None else by_hash[parent]
                    for i, h in enumerate(event["block_hashes"]):
                        tokens = tuple(event["token_ids"][i * B:(i + 1) * B])
                        content = ids.setdefault((content, tokens), len(ids))
                        by_hash[h] = content
                        out.append((step, "stored", content))
                elif event["type"] == "BlockRemoved":
                    out.extend((step, "removed", by_hash[h]) for h in event["block_hashes"])
    return out, ids


def truth(prompt: tuple[int, ...], at: int) -> dict:
    """The first missing block of ``prompt`` at step ``at`` by the independent replay: its index, and
    when it was last stored and removed (None: never)."""
    events, ids = independent_replay()
    live: dict[int, int] = {}
    stored_at: dict[int, int] = {}
    removed_at: dict[int, int] = {}
    for step, kind, content in events:
        if step > at:
            break
        if kind == "stored":
            if not live.get(content):
                stored_at[content] = step
                removed_at.pop(content, None)
            live[content] = live.get(content, 0) + 1
        else:
            live[content] -= 1
            if not live[content]:
                removed_at[content] = step
    content = None
    for index in range(len(prompt) // B):
        content = ids.get((content, tuple(prompt[index * B:(index + 1) * B])))
        if content is None or not live.get(content):
            return {"block": index, "stored": stored_at.get(content), "removed": removed_at.get(content)}
    return {"block": None, "stored": None, "removed": None}


def test_a_request_cached_in_full_is_a_proven_hit_and_its_tail_is_never_cached():
    prompt = prompt_of(120)
    assert truth(prompt, 121)["block"] is None
    found = explain(vllm_timeline(), prompt, 121).to_dict()
    assert found["cause"] == "hit" and found["proven"] is True
    assert found["matched_blocks"] == found["full_blocks"] == len(prompt) // B
    assert found["hit_tokens"] == len(prompt) // B * B and found["block"] is None
    assert "never cached" in found["evidence"]


def test_a_request_whose_blocks_were_removed_earlier_is_evicted_at_the_step_the_replay_names():
    found_any = 0
    for at in range(150, 400, 25):
        for i in range(at - 1):
            expected = truth(prompt_of(i), at)
            if expected["removed"] is None or expected["block"] is None:
                continue
            found = explain(vllm_timeline(), prompt_of(i), at).to_dict()
            assert (found["cause"], found["block"], found["removed_at_step"], found["stored_at_step"]) == (
                "evicted", expected["block"], expected["removed"], expected["stored"])
            assert found["proven"] is True and found["removed_at_seq"] == found["removed_at_step"] - 1
            found_any += 1
            break
    assert found_any >= 5


def test_a_request_never_seen_before_its_batch_is_first_seen():
    checked = 0
    for i in range(1, 400, 37):
        expected = truth(prompt_of(i), i)
        if expected["block"] is None or expected["stored"] is not None:
            continue
        found = explain(vllm_timeline(), prompt_of(i), i).to_dict()
        assert (found["cause"], found["block"], found["proven"]) == ("first-seen", expected["block"], True)
        assert found["matched_blocks"] == expected["block"]
        checked += 1
    assert checked >= 5


def test_a_prompt_cut_inside_a_cached_block_diverged_at_that_token():
    prompt = list(prompt_of(120))
    prompt[3 * B + 5] = 999_999_999  # a token no hash id spells
    found = explain(vllm_timeline(), prompt, 121).to_dict()
    assert (found["cause"], found["block"], found["diverged_at_token"]) == ("diverged", 3, 3 * B + 5)
    assert found["matched_blocks"] == 3 and found["hit_tokens"] == 3 * B
    assert 999_999_999 in found["context"]["prompt"] and 999_999_999 not in found["context"]["cached"]


def test_a_ten_token_prompt_is_below_one_block():
    found = explain(vllm_timeline(), prompt_of(0)[:10], 200).to_dict()
    assert (found["cause"], found["proven"], found["full_blocks"], found["block"]) == ("below-block", True, 0, None)


def test_a_gap_before_the_step_makes_the_verdict_unknown_never_a_confident_cause(tmp_path):
    messages = read_recording(VLLM)
    # Drop the batch that stored request 100's blocks: the stream alone would call it first-seen.
    timeline = WatchTimeline.from_messages(messages[:100] + messages[101:], source="gap")
    found = explain(timeline, prompt_of(100), 120).to_dict()
    assert found["cause"] == "unknown" and found["proven"] is False
    assert any(reason.startswith("gap at step 101") for reason in found["incomplete"])
    assert found["suggested"] in CAUSES


def test_the_json_has_every_documented_field():
    from kvviz.watch.json_output import WATCH_JSON_HELP

    found = explain(vllm_timeline(), prompt_of(5), 6).to_dict()
    for name in ("cause", "proven", "step", "block_size", "prompt_tokens", "full_blocks", "matched_blocks",
                 "hit_tokens", "block", "diverged_at_token", "removed_at_step", "stored_at_step", "medium",
                 "evidence"):
        assert name in found
        assert f"{name}" in WATCH_JSON_HELP
    for name in found:
        assert name in WATCH_JSON_HELP, name


# -- causes the shared recording never shows ------------------------------------------------------


def _message(seq: int, events: list) -> Message:
    return Message(topic=b"kv", seq=seq, payload=msgspec.msgpack.encode([1.0, events, 0]), rank=0)


def _stored(hashes, tokens, parent=None, medium="GPU", lora=None) -> dict:
    return {"type": "BlockStored", "block_hashes": list(hashes), "parent_block_hash": parent,
            "token_ids": list(tokens), "block_size": 2, "lora_id": lora, "medium": medium}


def test_the_same_tokens_on_another_tier_only_are_other_medium():
    timeline = WatchTimeline.from_messages([_message(0, [_stored([1, 2], [5, 6, 7, 8])]),
                                            _message(1, [_stored([9], [1, 1], medium="CPU", parent=2)])])
    found = explain(timeline, [5, 6, 7, 8, 1, 1]).to_dict()
    assert (found["cause"], found["block"], found["medium"], found["proven"]) == ("other-medium", 2, "CPU", True)


def test_the_same_tokens_under_another_lora_are_extra_keys_and_only_suggested():
    timeline = WatchTimeline.from_messages([_message(0, [_stored([1], [5, 6], lora=7)])])
    found = explain(timeline, [5, 6, 7]).to_dict()
    assert (found["cause"], found["proven"], found["keys"]) == ("extra-keys", False, {"request": None, "cached": [7]})


def test_a_block_cleared_by_the_server_is_evicted_at_the_clear():
    timeline = WatchTimeline.from_messages([_message(0, [_stored([1], [5, 6])]),
                                            _message(1, [{"type": "AllBlocksCleared"}])])
    found = explain(timeline, [5, 6]).to_dict()
    assert (found["cause"], found["stored_at_step"], found["removed_at_step"]) == ("evicted", 1, 2)


def test_a_late_attach_makes_first_seen_unknown_but_leaves_a_hit_proven():
    timeline = WatchTimeline.from_messages([_message(40, [_stored([1], [5, 6])])])
    assert explain(timeline, [5, 6]).to_dict()["cause"] == "hit"
    found = explain(timeline, [8, 9]).to_dict()
    assert (found["cause"], found["suggested"]) == ("unknown", "first-seen")
    assert "late attach" in found["incomplete"][0]


def test_a_prompt_is_read_from_json_or_plain_ints_and_bad_input_names_its_place():
    assert read_prompt("[1, 2, 3]", "p.json") == (1, 2, 3)
    assert read_prompt("1 2\n3\n", "p.txt") == (1, 2, 3)
    with pytest.raises(PromptError, match=r"^p.txt:2:3: 'x' is not a token id"):
        read_prompt("1 2\n4 x\n", "p.txt")
    with pytest.raises(PromptError, match=r"^p.json:1:\d+: "):
        read_prompt("[1, 2", "p.json")
    with pytest.raises(PromptError, match="item 1"):
        read_prompt("[1, -2]", "p.json")


# -- the command -----------------------------------------------------------------------------------


def _watch(*args: str, stdin: str | None = None):
    from click.testing import CliRunner

    from kvviz.cli import cli

    return CliRunner().invoke(cli, ["watch", *args], input=stdin, catch_exceptions=False)


def test_the_command_explains_a_prompt_from_a_file_or_stdin_as_json_or_lines(tmp_path):
    request = tmp_path / "r120.json"
    request.write_text(json.dumps(list(prompt_of(120))))
    result = _watch("--replay-file", str(VLLM), "--explain", str(request), "--at", "121", "--json")
    assert result.exit_code == 0, result.output
    record = json.loads(result.output)
    assert (record["type"], record["cause"], record["step"], record["seq"]) == ("explain", "hit", 121, 120)
    result = _watch("--replay-file", str(VLLM), "--explain", "-", "--at", "121", "--print",
                    stdin=" ".join(map(str, prompt_of(120))))
    assert result.exit_code == 0 and result.output.startswith("hit (proven by the stream) at step 121 (seq 120)")


def test_the_command_refuses_a_bad_prompt_or_step_in_one_line(tmp_path):
    request = tmp_path / "bad.txt"
    request.write_text("1 2 three")
    result = _watch("--replay-file", str(VLLM), "--explain", str(request), "--json")
    assert result.exit_code == 2 and f"{request}:1:5: 'three' is not a token id" in result.output
    request.write_text("1 2")
    result = _watch("--replay-file", str(VLLM), "--explain", str(request), "--at", "401", "--json")
    assert result.exit_code == 2 and "step 401 does not exist" in result.output
    result = _watch("--replay-file", str(VLLM), "--at", "3", "--json")
    assert result.exit_code == 2 and "--at STEP is the step --explain REQUEST asks about" in result.output
    result = _watch("--replay-file", str(VLLM), "--explain", str(request), "--against", "x.kvs")
    assert result.exit_code == 2 and "does not combine with --against" in result.output
    assert "Traceback" not in result.output


def test_a_live_watch_explains_the_prompt_at_the_last_batch_received_as_the_recording_does(tmp_path):
    import os
    import signal
    import socket
    import subprocess
    import sys

    def free_port() -> int:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            return probe.getsockname()[1]

    deadline = 60
    pub, router = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"steps": [{"send": 130}]}))
    request = tmp_path / "r119.json"
    request.write_text(json.dumps(list(prompt_of(119))))
    publisher = subprocess.Popen(
        [sys.executable, str(Path(__file__).parent / "publisher.py"), "--pub", pub, "--router", router,
         "--recording", str(VLLM), "--script", str(script), "--deadline", str(deadline)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        watch = subprocess.run(
            [sys.executable, "-m", "kvviz", "watch", pub, "--topic", "kv", "--json", "--count", "130",
             "--max-seconds", str(deadline - 10), "--explain", str(request)],
            capture_output=True, text=True, timeout=deadline)
    finally:
        if publisher.poll() is None:
            os.killpg(publisher.pid, signal.SIGKILL)
        publisher.wait(timeout=deadline)
    assert watch.returncode == 0, watch.stderr
    summary, found = (json.loads(line) for line in watch.stdout.splitlines())
    assert summary["type"] == "summary" and found["type"] == "explain"
    assert found == explain(vllm_timeline(), prompt_of(119), 130).to_dict()


def test_a_restart_before_the_step_makes_the_verdict_unknown():
    timeline = WatchTimeline.from_messages([_message(0, [_stored([1], [5, 6])]), _message(1, []),
                                            _message(0, [_stored([2], [7, 8])])])
    found = explain(timeline, [5, 6]).to_dict()
    assert (found["cause"], found["proven"]) == ("unknown", False)
    assert found["incomplete"] == ["restart at step 3"]


def test_the_json_summary_ranks_the_hot_prefixes():
    result = _watch("--replay-file", str(VLLM), "--json")
    summary = json.loads(result.output.splitlines()[-1])
    # Every request of the excerpt starts with hash id 0 (tokens 0..15): each chain stored under a
    # parent built on that first block, so it is hit once per chain with a parent.
    import base64

    under_a_parent = 0
    with open(VLLM, encoding="utf-8") as lines:
        for line in lines:
            _ts, events, _rank = msgspec.msgpack.decode(base64.b64decode(json.loads(line)["payload"]))
            under_a_parent += sum(1 for e in events if e["type"] == "BlockStored" and e["parent_block_hash"] is not None)
    assert all(request["hash_ids"][0] == 0 for request in requests())
    hottest = summary["hot_prefixes"][0]
    assert hottest == {"hits": under_a_parent, "blocks": 1, "tokens": 16, "last_tokens": list(range(16))}
    assert [h["hits"] for h in summary["hot_prefixes"]] == sorted((h["hits"] for h in summary["hot_prefixes"]),
                                                                  reverse=True)


def test_a_publisher_whose_stores_carry_no_token_ids_leaves_the_cause_unknown():
    timeline = WatchTimeline.from_messages([_message(0, [_stored([1, 2], [])])])
    found = explain(timeline, [5, 6, 7, 8]).to_dict()
    assert (found["cause"], found["proven"]) == ("unknown", False)
    assert any("carry no token ids" in reason for reason in found["incomplete"])


def test_a_live_watch_that_folded_its_early_steps_still_proves_a_hit_and_never_names_a_miss_it_cannot_know():
    whole = vllm_timeline()
    folded = WatchTimeline(keyframe_every=16, max_bytes=2_000_000)
    for message in read_recording(VLLM):
        folded.add(message)
    at = folded.first_step
    assert 0 < at < folded.last_step  # the bound folded the early steps: their messages are gone
    verdicts = {i: explain(whole, prompt_of(i), at) for i in range(at - 1, min(at + 20, 400))}
    hit = at - 1  # batch `at` stored request at-1's prompt: cached in full right after it
    assert verdicts[hit].cause == "hit"
    miss = next(i for i, v in verdicts.items() if v.cause in ("evicted", "first-seen", "diverged"))
    found = explain(folded, prompt_of(hit), at)
    assert found.cause == "hit" and found.proven and found.matched_blocks == verdicts[hit].matched_blocks
    unknown = explain(folded, prompt_of(miss), at)
    assert unknown.cause == "unknown" and not unknown.proven  # never a confident cause it cannot know
    assert unknown.block == verdicts[miss].block and unknown.matched_blocks == verdicts[miss].matched_blocks
    assert any("folded" in why for why in unknown.incomplete) and "--record" in unknown.evidence
