# SPDX-License-Identifier: Apache-2.0
"""The files the UI writes: ``e`` exports the step shown (bundle, Markdown, SVG), ctrl+s saves
the session's script as a ``.kvs`` file, the palette's Screenshot an SVG of the views.

:class:`ExportActions` is the app's: it writes what the app holds (the session, whether it
was edited) at the step its main screen shows. No file is overwritten unasked: a taken name
gets ``-2``, ``-3``, ... (:mod:`kvviz.ui.saving`), a typed name that exists is replaced only
when confirmed. Pictures are taken without the toasts of earlier exports. Served in a browser
(``kvviz serve``), each is offered to the browser as a download instead: a served app writes
nothing on the server's disk (:func:`offer_download`).
"""

from __future__ import annotations

import html
import io
import re
from collections.abc import Callable
from pathlib import Path

from textual.css.query import NoMatches

from kvviz.ui.saving import NoFreeName, edit_tag, free_path, free_stem, slug
from kvviz.ui.screens.prompt_screen import PromptScreen

SCRIPT_NAME = "kvviz-session.kvs"
"""The name ctrl+s offers first (numbered when taken)."""


_TEXT = re.compile(r'(<text [^>]*?x=")([\d.]+)("[^>]*?textLength=")([\d.]+)("[^>]*>)([^<]*)(</text>)')
_NBSP = "&#160;"


def portable_svg(svg: str) -> str:
    """``svg`` (Rich's export) with no text run starting or ending in spaces.

    Rich writes each run of one style as a ``<text>`` at its cell's ``x``, spaces as
    non-breaking ones, stretched to ``textLength``. librsvg-based viewers drop a run's leading
    (and trailing) non-breaking spaces and stretch the rest from ``x``, so "release s6" and
    "  LRU eviction" read "release s6LRU eviction". Here those spaces leave the run, and its
    ``x`` moves past them: every viewer draws the same text in the same cells.
    """
    def trimmed(match: re.Match) -> str:
        head, x, middle, length, tail, text, close = match.groups()
        chars = len(html.unescape(text))
        if not chars or not (text.startswith(_NBSP) or text.endswith(_NBSP)):
            return match[0]
        cell = float(length) / chars
        body, lead = text, 0
        while body.startswith(_NBSP):
            body, lead = body[len(_NBSP):], lead + 1
        trail = 0
        while body.endswith(_NBSP):
            body, trail = body[: -len(_NBSP)], trail + 1
        if not body:
            return ""  # only spaces: nothing to draw (the background is a rect of its own)
        return (f"{head}{round(float(x) + lead * cell, 2)}{middle}{round((chars - lead - trail) * cell, 2)}{tail}"
                f"{body}{close}")

    return _TEXT.sub(trimmed, svg)



class ExportActions:
    """Export, save and screenshot for the app, which provides ``session``, ``edited``,
    ``export_dir`` and the position shown (``step``, ``view``)."""

    EXPORT_SUFFIXES = (".json", ".md", ".svg")

    def export_paths(self) -> dict[str, Path]:
        """Where ``e`` writes the current step: ``kvviz-<title>-step<N>.json/.md/.svg``.

        A session changed in the UI adds ``-edited-<tag>`` (a digest of its script), so its
        files never take the unchanged scenario's names; a name that is taken gets ``-2``,
        ``-3``, ... (never overwritten).
        """
        from kvviz.report.bundle import session_script

        folder = self.export_dir or Path.cwd()
        edited = f"-edited-{edit_tag(session_script(self.session))}" if self.edited else ""
        inside = "" if self.substep is None else f"-sub{self.substep + 1}"  # exported from inside an op
        stem = free_stem(folder, f"kvviz-{slug(self.session.title)}{edited}-step{self.step}{inside}",
                         self.EXPORT_SUFFIXES)
        return {suffix: folder / f"{stem}{suffix}" for suffix in self.EXPORT_SUFFIXES}

    def views_svg(self) -> str:
        """An SVG of the screen as it is now, titled with the session and step."""
        sub = self.view.substep if self.view is not None else None
        inside = f" · sub-step {sub.label}" if sub is not None else ""
        return portable_svg(self.export_screenshot(
            title=f"kvviz · {self.session.title or 'session'} · step {self.step}{inside}"))

    def export_step(self) -> list[Path]:
        """Write the bundle, the Markdown and an SVG screenshot of the current step (under
        names no file has yet); returns the paths written."""
        from kvviz.report import write_export
        from kvviz.report.atomic import write_text_atomic

        paths = self.export_paths()
        if self.is_web:  # one download: a browser lets one key press open one, not three
            from kvviz.report import render_export

            return [offer_download(self, paths[".json"], render_export(self.session, self.step, ".json",
                                                                       substep=self.substep))]
        next(iter(paths.values())).parent.mkdir(parents=True, exist_ok=True)
        write_export(self.session, self.step, paths[".json"], substep=self.substep)  # the moment, not only the step
        write_export(self.session, self.step, paths[".md"], substep=self.substep)
        write_text_atomic(paths[".svg"], self.views_svg())
        return list(paths.values())

    def without_notifications(self, then: Callable[[], None]) -> None:
        """Hide the toasts, call ``then`` once the screen was drawn without them, show them
        again: a picture of the views must not carry the notifications of earlier exports."""
        try:
            rack = self.screen.query_one("#textual-toastrack")
        except NoMatches:
            then()
            return
        if not rack.display:
            then()
            return
        rack.display = False
        self.screen.refresh(layout=True)  # the layout is redone before the callback below

        def shoot() -> None:
            try:
                then()
            finally:
                rack.display = True

        self.call_after_refresh(shoot)

    def action_export(self) -> None:
        """Export the current step (a picture of the views, without toasts) and say where
        the files went."""
        self.without_notifications(lambda: export_and_tell(self))

    def deliver_screenshot(self, filename: str | None = None, path: str | None = None,
                           time_format: str | None = None) -> str | None:
        """The palette's Screenshot: an SVG of the views (no toasts) in the export folder,
        under a name no file has yet; says the path it wrote, or why it could not."""
        from kvviz.report.atomic import write_text_atomic

        folder = Path(path).expanduser() if path else (self.export_dir or Path.cwd())
        name = filename or f"kvviz-{slug(self.session.title)}-step{self.step}-screen.svg"

        def shoot() -> None:
            target = folder / name
            if self.is_web:
                offered = offer_download(self, target, self.views_svg())
                self.notify(str(offered), title="Offered the screenshot", timeout=8)
                return
            try:
                target = free_path(target)
                write_text_atomic(target, self.views_svg())
            except OSError as error:
                reason = error.strerror or str(error)
                self.notify(f"Could not write {target}: {reason}", title="Screenshot not saved",
                            severity="error", timeout=10)
                return
            self.notify(str(target), title="Saved the screenshot", timeout=8)

        self.without_notifications(shoot)
        return None

    def script_path(self, name: str | Path) -> Path:
        """Where ctrl+s writes ``name``: ``.kvs`` added when it has no suffix; relative names
        in the export folder (when one was given)."""
        path = Path(name).expanduser()
        if not path.suffix:
            path = path.with_suffix(".kvs")
        if not path.is_absolute() and self.export_dir is not None:
            path = self.export_dir / path
        return path

    def save_script(self, path: str | Path) -> Path:
        """Write the session's script (every op so far) as a ``.kvs`` file; returns the path.
        Replaces an existing file: the caller asked the user first."""
        from kvviz.report.atomic import write_text_atomic
        from kvviz.report.bundle import session_script

        path = self.script_path(path)
        if self.is_web:
            return offer_download(self, path, session_script(self.session))
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, session_script(self.session))
        return path

    def action_save_script(self) -> None:
        """Ask for a file name (one no file has yet, by default) and save the script there;
        a name that exists is replaced only when confirmed with a second enter."""
        confirmed: list[Path] = []

        def write(value: str) -> str | None:
            if not value.strip():
                return "a file name, e.g. kvviz-session.kvs"
            problem = name_problem(value.strip())
            if problem is not None:
                return problem
            path = self.script_path(value.strip())
            try:
                # Served, the name only names a download: no asking about the server's files.
                if not self.is_web and path.exists() and path not in confirmed:
                    confirmed.append(path)
                    return f"{shortened(path)} exists: enter again to replace it, or type another name"
                saved = self.save_script(path)
            except (OSError, ValueError) as error:  # refused by the file system: one line, keep asking
                reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
                return f"cannot write {shortened(path)}: {reason}"
            self.notify(str(saved), title=f"Saved the script ({len(self.session.steps)} ops)", timeout=6)
            return None

        try:
            default = free_path(self.script_path(SCRIPT_NAME)).name
        except NoFreeName:
            default = SCRIPT_NAME
        self.push_screen(PromptScreen("Save the script as", default, check=write,
                                      help="enter writes the .kvs file · escape cancels"))


def export_and_tell(app) -> None:
    """Run ``app.export_step()`` and toast the files it wrote, or why it could not (the
    explorer's and the watch's Export say the same)."""
    try:
        written = app.export_step()
    except (OSError, ValueError) as error:
        app.notify(f"Export failed: {error}", severity="error", timeout=8)
        return
    app.notify("\n".join(str(p) for p in written), title=f"Exported step {app.step}", timeout=8)


def offer_download(app, path: Path, text: str) -> Path:
    """Served in a browser: hand ``text`` to it as a download named ``path.name`` (Textual's
    ``deliver_text``; textual-serve streams it to the tab) and return that name. ValueError,
    nothing offered, past :data:`~kvviz.core.limits.MAX_BUNDLE_BYTES` (what ``kvviz open`` reads)."""
    from kvviz.core.limits import MAX_BUNDLE_BYTES

    size = len(text.encode("utf-8"))
    if size > MAX_BUNDLE_BYTES:
        raise ValueError(f"{path.name}: {size:,} bytes, more than the {MAX_BUNDLE_BYTES:,} a download may hold; "
                         "nothing was offered")
    app.deliver_text(io.StringIO(text), save_filename=path.name)
    return Path(path.name)


MAX_NAME_BYTES = 255
"""The longest file name (one path part, in UTF-8 bytes) Linux and macOS file systems take."""


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a file name, in one line, or None: a NUL or another control
    character (the OS refuses the first, the second would garble the messages), or a part
    longer than :data:`MAX_NAME_BYTES`."""
    if "\x00" in name:
        return "a file name cannot hold a NUL byte (\\0)"
    control = next((c for c in name if ord(c) < 0x20 or ord(c) == 0x7F), None)
    if control is not None:
        return f"a file name cannot hold the control character {control!r}"
    longest = max((part for part in Path(name).parts), key=lambda part: len(part.encode("utf-8")), default="")
    size = len(longest.encode("utf-8"))
    if size > MAX_NAME_BYTES:
        return f"a file name holds at most {MAX_NAME_BYTES} bytes; this one has {size:,}"
    return None


def shortened(path: str | Path, limit: int = 40) -> str:
    """``path`` as text, cut in the middle with ``…`` beyond ``limit`` characters (a status
    line stays one line)."""
    text = str(path)
    if len(text) <= limit:
        return text
    half = (limit - 1) // 2
    return f"{text[:half]}…{text[-half:]}"
