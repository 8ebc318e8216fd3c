# SPDX-License-Identifier: Apache-2.0
"""The live watch under hostile sizes and times, against peers of our own on 127.0.0.1: a frame
header claiming 8 GiB, a 20 MiB message, a replay endpoint that answers one frame a second, a
watch stopped by --max-seconds in the middle of a replay, a disk that fills under --record.
Each must leave the watch running, bounded, and saying what happened in one line."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from kvviz.watch import recording
from kvviz.watch.recording import read_recording
from kvviz.watch.subscriber import REPLAY_TOTAL_S

from .test_live import DEADLINE_S, RECORDED, publisher, receive, seqs, subscribe  # noqa: F401 - fixtures

pytestmark = pytest.mark.slow  # live ZeroMQ publishers and peers of our own, some for seconds

KV = b"kv"


# -- a ZMTP 3.0 peer by hand: what no ZeroMQ library would send -------------------------------


def zmtp_greeting() -> bytes:
    """ZMTP 3.0's 64-byte greeting, NULL mechanism, as a server."""
    return b"\xff" + b"\x00" * 8 + b"\x7f" + bytes([3, 0]) + b"NULL".ljust(20, b"\x00") + b"\x00" + b"\x00" * 31


def zmtp_ready(socket_type: bytes = b"PUB") -> bytes:
    body = b"\x05READY" + bytes([11]) + b"Socket-Type" + len(socket_type).to_bytes(4, "big") + socket_type
    return bytes([0x04, len(body)]) + body


def zmtp_frame(data: bytes, more: bool = False) -> bytes:
    flags = 0x01 if more else 0x00
    if len(data) > 255:
        return bytes([flags | 0x02]) + len(data).to_bytes(8, "big") + data
    return bytes([flags, len(data)]) + data


def read_exactly(connection: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise OSError("the subscriber hung up during the handshake")
        data += chunk
    return data


def read_handshake(connection: socket.socket) -> None:
    """Reads the peer's 64-byte greeting and its READY command (a short command frame)."""
    read_exactly(connection, 64)
    flags, size = read_exactly(connection, 2)
    assert flags == 0x04, f"expected a short command (READY), got flags {flags:#x}"
    read_exactly(connection, size)


class HostilePeer:
    """A listening socket that greets its first connection as a PUB and then sends a frame
    header claiming ``claim`` bytes; every later connection gets one valid message (seq 7)."""

    def __init__(self, claim: int):
        self.claim = claim
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(DEADLINE_S)
        self.endpoint = f"tcp://127.0.0.1:{self.server.getsockname()[1]}"
        self.connections = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            while self.connections < 2:
                connection, _ = self.server.accept()
                self.connections += 1
                with connection:
                    connection.settimeout(DEADLINE_S)
                    connection.sendall(zmtp_greeting() + zmtp_ready())
                    read_handshake(connection)  # the subscriber's greeting and READY: the handshake is done
                    if self.connections == 1:
                        connection.sendall(bytes([0x02]) + self.claim.to_bytes(8, "big") + b"\x00" * 64)
                        while connection.recv(65536):  # until the subscriber hangs up
                            pass
                    else:
                        connection.sendall(zmtp_frame(KV, True) + zmtp_frame((7).to_bytes(8, "big"), True)
                                           + zmtp_frame(RECORDED[0][1]))
                        while connection.recv(65536):
                            pass
        except OSError:
            pass  # the test's own deadline reports what did not happen

    def close(self) -> None:
        self.server.close()


def virtual_bytes() -> int:
    """This process's virtual memory now (Linux /proc)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmSize in /proc/self/status")


def test_a_frame_claiming_8_gib_is_refused_unallocated_and_the_next_valid_message_arrives(subscribe):
    peer = HostilePeer(claim=8 << 30)
    try:
        before = virtual_bytes()
        subscriber = subscribe(peer.endpoint, topic="kv")
        (got,) = receive(subscriber, 1)
        assert (got.message.seq, got.message.payload) == (7, RECORDED[0][1])
        assert virtual_bytes() - before < 1 << 30  # no 8 GiB reserved for the claim
        assert peer.connections == 2 and subscriber.stats.reconnects == 1
    finally:
        peer.close()


def test_a_refused_peer_is_reconnected_to_even_when_it_claims_a_tebibyte(subscribe):
    peer = HostilePeer(claim=1 << 40)
    try:
        subscriber = subscribe(peer.endpoint, topic="kv")
        assert seqs(receive(subscriber, 1)) == [7]
    finally:
        peer.close()


# -- a replay that trickles in -------------------------------------------------------------------


def test_a_replay_answering_one_frame_a_second_delays_live_messages_by_its_total_bound_at_most(publisher, subscribe):
    # 60 replayed frames at one a second would hold the live messages for a minute.
    live = publisher({"replay_trickle": 1.0, "steps": [{"send": 3}, {"skip": 60}, {"send": 5}]})
    subscriber = subscribe(live.pub, topic="kv", replay_endpoint=live.router, replay_wait=2.0)
    started = time.monotonic()
    got = []
    while len(got) < 3 or got[-1].message.seq != 67:
        got.extend(subscriber.poll())
        assert time.monotonic() - started < REPLAY_TOTAL_S + 10, [(r.message.seq, r.note) for r in got]
        time.sleep(0.01)  # a pause between polls; the loop ends on the last live seq
    live_seqs = [r.message.seq for r in got if r.note != "replayed"]
    assert live_seqs == [0, 1, 2, 63, 64, 65, 66, 67]
    replayed = [r.message.seq for r in got if r.note == "replayed"]
    assert replayed == list(range(3, 3 + len(replayed))) and len(replayed) <= REPLAY_TOTAL_S + 1
    assert got[-5].note.startswith("gap 3-62 partly replayed")


# -- the CLI: one count, one line ---------------------------------------------------------------


def watch(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvviz", "watch", *args], capture_output=True, text=True,
                          timeout=DEADLINE_S)


def test_max_seconds_in_the_middle_of_a_replay_counts_what_the_recording_holds(publisher, tmp_path):
    live = publisher({"replay_trickle": 0.2, "steps": [{"send": 3}, {"skip": 60}, {"send": 5}]})
    record = tmp_path / "live.jsonl"
    done = watch(live.pub, "--topic", "kv", "--replay-endpoint", live.router, "--json", "--max-seconds", "2",
                 "--record", str(record))
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.splitlines()[-1])
    recorded = read_recording(record)
    assert summary["messages"] == len(recorded) >= 3
    assert summary["last_seq"] == recorded[-1].seq


def test_a_20_mib_message_never_makes_a_recording_the_reader_refuses(publisher, tmp_path):
    live = publisher({"steps": [{"send": 2}, {"big": 20 * 1024 * 1024}, {"resubscribed": True}, {"send": 2}]})
    record = tmp_path / "live.jsonl"
    done = watch(live.pub, "--topic", "kv", "--json", "--count", "4", "--max-seconds", str(DEADLINE_S - 10),
                 "--record", str(record))
    assert done.returncode == 0, done.stderr
    assert [m.seq for m in read_recording(record)] == [0, 1, 3, 4]
    assert json.loads(done.stdout.splitlines()[-1])["messages"] == 4


def test_a_disk_that_fills_under_record_is_told_at_once_and_the_watch_ends_in_one_line(publisher, tmp_path,
                                                                                       monkeypatch):
    from click.testing import CliRunner

    from kvviz.cli import cli

    from .test_recording import FullDisk

    real_fdopen = recording.os.fdopen
    monkeypatch.setattr(recording.os, "fdopen", lambda *a, **k: FullDisk(real_fdopen(*a, **k), room=5))
    live = publisher({"steps": [{"send": 20}]})
    record = tmp_path / "live.jsonl"
    result = CliRunner().invoke(cli, ["watch", live.pub, "--topic", "kv", "--json", "--count", "20",
                                      "--max-seconds", str(DEADLINE_S - 10), "--record", str(record)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert json.loads(result.stdout.splitlines()[-1])["messages"] == 20  # watching went on
    told = f"kvviz: {record}: recording stopped after 5 messages: No space left on device"
    assert result.stderr.splitlines() == [f"{told}; watching goes on",
                                          f"{told} (15 messages received after it not recorded)"]
    assert len(read_recording(record)) == 5


# -- a flood nobody polls -------------------------------------------------------------------------


def test_a_flood_nobody_polls_stops_at_the_queues_byte_bound_and_the_rest_is_a_gap_not_memory(publisher,
                                                                                                subscribe):
    from kvviz.watch.subscriber import message_cost
    from kvviz.watch.subscriber import PENDING_BYTES

    live = publisher({"steps": [{"send": 20_000}]})
    subscriber = subscribe(live.pub, topic="kv")
    assert live.finish()["sent"] == 20_000  # every message left the publisher (or was dropped by its HWM)
    queued = subscriber.stats
    assert queued.pending_bytes <= PENDING_BYTES and queued.messages < 20_000
    drained = subscriber.poll(queued.messages)
    assert len(drained) == queued.messages  # queued, none lost: the thread waited for room
    assert sum(message_cost(r) for r in drained) == queued.pending_bytes


# -- a flooding publisher, the whole CLI watching ---------------------------------------------------

FLOOD_SECONDS = 10
"""How long the flood test watches: long enough that an unbounded timeline outgrows the cap
(before the bounds it passed 150 MB after 5 s and reached 3.2 GB in 20 s), and that the
bounded one folds steps (its 32 MiB hold about 2,100 of them, 3 s of this flood)."""
FLOOD_TIMELINE_BYTES = 32 * 1024 * 1024
FLOOD_PENDING_BYTES = 16 * 1024 * 1024
FLOOD_GROWTH_CAP = 150 * 1024 * 1024
"""Resident memory the watch may gain over its first second: the two bounds above (48 MiB, as
the test sets them), ZeroMQ's queue, the forest and the allocator's slack."""

BOUNDED_WATCH = """\
import sys
import kvviz.watch.subscriber as subscriber
import kvviz.watch.timeline as watch
watch.LIVE_TIMELINE_BYTES = {timeline}
subscriber.PENDING_BYTES = {pending}
from kvviz.cli import cli
cli(["watch", *sys.argv[1:]])
"""


def resident_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None  # it has exited
    return None


def test_a_flooding_publisher_keeps_the_watch_under_its_memory_cap_and_every_seq_is_shown_or_counted_missing(
        publisher):
    live = publisher({"steps": [{"send": 2_000_000}]})
    code = BOUNDED_WATCH.format(timeline=FLOOD_TIMELINE_BYTES, pending=FLOOD_PENDING_BYTES)
    watch = subprocess.Popen([sys.executable, "-c", code, live.pub, "--topic", "kv", "--json", "--every", "5000",
                              "--max-seconds", str(FLOOD_SECONDS)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        samples: list[int] = []
        started = time.monotonic()
        while watch.poll() is None and time.monotonic() - started < FLOOD_SECONDS + 20:
            rss = resident_bytes(watch.pid)
            if rss is not None:
                samples.append(rss)
            time.sleep(0.2)  # a sampling period, not a synchronisation
        out, err = watch.communicate(timeout=DEADLINE_S)
    finally:
        if watch.poll() is None:
            os.killpg(watch.pid, signal.SIGKILL)
            watch.wait(timeout=DEADLINE_S)
    assert watch.returncode == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    summary = lines[-1]
    assert summary["messages"] > 3_000  # it did watch a flood (more than the bound keeps)
    # --json kept up, or said what it dropped: every seq between the first and the last is a
    # step or counted missing.
    assert summary["last_seq"] - summary["first_seq"] + 1 == summary["messages"] + summary["missing_messages"]
    baseline = samples[5]  # after the first second: Python, kvviz, ZeroMQ loaded
    assert max(samples) - baseline < FLOOD_GROWTH_CAP, [s // 2**20 for s in samples]
