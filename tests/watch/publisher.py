# SPDX-License-Identifier: Apache-2.0
"""A KV-event publisher of our own, run as a process by tests/watch/test_live.py and
benchmarks/bench_watch.py: it plays a recording's bytes over ZeroMQ the way vLLM's
``ZmqEventPublisher`` does, with faults injected from a small JSON script.

    python tests/watch/publisher.py --pub tcp://127.0.0.1:PORT --router tcp://127.0.0.1:PORT2 \\
        --recording FILE (--script SCRIPT.json | --flood N) [--ranks N] [--deadline S]

Rank *r* binds its PUB side at PORT + *r* and its replay ROUTER at PORT2 + *r*, on 127.0.0.1
only. The PUB side is an ``XPUB`` socket so that the handshake needs no sleep: nothing is sent
on a rank until its XPUB has received a subscription (a SUB that has connected and
subscribed), so the first message cannot be lost to ZeroMQ's slow-joiner race. Every message
sent, skipped or garbled goes into the rank's replay buffer, as vLLM's does.

The script is JSON: ``{"replay": ENVELOPES, "replay_topic": BOOL, "steps": [STEP, ...]}``.

- ``replay``: which request envelopes the ROUTER answers: ``"both"`` (default), ``"bare"`` (the
  8-byte seq alone), ``"delimited"`` (an empty frame, then the seq), ``"none"``. Requests in
  an envelope it does not answer are counted as ignored.
- ``replay_topic``: answers are ``(b"", topic, seq, payload)`` (true, default: the shared
  README's shape) or ``(b"", seq, payload)`` (false: older vLLM). The end marker is
  ``(b"", b"", seq -1, b"")`` either way.
- ``replay_repeat`` (default 1): each buffered batch is answered this many times (duplicates);
  ``replay_reversed`` (default false): answered newest first (a reader must put them in order);
  ``replay_after`` (an envelope, default none): a request in the other envelope is held
  unanswered until a request in this one has come (a slow server, without a clock: its
  answer to the first envelope arrives only after the subscriber tried the second).
- ``replay_trickle`` (seconds, default none): an answer's frames go out one per that many
  seconds, while live messages keep flowing (a server answering slowly).
- a STEP is one of ``{"send": N}`` (the recording's next N messages, looping with rising seq;
  with ``"every": S``, one per S seconds, replays served meanwhile),
  ``{"skip": N}`` (the next N take their seqs and go into the replay buffer, unsent: a gap),
  ``{"restart": true}`` (seq back to 0, buffer emptied, as a restarted server),
  ``{"forget": true}`` (the replay buffer emptied, seq kept: batches aged out of it),
  ``{"garbage": KIND}`` (one message whose payload is ``GARBAGE[KIND]``), or
  ``{"batch": [EVENT, ...], "ts": T}`` (one message: the msgpack of ``[ts, events, rank]``,
  events written in the script as maps or legacy arrays), ``{"big": BYTES}`` (one message
  whose payload is that many bytes), ``{"resubscribed": true}`` (wait until a subscriber
  subscribes again: it reconnected), ``{"rebind": true}`` (close the PUB side and bind it again
  on its port, then wait for a subscriber: the server went away and came back). Any step may add ``"rank": R``
  (default 0), ``"topic": TEXT`` (instead of the recording's), ``"frames": 1 | 2 | 4`` (send
  the payload alone, or seq and payload, or a fourth frame after the payload, instead of
  three frames) and ``"seq_bytes": N`` (the seq frame's width, instead of 8).

Once every socket is bound it prints ``{"bound": true}`` (a starter waits for that line: a port
taken between choosing it and binding it is then a retry, not a test that hears nothing).
After the steps the process serves replays until its stdin closes or ``--deadline`` seconds
have passed since it started, then prints one JSON line (what it sent, skipped, and which
replay requests it answered or ignored) and exits: 0, or 3 when no subscriber came in time.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import json
import os
import sys
import time
from collections import deque
from pathlib import Path

import msgspec
import zmq

END_OF_REPLAY = b"\xff" * 8
REPLAY_BUFFER = 10_000
"""Batches each rank keeps for replay (vLLM's default ``buffer_steps``)."""
SEND_HWM = 100_000
"""The PUB side's send high-water mark (vLLM's default ``hwm``)."""
SERVE_POLL_MS = 50

GARBAGE = {
    "c1": b"\xc1",  # the one byte msgpack never uses
    "empty": b"",
    "not_a_batch": msgspec.msgpack.encode({"hello": 1}),
    # [ts, <an array header claiming 2^32 - 1 events>]: must be refused before allocation
    "huge_array": b"\x93\xcb\x3f\xf0\x00\x00\x00\x00\x00\x00\xdd\xff\xff\xff\xff",
    "truncated": None,  # the first half of the next recorded payload
}
"""Payloads a ``{"garbage": KIND}`` step sends."""


def read_recording(path: Path) -> list[tuple[bytes, bytes]]:
    """``(topic, payload)`` of each line of a recording (``{"topic", "seq", "payload"}``), read
    here with json, base64 and gzip alone so the test does not trust kvviz's own reader."""
    messages = []
    opener = gzip.open if path.suffix == ".gz" else open  # the shipped samples are gzip
    with opener(path, "rt", encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                record = json.loads(line)
                messages.append((record["topic"].encode("utf-8"), base64.b64decode(record["payload"])))
    if not messages:
        raise SystemExit(f"{path}: no messages")
    return messages


def local_port(endpoint: str) -> int:
    """The port of ``tcp://127.0.0.1:PORT``; any other host is refused (tests bind locally)."""
    prefix = "tcp://127.0.0.1:"
    if not endpoint.startswith(prefix) or not endpoint[len(prefix):].isdigit():
        raise SystemExit(f"{endpoint!r}: this publisher binds tcp://127.0.0.1:PORT only")
    return int(endpoint[len(prefix):])


class RankPublisher:
    """One data-parallel rank: its XPUB, its replay ROUTER, its seq and its replay buffer."""

    def __init__(self, context: zmq.Context, rank: int, pub_port: int, router_port: int, script: dict):
        self.rank = rank
        self.xpub = context.socket(zmq.XPUB)
        self.xpub.setsockopt(zmq.LINGER, 0)
        self.xpub.setsockopt(zmq.SNDHWM, SEND_HWM)
        self.xpub.bind(f"tcp://127.0.0.1:{pub_port + rank}")
        self.router = context.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        self.router.bind(f"tcp://127.0.0.1:{router_port + rank}")
        self.replay = script.get("replay", "both")
        self.replay_topic = bool(script.get("replay_topic", True))
        self.replay_repeat = int(script.get("replay_repeat", 1))
        self.replay_reversed = bool(script.get("replay_reversed", False))
        self.replay_after = script.get("replay_after")
        self.held: list[tuple[bytes, list[bytes], str]] = []  # requests waiting for replay_after
        self.seq = 0
        self.buffer: deque[tuple[int, bytes, bytes]] = deque(maxlen=REPLAY_BUFFER)
        self.subscribed = False
        self.pub_port = pub_port
        self.context = context
        self.replay_trickle = script.get("replay_trickle")
        self.trickling: deque[list[bytes]] = deque()  # answer frames not sent yet
        self.trickle_at = 0.0

    def take(self, topic: bytes, payload: bytes) -> int:
        """Gives the next seq to a message and buffers it for replay."""
        seq = self.seq
        self.seq += 1
        self.buffer.append((seq, topic, payload))
        return seq

    def send(self, topic: bytes, payload: bytes, frames: int = 3, seq_width: int = 8) -> None:
        seq = self.take(topic, payload)
        seq_bytes = seq.to_bytes(seq_width, "big")
        if frames == 1:
            self.xpub.send(payload)
        elif frames == 2:
            self.xpub.send_multipart([seq_bytes, payload])
        elif frames == 4:
            self.xpub.send_multipart([topic, seq_bytes, payload, b"trailer"])
        else:
            self.xpub.send_multipart([topic, seq_bytes, payload])

    def restart(self) -> None:
        self.seq = 0
        self.buffer.clear()

    def check_subscription(self) -> bool:
        """Reads subscription messages (``b"\\x01" + topic``) the XPUB has received; True when
        one came now."""
        came = False
        while self.xpub.poll(0):
            if self.xpub.recv()[:1] == b"\x01":
                self.subscribed = came = True
        return came

    def wait_subscription(self, deadline: float) -> None:
        """Blocks until a (new) subscription comes, or ``deadline`` (monotonic) passes."""
        while not self.check_subscription():
            if time.monotonic() > deadline:
                raise SystemExit("no subscriber came back before the deadline")
            self.xpub.poll(SERVE_POLL_MS)

    def rebind(self, deadline: float) -> None:
        """Closes the XPUB and binds a new one on the same port (retrying while the old one's
        port is still being released), then waits for a subscriber. The messages already
        sent are flushed first (linger), as a server that exits cleanly does."""
        self.xpub.close(linger=int(SERVE_POLL_MS * 20))
        while True:
            self.xpub = self.context.socket(zmq.XPUB)
            self.xpub.setsockopt(zmq.LINGER, 0)
            self.xpub.setsockopt(zmq.SNDHWM, SEND_HWM)
            try:
                self.xpub.bind(f"tcp://127.0.0.1:{self.pub_port + self.rank}")
                break
            except zmq.ZMQError:
                self.xpub.close(linger=0)
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)  # the port is still held by the socket just closed
        self.wait_subscription(deadline)

    def serve_replay(self, report: dict) -> None:
        """Answers every waiting replay request in the envelopes the script allows."""
        if self.trickling and time.monotonic() >= self.trickle_at:
            self.router.send_multipart(self.trickling.popleft())
            self.trickle_at = time.monotonic() + self.replay_trickle
        while self.router.poll(0):
            frames = self.router.recv_multipart()
            identity, request = frames[0], frames[1:]
            if len(request) == 1 and len(request[0]) == 8:
                envelope = "bare"
            elif len(request) == 2 and request[0] == b"" and len(request[1]) == 8:
                envelope = "delimited"
            else:
                report["requests"]["malformed"] += 1
                continue
            if self.replay_after is not None and envelope != self.replay_after:
                self.held.append((identity, request, envelope))  # the injected fault: a slow server
                continue
            self._answer(identity, request, envelope, report)
            held, self.held = self.held, []
            for waiting in held:  # the request they waited for came: now the slow answers
                self._answer(*waiting, report)

    def _answer(self, identity: bytes, request: list[bytes], envelope: str, report: dict) -> None:
        """Answers one replay request (or counts it ignored, in an envelope not served)."""
        if self.replay not in ("both", envelope):
            report["requests"]["ignored"] += 1
            return
        report["requests"][envelope] += 1
        start = int.from_bytes(request[-1], "big")
        answer = [entry for entry in self.buffer if entry[0] >= start]
        frames = []
        for seq, topic, payload in reversed(answer) if self.replay_reversed else answer:
            head = [identity, b"", topic] if self.replay_topic else [identity, b""]
            for _ in range(self.replay_repeat):
                frames.append([*head, seq.to_bytes(8, "big"), payload])
                report["replayed"] += 1
        frames.append([identity, b"", b"", END_OF_REPLAY, b""])
        if self.replay_trickle is not None:
            self.trickling.extend(frames)
            return
        for frame in frames:
            self.router.send_multipart(frame)

    def close(self) -> None:
        self.xpub.close(linger=0)
        self.router.close(linger=0)


class Recording:
    """The recording's messages, handed out in order and looped forever."""

    def __init__(self, messages: list[tuple[bytes, bytes]]):
        self.messages = messages
        self.cursor = 0

    def peek(self) -> tuple[bytes, bytes]:
        return self.messages[self.cursor % len(self.messages)]

    def next(self) -> tuple[bytes, bytes]:
        message = self.peek()
        self.cursor += 1
        return message


def run_step(step: dict, ranks: list[RankPublisher], recording: Recording, report: dict,
             deadline: float = float("inf")) -> None:
    rank = ranks[int(step.get("rank", 0))]
    frames = int(step.get("frames", 3))
    seq_width = int(step.get("seq_bytes", 8))
    override = step.get("topic")

    def topic_of(recorded: bytes) -> bytes:
        return recorded if override is None else override.encode("utf-8")

    if "send" in step:
        every = step.get("every")
        for i in range(int(step["send"])):
            topic, payload = recording.next()
            rank.send(topic_of(topic), payload, frames, seq_width)
            report["sent"] += 1
            if every is not None:  # a paced stream: replays are served while it waits
                until = time.monotonic() + float(every)
                while time.monotonic() < until:
                    for each in ranks:
                        each.serve_replay(report)
                    rank.router.poll(max(1, int((until - time.monotonic()) * 1000)))
            elif i % 64 == 63:
                for each in ranks:
                    each.serve_replay(report)
    elif "skip" in step:
        for _ in range(int(step["skip"])):
            topic, payload = recording.next()
            rank.take(topic_of(topic), payload)
            report["skipped"] += 1
    elif "restart" in step:
        rank.restart()
        report["restarts"] += 1
    elif "forget" in step:
        rank.buffer.clear()
    elif "garbage" in step:
        kind = step["garbage"]
        topic, recorded = recording.peek()
        payload = recorded[: len(recorded) // 2] if kind == "truncated" else GARBAGE[kind]
        rank.send(topic_of(topic), payload, frames)
        report["sent"] += 1
    elif "big" in step:
        topic, _ = recording.peek()
        rank.send(topic_of(topic), b"\x00" * int(step["big"]), frames)
        report["sent"] += 1
    elif "resubscribed" in step:
        rank.wait_subscription(deadline)
    elif "rebind" in step:
        rank.rebind(deadline)
    elif "batch" in step:
        topic, _ = recording.peek()
        payload = msgspec.msgpack.encode([float(step.get("ts", 0.0)), step["batch"], rank.rank])
        rank.send(topic_of(topic), payload, frames)
        report["sent"] += 1
    else:
        raise SystemExit(f"script step {step!r}: expected send, skip, restart, forget, garbage or batch")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pub", required=True)
    parser.add_argument("--router", required=True)
    parser.add_argument("--recording", required=True, type=Path)
    parser.add_argument("--script", type=Path)
    parser.add_argument("--flood", type=int, help="send this many recorded messages as fast as possible (no script)")
    parser.add_argument("--ranks", type=int, default=1)
    parser.add_argument("--deadline", type=float, default=60.0, help="seconds this process lives at most")
    args = parser.parse_args(argv)
    started = time.monotonic()
    if (args.script is None) == (args.flood is None):
        raise SystemExit("give --script or --flood")
    script = {"steps": [{"send": args.flood}]} if args.flood is not None else json.loads(args.script.read_text())
    recording = Recording(read_recording(args.recording))
    report = {
        "sent": 0, "skipped": 0, "restarts": 0, "replayed": 0,
        "requests": {"bare": 0, "delimited": 0, "ignored": 0, "malformed": 0},
        "subscribed": False, "send_seconds": None,
    }
    context = zmq.Context()
    ranks = [
        RankPublisher(context, r, local_port(args.pub), local_port(args.router), script)
        for r in range(args.ranks)
    ]
    print(json.dumps({"bound": True}), flush=True)  # every socket bound: the starter may connect
    waiting = zmq.Poller()
    for r in ranks:
        waiting.register(r.xpub, zmq.POLLIN)
    serving = zmq.Poller()
    serving.register(sys.stdin.fileno(), zmq.POLLIN)
    for r in ranks:
        serving.register(r.router, zmq.POLLIN)
    try:
        while True:
            for r in ranks:
                r.check_subscription()
            if all(r.subscribed for r in ranks):
                break
            if time.monotonic() - started > args.deadline:
                print(json.dumps(report), flush=True)
                return 3
            waiting.poll(SERVE_POLL_MS)
        report["subscribed"] = True
        sending = time.perf_counter()
        for step in script["steps"]:
            run_step(step, ranks, recording, report, started + args.deadline)
        report["send_seconds"] = round(time.perf_counter() - sending, 6)
        while time.monotonic() - started < args.deadline:
            for r in ranks:
                r.serve_replay(report)
            ready = dict(serving.poll(SERVE_POLL_MS))
            if ready.get(sys.stdin.fileno()) and os.read(sys.stdin.fileno(), 4096) == b"":
                break
        for r in ranks:
            r.serve_replay(report)
        print(json.dumps(report), flush=True)
        return 0
    finally:
        for r in ranks:
            r.close()
        context.term()


if __name__ == "__main__":
    sys.exit(main())
