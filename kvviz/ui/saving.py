# SPDX-License-Identifier: Apache-2.0
"""Names of the files the UI writes (``e``, ctrl+s, the palette's screenshot).

The UI never overwrites a file silently: a name that is taken gets ``-2``, ``-3``, ... and
the app says which name it used (or, for a name the user typed, asks first). A session
changed in the UI (ops typed, a branch) exports under a name of its own, so its files never
collide with those of the unchanged scenario's step.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from pathlib import Path

from kvviz.core.limits import MAX_NAME_TRIES  # beyond it the folder is full of kvviz exports: refused with a message


class NoFreeName(OSError):
    """Every numbered variant of a name is taken."""


def slug(text: str, limit: int = 32) -> str:
    """``text`` as a file-name part: lower-case words joined by dashes, cut at a word
    boundary after at most ``limit`` characters (``session`` when nothing is left)."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    kept: list[str] = []
    for word in words:
        if kept and len("-".join(kept + [word])) > limit:
            break
        kept.append(word[:limit])
    return "-".join(kept) or "session"


def edit_tag(script: str) -> str:
    """A short, stable tag for a changed session: the first 6 hex digits of its script's
    sha256 (the same ops give the same tag on every run)."""
    return hashlib.sha256(script.encode("utf-8")).hexdigest()[:6]


def free_stem(folder: Path, stem: str, suffixes: Iterable[str]) -> str:
    """``stem``, or ``stem-2``, ``stem-3``, ...: the first for which no ``folder/stem+suffix``
    exists. O(tries x suffixes) file-system checks; raises :class:`NoFreeName` after
    :data:`MAX_NAME_TRIES`."""
    suffixes = tuple(suffixes)
    for number in range(1, MAX_NAME_TRIES + 1):
        candidate = stem if number == 1 else f"{stem}-{number}"
        if not any((folder / f"{candidate}{suffix}").exists() for suffix in suffixes):
            return candidate
    raise NoFreeName(f"{folder / stem}: {MAX_NAME_TRIES} numbered names are taken; "
                     f"move some exports away or choose another folder")


def free_path(path: Path) -> Path:
    """``path``, or the first ``name-2.ext``, ``name-3.ext``, ... that does not exist."""
    return path.with_name(free_stem(path.parent, path.stem, (path.suffix,)) + path.suffix)
