# SPDX-License-Identifier: Apache-2.0
"""Work that must end by a deadline: run in a child process that the parent kills at it.

``kvviz shrink`` and ``kvviz fuzz`` promise to end within ``--max-seconds``. A clock asked
between ops cannot keep that promise: one op of a million tokens runs for seconds, and a diff
run is one call into two backends. A check inside every op of kvcore would slow every op of
every user for the sake of these two commands, and a foreign cache (shortfin, vLLM, SGLang)
cannot be given one at all. So the work runs in a forked child process, in a process group of
its own, and streams what it found to the parent as JSON messages over a pipe (the best
scenario so far, each result as it is made); the parent keeps what it received, kills the
group at the deadline and reports from that. The child writes no file the user named: the
parent writes them, atomically, from what the child sent.

Ctrl-C (SIGINT reaches the parent alone: the child has its own process group) is passed on to
the child once, so the work stops as it does when run in the process (fuzz keeps what it
found); a second Ctrl-C kills it. Where ``fork`` is not available (Windows, and macOS's
default), the work runs in the process and only the clock asked between ops bounds it.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Outcome", "WorkerCrashed", "can_fork", "run_until"]

Send = Callable[[dict], None]


class WorkerCrashed(RuntimeError):
    """The child raised: a bug of ours, with the child's traceback as its message."""


@dataclass(frozen=True)
class Outcome:
    """How the child ended: ``finished`` (its work returned) or killed at the deadline;
    ``interrupted`` when Ctrl-C was passed on to it."""

    finished: bool
    interrupted: bool = False


def can_fork() -> bool:
    """Whether work can run in a forked child here."""
    return "fork" in multiprocessing.get_all_start_methods()


def run_until(work: Callable[[Send], None], deadline: float, on_message: Send, *,
              clock: Callable[[], float] = time.monotonic) -> Outcome:
    """Run ``work(send)`` in a forked child and hand each ``send(message)`` (a JSON-able dict)
    to ``on_message`` in this process as it comes; kill the child's process group when
    ``clock()`` reaches ``deadline``. Without fork, ``work(on_message)`` runs here.

    Raises :class:`WorkerCrashed` when the work raised (KeyboardInterrupt included: work that
    handles Ctrl-C catches it itself)."""
    if not can_fork():
        work(on_message)
        return Outcome(True)
    context = multiprocessing.get_context("fork")
    reader, writer = context.Pipe(duplex=False)

    def child() -> None:
        reader.close()
        try:
            os.setpgid(0, 0)
        except OSError:  # the parent set it first
            pass
        signal.signal(signal.SIGINT, signal.default_int_handler)

        def send(message: dict) -> None:
            writer.send_bytes(json.dumps(message).encode("utf-8"))

        try:
            work(send)
        except BaseException:  # noqa: BLE001 - reported to the parent, which raises it
            send({"kind": "crash", "traceback": traceback.format_exc()})
        writer.close()

    process = context.Process(target=child, name="kvviz-worker", daemon=True)
    process.start()
    writer.close()
    try:
        os.setpgid(process.pid, process.pid)  # before any kill, whoever runs first
    except OSError:
        pass
    finished = interrupted = False
    crash = None
    try:
        while True:
            try:
                left = deadline - clock()
                if left <= 0:
                    break
                if not reader.poll(left):
                    continue
                try:
                    message = json.loads(reader.recv_bytes())
                except EOFError:  # the child closed its end: its work is over
                    finished = True
                    break
                if message.get("kind") == "crash":
                    crash = message["traceback"]
                    continue
                on_message(message)
            except KeyboardInterrupt:
                if interrupted:
                    raise
                interrupted = True
                _signal_group(process.pid, signal.SIGINT)
    finally:
        if finished:  # its end of the pipe closed: it is exiting (or died); its exit code says which
            process.join(max(0.0, deadline - clock()))
        ended = process.exitcode
        _signal_group(process.pid, signal.SIGKILL)  # whatever is left of its group
        process.join()
        reader.close()
    if crash is not None:
        raise WorkerCrashed(crash)
    if finished and ended not in (0, None):
        raise WorkerCrashed(f"the worker process ended with exit code {ended} before its work did (a negative "
                            f"code is a signal: -9 is SIGKILL, as the kernel's out-of-memory killer sends)")
    return Outcome(finished, interrupted)


def _signal_group(pid: int, sig: int) -> None:
    """Send ``sig`` to the child's process group (to the child alone if its group is not set)."""
    for send in (os.killpg, os.kill):
        try:
            send(pid, sig)
            return
        except (ProcessLookupError, PermissionError):
            continue
