# SPDX-License-Identifier: Apache-2.0
"""Plain-text plots of hit rate against capacity: what ``kvviz trace --sweep`` prints, one curve
per choice (policy or design) when it sweeps several."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from kvviz.core.designs import HASH, TRIE
from kvviz.trace.replay import ReplayResult

__all__ = ["CURVE_MARKS", "LINE_MARK", "Curve", "HitRateLine", "choice_label", "eviction_name", "hit_rate_curves",
           "hit_rate_plot", "percent"]


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


CURVE_MARKS = "*o+x#@%&"
"""The mark of each curve of :func:`hit_rate_curves`, in order (ASCII, one per choice)."""

LINE_MARK = "."
"""The continuous line's mark: a hit rate at every character column's capacity, under the
measured points (which are drawn over it)."""


class HitRateLine(Protocol):
    """A hit rate at any capacity (:class:`kvviz.trace.stack_distance.LruCurve` is one)."""

    @property
    def exact_from_tokens(self) -> int:
        """The smallest capacity the line describes."""

    def hit_rate_at(self, capacity_tokens: float) -> float | None:
        """The token hit rate at ``capacity_tokens``, None where the line says nothing."""


@dataclass(frozen=True)
class Curve:
    """One choice's hit rates against capacity: its ``label`` (``trie lru``), one result per
    capacity (the same capacities for every curve of a plot) and its unlimited-capacity result;
    ``line``, when known, its hit rate at every capacity, drawn as a continuous line."""

    label: str
    results: Sequence[ReplayResult]
    unlimited: ReplayResult | None = None
    line: HitRateLine | None = None


def eviction_name(result: ReplayResult) -> str:
    """How the result's cache evicts, for titles: ``LRU``, ``FIFO``, ... or the hash design's
    ``free-queue``."""
    return "free-queue" if result.cache == HASH else result.policy.upper()


def choice_label(result: ReplayResult) -> str:
    """The choice a result measured, as a sweep names it: ``trie lru``, ``hash``, ``base``."""
    return f"trie {result.policy}" if result.cache == TRIE else result.cache


def hit_rate_plot(results: Sequence[ReplayResult], unlimited: ReplayResult | None = None, *,
                  line: HitRateLine | None = None, column_width: int = 6, max_rows: int = 16) -> str:
    """Hit rate (y) against capacity (x, one column per result, log-spaced) in plain text.

    ``*`` marks a measured point, a dashed row the unlimited-capacity figure. Each row is
    1, 2, 2.5, 5 or 10% of hit rate, the finest that fits in ``max_rows`` rows. No colour and
    no box-drawing characters: it reads in any terminal, log file or README. The shape of
    Figure 9 of the Mooncake paper. ``line`` (the one-pass LRU curve) adds a ``.`` at every
    character column's capacity where it is known, and a legend line saying from where.
    """
    first = results[0] if results else None
    kind = first.cache if first is not None else TRIE
    eviction = eviction_name(first) if first is not None else "LRU"
    return _plot([Curve("", results, unlimited, line)], f"token hit rate vs cache capacity ({kind} cache, {eviction} "
                                                        f"eviction)", column_width, max_rows, legend=False)


def hit_rate_curves(curves: Sequence[Curve], *, column_width: int = 6, max_rows: int = 16) -> str:
    """:func:`hit_rate_plot` with one curve per choice (a policy, a design), each drawn with its
    mark of :data:`CURVE_MARKS` and a legend. Inside a capacity's column each curve has its own
    character, so curves never hide each other: equal rates read as marks side by side. At
    most ``len(CURVE_MARKS)`` curves, all over the same capacities. A curve's ``line`` is drawn
    with :data:`LINE_MARK` under every curve's marks (lines of equal curves coincide)."""
    if len(curves) > len(CURVE_MARKS):
        raise ValueError(f"at most {len(CURVE_MARKS)} curves in one plot, not {len(curves)}")
    return _plot(curves, "token hit rate vs cache capacity, one curve per choice",
                 max(column_width, len(curves) + 2), max_rows, legend=True)


def _plot(curves: Sequence[Curve], title: str, column_width: int, max_rows: int, legend: bool) -> str:
    results = curves[0].results if curves else ()
    rates = [r.token_hit_rate for c in curves for r in c.results]
    unlimited_rates = [c.unlimited.token_hit_rate for c in curves if c.unlimited is not None]
    ceiling = max(rates + unlimited_rates + [0.01])
    row_step = next((step for step in _ROW_STEPS if ceiling / step <= max_rows - 1e-9), 0.1)
    rows = max(2, math.ceil(ceiling / row_step - 1e-9))  # the top row: next multiple of row_step
    label_every = 2 if rows > 8 else 1
    rows += rows % label_every  # so that the top row is labelled
    width = column_width * len(results)
    centre = column_width // 2
    first_mark = centre - len(curves) // 2  # curve i is drawn i characters right of this

    def row_of(rate: float) -> int:
        return rows - round(rate / row_step)  # row 0 at the top, row `rows` is the 0% axis

    grid = [[" "] * width for _ in range(rows)]
    axis = ["-"] * width
    for column in range(len(results)):
        axis[column * column_width + centre] = "+"
    grid.append(axis)
    unlimited_labels: dict[int, list[str]] = {}
    for c in curves:
        if c.unlimited is None:
            continue
        row = row_of(c.unlimited.token_hit_rate)
        text = percent(c.unlimited.token_hit_rate)
        labels = unlimited_labels.setdefault(row, [])
        labels.append(f"{c.label} {text}" if c.label else text)
    for row, labels in unlimited_labels.items():
        if row < rows:
            grid[row] = [" " if i % 2 else "-" for i in range(width)]
    for c in curves:
        if c.line is not None:
            _draw_line(grid, c.line, [r.capacity_tokens for r in results], column_width,
                       [r for r in range(rows) if r not in unlimited_labels], row_of)
    for index, c in enumerate(curves):
        mark = CURVE_MARKS[index]
        for column, r in enumerate(c.results):
            grid[row_of(r.token_hit_rate)][column * column_width + first_mark + index] = mark
    lines = [title]
    for index, cells in enumerate(grid):
        value = (rows - index) * row_step
        labelled = (rows - index) % label_every == 0
        label = f"{value * 100:5.1f}% " if labelled else "       "
        corner = "+" if index == rows else "|"
        line = f"{label}{corner}{''.join(cells)}".rstrip()
        if index in unlimited_labels:
            labels = unlimited_labels[index]
            same = len({label.rsplit(" ", 1)[-1] for label in labels}) == 1
            line += ("  unlimited " + (labels[0].rsplit(" ", 1)[-1] if same and len(labels) > 1 else ", ".join(labels)))
        lines.append(line)
    margin = " " * 8
    ticks = "".join(_short_capacity(r.capacity_tokens or 0).center(column_width) for r in results)
    lines.append(margin + ticks.rstrip())
    lines.append(margin + "cache capacity in tokens (log scale)".center(width).rstrip())
    lined = [c for c in curves if c.line is not None]
    if lined and len(results) > 1:
        whose = f"{', '.join(c.label for c in lined)} at " if legend else ""
        start = min(c.line.exact_from_tokens for c in lined)
        lines.append(margin + f"{LINE_MARK} {whose}every capacity from {start:,} tokens (the largest request)")
        lines.append(margin + "  from one pass of LRU stack distances")
    if legend:  # the marks' legend last, where a reader (and a script) finds it
        lines.append(margin + "   ".join(f"{CURVE_MARKS[i]} {c.label}" for i, c in enumerate(curves)))
    return "\n".join(lines)


def _draw_line(grid: list[list[str]], line: HitRateLine, capacities: Sequence[int | None], column_width: int,
               rows: Sequence[int], row_of) -> None:
    """``line``'s hit rate at each character column's capacity (log-interpolated between the
    columns' capacities, extrapolated past the ends), joined by filling the rows between two
    neighbouring columns; only on blank cells of ``rows`` (not the axis, not a dashed
    unlimited row, which the line meets where it flattens)."""
    drawable = set(rows)
    logs = [math.log10(c) for c in capacities if c]
    if len(logs) != len(capacities) or len(logs) < 2:
        return  # no log scale to place it on (a capacity of 0 or a single column)
    centre = column_width // 2
    previous = None
    for x in range(len(grid[0])):
        position = (x - centre) / column_width
        left = min(max(int(math.floor(position)), 0), len(logs) - 2)
        capacity = 10 ** (logs[left] + (position - left) * (logs[left + 1] - logs[left]))
        rate = line.hit_rate_at(capacity)
        if rate is None:
            previous = None
            continue
        row = row_of(rate)
        span = range(row, previous) if previous is not None and previous > row else \
            range(previous + 1, row + 1) if previous is not None and previous < row else (row,)
        for r in span:
            if r in drawable and grid[r][x] == " ":
                grid[r][x] = LINE_MARK
        previous = row
