"""SVG of the screen at a step: rendered by the Textual app headless."""

from __future__ import annotations


def frame_svg(session, step: int) -> str:
    """The app's screenshot at ``step`` as SVG text."""
    try:
        from ..app import screenshot_svg
    except ImportError:
        raise ValueError("SVG export needs the terminal UI, which is not part of this build yet; "
                         "use .json, .md or .txt") from None
    return screenshot_svg(session, step)
