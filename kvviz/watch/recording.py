# SPDX-License-Identifier: Apache-2.0
"""Recordings of the KV-event stream: one JSON object per line, one line per message, in
arrival order (plain or gzip-compressed: the shipped samples are), exactly as received (``--record FILE`` writes them, ``--replay-file`` reads them)::

    {"topic": "kv", "seq": 17, "payload": "<base64 of the msgpack bytes>"}

``"rank"`` (the SUB socket's index: the message came from port + rank) is written only when it
is not 0. A topic that is not UTF-8 is written as ``"topic_b64"`` instead of ``"topic"``, so no
message loses a byte. A reader ignores keys it does not know (later writers may add some).

Two marks are written only when true, so a line without them reads as it always did:
``"replayed": true`` on a message the replay endpoint answered (it may come after live messages
newer than it: a gap's fill, or the history before a late attach, which a reader puts back in
its place rather than taking for a publisher that went back to seq 0), and ``"restart": true`` on
the first message of a publisher the subscriber found restarted though its seq does not show it
(a reconnect to a new publisher that outran the old seq). Recordings of earlier kvvizes have
neither: they read as before (their late history, if any, reads as a restart).

Reading is bounded before work starts: the file's size
(:data:`~kvviz.core.limits.MAX_RECORDING_BYTES`), each line's
(:data:`~kvviz.core.limits.MAX_RECORDING_LINE_BYTES`) and the count of messages
(:data:`~kvviz.core.limits.MAX_RECORDING_MESSAGES`). A bad line is a :class:`RecordingError`,
``FILE:LINE:COL: what``; the payload itself is not decoded here (an undecodable payload is a
message of the stream like any other, shown, never fatal).

The one bad line forgiven is a last line cut off: no newline at its end and not a whole
message, what a writer killed mid-line leaves (``--record`` flushes line by line, so only the
line it was writing is lost). It is ignored, and said so through ``on_warning``.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable

from kvviz.core.jsonread import JsonNumberTooLong, loads
from kvviz.core.limits import MAX_RECORDING_BYTES, MAX_RECORDING_LINE_BYTES, MAX_RECORDING_MESSAGES
from kvviz.samples import open_data

_MAX_SEQ = (1 << 64) - 1  # the wire's seq is 8 bytes

MARKS = ("replayed", "restart")
"""A recording line's optional marks (written only when true): see the module's docstring."""


@dataclass(frozen=True, slots=True)
class Message:
    """One ZeroMQ message of the stream, as received: topic frame, seq, payload (msgpack)."""

    topic: bytes
    seq: int
    payload: bytes
    rank: int = 0
    """The SUB socket's index: the message came from the endpoint's port + rank."""
    replayed: bool = False
    """It came from the replay endpoint (a gap's fill, or the history before the first live
    message), possibly after live messages newer than it."""
    restart: bool = False
    """The view restarts before it: its publisher is a new one, though its seq may not show it."""


class RecordingError(ValueError):
    """A recording that cannot be read or written, located: ``FILE:LINE:COL: what`` (or
    ``FILE: what`` for the file as a whole)."""

    def __init__(self, path: str | os.PathLike, line: int, column: int, what: str) -> None:
        self.path, self.line, self.column, self.what = str(path), line, column, what
        super().__init__(str(self))

    def __str__(self) -> str:
        if self.line:
            return f"{self.path}:{self.line}:{self.column}: {self.what}"
        return f"{self.path}: {self.what}"


def read_recording(path: str | os.PathLike,
                   on_warning: Callable[[str], None] | None = None) -> list[Message]:
    """Every message of the recording at ``path``, in order. Raises :class:`RecordingError` for
    a file that is missing, not a regular file, over a bound, or has a bad line (blank lines are
    skipped). A last line cut off (no newline, not a whole message) is ignored and
    ``on_warning`` is told, one line: ``FILE:LINE: the last line is cut off …``."""
    try:
        status = os.stat(path)
    except OSError as error:
        raise RecordingError(path, 0, 0, f"cannot read the recording: {error.strerror}") from None
    size = status.st_size
    if not stat.S_ISREG(status.st_mode):
        raise RecordingError(path, 0, 0, "not a regular file")
    if size > MAX_RECORDING_BYTES:
        raise RecordingError(path, 0, 0, f"the recording has {size:,} bytes; the limit is {MAX_RECORDING_BYTES:,}")
    messages: list[Message] = []
    try:
        with open_data(path) as stream:  # gzip or plain: the bounds count what it decompresses to
            for number, raw in enumerate(_bounded_lines(stream, path), start=1):
                if not raw.strip():
                    continue
                if len(messages) >= MAX_RECORDING_MESSAGES:
                    raise RecordingError(path, number, 1,
                                         f"more than {MAX_RECORDING_MESSAGES:,} messages (the limit)")
                try:
                    messages.append(_message(raw, path, number))
                except RecordingError:
                    if raw.endswith(b"\n") or stream.peek(1):
                        raise
                    if on_warning is not None:
                        on_warning(f"{path}:{number}: the last line is cut off "
                                   "(a recording whose writer stopped mid-line): ignored")
    except OSError as error:
        raise RecordingError(path, 0, 0, f"cannot read the recording: {error.strerror or error}") from None
    return messages


def _bounded_lines(stream: IO[bytes], path: str | os.PathLike):
    """The file's lines, each refused before it grows past the line limit."""
    number = total = 0
    while True:
        raw = stream.readline(MAX_RECORDING_LINE_BYTES + 1)
        if not raw:
            return
        number += 1
        total += len(raw)
        if total > MAX_RECORDING_BYTES:  # a file still growing as it is read (a live --record)
            raise RecordingError(path, number, 1, f"the recording grew past {MAX_RECORDING_BYTES:,} bytes (the limit)")
        if len(raw) > MAX_RECORDING_LINE_BYTES:
            raise RecordingError(path, number, 1,
                                 f"the line is longer than {MAX_RECORDING_LINE_BYTES:,} bytes (the limit)")
        yield raw


def _message(raw: bytes, path: str | os.PathLike, number: int) -> Message:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise RecordingError(path, number, error.start + 1, "not UTF-8") from None
    try:
        record = loads(text.rstrip("\r\n"))
    except JsonNumberTooLong as error:
        raise RecordingError(path, number, error.colno, str(error)) from None
    except json.JSONDecodeError as error:
        raise RecordingError(path, number, error.pos + 1, f"not JSON: {_json_what(error)}") from None
    except RecursionError:
        raise RecordingError(path, number, 1, "not a recording line: nested too deep") from None
    if not isinstance(record, dict):
        raise RecordingError(path, number, 1, 'expected an object {"topic": …, "seq": …, "payload": …}')

    def bad(what: str) -> RecordingError:
        return RecordingError(path, number, 1, what)

    topic = _topic(record, bad)
    seq = record.get("seq")
    if not _is_int(seq) or not 0 <= seq <= _MAX_SEQ:
        raise bad('"seq" must be an int from 0 to 2^64 − 1')
    rank = record.get("rank", 0)
    if not _is_int(rank) or rank < 0:
        raise bad('"rank" must be an int ≥ 0')
    marks = {name: record.get(name, False) for name in MARKS}
    for name, value in marks.items():
        if not isinstance(value, bool):
            raise bad(f'"{name}" must be true or false')
    return Message(topic=topic, seq=seq, payload=strict_base64(record.get("payload"), '"payload"', bad), rank=rank,
                   **marks)


def _json_what(error: json.JSONDecodeError) -> str:
    """The decoder's complaint made whole: its ``msg`` alone stops at "… starting at" (the
    place is in ``colno``, which ``str(error)`` adds as "line 1 column …")."""
    if error.msg.endswith(" at"):
        return f"{error.msg} column {error.colno}"
    return error.msg


def _topic(record: dict, bad) -> bytes:
    if "topic_b64" in record:
        return strict_base64(record["topic_b64"], '"topic_b64"', bad)
    topic = record.get("topic")
    if not isinstance(topic, str):
        raise bad('"topic" must be a string')
    try:
        return topic.encode("utf-8")
    except UnicodeEncodeError:
        raise bad('"topic" holds a lone surrogate; write a non-UTF-8 topic as "topic_b64"') from None


def strict_base64(value: object, name: str, bad: Callable[[str], Exception]) -> bytes:
    """``value`` decoded as strict base64 (a recording's and a watch bundle's payloads), or
    ``bad("<name> must be a base64 string")`` / ``bad("<name> is not valid base64")`` raised."""
    if not isinstance(value, str):
        raise bad(f"{name} must be a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise bad(f"{name} is not valid base64") from None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def message_line(message: Message) -> str:
    """``message`` as one recording line (no newline): the recordings' own key order and
    spacing; ``"rank"`` only when it is not 0, the marks (:data:`MARKS`) only when true;
    ``"topic_b64"`` for a topic that is not UTF-8."""
    try:
        record: dict[str, object] = {"topic": message.topic.decode("utf-8")}
    except UnicodeDecodeError:
        record = {"topic_b64": base64.b64encode(message.topic).decode("ascii")}
    record["seq"] = message.seq
    record["payload"] = base64.b64encode(message.payload).decode("ascii")
    if message.rank:
        record["rank"] = message.rank
    for name in MARKS:
        if getattr(message, name):
            record[name] = True
    return json.dumps(record, ensure_ascii=True)


class RecordingExists(RecordingError):
    """``--record FILE`` naming a path that exists: kvviz never overwrites a recording (one
    truncated at open would be lost before the first message arrives)."""

    def __str__(self) -> str:
        return f"{self.path} exists: kvviz never overwrites a recording; remove it or name another"


class RecordingWriter:
    """Writes messages to a recording as they arrive, one flushed line each, so a recording cut
    short by a crash keeps every message written before it. Writes only a file it creates
    (``O_EXCL``): an existing regular file is :class:`RecordingExists`, anything else that exists
    (a directory, a FIFO, a device, a symlink) is "not a regular file"; nothing is opened then.

    Every recording it writes, :func:`read_recording` reads: a message whose line would pass
    ``MAX_RECORDING_LINE_BYTES`` is not written (counted in ``refused``), and writing stops at
    ``MAX_RECORDING_BYTES`` or ``MAX_RECORDING_MESSAGES``. A write that fails (a full disk)
    stops the recording, never the caller: ``failure`` says why in one line, ``lost`` counts
    the messages not written since. ``on_note`` hears each of these at once, one line each."""

    def __init__(self, path: str | os.PathLike, on_note: Callable[[str], None] | None = None) -> None:
        self.path = Path(path)
        try:
            existing = os.stat(path)
        except OSError:
            existing = None
        if existing is not None and not stat.S_ISREG(existing.st_mode):
            raise RecordingError(path, 0, 0, "not a regular file; name a file to record into")
        if existing is not None or os.path.lexists(path):
            raise RecordingExists(path, 0, 0, "exists")
        # O_EXCL: created here or refused, so a file that appears meanwhile is never truncated;
        # O_NOFOLLOW: a symlink planted meanwhile is refused too.
        flags = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                 | getattr(os, "O_CLOEXEC", 0))
        try:
            descriptor = os.open(path, flags, 0o644)
        except FileExistsError:
            raise RecordingExists(path, 0, 0, "exists") from None
        except OSError as error:
            raise RecordingError(path, 0, 0, f"cannot write the recording: {error.strerror}") from None
        try:
            self._stream = os.fdopen(descriptor, "w", encoding="ascii", newline="\n")
        except BaseException:
            os.close(descriptor)
            raise
        self.messages = 0
        """Messages written so far."""
        self.bytes = 0
        """Bytes written so far."""
        self.refused = 0
        """Messages not written because the reader would refuse their line."""
        self.lost = 0
        """Messages not written because the recording had stopped (``failure``)."""
        self.failure: str | None = None
        """Why the recording stopped early, in one line (None while it records)."""
        self._on_note = on_note

    def write(self, message: Message) -> bool:
        """Append ``message`` as one line and flush it; False when it was not written (see
        the class's docstring: refused, or the recording stopped)."""
        if self.failure is not None:
            self.lost += 1
            return False
        line = message_line(message) + "\n"
        if len(line) > MAX_RECORDING_LINE_BYTES:
            self.refused += 1
            self._note(f"{self.path}: message seq {message.seq} not recorded: its line of {len(line):,} bytes is "
                       f"more than a recording may hold ({MAX_RECORDING_LINE_BYTES:,}, MAX_RECORDING_LINE_BYTES)")
            return False
        if self.bytes + len(line) > MAX_RECORDING_BYTES or self.messages >= MAX_RECORDING_MESSAGES:
            return self._stop(f"the recording reached its limit ({MAX_RECORDING_BYTES:,} bytes or "
                              f"{MAX_RECORDING_MESSAGES:,} messages, what --replay-file reads)")
        try:
            self._stream.write(line)
            self._stream.flush()
        except OSError as error:
            return self._stop(error.strerror or str(error))
        self.messages += 1
        self.bytes += len(line)
        return True

    def _stop(self, why: str) -> bool:
        """Stop recording (the message in hand is lost), and say so once."""
        self.failure = f"{self.path}: recording stopped after {self.messages:,} messages: {why}"
        self.lost += 1
        self._note(f"{self.failure}; watching goes on")
        return False

    def _note(self, line: str) -> None:
        if self._on_note is not None:
            self._on_note(line)

    def close(self) -> None:
        """Flush and close the file (idempotent); a flush that fails sets ``failure``, it does
        not raise."""
        if self._stream.closed:
            return
        try:
            self._stream.close()
        except OSError as error:
            if self.failure is None:
                self.failure = f"{self.path}: recording stopped: {error.strerror or error}"
            try:
                os.close(self._stream.fileno())
            except (OSError, ValueError):  # already closed by the failed close
                pass

    def __enter__(self) -> RecordingWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
