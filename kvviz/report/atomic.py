# SPDX-License-Identifier: Apache-2.0
"""One atomic write for every file kvviz writes: a unique temporary file beside the target,
then a rename, so a failure (or a second kvviz writing at the same moment) leaves nothing
half-written and never clobbers an unrelated file such as an existing ``X.md.part``.

Three promises beyond atomicity: an output is never one of the command's inputs (``kvviz
export s.md -o s.md`` must not replace the scenario with its report); only a regular file (or
nothing) is replaced, never a FIFO, a device node or a symbolic link (the rename would put a
file where the user had something else, and say "wrote"); and a writer may cap
the bytes it writes, so an export too large for ``kvviz open`` is refused while being
streamed instead of after a giant string was built.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path


class OutputTooLarge(ValueError):
    """A capped write went past its limit; nothing was written."""


class NotARegularFile(OSError, ValueError):
    """The target exists and is not a regular file; nothing was written. An OSError (with
    ``strerror``, as callers that say "cannot write" expect) and a ValueError (bad input)."""

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


def special_file_kind(mode: int) -> str | None:
    """``"a FIFO (named pipe)"``, ``"a device"``, ... for an ``lstat`` mode that is not a
    regular file; None for a regular file. The one wording, for readers and writers."""
    if stat.S_ISREG(mode):
        return None
    return ("a folder" if stat.S_ISDIR(mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a symbolic link" if stat.S_ISLNK(mode) else "a special file")


def refuse_special_target(path: str | os.PathLike) -> None:
    """Raise :class:`NotARegularFile` when ``path`` exists and is not a regular file.

    ``lstat``: a symbolic link is refused as itself, even one pointing at a regular file (the
    rename would replace the link, not its target) or at nothing.
    """
    try:
        mode = os.lstat(path).st_mode
    except (OSError, ValueError):  # absent (written anew), or a name the write will refuse itself
        return
    what = special_file_kind(mode)
    if what is not None:
        raise NotARegularFile(errno.EEXIST, f"is {what}, not a regular file; kvviz replaces only regular "
                                            f"files: name another output", os.fspath(path))


def refuse_overwriting_inputs(output: str | os.PathLike, inputs: Iterable[str | os.PathLike]) -> None:
    """Raise ValueError when ``output`` is the same file as any of ``inputs``.

    Same file means the same path once resolved (symlinks followed, ``..`` removed) or, when
    both exist, the same inode (``os.path.samefile``: hard links, bind mounts, case-folding
    file systems). Inputs that do not exist or are not files (``-`` for stdin) are skipped.
    """
    output = Path(output)
    try:
        resolved = output.resolve()
    except (OSError, RuntimeError):  # a symlink loop: cannot be one of the inputs we read
        return
    for given in inputs:
        if given is None:
            continue
        source = Path(given)
        try:
            same = source.resolve() == resolved or (
                output.exists() and source.exists() and os.path.samefile(source, output))
        except (OSError, RuntimeError):
            continue
        if same:
            shown = f"{output}" if str(output) == str(source) else f"{output} (the same file as {source})"
            raise ValueError(f"{shown}: refusing to overwrite an input of this command with its output; "
                             f"name another output file")


def check_writable(path: str | os.PathLike) -> None:
    """Raise OSError when :func:`open_atomic` could not write ``path``: a special file there,
    or a folder that is missing, read-only or full. Probed by making (and removing) the same
    kind of temporary file beside it, so a command checks every output before its work, not
    after it."""
    path = Path(path)
    refuse_special_target(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    os.close(fd)
    os.unlink(tmp)


def write_text_atomic(path: str | os.PathLike, text: str, *, inputs: Iterable[str | os.PathLike] = ()) -> None:
    """Write ``text`` (UTF-8) to ``path`` through a uniquely named temporary file.

    Raises ValueError when ``path`` is one of ``inputs`` (nothing is written) and OSError when
    the folder does not exist or cannot be written; nothing is left behind.
    """
    with open_atomic(path, inputs=inputs) as write:
        write(text)


@contextmanager
def open_atomic(path: str | os.PathLike, *, inputs: Iterable[str | os.PathLike] = (),
                max_bytes: int | None = None, too_large: str = "") -> Iterator[Callable[[str], None]]:
    """A ``write(text)`` function that streams UTF-8 into a temporary file beside ``path``;
    the file is renamed to ``path`` when the block ends without an exception, and removed
    otherwise.

    With ``max_bytes``, a write that takes the file past that many bytes raises
    :class:`OutputTooLarge` (message: ``too_large`` followed by the limit) and the partial
    file is removed: memory and disk stay bounded by the limit, whatever the caller streams.
    """
    path = Path(path)
    refuse_overwriting_inputs(path, inputs)
    refuse_special_target(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    written = 0
    try:
        with os.fdopen(fd, "wb") as handle:
            def write(text: str) -> None:
                nonlocal written
                data = text.encode("utf-8")
                written += len(data)
                if max_bytes is not None and written > max_bytes:
                    raise OutputTooLarge(f"{path}: {too_large or 'the output would be'} more than "
                                         f"{max_bytes} bytes (the limit); nothing was written")
                handle.write(data)

            yield write
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 would make exports private
        refuse_special_target(path)  # again: a FIFO made there while the text was streamed
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
