# SPDX-License-Identifier: Apache-2.0
"""Served in a browser (``kvviz serve``), an app titles the terminal with the step it shows.

The page draws the terminal on a canvas, which holds no text: the terminal's title (xterm's
OSC 2), which the page copies to the tab's title and a ``role=status`` element, is where a
person with a screen reader, and the browser tests, read the step. The main app and the watch
app both title it here, in one wording, so a page reads either the same way.
"""

from __future__ import annotations

from textual.app import App


def step_title(name: str, step: int, last_step: int, substep: int | None = None, state: str = "") -> str:
    """The title for step ``step`` of ``last_step`` of ``name`` (a session's title, a watch's
    source); ``substep``: the 0-based sub-step shown inside the op; ``state``: a last clause
    (the watch's "live" or "paused")."""
    title = f"kvviz {name} · step {step} of {last_step}"
    if substep is not None:
        title += f" · sub-step {substep + 1}"
    return f"{title} · {state}" if state else title


def title_the_terminal(app: App, title: str) -> None:
    """Set the terminal's title to ``title`` when ``app`` is served (nothing in a terminal of
    one's own, where the title is the user's); characters that are not printable are left
    out, so the title can never end the escape sequence early or start another."""
    if not app.is_web or app._driver is None:
        return
    app._driver.write(f"\x1b]2;{''.join(c for c in title if c.isprintable())}\x07")
