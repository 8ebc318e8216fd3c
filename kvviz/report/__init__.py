# SPDX-License-Identifier: Apache-2.0
"""Exports of a frame: bundle (.json), Markdown (.md), text (.txt) and SVG (.svg).

The SVG is a picture of the UI, so it is drawn by the caller (the CLI or the app hands in
``render_svg``): this package stays free of Textual.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from kvviz.report.atomic import refuse_overwriting_inputs, write_text_atomic

FORMATS = (".json", ".md", ".txt", ".svg")


def write_export(session, step: int, output: str | os.PathLike, *, render_svg=None,
                 inputs: Iterable[str | os.PathLike] = (), substep: int | None = None) -> None:
    """Write step ``step`` of ``session`` to ``output`` in the format its suffix names, at
    sub-step ``substep`` of its op when given (the bundle records it, the Markdown's summary
    and the SVG's title say it; :class:`~kvviz.report.bundle.SubstepError` when the op has no
    such sub-step).

    ``inputs`` are the files the session was read from: an output that is one of them (also
    through a symlink or a hard link) is refused before any work. Raises ValueError for an
    unknown suffix, an output that is an input, or a bundle larger than ``kvviz open``
    accepts (:class:`~kvviz.report.bundle.BundleTooLarge`), and OSError when the file cannot be
    written. Writes through a unique temporary file so a failure leaves nothing behind.
    """
    output = Path(output)
    suffix = output.suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"{output}: unknown export format {suffix or '(none)'!r} (expected one of {', '.join(FORMATS)})")
    inputs = tuple(inputs)
    refuse_overwriting_inputs(output, inputs)
    if suffix == ".json":
        from kvviz.report.bundle import write_bundle

        write_bundle(session, step, output, inputs=inputs, substep=substep)  # streamed: may be tens of MB
        return
    text = render_export(session, step, suffix, render_svg=render_svg, substep=substep)
    write_text_atomic(output, text, inputs=inputs)


def render_export(session, step: int, suffix: str, *, render_svg=None, substep: int | None = None) -> str:
    """The export's text for ``suffix``; ``.svg`` needs ``render_svg(session, step)`` (with a
    ``substep``, ``render_svg(session, step, substep)``)."""
    from kvviz.report.bundle import dumps_bundle, make_bundle, session_script, substep_claim, summary
    from kvviz.report.markdown import frame_markdown
    from kvviz.report.text import frame_text

    frame = session.frame(step)
    substep_claim(session, step, substep)  # a sub-step the op does not have is refused in every format
    if suffix == ".json":
        return dumps_bundle(make_bundle(session, step, substep))
    if suffix == ".md":
        return frame_markdown(frame, session, session_script(session), summary(frame, session, substep))
    if suffix == ".txt":
        return frame_text(frame, session)
    if render_svg is None:
        raise ValueError("an SVG export is a picture of the UI: it is written by `kvviz export` or the "
                         "app's `e` key; use .json, .md or .txt here")
    return render_svg(session, step) if substep is None else render_svg(session, step, substep)
