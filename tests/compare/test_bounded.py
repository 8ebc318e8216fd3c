# SPDX-License-Identifier: Apache-2.0
"""``run_until``: work in a forked worker whose messages reach the caller in order, killed at
the deadline (what it sent before is kept), its crash raised here; without fork, run here."""

from __future__ import annotations

import os
import time

import pytest

from kvviz.compare import bounded
from kvviz.compare.bounded import WorkerCrashed, run_until


def test_every_message_arrives_in_order_and_a_finished_worker_says_so():
    got = []
    outcome = run_until(lambda send: [send({"n": n}) for n in range(500)], time.monotonic() + 60, got.append)
    assert outcome.finished and not outcome.interrupted
    assert got == [{"n": n} for n in range(500)]


def test_the_work_runs_in_another_process_in_a_group_of_its_own():
    got = []
    run_until(lambda send: send({"pid": os.getpid(), "group": os.getpgid(0)}), time.monotonic() + 60, got.append)
    assert got[0]["pid"] != os.getpid() and got[0]["group"] == got[0]["pid"]


@pytest.mark.slow
def test_a_worker_that_never_ends_is_killed_at_the_deadline_and_what_it_sent_is_kept():
    def forever(send):
        send({"best": 1})
        while True:
            pass

    got = []
    started = time.monotonic()
    outcome = run_until(forever, started + 1, got.append)
    assert not outcome.finished and got == [{"best": 1}]
    assert time.monotonic() - started < 30  # killed, not waited for (it never ends)


def test_a_crash_in_the_worker_is_raised_here_with_its_traceback():
    def broken(send):
        send({"first": True})
        raise ZeroDivisionError("a bug of ours")

    got = []
    with pytest.raises(WorkerCrashed, match="ZeroDivisionError: a bug of ours"):
        run_until(broken, time.monotonic() + 60, got.append)
    assert got == [{"first": True}]


def test_without_fork_the_work_runs_in_this_process(monkeypatch):
    monkeypatch.setattr(bounded, "can_fork", lambda: False)
    got = []
    outcome = run_until(lambda send: send({"pid": os.getpid()}), time.monotonic() + 60, got.append)
    assert outcome.finished and got == [{"pid": os.getpid()}]


def test_a_worker_killed_by_someone_else_is_a_crash_not_a_finished_run():
    import signal

    def killed(send):
        send({"before": True})
        os.kill(os.getpid(), signal.SIGKILL)  # as the out-of-memory killer would

    got = []
    with pytest.raises(WorkerCrashed, match="ended with exit code -9 before its work did"):
        run_until(killed, time.monotonic() + 60, got.append)
    assert got == [{"before": True}]
