# SPDX-License-Identifier: Apache-2.0
"""``kvviz progress``: the course's progress file, shown or reset.

The file lives under the user's data directory (:func:`kvviz.teach.course.progress_path`:
``$XDG_DATA_HOME/kvviz/progress.json`` or ``~/.local/share/kvviz/progress.json``), never the
working directory; it is written atomically, and a file that is not a progress file is one
line of bad input and is left as it is (only ``--reset``, asked for by name, replaces it).
``kvviz practice --next`` plays and records the rounds (:func:`next_round`, :func:`record_round`).

A round is never lost after it was played: whether the file can be written is settled before
the round starts (:func:`next_round` tries it). A progress file that is a symbolic link (a
dotfile manager's, such as stow or home-manager) is written through: its target is replaced
atomically and the link stays. Recording holds an exclusive lock (``fcntl.flock`` on the
file's folder) from reading the file to writing it, so two kvviz recording at once both count.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from kvviz.teach.course import (MAX_PROGRESS_BYTES, Progress, ProgressError, Round, next_round as course_next,
                            next_up_line, parse_progress, progress_path, progress_text, record, summary_lines)
from kvviz.commands import BadInput


def load() -> Progress:
    """The progress file's progress (empty when there is none); bad input, naming the file and
    leaving it untouched, when it is not a progress file."""
    path = progress_path()
    try:
        if not path.exists():
            return Progress()
        if not path.is_file():
            raise BadInput(f"{path}: is not a regular file (expected the kvviz progress file)")
        if path.stat().st_size > MAX_PROGRESS_BYTES:
            raise BadInput(f"{path}: the progress file is larger than {MAX_PROGRESS_BYTES:,} bytes; it was left as "
                           "it is (`kvviz progress --reset` starts again)")
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        text = "\0"
    except OSError as exc:
        raise BadInput(f"{path}: cannot read the progress file: {exc.strerror or exc}") from None
    try:
        return parse_progress(text)
    except ProgressError as exc:
        raise BadInput(f"{path}: not a kvviz progress file ({exc}); it was left as it is: fix it, or "
                       "`kvviz progress --reset` to start again") from None


def _target() -> Path:
    """The file the progress is written to: the progress file, or the file it links to when
    it is a symbolic link (so the link stays, and its target gets the round)."""
    path = progress_path()
    if path.is_symlink():  # a loop resolves to a link still: the write then refuses it, at the start
        return Path(os.path.realpath(path))
    return path


def _cannot_write(exc: Exception) -> BadInput:
    return BadInput(f"{progress_path()}: cannot write the progress file: {getattr(exc, 'strerror', None) or exc}")


def check_writable() -> None:
    """Bad input, before any round is played, when the progress file could not be written:
    its folder cannot be made or written, or it is something a write would not replace (a
    folder, a FIFO, a link that leads nowhere writable)."""
    from kvviz.report.atomic import refuse_special_target

    target = _target()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        refuse_special_target(target)
        fd, probe = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".probe", dir=target.parent)
        os.close(fd)
        os.unlink(probe)
    except (OSError, ValueError) as exc:
        raise _cannot_write(exc) from None


@contextmanager
def _locked() -> Iterator[None]:
    """Hold an exclusive lock on the progress file's folder (made if needed) for the block:
    one read-record-write at a time, whichever process does it."""
    folder = _target().parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder, os.O_RDONLY)
    except OSError as exc:
        raise _cannot_write(exc) from None
    try:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - no flock on this platform: one writer is assumed
            fcntl = None
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def save(progress: Progress) -> None:
    """Write the progress file atomically (its folder made if needed; through a symbolic link
    to its target)."""
    from kvviz.report.atomic import write_text_atomic

    target = _target()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(target, progress_text(progress))
    except (OSError, ValueError) as exc:
        raise _cannot_write(exc) from None


def next_round() -> Round:
    """The course's next round, from the progress file; bad input when the course is done,
    or when the round could not be recorded (said now, before the learner plays it)."""
    round_ = course_next(load())
    if round_ is None:
        raise BadInput("every lesson is mastered: nothing is next up (`kvviz progress` shows it)")
    check_writable()
    return round_


def record_round(round_: Round, play) -> list[str]:
    """Record a played round in the progress file; the lines to say after it."""
    played = len(play.results)
    with _locked():  # read again under the lock: the file is the truth, and another kvviz may have written
        after = record(load(), round_, played, play.right, play.misses_by_kind())
        save(after)
    result = after.rounds[-1]
    verdict = "passed" if result.passed else "not passed yet"
    return [f"Recorded in {progress_path()}: {round_.stage} of {round_.lesson}, {play.right} of {played} right "
            f"first time: {verdict}.", next_up_line(after)]


def listing_next_up() -> str | None:
    """The demo listing's "next up" line; a progress file that cannot be read says so in it
    (the listing itself never fails on it)."""
    try:
        return next_up_line(load())
    except BadInput as exc:
        return f"Next up: unknown ({exc.format_message()})"


@click.command()
@click.option("--reset", is_flag=True, help="Clear the progress: every lesson starts again.")
def progress(reset: bool) -> None:
    """Your progress through the course: each lesson's stages (its demo, then random scenarios),
    mastery, the missed move kinds to review, and what is next up (`kvviz practice --next`).

    The course starts with prefix-sharing, refcount and lru (eviction by the fourth round); a
    lesson's demo passed opens the next lesson, its random stages follow. The file is
    $XDG_DATA_HOME/kvviz/progress.json (or ~/.local/share/kvviz/progress.json); a symbolic link
    there is written through to its target, and a file that cannot be written is said before a
    round starts, never after it."""
    path = progress_path()
    if reset:
        existed = path.exists()
        with _locked():
            save(Progress())
        click.echo(f"Progress cleared ({path})." if existed else f"No progress yet; started an empty one ({path}).")
        return
    state = load()
    click.echo(f"Progress file: {path}" + ("" if path.exists() else " (none yet)"))
    for line in summary_lines(state):
        click.echo(line)
