# SPDX-License-Identifier: Apache-2.0
"""Exported SVGs read the same in every viewer: no text run starts or ends with the
non-breaking spaces librsvg-based viewers drop (which ran "release s6" into "LRU eviction"),
and each run still sits in its own cells."""

from __future__ import annotations

import html
import re

from kvviz.ui.exporting import portable_svg
from kvviz.explore.screenshot import screenshot_svg

TEXT = re.compile(r'<text [^>]*?x="([\d.]+)"[^>]*?textLength="([\d.]+)"[^>]*>([^<]*)</text>')


def test_an_exported_svg_has_no_text_run_starting_or_ending_in_spaces(lru):
    svg = screenshot_svg(lru, 20, size=(120, 36))
    runs = TEXT.findall(svg)
    assert runs and not [text for _, _, text in runs if text.startswith("&#160;") or text.endswith("&#160;")]
    header = next((x, text) for x, _, text in runs if text.startswith("LRU&#160;eviction"))
    op = next((x, length, text) for x, length, text in runs if "release&#160;s6" in text)
    cell = float(op[1]) / len(html.unescape(op[2]))
    assert float(header[0]) >= float(op[0]) + float(op[1]) + cell  # a space between them, drawn as a gap


def test_a_run_of_spaces_keeps_its_cells_when_trimmed():
    svg = '<text class="r" x="10" y="20" textLength="70" clip-path="c">&#160;&#160;ab&#160;c&#160;</text>'
    assert portable_svg(svg) == '<text class="r" x="30.0" y="20" textLength="40.0" clip-path="c">ab&#160;c</text>'
