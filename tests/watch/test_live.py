# SPDX-License-Identifier: Apache-2.0
"""The subscriber against a live publisher process of our own (tests/watch/publisher.py) on
127.0.0.1: the shared vLLM recording's bytes over PUB, replays on a ROUTER in both request
envelopes, and each fault a real publisher commits, injected from a script. The subscriber
must survive each and say what happened.

Every wait polls with a deadline; each publisher runs in its own process group, killed in a
``finally`` even when the test fails; ports are found by binding port 0 on 127.0.0.1.
"""

from __future__ import annotations

import base64
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest

from kvviz.watch.forest import Forest
from kvviz.watch.subscriber import EndpointError, Received, Subscriber, parse_endpoint
from kvviz.watch.wire import BlockRemoved, BlockStored, UnknownEvent

pytestmark = pytest.mark.slow  # a live ZeroMQ publisher

ROOT = Path(__file__).resolve().parents[2]
PUBLISHER = Path(__file__).with_name("publisher.py")
RECORDING = ROOT.parent / "shared" / "data" / "kv-events" / "vllm-0.33.0-conversation-400.jsonl"
DEADLINE_S = 30.0
"""How long any one wait may take before the test fails (a loaded 2-core machine is slow)."""


def recorded() -> list[tuple[bytes, bytes]]:
    """The recording's (topic, payload), read with json and base64 only."""
    lines = RECORDING.read_text(encoding="utf-8").splitlines()
    return [(json.loads(x)["topic"].encode(), base64.b64decode(json.loads(x)["payload"])) for x in lines]


RECORDED = recorded()


def free_base_port(count: int = 1) -> int:
    """A port p such that p .. p + count - 1 are free on 127.0.0.1 now (bound to port 0 first)."""
    for _ in range(100):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + count - 1 > 65535:
            continue
        held = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                held.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in held:
                s.close()
    raise AssertionError("no run of free ports on 127.0.0.1")


BIND_TRIES = 5
"""Fresh ports tried when another test took a chosen port before the publisher bound it."""


def bound(proc: subprocess.Popen) -> bool:
    """Waits (bounded) for the publisher's ``{"bound": true}`` line; False when it exited first."""
    ready, _, _ = select.select([proc.stdout], [], [], DEADLINE_S)
    line = proc.stdout.readline() if ready else b""
    return json.loads(line or b"{}").get("bound", False)


class Publisher:
    """One publisher process and its endpoints."""

    def __init__(self, proc: subprocess.Popen, pub: str, router: str):
        self.proc, self.pub, self.router = proc, pub, router

    def finish(self) -> dict:
        """Closes its stdin (it stops serving replays), waits for it, returns its report."""
        out, err = self.proc.communicate(timeout=DEADLINE_S)
        assert self.proc.returncode == 0, err
        return json.loads(out.strip().splitlines()[-1])


@pytest.fixture
def publisher(tmp_path):
    """``start(script, ranks=1) -> Publisher``; every process started is killed afterwards."""
    started: list[subprocess.Popen] = []

    def start(script: dict, ranks: int = 1) -> Publisher:
        path = tmp_path / f"script-{len(started)}.json"
        path.write_text(json.dumps(script))
        for _ in range(BIND_TRIES):
            pub_port, router_port = free_base_port(ranks), free_base_port(ranks)
            pub, router = f"tcp://127.0.0.1:{pub_port}", f"tcp://127.0.0.1:{router_port}"
            proc = subprocess.Popen(
                [sys.executable, str(PUBLISHER), "--pub", pub, "--router", router, "--recording", str(RECORDING),
                 "--script", str(path), "--ranks", str(ranks), "--deadline", str(DEADLINE_S)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
            )
            started.append(proc)
            if bound(proc):
                return Publisher(proc, pub, router)
            err = proc.stderr.read().decode(errors="replace") if proc.poll() is not None else ""
            assert "Address already in use" in err, f"the publisher did not bind within {DEADLINE_S} s: {err}"
        raise AssertionError(f"no free ports for the publisher in {BIND_TRIES} tries")

    try:
        yield start
    finally:
        for proc in started:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=DEADLINE_S)


@pytest.fixture
def subscribe():
    """``subscribe(endpoint, **options) -> Subscriber`` (started); all are stopped afterwards."""
    subscribers: list[Subscriber] = []

    def make(endpoint: str, **options) -> Subscriber:
        subscriber = Subscriber(endpoint, **options)
        subscribers.append(subscriber)
        subscriber.start()
        return subscriber

    try:
        yield make
    finally:
        for subscriber in subscribers:
            subscriber.stop()


def receive(subscriber: Subscriber, count: int) -> list[Received]:
    """Exactly ``count`` messages, polling until they came or the deadline passed; then checks
    that no more arrive at once (a duplicate would)."""
    got: list[Received] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(got) < count and time.monotonic() < deadline:
        got.extend(subscriber.poll())
        if len(got) < count:
            time.sleep(0.01)  # a pause between polls, not a synchronisation: the loop ends on the count
    assert len(got) == count, f"{len(got)} of {count} arrived: {[(r.message.seq, r.note) for r in got]}"
    assert subscriber.stats.failure is None
    got.extend(subscriber.poll())
    assert len(got) == count, f"more than {count} arrived: {[(r.message.seq, r.note) for r in got]}"
    return got


def placed(received: list[Received]) -> list[Received]:
    """``received`` as a timeline places it: each rank's messages in seq order (a replay's
    answer comes after the live messages that went on while it was read), ranks in arrival
    order of their first message."""
    ranks = list(dict.fromkeys(r.message.rank for r in received))
    return [r for rank in ranks for r in sorted((r for r in received if r.message.rank == rank),
                                               key=lambda r: r.message.seq)]


def until(predicate, what: str) -> None:
    """Polls ``predicate`` until it holds or the deadline passes (then fails, saying ``what``)."""
    deadline = time.monotonic() + DEADLINE_S
    while not predicate():
        assert time.monotonic() < deadline, f"not within {DEADLINE_S} s: {what}"
        time.sleep(0.01)  # a pause between looks, not a synchronisation: the loop ends on the predicate


ASKED = "gap {}: replay asked, live messages go on meanwhile"
"""The note on the live message that revealed a gap the replay endpoint is asked for."""


def seqs(received: list[Received]) -> list[int]:
    return [r.message.seq for r in received]


def notes(received: list[Received]) -> dict[int, str]:
    return {r.message.seq: r.note for r in received if r.note is not None}


def events_in(payload: bytes) -> int:
    """Events in one payload, counted by msgspec's generic decoder (not kvviz's)."""
    return len(msgspec.msgpack.decode(payload)[1])


# -- the stream as sent ----------------------------------------------------------------------


def test_recorded_messages_arrive_in_order_with_their_bytes_and_are_decoded(publisher, subscribe):
    live = publisher({"steps": [{"send": 20}]})
    subscriber = subscribe(live.pub, topic="kv")
    got = receive(subscriber, 20)
    assert seqs(got) == list(range(20))
    assert [(r.message.topic, r.message.payload) for r in got] == RECORDED[:20]
    assert all(r.error is None and r.note is None and r.message.rank == 0 for r in got)
    assert [len(r.batch.events) for r in got] == [events_in(p) for _, p in RECORDED[:20]]
    stats = subscriber.stats
    assert (stats.messages, stats.bytes) == (20, sum(len(p) for _, p in RECORDED[:20]))
    assert stats.last_seq == (19,) and stats.connected == (True,)
    assert (stats.gaps, stats.restarts, stats.undecodable, stats.replays_asked) == (0, 0, 0, 0)
    assert live.finish()["sent"] == 20


def test_a_topic_the_publisher_does_not_send_receives_nothing(publisher, subscribe):
    live = publisher({"steps": [{"send": 3}, {"send": 2, "topic": "other"}]})
    subscriber = subscribe(live.pub, topic="other")
    got = receive(subscriber, 2)
    assert [r.message.topic for r in got] == [b"other", b"other"]
    # seqs 0-2 went to topic kv: from this subscriber's side, a gap before its first message is
    # not a gap (it attached late), so no note.
    assert seqs(got) == [3, 4] and notes(got) == {}


# -- gaps and replay ---------------------------------------------------------------------------


GAP_SCRIPT = [{"send": 5}, {"skip": 3}, {"send": 2}]


def test_a_gap_is_filled_by_one_delimited_request_as_vllm_and_sglang_take_it(publisher, subscribe):
    # vLLM's and SGLang's ROUTERs read [identity, b"", seq] and refuse anything else: the
    # delimited envelope goes first, so a gap costs them one request and no "Invalid replay request".
    live = publisher({"replay": "delimited", "steps": GAP_SCRIPT})
    subscriber = subscribe(live.pub, topic="kv", replay_endpoint=live.router, replay_wait=5.0)
    arrived = receive(subscriber, 10)
    # The live message that revealed the gap came at once; the replay's answer after it.
    assert seqs(arrived).index(8) < seqs(arrived).index(5) < seqs(arrived).index(6) < seqs(arrived).index(7)
    got = placed(arrived)
    assert seqs(got) == list(range(10))
    assert notes(got) == {5: "replayed", 6: "replayed", 7: "replayed", 8: ASKED.format("5-7")}
    assert [r.message.payload for r in got] == [p for _, p in RECORDED[:10]]
    assert [r.message.topic for r in got] == [b"kv"] * 10
    stats = subscriber.stats
    assert (stats.gaps, stats.missing, stats.replays_asked, stats.replays_answered, stats.replayed) == (1, 0, 1, 1, 3)
    report = live.finish()
    assert report["requests"] == {"bare": 0, "delimited": 1, "ignored": 0, "malformed": 0}


def test_a_gap_is_filled_with_the_bare_seq_when_the_delimited_envelope_gets_no_answer(publisher, subscribe):
    live = publisher({"replay": "bare", "steps": GAP_SCRIPT})
    subscriber = subscribe(live.pub, topic="kv", replay_endpoint=live.router, replay_wait=2.0)
    got = placed(receive(subscriber, 10))
    assert seqs(got) == list(range(10))
    assert notes(got) == {5: "replayed", 6: "replayed", 7: "replayed", 8: ASKED.format("5-7")}
    assert [r.message.payload for r in got] == [p for _, p in RECORDED[:10]]
    stats = subscriber.stats
    assert (stats.replays_asked, stats.replays_answered, stats.missing) == (2, 1, 0)
    report = live.finish()
    assert report["requests"] == {"bare": 1, "delimited": 0, "ignored": 1, "malformed": 0}


def test_a_slow_answer_to_the_delimited_request_still_counts_after_the_bare_seq_went_out(publisher, subscribe):
    # The server holds the delimited request's answer until the bare seq has come (no clock
    # decides the order: it is the server's), so the answer can only arrive after the
    # subscriber gave up waiting on the delimited envelope and asked in the other; it must keep
    # listening to both. replay_wait only bounds how long an answer may take, as in the tests above.
    live = publisher({"replay": "delimited", "replay_after": "bare", "steps": GAP_SCRIPT})
    subscriber = subscribe(live.pub, topic="kv", replay_endpoint=live.router, replay_wait=2.0)
    got = placed(receive(subscriber, 10))
    assert seqs(got) == list(range(10))
    assert notes(got) == {5: "replayed", 6: "replayed", 7: "replayed", 8: ASKED.format("5-7")}
    assert (subscriber.stats.replays_asked, subscriber.stats.replays_answered) == (2, 1)
    assert live.finish()["requests"] == {"bare": 0, "delimited": 1, "ignored": 1, "malformed": 0}


def test_the_envelope_that_answered_is_used_for_the_next_gap(publisher, subscribe):
    live = publisher({"replay": "bare", "steps": [*GAP_SCRIPT, {"skip": 2}, {"send": 1}]})
    subscriber = subscribe(live.pub, topic="kv", replay_endpoint=live.router, replay_wait=2.0)
    got = placed(receive(subscriber, 13))
    assert seqs(got) == list(range(13))
    assert notes(got) == {5: "replayed", 6: "replayed", 7: "replayed", 8: ASKED.format("5-7"), 10: "replayed",
                          11: "replayed", 12: ASKED.format("10-11")}
    assert subscriber.stats.replays_asked == 3  # delimited then bare for the first gap; bare for the second
    assert live.finish()["requests"]["bare"] == 2


def test_replay_answers_without_a_topic_frame_take_the_live_messages_topic(publisher, subscribe):
    live = publisher({"replay": "both", "replay_topic": False, "steps": GAP_SCRIPT})
    subscriber = subscribe(live.pub, topic="kv", replay_endpoint=live.router, replay_wait=5.0)
    got = placed(receive(subscriber, 10))
    assert seqs(got) == list(range(10))
    assert [r.message.topic for r in got] == [b"kv"] * 10
    assert [r.message.payload for r in got] == [p for _, p in RECORDED[:10]]


def test_replayed_duplicates_are_dropped_and_answers_newest_first_are_put_in_order(publisher, subscribe):
    live = publisher({"replay_repeat": 2, "replay_reversed": True, "steps": GAP_SCRIPT})
    subscriber = subscribe(live.pub, topic="kv", replay_endpoint=live.router, replay_wait=5.0)
    arrived = receive(subscriber, 10)
    assert [seq for seq in seqs(arrived) if seq in (5, 6, 7)] == [5, 6, 7]  # delivered in seq order
    got = placed(arrived)
    assert seqs(got) == list(range(10))
    assert [r.message.payload for r in got] == [p for _, p in RECORDED[:10]]
    assert notes(got) == {5: "replayed", 6: "replayed", 7: "replayed", 8: ASKED.format("5-7")}
    # the answer repeats 9..5 (the buffer from the start seq on, newest first); 8 and 9 are past
    # the gap; 7 and 6 come twice; reading stops at the first 5, when every seq asked for came
    assert (subscriber.stats.duplicates, subscriber.stats.replayed) == (2, 3)


def test_a_gap_without_a_replay_endpoint_is_noted_on_the_message_after_it(publisher, subscribe):
    live = publisher({"steps": GAP_SCRIPT})
    subscriber = subscribe(live.pub, topic="kv")
    got = receive(subscriber, 7)
    assert seqs(got) == [0, 1, 2, 3, 4, 8, 9]
    assert notes(got) == {8: "gap 5-7 not replayed"}
    assert got[5].message.payload == RECORDED[8][1] and got[5].batch is not None
    stats = subscriber.stats
    assert (stats.gaps, stats.missing, stats.replays_asked) == (1, 3, 0)


def test_a_gap_the_replay_buffer_no_longer_holds_is_noted_as_partly_replayed(publisher, subscribe):
    # seqs 3-4 are skipped and then age out of the buffer; 5 is skipped but still buffered
    live = publisher({"steps": [{"send": 3}, {"skip": 2}, {"forget": True}, {"skip": 1}, {"send": 1}]})
    subscriber = subscribe(live.pub, topic="kv", replay_endpoint=live.router, replay_wait=5.0)
    got = placed(receive(subscriber, 5))
    assert seqs(got) == [0, 1, 2, 5, 6]
    assert notes(got) == {5: "replayed; gap 3-5 partly replayed: 3-4 missing", 6: ASKED.format("3-5")}
    assert (subscriber.stats.missing, subscriber.stats.replayed) == (2, 1)


def test_a_replay_endpoint_that_never_answers_leaves_the_gap_noted(publisher, subscribe):
    live = publisher({"replay": "none", "steps": GAP_SCRIPT})
    subscriber = subscribe(live.pub, topic="kv", replay_endpoint=live.router, replay_wait=0.3)
    got = receive(subscriber, 7)
    assert notes(got) == {8: ASKED.format("5-7")}
    until(lambda: subscriber.stats.replays_asked == 2 and subscriber.stats.missing == 3, "both envelopes asked in vain")
    assert (subscriber.stats.replays_answered, subscriber.stats.gaps) == (0, 1)
    assert live.finish()["requests"]["ignored"] == 2


# -- restarts, garbage, odd events -------------------------------------------------------------


def test_a_seq_going_backwards_is_a_restart_and_no_replay_is_asked(publisher, subscribe):
    live = publisher({"steps": [{"send": 5}, {"restart": True}, {"send": 3}]})
    subscriber = subscribe(live.pub, topic="kv", replay_endpoint=live.router)
    got = receive(subscriber, 8)
    assert seqs(got) == [0, 1, 2, 3, 4, 0, 1, 2]
    assert [r.note for r in got] == [None] * 5 + ["restart: seq 0 after 4", None, None]
    assert (subscriber.stats.restarts, subscriber.stats.replays_asked) == (1, 0)


@pytest.mark.parametrize("kind", ["c1", "empty", "not_a_batch", "huge_array", "truncated"])
def test_a_garbage_payload_is_delivered_with_its_seq_and_one_line_error(publisher, subscribe, kind):
    live = publisher({"steps": [{"send": 2}, {"garbage": kind}, {"send": 2}]})
    subscriber = subscribe(live.pub, topic="kv")
    got = receive(subscriber, 5)
    assert seqs(got) == [0, 1, 2, 3, 4]
    bad = got[2]
    assert bad.batch is None and bad.error and "\n" not in bad.error
    assert [r.error is None and r.batch is not None for r in got] == [True, True, False, True, True]
    assert subscriber.stats.undecodable == 1 and subscriber.running


UNSIGNED = [2**64 - 1, 2**63 + 5, 2**63 + 6]
"""Block hashes above 2^63, as vLLM sends them."""
SIGNED = [-(2**63), -7, 12]
"""Signed int64 hashes, as SGLang sends them."""


def stored(hashes: list[int], parent=None) -> dict:
    tokens = [i for i in range(len(hashes) * 4)]
    return {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent, "token_ids": tokens,
            "block_size": 4, "lora_id": None, "medium": "GPU"}


def removed(hashes: list[int]) -> dict:
    return {"type": "BlockRemoved", "block_hashes": hashes, "medium": "GPU"}


def test_an_unknown_event_type_is_kept_beside_the_known_ones(publisher, subscribe):
    transfer = {"type": "BlockTransferred", "block_hashes": [1, 2], "from_medium": "GPU", "to_medium": "CPU"}
    live = publisher({"steps": [{"send": 1}, {"batch": [transfer, stored([41])], "ts": 7.5}, {"send": 1}]})
    subscriber = subscribe(live.pub, topic="kv")
    got = receive(subscriber, 3)
    batch = got[1].batch
    assert got[1].error is None and batch.ts == 7.5
    assert [type(e) for e in batch.events] == [UnknownEvent, BlockStored]
    assert batch.events[0].type == "BlockTransferred"
    assert batch.events[1].hashes == (41,)


def test_unknown_fields_are_ignored_and_counted(publisher, subscribe):
    event = {**stored([51, 52]), "group_idx": 0, "extra_keys": [[1]], "kv_cache_spec_kind": "full_attention"}
    live = publisher({"steps": [{"batch": [event, {**removed([52]), "group_idx": 0}]}]})
    subscriber = subscribe(live.pub, topic="kv")
    (got,) = receive(subscriber, 1)
    assert got.error is None
    assert [type(e) for e in got.batch.events] == [BlockStored, BlockRemoved]
    assert got.batch.events[0].hashes == (51, 52) and got.batch.events[0].token_ids == tuple(range(8))
    assert sorted(got.batch.unknown_fields) == [
        ("BlockRemoved", "group_idx"), ("BlockStored", "extra_keys"), ("BlockStored", "group_idx"),
        ("BlockStored", "kv_cache_spec_kind"),
    ]


def test_an_empty_topic_is_accepted(publisher, subscribe):
    live = publisher({"steps": [{"send": 1}, {"send": 1, "topic": ""}, {"send": 1}]})
    subscriber = subscribe(live.pub, topic="")
    got = receive(subscriber, 3)
    assert [r.message.topic for r in got] == [b"kv", b"", b"kv"]
    assert seqs(got) == [0, 1, 2] and notes(got) == {}
    assert got[1].batch is not None and got[1].message.payload == RECORDED[1][1]


def test_multi_hash_removals_child_first_and_parent_first_empty_the_forest(publisher, subscribe):
    steps = [
        {"batch": [stored(UNSIGNED)]},
        {"batch": [removed(UNSIGNED[::-1])]},  # child first
        {"batch": [stored(SIGNED)]},
        {"batch": [removed(SIGNED)]},  # parent first
    ]
    live = publisher({"steps": steps})
    subscriber = subscribe(live.pub, topic="kv")
    got = receive(subscriber, 4)
    assert all(r.error is None for r in got)
    assert got[1].batch.events[0].hashes == tuple(UNSIGNED[::-1])
    assert got[3].batch.events[0].hashes == tuple(SIGNED)
    forest = Forest()
    sizes = []
    for step, r in enumerate(got, start=1):
        forest.apply(r.batch, step)
        sizes.append(len(forest.state()))
    assert sizes == [3, 0, 3, 0]


def test_a_one_frame_message_is_numbered_as_the_next_seq_and_noted(publisher, subscribe):
    live = publisher({"steps": [{"send": 2}, {"send": 1, "frames": 1}, {"send": 1}, {"send": 1, "frames": 2}]})
    subscriber = subscribe(live.pub, topic="")  # a SUB filters on the first frame: a payload alone needs ""
    got = receive(subscriber, 5)
    assert seqs(got) == [0, 1, 2, 3, 4]
    assert notes(got) == {2: "no seq frame: numbered 2"}
    assert got[2].message.topic == b"" and got[2].message.payload == RECORDED[2][1] and got[2].batch is not None
    assert got[4].message.topic == b"" and got[4].message.payload == RECORDED[4][1]  # (seq, payload)
    assert subscriber.stats.unnumbered == 1


def test_extra_frames_and_a_short_seq_frame_are_noted_and_the_message_kept(publisher, subscribe):
    live = publisher({"steps": [{"send": 1}, {"send": 1, "frames": 4}, {"send": 1, "seq_bytes": 4}, {"send": 1}]})
    subscriber = subscribe(live.pub, topic="kv")
    got = receive(subscriber, 4)
    assert seqs(got) == [0, 1, 2, 3]
    assert notes(got) == {1: "4 frames: the last 1 ignored", 2: "seq frame of 4 bytes: numbered 2"}
    assert [r.message.payload for r in got] == [p for _, p in RECORDED[:4]]
    assert all(r.batch is not None for r in got)


def test_the_on_received_hook_sees_every_message_in_order_and_its_errors_are_counted(publisher, subscribe):
    seen: list[int] = []

    def record(received: Received) -> None:
        seen.append(received.message.seq)
        if received.message.seq == 1:
            raise OSError("disk full")

    live = publisher({"steps": GAP_SCRIPT})
    subscriber = subscribe(live.pub, topic="kv", replay_endpoint=live.router, replay_wait=5.0, on_received=record)
    got = receive(subscriber, 10)
    assert seen == seqs(got) and seqs(placed(got)) == list(range(10))
    assert (subscriber.stats.hook_errors, subscriber.stats.hook_error) == (1, "OSError: disk full")


# -- ranks -------------------------------------------------------------------------------------


def test_two_ranks_are_followed_on_port_and_port_plus_one_with_replay_per_rank(publisher, subscribe):
    live = publisher(
        {"steps": [{"send": 3, "rank": 0}, {"send": 2, "rank": 1}, {"skip": 1, "rank": 1}, {"send": 1, "rank": 1},
                   {"send": 1, "rank": 0}]},
        ranks=2,
    )
    subscriber = subscribe(live.pub, topic="kv", ranks=2, replay_endpoint=live.router, replay_wait=5.0)
    got = receive(subscriber, 8)
    by_rank = {rank: placed([r for r in got if r.message.rank == rank]) for rank in (0, 1)}
    assert seqs(by_rank[0]) == [0, 1, 2, 3] and notes(by_rank[0]) == {}
    assert seqs(by_rank[1]) == [0, 1, 2, 3] and notes(by_rank[1]) == {2: "replayed", 3: ASKED.format("2")}
    assert [r.message.payload for r in by_rank[1]] == [p for _, p in RECORDED[3:7]]
    stats = subscriber.stats
    assert stats.connected == (True, True) and stats.last_seq == (3, 3)
    host, _, port = live.pub.rpartition(":")
    assert [r.endpoint for r in stats.ranks] == [live.pub, f"{host}:{int(port) + 1}"]
    assert [r.messages for r in stats.ranks] == [4, 4]


# -- endpoints and lifecycle (no publisher) ------------------------------------------------------


@pytest.mark.parametrize(
    "endpoint, words",
    [
        ("tcp://*:5557", "where a server binds"),
        ("tcp://0.0.0.0:5557", "where a server binds"),
        ("ipc:///tmp/kv", "is not tcp://HOST:PORT"),
        ("127.0.0.1:5557", "is not tcp://HOST:PORT"),
        ("tcp://127.0.0.1", "is not tcp://HOST:PORT"),
        ("tcp://127.0.0.1:70000", "not between 1 and 65535"),
        ("tcp://127.0.0.1:5557/x", "is not tcp://HOST:PORT"),
    ],
)
def test_an_endpoint_that_is_not_tcp_host_port_is_refused_in_one_line(endpoint, words):
    with pytest.raises(EndpointError) as refused:
        Subscriber(endpoint)
    assert words in str(refused.value) and "\n" not in str(refused.value)


def test_ranks_past_the_last_port_are_refused():
    with pytest.raises(EndpointError, match="past 65535"):
        parse_endpoint("tcp://127.0.0.1:65535", ranks=2)
    assert parse_endpoint("tcp://[::1]:5557", ranks=3) == ("[::1]", 5557)


def test_stop_ends_the_thread_and_closes_the_sockets_even_with_nobody_publishing():
    subscriber = Subscriber(f"tcp://127.0.0.1:{free_base_port()}", replay_endpoint="tcp://127.0.0.1:1")
    subscriber.start()
    assert subscriber.running and subscriber.stats.connected == (False,)
    began = time.monotonic()
    subscriber.stop()
    assert not subscriber.running and time.monotonic() - began < 5.0
    subscriber.stop()  # twice is harmless
    assert subscriber.poll() == []


def test_the_most_ranks_allowed_start_and_stop_without_running_out_of_sockets():
    from kvviz.core.limits import MAX_WATCH_RANKS

    with socket.socket() as probe:  # a port range nobody listens on: connects stay pending
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1] % 30_000 + 20_000
    watch = Subscriber(f"tcp://127.0.0.1:{port}", ranks=MAX_WATCH_RANKS,
                       replay_endpoint=f"tcp://127.0.0.1:{port + MAX_WATCH_RANKS}")
    with watch:
        assert len(watch.stats.ranks) == MAX_WATCH_RANKS and watch.stats.failure is None
    assert not watch.running


# -- what came before the first message: a late attach, a restart, a reconnect ---------------


def cached_set(messages) -> set:
    """The blocks (key, medium) cached after ``messages``, through kvviz's timeline."""
    from kvviz.watch.recording import Message
    from kvviz.watch.timeline import WatchTimeline

    timeline = WatchTimeline.from_messages(
        Message(topic=topic, seq=seq, payload=payload) for seq, (topic, payload) in enumerate(messages))
    return set(timeline.head_state.blocks)


def watched_set(received: list[Received]) -> tuple[set, dict]:
    """(blocks cached, summary) of a timeline fed what the subscriber delivered, as the app feeds
    it (``add_all``: a replay's late answer goes in at once, one re-derivation of the steps after
    its place, not one a message)."""
    from kvviz.watch.timeline import WatchTimeline

    timeline = WatchTimeline()
    timeline.add_all(received)
    return set(timeline.head_state.blocks), timeline.summary()


HISTORY_ASKED = "seqs {}: replay asked, live messages go on meanwhile"
"""The note on a rank's first message (or a restarted publisher's) whose history is asked for."""


def test_a_late_watch_on_a_publisher_with_a_replay_buffer_ends_equal_to_its_cached_set(publisher, subscribe):
    # The server published 200 batches before kvviz attached (skipped: buffered, never sent
    # to this subscriber); its first live seq is 200. The blocks of batch 0 are never evicted
    # in the recording, so a view that starts at 200 misses them.
    live = publisher({"replay": "delimited", "steps": [{"skip": 200}, {"send": 200}]})
    subscriber = subscribe(live.pub, topic="kv", replay_endpoint=live.router, replay_wait=5.0)
    got = receive(subscriber, 400)
    assert seqs(got)[0] == 200 and seqs(placed(got)) == list(range(400))
    assert got[0].note == HISTORY_ASKED.format("0-199 came before")
    history = [r for r in got if r.message.replayed]
    assert seqs(history) == list(range(200)) and all(r.note == "replayed" for r in history)
    blocks, summary = watched_set(got)
    assert blocks == cached_set(RECORDED[:400])
    assert summary["gaps"] == 0 and summary["replayed"] == 200 and summary["restarts"] == 0


def test_a_late_watch_whose_history_aged_out_of_the_buffer_says_what_is_missing(publisher, subscribe):
    live = publisher({"steps": [{"skip": 3}, {"forget": True}, {"skip": 2}, {"send": 2}]})
    subscriber = subscribe(live.pub, topic="kv", replay_endpoint=live.router, replay_wait=5.0)
    got = receive(subscriber, 4)
    assert seqs(placed(got)) == [3, 4, 5, 6]
    assert notes(got) == {3: "replayed", 4: "replayed; gap 0-4 partly replayed: 0-2 missing",
                          5: HISTORY_ASKED.format("0-4 came before")}


def test_a_late_watch_without_a_replay_endpoint_starts_where_it_attached(publisher, subscribe):
    live = publisher({"steps": [{"skip": 3}, {"send": 2}]})
    subscriber = subscribe(live.pub, topic="kv")
    got = receive(subscriber, 2)
    assert seqs(got) == [3, 4] and notes(got) == {}


def test_a_restart_replays_what_the_new_publisher_sent_before_its_first_message_received(publisher, subscribe):
    live = publisher({"steps": [{"send": 5}, {"restart": True}, {"skip": 3}, {"send": 2}]})
    subscriber = subscribe(live.pub, topic="kv", replay_endpoint=live.router, replay_wait=5.0)
    got = receive(subscriber, 10)
    assert seqs(got)[:6] == [0, 1, 2, 3, 4, 3]
    assert got[0].note is None and got[5].note == "restart: seq 3 after 4; " + HISTORY_ASKED.format("0-2 came before")
    assert sorted(r.message.seq for r in got if r.message.replayed) == [0, 1, 2]
    blocks, summary = watched_set(got)
    assert blocks == cached_set(RECORDED[5:10]) and summary["restarts"] == 1


def test_a_restart_that_outran_the_old_seq_while_kvviz_reconnected_resets_and_replays(publisher, subscribe):
    # The server goes away after seq 4 and a new one comes back on the same port; before kvviz
    # reconnects it has published seqs 0-7 (skipped: buffered only). Its next live seq, 8, looks
    # like a gap of 5-7 after 4: filling it from the new server's buffer mixed two servers'
    # blocks. The new server's seq 4 is not the payload kvviz received at 4: a restart, marked
    # on seq 8 (its seq does not show it), and the new server's 0-7 come as its history.
    live = publisher({"replay": "delimited",
                      "steps": [{"send": 5}, {"rebind": True}, {"restart": True}, {"skip": 8}, {"send": 2}]})
    subscriber = subscribe(live.pub, topic="kv", replay_endpoint=live.router, replay_wait=5.0)
    got = receive(subscriber, 15)
    assert seqs(got)[:6] == [0, 1, 2, 3, 4, 8] and got[5].message.restart
    assert got[5].note == ("restart: seq 8 after 4, on a new connection (the replay endpoint's seq 4 differs "
                           "from the one received); " + HISTORY_ASKED.format("0-7 came before"))
    assert sorted(r.message.seq for r in got if r.message.replayed) == list(range(8))
    blocks, summary = watched_set(got)
    assert blocks == cached_set(RECORDED[5:15])
    assert summary["restarts"] == 1 and subscriber.stats.restarts == 1


def test_a_restart_behind_a_reconnect_with_nothing_to_replay_still_resets_the_view(publisher, subscribe):
    live = publisher({"steps": [{"send": 5}, {"rebind": True}, {"restart": True}, {"skip": 8}, {"forget": True},
                                {"send": 1}]})
    subscriber = subscribe(live.pub, topic="kv", replay_endpoint=live.router, replay_wait=1.0)
    got = receive(subscriber, 6)
    assert seqs(got) == [0, 1, 2, 3, 4, 8] and got[5].message.restart
    assert got[5].note == ("restart: seq 8 after 4, on a new connection (the replay endpoint no longer has "
                           "seq 4); " + HISTORY_ASKED.format("0-7 came before"))
    until(lambda: subscriber.stats.replays_answered == 2, "the history's replay to end")
    # The check's answer was read on as the history from seq 4, and 0-3 asked next: neither brought any.
    assert subscriber.notices() == ["gap 4-7 not replayed", "gap 0-3 not replayed"]
    assert subscriber.stats.missing == 8
    blocks, summary = watched_set(got)
    assert blocks == cached_set(RECORDED[13:14])
    assert summary["restarts"] == 1


def test_a_reconnect_to_the_same_publisher_fills_the_gap_it_left(publisher, subscribe):
    live = publisher({"steps": [{"send": 5}, {"rebind": True}, {"skip": 3}, {"send": 2}]})
    subscriber = subscribe(live.pub, topic="kv", replay_endpoint=live.router, replay_wait=5.0)
    got = receive(subscriber, 10)
    assert seqs(placed(got)) == list(range(10))
    assert notes(got) == {5: "replayed", 6: "replayed", 7: "replayed", 8: ASKED.format("5-7")}
    assert subscriber.stats.restarts == 0
    blocks, _ = watched_set(got)
    assert blocks == cached_set(RECORDED[:10])


def test_a_reconnect_the_replay_endpoint_cannot_check_keeps_the_view_and_says_a_restart_is_possible(
        publisher, subscribe):
    live = publisher({"replay": "none", "steps": [{"send": 5}, {"rebind": True}, {"skip": 3}, {"send": 2}]})
    subscriber = subscribe(live.pub, topic="kv", replay_endpoint=live.router, replay_wait=0.3)
    got = receive(subscriber, 7)
    assert seqs(got) == [0, 1, 2, 3, 4, 8, 9]
    assert got[5].note == ("a new connection after seq 4: the replay endpoint did not answer, so a publisher "
                           "restart cannot be ruled out; gap 5-7 not replayed")
    assert subscriber.stats.restarts == 0


def test_notices_told_to_the_subscriber_are_taken_once_in_order():
    subscriber = Subscriber("tcp://127.0.0.1:5557")  # never started: notices need no socket
    subscriber.tell("first")
    subscriber.tell("second")
    assert subscriber.notices() == ["first", "second"] and subscriber.notices() == []
