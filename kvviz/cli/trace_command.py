"""``kvviz trace``: replay a Mooncake trace and print hit rate, evictions and held pages.

Registered on the ``kvviz`` group in ``kvviz/cli/__init__.py``.
Output is Rich tables on stdout (``--json`` for machine-readable output); the progress bar
goes to stderr and only on a terminal. Bad input (a bad trace line with
``--on-error stop``, an unreadable file, bad options) exits with code 2 and a one-line
message, never a traceback.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from ..model.scenario import MAX_SOURCE_BYTES
from ..trace.mooncake import DEFAULT_BLOCK_TOKENS, PrefixReuse, Trace, TraceFormatError, prefix_reuse, read_trace
from ..trace.replay import (
    DEFAULT_DECODE_MS_PER_TOKEN,
    DEFAULT_PREFILL_MS_PER_TOKEN,
    ReplayConfig,
    ReplayResult,
    replay,
    sweep,
    sweep_capacities,
)
from ..trace.plot import hit_rate_plot, percent
from ..trace.to_kvs import trace_to_scenario
from .common import BadInput, launch_ui

__all__ = ["parse_capacity", "trace"]

_SUFFIXES = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_UNLIMITED = ("unlimited", "inf", "none")
_SKIPPED_SHOWN = 10


def parse_capacity(text: str) -> int | None:
    """Tokens from ``3000000``, ``3_000_000``, ``3e6``, ``3M``, ``1.5k``; ``None`` for ``unlimited``.

    Raises ``ValueError`` with a message for anything else.
    """
    cleaned = text.strip().lower().replace("_", "").replace(",", "")
    if cleaned in _UNLIMITED:
        return None
    match = re.fullmatch(r"(\d+(?:\.\d*)?(?:e\d+)?)([kmgt]?)", cleaned)
    if not match:
        raise ValueError(f"{text!r} is not a token count (examples: 3000000, 3e6, 3M, unlimited)")
    value = float(match.group(1)) * _SUFFIXES[match.group(2)]
    if not value.is_integer():
        raise ValueError(f"{text!r} is not a whole number of tokens")
    return int(value)


class _CapacityType(click.ParamType):
    name = "TOKENS"

    def convert(self, value, param, ctx):
        if value is None or isinstance(value, int):
            return value
        try:
            return parse_capacity(str(value))
        except ValueError as error:
            self.fail(str(error), param, ctx)


def _fail(message: str) -> None:
    """Bad input: one line on stderr and exit code 2, never a traceback."""
    raise BadInput(message)


# -- formatting -------------------------------------------------------------------------


def _capacity_label(result: ReplayResult) -> str:
    if result.capacity_tokens is None:
        return "unlimited"
    return f"{result.capacity_tokens:,}"


def _summary_table(trace: Trace, reuse: PrefixReuse, result: ReplayResult) -> Table:
    table = Table(title=f"Mooncake trace replay: {trace.name}", show_header=False, title_justify="left")
    table.add_column("measure", style="bold")
    table.add_column("value", justify="right")
    table.add_column("note")
    if result.capacity_tokens is None:
        capacity = f"unlimited ({result.page_count:,} pages)"
    else:
        capacity = f"{result.capacity_tokens:,} tokens = {result.page_count:,} pages"
    mode = "concurrent" if result.concurrency else "sequential"
    if result.concurrency:
        mode_note = (f"prefill {result.prefill_ms_per_token:g} ms/token, "
                     f"decode {result.decode_ms_per_token:g} ms/token")
    else:
        mode_note = "acquire, publish, release each request"
    rows = [
        ("requests", f"{result.requests:,}", f"{len(trace.skipped):,} bad lines skipped" if trace.skipped else ""),
        ("input tokens", f"{result.input_tokens:,}", f"{reuse.blocks:,} blocks of {result.page_tokens} tokens"),
        ("cache", result.cache, capacity),
        ("replay", mode, mode_note + (", with output" if result.with_output else "")),
        ("token hit rate", percent(result.token_hit_rate), f"{result.hit_tokens:,} prompt tokens from cache"),
        ("prefix-reuse ratio", percent(reuse.ratio), "the trace's own (unlimited capacity)"),
        ("pages evicted", f"{result.pages_evicted:,}", ""),
        ("peak pages held", f"{result.peak_pages_held:,}",
         f"{result.peak_live_requests:,} live request{'s' if result.peak_live_requests != 1 else ''} at most"),
        ("failed to fit", f"{result.failed_to_fit:,}", "not enough free + evictable pages"),
        ("wall time", f"{result.wall_seconds:.2f} s", f"{result.requests_per_second:,.0f} requests/s"),
    ]
    for row in rows:
        table.add_row(*row)
    return table


def _sweep_table(trace: Trace, results: Sequence[ReplayResult], unlimited: ReplayResult) -> Table:
    table = Table(title=f"Hit rate vs capacity: {trace.name} ({unlimited.cache} cache, "
                        f"{unlimited.requests:,} requests)", title_justify="left")
    for name in ("capacity", "pages", "hit rate", "evicted", "peak held", "failed", "time"):
        table.add_column(name, justify="right", no_wrap=True)
    table.caption = "capacity in tokens; hit rate = prompt tokens served from the cache; " \
                    "failed = requests that did not fit"
    for result in (*results, unlimited):
        table.add_row(_capacity_label(result), f"{result.page_count:,}", percent(result.token_hit_rate),
                      f"{result.pages_evicted:,}", f"{result.peak_pages_held:,}", f"{result.failed_to_fit:,}",
                      f"{result.wall_seconds:.2f} s")
    return table


def _trace_json(trace: Trace, reuse: PrefixReuse) -> dict:
    return {
        "path": trace.path,
        "requests": len(trace.requests),
        "block_tokens": trace.block_tokens,
        "input_tokens": reuse.input_tokens,
        "blocks": reuse.blocks,
        "distinct_blocks": reuse.distinct_blocks,
        "prefix_reuse_ratio": reuse.ratio,
        "skipped_lines": [{"line": p.line, "message": p.message} for p in trace.skipped],
    }


# -- progress -------------------------------------------------------------------------------


@contextmanager
def _progress(enabled: bool, total: int, description: str) -> Iterator[Callable[[int], None] | None]:
    """A Rich progress bar on stderr, or None when disabled (not a terminal, --no-progress)."""
    if not enabled:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda done: bar.update(task, completed=done)


# -- the command ------------------------------------------------------------------------------


@click.command("trace")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--capacity-tokens", type=_CapacityType(), default="unlimited", show_default=True,
              help="Cache capacity in tokens (3000000, 3e6, 3M) or 'unlimited'. Pages = capacity // page tokens.")
@click.option("--page-tokens", type=click.IntRange(min=1), default=DEFAULT_BLOCK_TOKENS, show_default=True,
              help="Tokens per hash block = per page (the Mooncake release uses 512).")
@click.option("--base", "use_base", is_flag=True, help="Use the base cache (no sharing) instead of the trie cache.")
@click.option("--with-output", is_flag=True, help="Also hold pages for each request's output tokens.")
@click.option("--concurrency", is_flag=True,
              help="Overlap requests by arrival time; each holds its pages for prefill + decode time.")
@click.option("--prefill-ms-per-token", type=click.FloatRange(min=0), default=DEFAULT_PREFILL_MS_PER_TOKEN,
              show_default=True, help="With --concurrency: prefill time per uncached prompt token.")
@click.option("--decode-ms-per-token", type=click.FloatRange(min=0), default=DEFAULT_DECODE_MS_PER_TOKEN,
              show_default=True, help="With --concurrency: decode time per output token.")
@click.option("--first", type=click.IntRange(min=1), default=None, help="Replay only the first N requests.")
@click.option("--on-error", type=click.Choice(["stop", "skip"]), default="stop", show_default=True,
              help="At a bad trace line: stop (exit code 2) or skip it and report it.")
@click.option("--sweep", "do_sweep", is_flag=True,
              help="Replay at 1e4 .. 1e9 tokens (half-decades) and unlimited, and plot hit rate vs "
                   "capacity (--capacity-tokens is ignored).")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON instead of tables.")
@click.option("--no-progress", is_flag=True, help="No progress bar (it is also off when stderr is not a terminal).")
@click.option("--to-kvs", type=click.Path(dir_okay=False, writable=True, path_type=Path), default=None,
              help="Write the replayed requests (use --first N) as a kvviz scenario file and exit.")
@click.option("--ui", is_flag=True, help="Open the replay in the kvviz UI (the first 1,000 requests unless --first N).")
def trace(file: Path, capacity_tokens: int | None, page_tokens: int, use_base: bool, with_output: bool,
          concurrency: bool, prefill_ms_per_token: float, decode_ms_per_token: float, first: int | None,
          on_error: str, do_sweep: bool, as_json: bool, no_progress: bool, to_kvs: Path | None,
          ui: bool) -> None:
    """Replay a Mooncake request trace (JSONL) through the KV cache.

    Each hash id is one page of --page-tokens tokens; requests share pages as far as their
    hash ids agree from the start. Prints requests, token hit rate, the trace's prefix-reuse
    ratio, pages evicted, peak pages held, requests that failed to fit, and the time taken.
    """
    if ui and (do_sweep or to_kvs is not None or as_json):
        _fail("--ui opens one replay in the UI: it does not combine with --sweep, --to-kvs or --json")
    if ui and first is None:
        first = UI_DEFAULT_REQUESTS
    if do_sweep and to_kvs is not None:
        _fail("--sweep and --to-kvs do not combine: write a scenario at one capacity")
    try:
        loaded = read_trace(file, block_tokens=page_tokens, on_error=on_error, first=first)
    except TraceFormatError as error:
        _fail(f"{error} (use --on-error skip to leave bad lines out)")
    except OSError as error:
        _fail(f"cannot read {file}: {error.strerror or error}")
    except MemoryError:
        _fail(f"{file} is too large to load")
    if loaded.skipped and not as_json:
        _report_skipped(loaded)
    if not loaded.requests:
        _fail(f"{file} has no valid requests")
    config = ReplayConfig(capacity_tokens=capacity_tokens, page_tokens=page_tokens,
                          cache="base" if use_base else "trie", with_output=with_output,
                          concurrency=concurrency, prefill_ms_per_token=prefill_ms_per_token,
                          decode_ms_per_token=decode_ms_per_token)
    show_progress = not no_progress and sys.stderr.isatty()
    requests = loaded.requests
    if ui:
        _open_in_ui(loaded, requests, config)
        return
    if to_kvs is not None:
        try:
            scenario = trace_to_scenario(requests, config, source=loaded.name)
        except ValueError as error:
            _fail(f"cannot convert {file}: {error}")
        size = len(scenario.text.encode("utf-8"))
        if size > MAX_SOURCE_BYTES:
            _fail(f"the scenario for {len(requests):,} requests would be {size:,} bytes; kvviz reads "
                  f"scenarios of at most {MAX_SOURCE_BYTES:,}: take fewer with --first N")
        try:
            to_kvs.write_text(scenario.text, encoding="utf-8")
        except OSError as error:
            _fail(f"cannot write {to_kvs}: {error.strerror or error}")
        message = {"scenario": str(to_kvs), "requests": len(requests), "ops": scenario.ops,
                   "result": scenario.result.to_dict()}
        if as_json:
            click.echo(json.dumps(message, indent=2))
        else:
            click.echo(f"wrote {to_kvs}: {len(requests):,} requests, {scenario.ops:,} ops "
                       f"(token hit rate {percent(scenario.result.token_hit_rate)})")
        return
    reuse = prefix_reuse(requests, block_tokens=page_tokens)
    console = Console()
    if do_sweep:
        capacities = sweep_capacities()
        total = len(requests) * (len(capacities) + 1)
        with _progress(show_progress, total, "sweeping capacities") as progress:
            results = sweep(requests, config, capacities, progress=progress)
            offset = len(requests) * len(capacities)
            unlimited = replay(requests, replace(config, capacity_tokens=None),
                               progress=None if progress is None else (lambda done: progress(offset + done)))
        if as_json:
            click.echo(json.dumps({"trace": _trace_json(loaded, reuse),
                                   "sweep": [r.to_dict() for r in results],
                                   "unlimited": unlimited.to_dict()}, indent=2))
            return
        console.print(_sweep_table(loaded, results, unlimited))
        console.print()
        # Plain text through click: no Rich markup or wrapping may touch the plot.
        click.echo(hit_rate_plot(results, unlimited))
        return
    with _progress(show_progress, len(requests), "replaying") as progress:
        result = replay(requests, config, progress=progress)
    if as_json:
        click.echo(json.dumps({"trace": _trace_json(loaded, reuse), "result": result.to_dict()}, indent=2))
        return
    console.print(_summary_table(loaded, reuse, result))


UI_DEFAULT_REQUESTS = 1000


def _open_in_ui(loaded: Trace, requests, config: ReplayConfig) -> None:
    """Open the replay of ``requests`` as a timeline in the UI (frames are built lazily)."""
    from ..model.session import Session

    try:
        converted = trace_to_scenario(requests, config, source=loaded.name)
    except ValueError as error:
        _fail(f"cannot open {loaded.path} in the UI: {error}")
    launch_ui(Session.from_scenario(converted.scenario, lazy=True))


def _report_skipped(loaded: Trace) -> None:
    skipped = loaded.skipped
    click.echo(f"kvviz: warning: skipped {len(skipped):,} bad line{'s' if len(skipped) != 1 else ''} in {loaded.path}:",
               err=True)
    for problem in skipped[:_SKIPPED_SHOWN]:
        click.echo(f"  {problem}", err=True)
    if len(skipped) > _SKIPPED_SHOWN:
        click.echo(f"  ... and {len(skipped) - _SKIPPED_SHOWN:,} more (--json lists them all)", err=True)
