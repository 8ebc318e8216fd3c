# SPDX-License-Identifier: Apache-2.0
"""A ``kvviz serve`` under test: started on a free 127.0.0.1 port in a process group of its
own, read for its address, and ended in a ``finally`` with every app it started.

Also what the tests look at from outside: a process's children, its group, its command line
(Linux ``/proc``). Every wait here polls with a bound; none sleeps for a fixed time to wait
for something.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

START_SECONDS = 90.0
"""Bound on a server's start (it runs its command's app once first; a shared CI core is slow)."""

GONE_SECONDS = 20.0
"""Bound on a process group's end once it was told to (the server allows itself 3 + 2 + 2 s)."""

ADDRESS = re.compile(r"kvviz serve: (http://127\.0\.0\.1:(\d+))/ serves")

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def poll(condition, seconds: float, what: str, pause=None):
    """``condition()``'s first truthy value within ``seconds``; AssertionError naming ``what``.
    ``pause()`` waits between looks (default 50 ms)."""
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {seconds:g} s: {what}")
        pause() if pause is not None else time.sleep(0.05)


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, pgrp) of ``pid``, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text[text.rindex(")") + 2:].split()
    return fields[0], int(fields[1]), int(fields[2])


def _pids() -> list[int]:
    return sorted(int(name) for name in os.listdir("/proc") if name.isdigit())


def children_of(pid: int) -> list[int]:
    """The live (not zombie) children of ``pid``, in pid order."""
    found = []
    for child in _pids():
        stat = _stat(child)
        if stat is not None and stat[1] == pid and stat[0] != "Z":
            found.append(child)
    return found


def group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``."""
    return [pid for pid in _pids() if (stat := _stat(pid)) is not None and stat[2] == pgid and stat[0] != "Z"]


def group_of(pid: int) -> int | None:
    stat = _stat(pid)
    return None if stat is None else stat[2]


def command_line(pid: int) -> list[str]:
    """``pid``'s argument vector (empty when it is gone)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return []
    return [part.decode() for part in raw.split(b"\0") if part]


def _end_with_the_test_run() -> None:
    """In the server's process, before exec: SIGTERM it should pytest itself die (killed by
    a timeout, say), when no ``finally`` runs; the server then ends its apps as on Ctrl+C."""
    import ctypes

    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


@dataclass
class ServedProcess:
    """A running ``kvviz serve``: its ``process``, ``url`` (``http://127.0.0.1:PORT``) and
    ``output`` file; ``app_groups`` collects every app group seen, so the ``finally`` can
    end any a broken server left."""

    process: subprocess.Popen
    url: str
    output: Path
    app_groups: set[int] = field(default_factory=set)

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def apps(self) -> list[int]:
        """The server's live app processes (each the leader of its own group)."""
        pids = children_of(self.process.pid)
        self.app_groups.update(pgid for pid in pids if (pgid := group_of(pid)) is not None)
        return pids

    def new_app(self, before: list[int], seconds: float = START_SECONDS) -> int:
        """The one app started since ``before`` was taken (polled)."""
        found = poll(lambda: [p for p in self.apps() if p not in before], seconds, "a new app process")
        assert len(found) == 1, found
        return found[0]

    def text(self) -> str:
        return self.output.read_text(errors="replace")


@contextmanager
def served(*args: str, cwd: Path, max_sessions: int | None = None):
    """Run ``kvviz serve ARGS --port 0`` (in ``cwd``, its own process group) until the block
    ends; then SIGINT it as Ctrl+C would, wait (bounded), and SIGKILL whatever is left of it
    and of every app group it was seen to run."""
    output = cwd / "serve-output.txt"
    command = [sys.executable, "-m", "kvviz", "serve", *args, "--host", "127.0.0.1", "--port", "0"]
    if max_sessions is not None:
        command += ["--max-sessions", str(max_sessions)]
    with output.open("w") as sink:
        process = subprocess.Popen(command, cwd=cwd, stdin=subprocess.DEVNULL, stdout=sink,
                                   stderr=subprocess.STDOUT, start_new_session=True,
                                   preexec_fn=_end_with_the_test_run)
    server = None
    try:
        def address():
            if process.poll() is not None:
                raise AssertionError(f"kvviz serve exited {process.returncode}: {output.read_text()}")
            match = ADDRESS.search(output.read_text(errors="replace"))
            return match and match.group(1)

        server = ServedProcess(process, poll(address, START_SECONDS, "kvviz serve printing its address"), output)
        yield server
    finally:
        if process.poll() is None:
            if server is not None:
                server.apps()  # note the groups still there
            os.killpg(process.pid, signal.SIGINT)
            try:
                process.wait(timeout=GONE_SECONDS)
            except subprocess.TimeoutExpired:
                pass
        kill_group(process.pid)
        process.wait(timeout=GONE_SECONDS)
        for pgid in server.app_groups if server is not None else ():
            kill_group(pgid)
