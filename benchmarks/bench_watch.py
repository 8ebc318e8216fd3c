# SPDX-License-Identifier: Apache-2.0
"""Throughput of ``kvviz watch``: how many KV events per second it takes off a live ZeroMQ
stream, and whether it drops any. The target is 20,000 events/s without a drop on the
project's 2-core machine.

    python benchmarks/bench_watch.py [--messages N] [--recording FILE] [--hwm N] [--decode-only]

By default the whole path is measured, end to end: publisher process -> Subscriber (receive
and decode on its thread) -> ``WatchTimeline.add`` of each polled message on this thread (the
forest applied, the counters kept), as the UI's drain and ``kvviz watch --print --count N``
do. ``--decode-only`` measures the subscriber alone (polled and counted, nothing added), the
figure this benchmark printed first.

A publisher process of our own (tests/watch/publisher.py ``--flood N``, on 127.0.0.1) sends
the shared vLLM recording's payloads as fast as it can, looped with rising seq (400 batches,
7,850 events; 19.6 events per batch), once the subscriber has subscribed. The subscriber
(``kvviz.watch.subscriber.Subscriber``, topic ``kv``, no replay endpoint so that
every lost message shows as a gap) receives and decodes on its own thread; this process polls
it like the UI does and counts, from the first message polled to the last:

- events/s and messages/s received **and decoded** (decoded batches' events);
- drops: seqs the subscriber saw skipped (its gap counter) and messages that never came;
- the CPU seconds this process spent meanwhile (both threads), so events per CPU-second:
  the rate a core of its own would give, less sensitive to what else the machine runs;
- the publisher's own send rate, and the machine's load average before and after (the
  figures are only comparable on a machine as loaded).

Exit status 0 when the target is met, 1 when not.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvviz.watch.subscriber import DEFAULT_HWM, Subscriber  # noqa: E402
from kvviz.watch.timeline import WatchTimeline  # noqa: E402

PUBLISHER = ROOT / "tests" / "watch" / "publisher.py"
DEFAULT_RECORDING = ROOT / "kvviz" / "samples" / "kv-events" / "vllm-0.33.0-conversation-400.jsonl.gz"  # the shipped sample
TARGET_EVENTS_PER_S = 20_000
IDLE_S = 5.0
"""Seconds without a message, after the first, that end the count: the rest were dropped."""
DEADLINE_S = 300.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000, help="batches to send (default 20,000: 50 loops)")
    parser.add_argument("--recording", type=Path, default=DEFAULT_RECORDING)
    parser.add_argument("--hwm", type=int, default=DEFAULT_HWM, help="the SUB socket's receive high-water mark")
    parser.add_argument("--decode-only", action="store_true",
                        help="the subscriber alone: poll and count, add nothing to a timeline")
    parser.add_argument("--chunk", type=int, default=1000,
                        help="messages per poll (kvviz watch --print takes 1,000; the UI 200 a drain)")
    args = parser.parse_args()
    timeline = None if args.decode_only else WatchTimeline("bench")
    backlog_peak = 0

    pub, router = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    load_before = os.getloadavg()
    publisher = subprocess.Popen(
        [sys.executable, str(PUBLISHER), "--pub", pub, "--router", router, "--recording", str(args.recording),
         "--flood", str(args.messages), "--deadline", str(DEADLINE_S)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )
    subscriber = Subscriber(pub, topic="kv", hwm=args.hwm)
    received = events = undecodable = 0
    first = last = None
    cpu_first = cpu_last = 0.0
    try:
        subscriber.start()
        deadline = time.monotonic() + DEADLINE_S
        quiet_since = time.monotonic()
        while received < args.messages and time.monotonic() < deadline:
            batch = subscriber.poll(args.chunk)
            now = time.perf_counter()
            if not batch:
                if first is not None and time.monotonic() - quiet_since > IDLE_S:
                    break
                time.sleep(0.002)  # the UI polls on a timer too; this is its stand-in, not a synchronisation
                continue
            quiet_since = time.monotonic()
            if first is None:
                first, cpu_first = now, time.process_time()
            last, cpu_last = now, time.process_time()
            received += len(batch)
            for item in batch:
                if item.batch is None:
                    undecodable += 1
                else:
                    events += len(item.batch.events)
                if timeline is not None:
                    timeline.add(item.message, item.batch, item.error, item.note)
            last, cpu_last = time.perf_counter(), time.process_time()  # after the adds
            backlog_peak = max(backlog_peak, subscriber.pending)
        stats = subscriber.stats
    finally:
        subscriber.stop()
        out = b""
        try:
            out, _ = publisher.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        if publisher.poll() is None:
            os.killpg(publisher.pid, signal.SIGKILL)
            publisher.wait()
    load_after = os.getloadavg()
    report = json.loads(out.decode().strip().splitlines()[-1]) if out.strip() else {}

    seconds = (last - first) if first is not None and last is not None and last > first else float("nan")
    events_per_s = events / seconds
    dropped = args.messages - received
    sent_per_s = report.get("sent", 0) / report["send_seconds"] if report.get("send_seconds") else float("nan")
    print(f"recording        {args.recording.name} (looped)")
    print(f"sent             {report.get('sent', '?'):,} messages by the publisher at {sent_per_s:,.0f} messages/s")
    print(f"received         {received:,} messages, {events:,} events, {undecodable} undecodable, in {seconds:.2f} s")
    path = "received and decoded" if timeline is None else "received, decoded and added to the timeline"
    print(f"mode             {'decode only (the subscriber)' if timeline is None else 'end to end (publisher -> subscriber -> timeline.add)'}")
    print(f"throughput       {events_per_s:,.0f} events/s, {received / seconds:,.0f} messages/s ({path})")
    print(f"backlog          at most {backlog_peak:,} messages waiting in the subscriber (polled {args.chunk:,} at a time)")
    if timeline is not None:
        print(f"timeline         {timeline.last_step:,} steps, {timeline.summary()['cached_blocks']:,} blocks cached")
    cpu = cpu_last - cpu_first
    per_cpu_second = events / cpu if cpu else float("nan")
    print(f"cpu              {cpu:.2f} s of this process (both threads): {per_cpu_second:,.0f} events per CPU-second")
    print(f"drops            {dropped} messages never came; gaps seen {stats.gaps}, seqs missing {stats.missing}")
    print(f"hwm              SUB {args.hwm:,}, publisher's SND 100,000")
    print(f"load average     {load_before[0]:.2f} before, {load_after[0]:.2f} after (1 min; {os.cpu_count()} CPUs)")
    met = events_per_s >= TARGET_EVENTS_PER_S and dropped == 0 and stats.missing == 0
    print(f"target           {TARGET_EVENTS_PER_S:,} events/s without a drop: {'met' if met else 'NOT met'}")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
