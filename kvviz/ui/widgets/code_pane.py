# SPDX-License-Identifier: Apache-2.0
"""The pseudo-code pane: the algorithm of the sub-step shown, its line(s) lit.

Stepped into an op, the pane draws one :class:`~kvviz.core.view.CodeView` of the frozen
:class:`~kvviz.core.view.SubStepView` (the text is the model's, :mod:`kvviz.core.pseudocode`;
the pane owns none): line numbers, the lines the sub-step runs lit (several when it spans
them) and kept in sight, and, beside a bug-museum demo's buggy variant, the lines where the
two differ marked ``≠``. The app shows two of these: ours (``variant="ours"``) and the buggy
variant (``variant="buggy"``), side by side.

A line that differs is never cut where the two versions part: longer than the pane, it wraps
onto rows of its own, and the pane beside it gives that line as many rows, so the two stay
line for line.
"""

from __future__ import annotations

import textwrap
from collections.abc import Hashable

from kvviz.core.view import CodeView, FrameView
from kvviz.ui.widgets.line_view import LineView, Row, Span


class CodePane(LineView):
    """One algorithm's pseudo-code with the sub-step's lines lit (see the module doc).

    | Class | Description |
    | :- | :- |
    | `code-pane--number` | Line numbers. |
    | `code-pane--text` | A line of pseudo-code. |
    | `code-pane--current` | The line(s) the sub-step shown runs. |
    | `code-pane--differs` | A line that differs from the variant beside it (≠). |

    Plus those of :class:`~kvviz.ui.widgets.line_view.LineView` (cursor, linked, muted).
    """

    COMPONENT_CLASSES = {"code-pane--number", "code-pane--text", "code-pane--current", "code-pane--differs"}

    DEFAULT_CSS = """
    CodePane {
        & > .code-pane--number { color: $kv-muted; }
        & > .code-pane--text { color: $foreground; }
        & > .code-pane--current { background: $primary-muted; text-style: bold; }
        & > .code-pane--differs { color: $warning; text-style: bold; }
    }
    """

    def __init__(self, variant: str = "ours", **kwargs) -> None:
        super().__init__(**kwargs)
        self.variant = variant
        self._parts: dict[int, list[str]] = {}  # line number -> its rows' text (one, or wrapped)
        self._first_row: dict[int, int] = {}  # line number -> the row it starts on

    @property
    def other(self) -> CodeView | None:
        """The code of the pane beside this one (ours beside the buggy variant), if any."""
        sub = self.view.substep if self.view is not None else None
        if sub is None:
            return None
        return sub.buggy if self.variant == "ours" else sub.code

    @property
    def code(self) -> CodeView | None:
        """The code this pane draws for the view shown (None: nothing to draw)."""
        sub = self.view.substep if self.view is not None else None
        if sub is None:
            return None
        return sub.code if self.variant == "ours" else sub.buggy

    def build_rows(self, view: FrameView, width: int) -> list[Row]:
        code = self.code
        if code is None or not code.lines:
            return [Row(None, "empty")]
        other = self.other
        room = max(8, width - len(str(len(code.lines))) - 3)  # the number, ▶, ≠ and a space
        rows: list[Row] = []
        self._parts, self._first_row = {}, {}
        for number, text in enumerate(code.lines, 1):
            parts = [text]
            if number in code.differs:
                parts = _wrapped(text, room)
                beside = other.lines[number - 1] if other is not None and number <= len(other.lines) else ""
                parts += [""] * (len(_wrapped(beside, room)) - len(parts))  # as many rows as the line beside
            self._parts[number], self._first_row[number] = parts, len(rows)
            rows += [Row(None, (number, part)) for part in range(len(parts))]
        return rows

    def render_row(self, row: Row, width: int) -> list[Span]:
        style = self.style_of
        if row.data == "empty":
            if self.view is None or self.view.substep is None:
                return [("step into an op (i) to follow its pseudo-code", style("line-view--muted"))]
            return [("no pseudo-code for this sub-step", style("line-view--muted"))]
        code = self.code
        number, part = row.data
        if part:  # a wrapped line's next row: its text only, under the line's
            text_style = style("code-pane--differs") + (style("code-pane--current") if number in code.current
                                                        else style("code-pane--differs"))
            return [(" " * (len(str(len(code.lines))) + 2), style("code-pane--number")),
                    (f" {self._parts[number][part]}", text_style)]
        current = number in code.current
        differs = number in code.differs
        text_style = style("code-pane--differs" if differs else "code-pane--text")
        if current:
            text_style += style("code-pane--current")
        digits = len(str(len(code.lines)))
        # Two marks, so a lit line that is also the buggy one says both.
        return [(f"{number:>{digits}}", style("code-pane--number")),
                ("▶" if current else " ", style("code-pane--current") if current else style("code-pane--number")),
                ("≠" if differs else " ", style("code-pane--differs")),
                (f" {self._parts[number][0]}", text_style)]

    def line_signature(self, index: int) -> Hashable | None:
        # A line looks like its text and whether it is lit or differs: a sub-step that lights
        # the next line of the same algorithm redraws two lines, not the pane.
        if index >= len(self._rows):
            return ("blank",)
        row = self._rows[index]
        code = self.code
        if row.data == "empty" or code is None:
            return ("empty", self.view is not None and self.view.substep is not None)
        number, part = row.data
        return (number, part, len(code.lines), self._parts[number][part], number in code.current,
                number in code.differs)

    def show(self, view: FrameView, rebuild: bool = True) -> None:
        """Render ``view``'s code with its current line(s) in sight (nothing is redrawn when
        the code and its lit lines are those already shown: most sub-steps of a long op)."""
        old = self.code
        had_substep = self.view is not None and self.view.substep is not None
        previous, self.view = self.view, view
        code = self.code
        if self._rows and code == old and had_substep == (view.substep is not None):
            return
        self.view = previous
        shown = self._shown_signatures() if self._rows else None
        self.view = view
        self._rebuild(repaint=shown is None)
        if shown is not None:
            self._repaint_changed(shown)  # everything, if the lines below scroll
        if code is None or not code.current:
            self.scroll_home(animate=False, immediate=True)
            return
        first = self._first_row.get(min(code.current), 0)
        last = self._first_row.get(max(code.current), 0) + len(self._parts.get(max(code.current), [""])) - 1
        height = max(1, self.scrollable_content_region.height)
        top = self.scroll_offset.y
        if not (top <= first and last < top + height):
            # Centred when it fits, so the lines before the lit ones are read with them.
            start = max(0, first - max(0, (height - (last - first + 1)) // 2))
            self.scroll_to(y=start, animate=False, immediate=True, force=True)


def _wrapped(text: str, room: int) -> list[str]:
    """``text`` on rows of ``room`` cells, broken at spaces where it can be; a row after the
    first keeps the line's indent, four cells deeper."""
    if len(text) <= room:
        return [text]
    indent = " " * min(room // 4, len(text) - len(text.lstrip()) + 4)
    return textwrap.wrap(text, room, subsequent_indent=indent) or [text]
