"""Exports of a frame: bundle (.json), Markdown (.md), text (.txt) and SVG (.svg).

The SVG is a picture of the UI, so it is drawn by the caller (the CLI or the app hands in
``render_svg``): this package stays free of Textual.
"""

from __future__ import annotations

from pathlib import Path

from .atomic import write_text_atomic

FORMATS = (".json", ".md", ".txt", ".svg")


def write_export(session, step: int, output: Path, *, render_svg=None) -> None:
    """Write step ``step`` of ``session`` to ``output`` in the format its suffix names.

    Raises ValueError for an unknown suffix and OSError when the file cannot be written. Writes
    through a unique temporary file so a failure leaves nothing behind.
    """
    suffix = output.suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"{output}: unknown export format {suffix or '(none)'!r} (expected one of {', '.join(FORMATS)})")
    text = render_export(session, step, suffix, render_svg=render_svg)
    write_text_atomic(output, text)


def render_export(session, step: int, suffix: str, *, render_svg=None) -> str:
    """The export's text for ``suffix``; ``.svg`` needs ``render_svg(session, step)``."""
    from .bundle import dumps_bundle, make_bundle, session_script, summary
    from .markdown import frame_markdown
    from .text import frame_text

    frame = session.frame(step)
    if suffix == ".json":
        return dumps_bundle(make_bundle(session, step))
    if suffix == ".md":
        return frame_markdown(frame, session, session_script(session), summary(frame, session))
    if suffix == ".txt":
        return frame_text(frame, session)
    if render_svg is None:
        raise ValueError("an SVG export is a picture of the UI: it is written by `kvviz export` or the "
                         "app's `e` key; use .json, .md or .txt here")
    return render_svg(session, step)
