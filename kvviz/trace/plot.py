# SPDX-License-Identifier: Apache-2.0
"""A plain-text plot of hit rate against capacity: what ``kvviz trace --sweep`` prints."""

from __future__ import annotations

import math
from collections.abc import Sequence

from .replay import ReplayResult

__all__ = ["hit_rate_plot", "percent"]


def percent(rate: float) -> str:
    """``0.374`` as ``37.4%``."""
    return f"{rate * 100:.1f}%"


def _short_capacity(tokens: int) -> str:
    """``1e4``, ``3e4`` ...: one significant digit, for the plot's axis."""
    exponent = int(math.floor(math.log10(tokens))) if tokens > 0 else 0
    mantissa = round(tokens / 10**exponent)
    if mantissa == 10:
        mantissa, exponent = 1, exponent + 1
    return f"{mantissa}e{exponent}"


_ROW_STEPS = (0.01, 0.02, 0.025, 0.05, 0.1)


def hit_rate_plot(results: Sequence[ReplayResult], unlimited: ReplayResult | None = None, *,
                  column_width: int = 6, max_rows: int = 16) -> str:
    """Hit rate (y) against capacity (x, one column per result, log-spaced) in plain text.

    ``*`` marks a measured point, a dashed row the unlimited-capacity figure. Each row is
    1, 2, 2.5, 5 or 10% of hit rate, the finest that fits in ``max_rows`` rows. No colour and
    no box-drawing characters: it reads in any terminal, log file or README. The shape of
    Figure 9 of the Mooncake paper.
    """
    rates = [r.token_hit_rate for r in results]
    ceiling = max(rates + ([unlimited.token_hit_rate] if unlimited else []) + [0.01])
    row_step = next((step for step in _ROW_STEPS if ceiling / step <= max_rows - 1e-9), 0.1)
    rows = max(2, math.ceil(ceiling / row_step - 1e-9))  # the top row: next multiple of row_step
    label_every = 2 if rows > 8 else 1
    rows += rows % label_every  # so that the top row is labelled
    width = column_width * len(results)
    centre = column_width // 2

    def row_of(rate: float) -> int:
        return rows - round(rate / row_step)  # row 0 at the top, row `rows` is the 0% axis

    grid = [[" "] * width for _ in range(rows)]
    axis = ["-"] * width
    for column in range(len(results)):
        axis[column * column_width + centre] = "+"
    grid.append(axis)
    unlimited_row = None
    if unlimited is not None:
        unlimited_row = row_of(unlimited.token_hit_rate)
        if unlimited_row < rows:
            grid[unlimited_row] = [" " if i % 2 else "-" for i in range(width)]
    for column, rate in enumerate(rates):
        grid[row_of(rate)][column * column_width + centre] = "*"
    kind = results[0].cache if results else "trie"
    lines = [f"token hit rate vs cache capacity ({kind} cache, LRU eviction)"]
    for index, cells in enumerate(grid):
        value = (rows - index) * row_step
        labelled = (rows - index) % label_every == 0
        label = f"{value * 100:5.1f}% " if labelled else "       "
        corner = "+" if index == rows else "|"
        line = f"{label}{corner}{''.join(cells)}".rstrip()
        if index == unlimited_row:
            line += f"  unlimited {percent(unlimited.token_hit_rate)}"
        lines.append(line)
    margin = " " * 8
    ticks = "".join(_short_capacity(r.capacity_tokens or 0).center(column_width) for r in results)
    lines.append(margin + ticks.rstrip())
    lines.append(margin + "cache capacity in tokens (log scale)".center(width).rstrip())
    return "\n".join(lines)
