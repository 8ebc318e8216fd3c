# SPDX-License-Identifier: Apache-2.0
"""Strings from files, streams and bundles made safe to show: one sanitizer for every output.

A scenario, a bundle, a trace, a recording or a progress file is written by someone else. Any
string kvviz quotes from one (a name, a title, a digest, a stream's ``medium``...) may hold
control characters: an ESC sequence that retitles the window, clears the screen or draws a
fake prompt; a newline that splits a one-line message in two; a bidirectional override that
shows text in another order than it is read. :func:`printable` writes each such character as
its Python escape (``\\n``, ``\\x1b``, ``\\u202e``), so the text shows what the file holds
and can do nothing else. ``--json`` needs none of this: JSON escapes control characters.

Standard library only: the model, the readers and the exports use it as the CLI and UI do.
"""

from __future__ import annotations

import unicodedata

# Categories written as escapes: controls (Cc: C0, DEL, C1), line and paragraph separators (Zl,
# Zp), lone surrogates (Cs). Other format characters (a zero-width joiner in an emoji, a soft
# hyphen), private-use and not-yet-assigned characters are text and stay.
_CONTROLS = frozenset({"Cc", "Zl", "Zp", "Cs"})
# The bidirectional controls too (category Cf): they show text in another order than it is
# read ("Trojan Source"), so a quoted name could seem to say something it does not.
_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _is_control(char: str) -> bool:
    return not char.isprintable() and unicodedata.category(char) in _CONTROLS


def _escape(char: str) -> str:
    if char.isprintable() or not (char in _BIDI or _is_control(char)):
        return char
    return char.encode("unicode_escape", "backslashreplace").decode("ascii")


def printable(text: str) -> str:
    """``text`` with every control, line separator or bidirectional control written as its
    escape.

    One line in, one line out: a newline becomes ``\\n``. Printable text is returned as is
    (the common case costs one ``isprintable`` scan).
    """
    if text.isprintable():
        return text
    return "".join(_escape(char) for char in text)


def first_control(text: str, allowed: str = "") -> int:
    """The index of ``text``'s first control character (C0, DEL, C1, a line or paragraph
    separator, a lone surrogate) not in ``allowed``, or -1: where a reader that refuses such
    text points."""
    if text.isprintable():
        return -1
    return next((i for i, char in enumerate(text) if char not in allowed and _is_control(char)), -1)


__all__ = ["first_control", "printable"]
