# SPDX-License-Identifier: Apache-2.0
"""One browser tab's app: a process group of its own, ended with everything in it.

textual-serve starts each tab's app with a shell command line in the server's own process
group and, when the tab closes, asks it to quit and waits, unbounded, for it to close its
output. :class:`GroupedAppService` keeps textual-serve's packet protocol (frames out, keys,
resizes and downloads in) but starts the command line as an argument vector (no shell) as
the leader of a new session, so that it and anything it starts share a process group, and
ends that group when the tab goes: asked to quit, then SIGTERM, then SIGKILL, each wait
bounded. Ctrl+C at the server reaches only the server (the apps are in other sessions); the
server then ends every group (:func:`end_process_group`). Should the server itself be
killed outright, Linux sends each app SIGKILL as its parent dies (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
import sys
from collections.abc import Sequence

from textual_serve.app_service import AppService

QUIT_GRACE = 3.0
"""Seconds an app has to quit when asked (it saves nothing: quitting is a few frames)."""

TERM_GRACE = 2.0
"""Seconds a group has between SIGTERM and SIGKILL."""

KILL_WAIT = 2.0
"""Seconds to wait for a SIGKILLed group to be gone (the kernel's part only)."""

POLL = 0.05
"""How often a group is looked at while waiting for it to go (no event says it went)."""


def _parent_death_kill() -> None:
    """In the child, before exec: SIGKILL this process when the server dies (Linux)."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _load_prctl():
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl()  # found in the parent: the child between fork and exec only calls it


def group_alive(pgid: int) -> bool:
    """Whether any process is left in process group ``pgid`` (signal 0 probes, sends nothing)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # the id was reused by another user's group: ours is gone
        return False
    return True


def signal_group(pgid: int, signum: int) -> bool:
    """Send ``signum`` to group ``pgid``; False when the group is gone."""
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        return False
    return True


async def _until_gone(pgid: int, seconds: float) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while group_alive(pgid):
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(POLL)
    return True


async def end_process_group(process: asyncio.subprocess.Process, grace: float) -> None:
    """End ``process`` (the leader of its own group) and its group: ``grace`` seconds for it
    to exit by itself (it was asked to quit), then SIGTERM to the group, then SIGKILL. Every
    wait is bounded; returns once the group is gone or SIGKILL was sent and waited for."""
    pgid = process.pid
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(process.wait(), grace)
    # The leader may be gone while a child it started lives on: the group is what ends.
    if signal_group(pgid, signal.SIGTERM) and not await _until_gone(pgid, TERM_GRACE):
        signal_group(pgid, signal.SIGKILL)
        await _until_gone(pgid, KILL_WAIT)
    with contextlib.suppress(asyncio.TimeoutError, ProcessLookupError):
        await asyncio.wait_for(process.wait(), KILL_WAIT)


def kill_group_now(pgid: int) -> None:
    """SIGKILL group ``pgid`` without waiting: the server's last act for a group left over."""
    signal_group(pgid, signal.SIGKILL)


class GroupedAppService(AppService):
    """textual-serve's app service for one tab, on a fixed argument vector ``argv``, in a
    process group of its own that :meth:`stop` ends (see the module doc). ``pid`` is the
    app's process id, which is also its group's id (None until started)."""

    def __init__(self, argv: Sequence[str], **options):
        super().__init__(shlex.join(argv), **options)  # the command text is only for logs
        self.argv = tuple(argv)
        self.pid: int | None = None
        self._stopped = False

    async def _open_app_process(self, width: int = 80, height: int = 24):
        environment = self._build_environment(width=width, height=height)
        self._process = process = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=environment,
            start_new_session=True,
            preexec_fn=_parent_death_kill if _PRCTL is not None else None,
        )
        self._stdin = process.stdin
        self.pid = process.pid
        return process

    async def run(self) -> None:
        """Relay the app's packets until its output ends (it quit or crashed), then close the
        tab's socket so the page says the session ended instead of freezing on a frame."""
        try:
            await super().run()
        finally:
            with contextlib.suppress(Exception):
                await self.remote_close()

    async def stop(self) -> None:
        """Ask the app to quit and end its process group (bounded; a second call does nothing)."""
        if self._stopped or self._process is None:
            return
        self._stopped = True
        await self._download_manager.cancel_app_downloads(app_service_id=self.app_service_id)
        if self._process.returncode is None:
            with contextlib.suppress(Exception):  # its input may be closed already
                await self.send_meta({"type": "quit"})
        await end_process_group(self._process, QUIT_GRACE)
        if self._task is not None:  # the relay ends with the app's output; bounded all the same
            _done, pending = await asyncio.wait({self._task}, timeout=KILL_WAIT)
            for task in pending:
                task.cancel()
            self._task = None


READY_LINE = b"__GANGLION__\n"
"""What Textual's web driver writes once the app runs (textual-serve waits for it too)."""


def preflight(argv: Sequence[str], seconds: float) -> str | None:
    """Start ``argv`` once as a tab would (web driver, own group), wait until its app runs,
    then end it. None when it ran; else why not, in one line (its error output's last line)."""
    return measure_tab(argv, seconds)[0]


def measure_tab(argv: Sequence[str], seconds: float) -> tuple[str | None, int]:
    """:func:`preflight`'s answer, and the peak resident bytes of the tab's process group once
    its app ran (its processes' ``VmHWM``; 0 where ``/proc`` does not tell): what one more tab
    costs, measured on this machine with this command."""
    return asyncio.run(_preflight(tuple(argv), seconds))


def _group_peak_bytes(pgid: int) -> int:
    """The summed ``VmHWM`` (peak resident set) of process group ``pgid``'s processes."""
    total = 0
    for name in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not name.isdigit():
            continue
        try:
            if os.getpgid(int(name)) != pgid:
                continue
            with open(f"/proc/{name}/status", encoding="ascii", errors="replace") as status:
                for line in status:
                    if line.startswith("VmHWM:"):
                        total += int(line.split()[1]) * 1024
                        break
        except (OSError, ValueError):  # gone meanwhile, or not ours to read
            continue
    return total


async def _preflight(argv: tuple[str, ...], seconds: float) -> tuple[str | None, int]:
    from textual_serve.download_manager import DownloadManager

    async def ignore(*_args) -> None:
        return None

    service = GroupedAppService(argv, write_bytes=ignore, write_str=ignore, close=ignore,
                                download_manager=DownloadManager())
    process = await service._open_app_process(80, 24)
    peak = 0
    try:
        started = await asyncio.wait_for(_reached_ready_line(process.stdout), seconds)
        if started:
            peak = _group_peak_bytes(process.pid)
    except asyncio.TimeoutError:
        return f"its app did not open within {seconds:g} s", 0
    finally:
        await end_process_group(process, 0)
    if started:
        return None, peak
    error = (await process.stderr.read(64 * 1024)).decode("utf-8", "replace").strip().splitlines()
    return (error[-1] if error else f"it exited with status {process.returncode} and said nothing"), 0


async def _reached_ready_line(stdout: asyncio.StreamReader) -> bool:
    while line := await stdout.readline():
        if line == READY_LINE:
            return True
    return False
