"""Exports of a frame: bundle (.json), Markdown (.md), text (.txt) and SVG (.svg)."""

from __future__ import annotations

from pathlib import Path

FORMATS = (".json", ".md", ".txt", ".svg")


def write_export(session, step: int, output: Path) -> None:
    """Write step ``step`` of ``session`` to ``output`` in the format its suffix names.

    Raises ValueError for an unknown suffix and OSError when the file cannot be written. Writes
    to a temporary file first so a failure leaves nothing behind.
    """
    suffix = output.suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"{output}: unknown export format {suffix or '(none)'!r} (expected one of {', '.join(FORMATS)})")
    text = render_export(session, step, suffix)
    tmp = output.with_name(output.name + ".part")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(output)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def render_export(session, step: int, suffix: str) -> str:
    """The export's text for ``suffix``."""
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
    from .svg import frame_svg

    return frame_svg(session, step)
