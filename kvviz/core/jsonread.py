# SPDX-License-Identifier: Apache-2.0
"""JSON read with every integer bounded before it becomes an int.

``json.loads`` turns a run of digits into an int whatever its length: 4,301 digits raise
Python's ``ValueError`` (its int-string limit, a crash rather than a bound), and fewer still
cost quadratic time. :func:`loads` refuses an integer of more than
:data:`~kvviz.core.limits.MAX_JSON_INT_DIGITS` digits with :class:`JsonNumberTooLong`, which says
where it is (line and column), so each reader reports ``FILE:LINE:COL: what`` as it does for
any other bad JSON.
"""

from __future__ import annotations

import json
import re
from typing import Any

from kvviz.core.limits import MAX_JSON_INT_DIGITS

# A JSON string (skipped: digits inside one are no number) or a run of digits too long.
_LONG_INT = re.compile(r'"(?:[^"\\]|\\.)*"|(-?[0-9]{%d,})' % (MAX_JSON_INT_DIGITS + 1))


class JsonNumberTooLong(ValueError):
    """An integer with more digits than :data:`~kvviz.core.limits.MAX_JSON_INT_DIGITS`, located
    (``lineno``, ``colno`` from 1, as :class:`json.JSONDecodeError` has them)."""

    def __init__(self, digits: int, lineno: int, colno: int) -> None:
        self.digits, self.lineno, self.colno = digits, lineno, colno
        super().__init__(f"an integer of {digits:,} digits (at most {MAX_JSON_INT_DIGITS} are read)")


class _TooLong(Exception):
    pass


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_JSON_INT_DIGITS:
        raise _TooLong
    return int(text)


def loads(text: str | bytes) -> Any:
    """``json.loads(text)``, except that an integer of more than
    :data:`~kvviz.core.limits.MAX_JSON_INT_DIGITS` digits raises :class:`JsonNumberTooLong` before it
    is converted. Other errors are ``json.loads``'s own."""
    try:
        return json.loads(text, parse_int=_bounded_int)
    except _TooLong:
        pass
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    for match in _LONG_INT.finditer(text):
        if match[1]:
            start = match.start(1)
            lineno = text.count("\n", 0, start) + 1
            colno = start - text.rfind("\n", 0, start)
            raise JsonNumberTooLong(len(match[1].lstrip("-")), lineno, colno)
    raise JsonNumberTooLong(MAX_JSON_INT_DIGITS + 1, 1, 1)  # not found again: should not happen


__all__ = ["JsonNumberTooLong", "loads"]
