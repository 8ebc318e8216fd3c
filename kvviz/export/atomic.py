"""One atomic write for every file kvviz writes: a unique temporary file beside the target,
then a rename, so a failure (or a second kvviz writing at the same moment) leaves nothing
half-written and never clobbers an unrelated file such as an existing ``X.md.part``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` through a uniquely named temporary file.

    Raises OSError when the folder does not exist or cannot be written; nothing is left behind.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 would make exports private
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
