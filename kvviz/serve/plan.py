# SPDX-License-Identifier: Apache-2.0
"""What a ``kvviz serve`` server serves: a fixed table of pages, each with its command line.

The table is made once, before the server listens, and is frozen: a tab's app process runs
the command line of the page it was opened from, exactly, and a browser can only choose
among the table's pages (a path not in it is a 404). So no request, query string or
websocket message can make the server open another file or run another command.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServedPage:
    """One page of the server: its ``path`` (``/demo/lru``), its short ``name`` (``lru``) and
    the ``title`` the landing page and the loading screen show, the landing page's
    ``section`` for it, and ``argv``: the whole command line its tabs run (the interpreter
    first; no shell parses it)."""

    path: str
    name: str
    title: str
    section: str
    argv: tuple[str, ...]

    @property
    def socket_path(self) -> str:
        """Where the page's tabs open their websocket: under the page's own path."""
        return f"{self.path.rstrip('/')}/ws"


@dataclass(frozen=True)
class ServePlan:
    """Everything a server serves. ``pages`` in landing-page order; ``home``: the page ``/``
    opens (None: ``/`` is the landing page); ``version``: kvviz's, shown on the landing
    page; ``served``: the command line named at start, as a person typed it (for messages)."""

    pages: tuple[ServedPage, ...]
    home: ServedPage | None
    version: str
    served: str | None = None

    def __post_init__(self) -> None:
        paths = [page.path for page in self.pages]
        if len(set(paths)) != len(paths):
            raise ValueError(f"two served pages share a path: {sorted(paths)}")
        if self.home is not None and self.home not in self.pages:
            raise ValueError(f"the home page {self.home.path} is not one of the served pages")

    def sections(self) -> list[tuple[str, list[ServedPage]]]:
        """The pages grouped by section, in the order each section first appears."""
        grouped: dict[str, list[ServedPage]] = {}
        for page in self.pages:
            grouped.setdefault(page.section, []).append(page)
        return list(grouped.items())
