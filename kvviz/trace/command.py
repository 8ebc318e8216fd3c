# SPDX-License-Identifier: Apache-2.0
"""``kvviz trace``: replay a Mooncake trace and print hit rate, evictions and held pages.

Registered on the ``kvviz`` group in ``kvviz/cli/__init__.py``.
Output is Rich tables on stdout (``--json`` for machine-readable output); the progress bar
goes to stderr and only on a terminal. Bad input (a bad trace line with
``--on-error stop``, an unreadable file, bad options) exits with code 2 and a one-line
message, never a traceback.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from kvviz.core.designs import BASE, TRIE
from kvviz.report.atomic import refuse_overwriting_inputs, write_text_atomic
from kvviz.core.limits import MAX_CAPACITY_TOKENS
from kvviz.core.mooncake import (
    DEFAULT_BLOCK_TOKENS,
    PrefixReuse,
    Trace,
    TraceFormatError,
    TraceRequest,
    TraceTooLarge,
    prefix_reuse,
    read_trace,
)
from kvviz.trace.replay import (
    DESIGNS,
    POLICIES,
    DEFAULT_DECODE_MS_PER_TOKEN,
    DEFAULT_PREFILL_MS_PER_TOKEN,
    ReplayConfig,
    ReplayResult,
    ReplayTooLarge,
    SweepCurve,
    ONE_PASS,
    SweepWorkerFailed,
    TraceChanged,
    TraceSource,
    check_design,
    check_replay_size,
    check_sweep_size,
    output_blocks,
    replay,
    sweep_capacities,
    sweep_choices,
    sweep_replay_count,
)
from kvviz.trace.plot import Curve, choice_label, eviction_name, hit_rate_curves, hit_rate_plot, percent
from kvviz.trace.to_kvs import trace_to_scenario
from kvviz.commands import (
    BadInput,
    SampleOrPath,
    collector_paused,
    freeze_heap,
    require_terminal,
    stdout_console,
)
from kvviz.explore.launch import launch_ui
from kvviz.core.words import count as plural

__all__ = ["parse_capacity", "trace"]

_SUFFIX_EXPONENTS = {"": 0, "k": 3, "m": 6, "g": 9, "t": 12}
_UNLIMITED = ("unlimited", "inf", "none")
_SKIPPED_SHOWN = 10


# ASCII digits only: Python's \d, int() and float() also take other scripts' digits ("٣" is 3).
_CAPACITY = re.compile(r"([0-9]+)(?:\.([0-9]*))?(?:e([+-]?[0-9]+))?([kmgt]?)", re.ASCII)
_MILLISECONDS = re.compile(r"[0-9]+(?:\.[0-9]*)?(?:e[+-]?[0-9]+)?|\.[0-9]+(?:e[+-]?[0-9]+)?", re.ASCII | re.IGNORECASE)
_COUNT = re.compile(r"[+]?[0-9]+", re.ASCII)


def parse_capacity(text: str) -> int | None:
    """Tokens from ``3000000``, ``3_000_000``, ``3e6``, ``3e+6``, ``3M``, ``1.5k``; ``None`` for
    ``unlimited``. At most ``MAX_CAPACITY_TOKENS``.

    Exact decimal arithmetic (``1.5e3`` is 1500, ``12345e-2`` is not whole), with the size
    checked from the digits before any power of ten is computed. Raises ``ValueError`` with a
    message for anything else.
    """
    cleaned = text.strip().lower().replace("_", "").replace(",", "")
    if cleaned in _UNLIMITED:
        return None
    match = _CAPACITY.fullmatch(cleaned)
    if not match:
        raise ValueError(f"{text!r} is not a token count (examples: 3000000, 3e6, 3M, unlimited)")
    whole, fraction, exponent, suffix = match.group(1), match.group(2) or "", match.group(3) or "0", match.group(4)
    digits = (whole + fraction).lstrip("0")
    if not digits:
        return 0
    too_large = ValueError(f"{text!r} is more than {MAX_CAPACITY_TOKENS:,} tokens, the largest capacity kvviz replays")
    if len(exponent.lstrip("+-").lstrip("0")) > 4:  # beyond 1e9999 either way: no int() of it
        if exponent.startswith("-"):
            raise ValueError(f"{text!r} is not a whole number of tokens")
        raise too_large
    scale = int(exponent) - len(fraction) + _SUFFIX_EXPONENTS[suffix]  # value = int(digits) * 10**scale
    if len(digits) + scale > len(str(MAX_CAPACITY_TOKENS)):
        raise too_large
    if scale < 0:
        value, remainder = divmod(int(digits), 10**-scale)
        if remainder:
            raise ValueError(f"{text!r} is not a whole number of tokens")
    else:
        value = int(digits) * 10**scale
    if value > MAX_CAPACITY_TOKENS:
        raise too_large
    return value


class _CapacityType(click.ParamType):
    name = "TOKENS"

    def convert(self, value, param, ctx):
        if value is None or isinstance(value, int):
            return value
        try:
            return parse_capacity(str(value))
        except ValueError as error:
            self.fail(str(error), param, ctx)


class _MillisecondsType(click.ParamType):
    """A finite, non-negative number of milliseconds in ASCII digits (no nan, inf or "٣")."""

    name = "MS"

    def convert(self, value, param, ctx):
        if isinstance(value, float):
            return value
        text = str(value).strip()
        number = float(text) if _MILLISECONDS.fullmatch(text) else math.nan
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a number of milliseconds (examples: 0.1, 30, 2.5e-2)", param, ctx)
        return number


class _AsciiIntRange(click.IntRange):
    """click's IntRange, but in ASCII digits only (click's int() also reads "٣" as 3)."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not _COUNT.fullmatch(value.strip()):
            self.fail(f"{value!r} is not a whole number (digits 0-9)", param, ctx)
        return super().convert(value, param, ctx)


def _fail(message: str) -> None:
    """Bad input: one line on stderr and exit code 2, never a traceback."""
    raise BadInput(message)


# -- formatting -------------------------------------------------------------------------


def _capacity_label(result: ReplayResult) -> str:
    if result.capacity_tokens is None:
        return "unlimited"
    return f"{result.capacity_tokens:,}"


def _miss_rows(requests, result: ReplayResult) -> list[tuple[str, str, str]]:
    """The summary's miss breakdown: the miss rate, then a row per class."""
    from kvviz.trace.misses import MISS_CLASSES

    misses = None if requests is None else _misses(requests, result)
    if misses is None:
        return []
    notes = {"compulsory": "first seen: no cache could hit", "capacity": "seen before, evicted or did not fit",
             "diverged": "left a shared prefix inside this block", "below_floor": "prompt under one block",
             "partial_tail": "after the last full block"}
    rows = [("miss rate", percent(misses.miss_rate), f"{misses.missed_tokens:,} prompt tokens, as below")]
    rows += [(f"  {name.replace('_', ' ')}", percent(misses.share(name)), notes[name]) for name in MISS_CLASSES]
    return rows


def _summary_table(trace: Trace, reuse: PrefixReuse, result: ReplayResult, requests=None) -> Table:
    table = Table(title=f"Mooncake trace replay: {trace.name}", show_header=False, title_justify="left")
    table.add_column("measure", style="bold")
    table.add_column("value", justify="right")
    table.add_column("note")
    if result.capacity_tokens is None:
        capacity = f"unlimited ({plural(result.page_count, 'page')})"
    else:
        capacity = f"{plural(result.capacity_tokens, 'token')} = {plural(result.page_count, 'page')}"
    mode = "concurrent" if result.concurrency else "sequential"
    if result.concurrency:
        mode_note = (f"prefill {result.prefill_ms_per_token:g} ms/token, "
                     f"decode {result.decode_ms_per_token:g} ms/token")
    else:
        mode_note = "acquire, publish, release each request"
    rows = [
        ("requests", f"{result.requests:,}",
         f"{plural(trace.skipped_count, 'bad line')} skipped" if trace.skipped_count else ""),
        ("input tokens", f"{result.input_tokens:,}", f"{reuse.blocks:,} blocks of {result.page_tokens} tokens"),
        ("cache", _cache_label(result), capacity),
        ("replay", mode, mode_note + (", with output" if result.with_output else "")),
        ("token hit rate", percent(result.token_hit_rate), f"{result.hit_tokens:,} prompt tokens from cache"),
        ("prefix-reuse ratio", percent(reuse.ratio), "the trace's own (unlimited capacity)"),
        ("pages evicted", f"{result.pages_evicted:,}", ""),
        ("peak pages held", f"{result.peak_pages_held:,}",
         f"{result.peak_live_requests:,} live request{'s' if result.peak_live_requests != 1 else ''} at most"),
        ("failed to fit", f"{result.failed_to_fit:,}", "not enough free + evictable pages"),
        *_miss_rows(requests, result),
        ("wall time", f"{result.wall_seconds:.2f} s", f"{result.requests_per_second:,.0f} requests/s"),
    ]
    for row in rows:
        table.add_row(*row)
    return table


def _misses(requests, result: ReplayResult, known: dict | None = None):
    """The miss breakdown of ``result`` (:mod:`kvviz.trace.misses`), or None for the base cache
    (it shares nothing: its misses are not the trace's). ``known`` caches the trace's part."""
    from kvviz.trace.misses import miss_breakdown, trace_misses

    if result.cache == BASE:
        return None
    known = {} if known is None else known
    key = (result.page_tokens, result.concurrency)
    if key not in known:
        known[key] = trace_misses(requests, result.page_tokens, by_arrival=result.concurrency)
    return miss_breakdown(known[key], result.hit_tokens)


def _with_misses(requests, result: ReplayResult, known: dict) -> dict:
    """``result.to_dict()`` with its ``misses`` (null for the base cache)."""
    misses = _misses(requests, result, known)
    return {**result.to_dict(), "misses": None if misses is None else misses.to_dict()}


def _misses_table(title: str, requests, results: Sequence[ReplayResult], known: dict) -> Table:
    """Per capacity: the miss rate and the share of each class of missed tokens (they add up)."""
    from kvviz.trace.misses import MISS_CLASSES

    table = Table(title=title, title_justify="left")
    headers = {"compulsory": "compulsory", "capacity": "capacity", "diverged": "diverged", "below_floor": "floor",
               "partial_tail": "tail"}
    for name in ("tokens", "miss", *(headers[c] for c in MISS_CLASSES)):
        table.add_column(name, justify="right", no_wrap=True)
    table.caption = ("shares of all prompt tokens, adding up to the miss rate; compulsory: first seen; capacity: "
                     "seen before (evicted, or did not fit); diverged: left a shared prefix inside the block; "
                     "floor: prompt under one block; tail: after the last full block")
    for result in results:
        misses = _misses(requests, result, known)
        table.add_row(_capacity_label(result), percent(misses.miss_rate),
                      *(percent(misses.share(name)) for name in MISS_CLASSES))
    return table


def _cache_label(result: ReplayResult) -> str:
    """``trie, lru``; ``hash, free-queue``; ``base``."""
    if result.cache == BASE:
        return BASE
    return f"{result.cache}, {result.policy if result.cache == TRIE else eviction_name(result)}"


def _sweep_table(trace: Trace, results: Sequence[ReplayResult], unlimited: ReplayResult) -> Table:
    table = Table(title=f"Hit rate vs capacity: {trace.name} ({unlimited.cache} cache, "
                        f"{unlimited.requests:,} requests)", title_justify="left")
    for name in ("capacity", "pages", "hit rate", "evicted", "peak held", "failed", "time"):
        table.add_column(name, justify="right", no_wrap=True)
    table.caption = "capacity in tokens; hit rate = prompt tokens served from the cache; " \
                    "failed = requests that did not fit"
    for result in (*results, unlimited):
        one_pass = result.source == ONE_PASS
        table.add_row(_capacity_label(result), f"{result.page_count:,}",
                      percent(result.token_hit_rate) + _ONE_PASS_MARK * one_pass,
                      f"{result.pages_evicted:,}", f"{result.peak_pages_held:,}", f"{result.failed_to_fit:,}",
                      "-" if one_pass else f"{result.wall_seconds:.2f} s")
    note = _one_pass_note((*results, unlimited))
    if note:
        table.caption += "\n" + note
    return table


_ONE_PASS_MARK = "*"
"""After a hit rate read off the one-pass LRU curve instead of replayed."""


def _one_pass_note(results: Sequence[ReplayResult]) -> str:
    """The footnote of :data:`_ONE_PASS_MARK`, or "" when every row was replayed."""
    if not any(r.source == ONE_PASS for r in results):
        return ""
    # Short: a caption wraps to the table's width (39 columns for three choices).
    return f"{_ONE_PASS_MARK} one-pass LRU curve, not replayed"


def _choices_table(trace: Trace, curves: Sequence[SweepCurve]) -> Table:
    """Rows: capacities (then unlimited); a hit-rate column per choice.

    Compact (headings on two lines, no rules between columns) so that every policy and both
    designs, 8 columns, fit 80 columns without a cell cut short.
    """
    from rich import box

    first = curves[0]
    table = Table(box=box.SIMPLE_HEAD, collapse_padding=True, pad_edge=False)
    table.add_column("capacity", justify="right", no_wrap=True)
    for curve in curves:
        table.add_column(choice_label(curve.unlimited).replace(" ", "\n"), justify="right", no_wrap=True,
                         min_width=len("100.0%"))
    table.caption = "capacity in tokens; hit rate = prompt tokens from the cache"
    for row, result in enumerate((*first.results, first.unlimited)):
        cells = [_capacity_label(result)]
        for curve in curves:
            result = (*curve.results, curve.unlimited)[row]
            cells.append(percent(result.token_hit_rate) + _ONE_PASS_MARK * (result.source == ONE_PASS))
        table.add_row(*cells)
    note = _one_pass_note([r for c in curves for r in (*c.results, c.unlimited)])
    if note:
        table.caption += "\n" + note
    return table


def _choices_title(trace: Trace, curves: Sequence[SweepCurve]) -> str:
    """The title printed above :func:`_choices_table`."""
    return f"Token hit rate vs capacity by choice: {trace.name} ({curves[0].unlimited.requests:,} requests)"


def _listed(option: str, text: str, allowed: Sequence[str]) -> tuple[str, ...]:
    """The comma-separated names of ``--policy`` or ``--design``, in order, each once; an
    unknown name is bad input naming it and the allowed ones."""
    names = [name.strip().lower() for name in text.split(",")]
    for name in names:
        if name not in allowed:
            what = f"{name!r} in {text!r}" if len(names) > 1 else repr(name)
            _fail(f"{option}: unknown {option.lstrip('-')} {what} (expected one of {', '.join(allowed)}, "
                  f"or several separated by commas with --sweep)")
    return tuple(dict.fromkeys(names))


def _choices(policy_text: str, design_text: str, use_base: bool, do_sweep: bool,
             template: ReplayConfig) -> tuple[ReplayConfig, ...]:
    """The configurations a replay or sweep runs: each design, and on the trie each policy."""
    policies = _listed("--policy", policy_text, POLICIES)
    designs = (BASE,) if use_base else _listed("--design", design_text, DESIGNS)
    if use_base and design_text != TRIE:
        _fail("--base and --design exclude each other: the base cache is its own design")
    if not do_sweep and (len(policies) > 1 or len(designs) > 1):
        _fail("several policies or designs are compared by a sweep: add --sweep (one replay takes one of each)")
    if TRIE not in designs and policies != ("lru",):
        evicts = "(--base) never evicts" if use_base else "(--design hash) evicts by its free queue"
        _fail(f"--policy orders the trie's evictions; the {designs[0]} cache {evicts}")
    configs = []
    for design in designs:
        for policy in policies if design == TRIE else ("lru",):
            configs.append(replace(template, cache=design, policy=policy))
    return tuple(configs)


def _trace_json(trace: Trace, reuse: PrefixReuse) -> dict:
    return {
        "path": trace.path,
        "requests": len(trace.requests),
        "block_tokens": trace.block_tokens,
        "input_tokens": reuse.input_tokens,
        "blocks": reuse.blocks,
        "distinct_blocks": reuse.distinct_blocks,
        "prefix_reuse_ratio": reuse.ratio,
        "skipped_count": trace.skipped_count,
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


def _tokenize(path: str | None):
    """``--tokenizer PATH``'s encode, or None; one error line for a file that is not one."""
    if path is None:
        return None
    from kvviz.core.tokenizer_file import TokenizerError, load_tokenizer

    try:
        return load_tokenizer(path).encode
    except TokenizerError as error:
        _fail(str(error))


TRACE_EPILOG = """\b
Your own traffic: a JSONL of requests by their tokens (or text) instead of Mooncake's hash ids,
one a line (timestamp and output_length optional; each full block of --page-tokens tokens
becomes a hash id chained on the ones before it; a partial last block is never cached):
  {"timestamp": 0, "tokens": [101, 7592, 2088, 102, 7592], "output_length": 12}
  {"timestamp": 40, "text": "You are a helpful assistant. Translate: bonjour"}
  kvviz trace my-traffic.jsonl --page-tokens 16 --tokenizer tokenizer.json --sweep
("text" needs --tokenizer PATH, a tokenizer.json read with the tokenizers package, never
downloaded.) Every replay and sweep row ends with why prompt tokens missed: compulsory (first
seen), capacity (seen before, evicted), diverged (left a shared prefix inside a block), below
the block floor, partial tail; the shares add up to the miss rate.
"""


@click.command("trace", epilog=TRACE_EPILOG)
@click.argument("file", type=SampleOrPath("trace", path_type=Path))
@click.option("--tokenizer", "tokenizer_path", type=click.Path(dir_okay=False), default=None,
              help="A tokenizer.json that cuts the 'text' of your own traffic's lines into token ids "
                   "(see below; never downloaded).")
@click.option("--capacity-tokens", type=_CapacityType(), default="unlimited", show_default=True,
              help="Cache capacity in tokens (3000000, 3e6, 3M) or 'unlimited'. Pages = capacity // page tokens.")
@click.option("--page-tokens", type=_AsciiIntRange(min=1), default=DEFAULT_BLOCK_TOKENS, show_default=True,
              help="Tokens per hash block = per page (the Mooncake release uses 512).")
@click.option("--base", "use_base", is_flag=True, help="Use the base cache (no sharing) instead of the trie cache.")
@click.option("--policy", "policy_text", default="lru", show_default=True, metavar="POLICY[,POLICY...]",
              help=f"The trie's eviction policy: {', '.join(POLICIES)} (SGLang's names). With --sweep, "
                   f"several separated by commas: a curve each.")
@click.option("--design", "design_text", default=TRIE, show_default=True, metavar="DESIGN[,DESIGN...]",
              help="trie (SGLang's radix tree) or hash (vLLM's hash blocks and free queue). With --sweep, "
                   "both separated by a comma: a curve each.")
@click.option("--with-output", is_flag=True, help="Also hold pages for each request's output tokens.")
@click.option("--concurrency", is_flag=True,
              help="Overlap requests by arrival time; each holds its pages for prefill + decode time.")
@click.option("--prefill-ms-per-token", type=_MillisecondsType(), default=DEFAULT_PREFILL_MS_PER_TOKEN,
              show_default=True, help="With --concurrency: prefill time per uncached prompt token.")
@click.option("--decode-ms-per-token", type=_MillisecondsType(), default=DEFAULT_DECODE_MS_PER_TOKEN,
              show_default=True, help="With --concurrency: decode time per output token.")
@click.option("--first", type=_AsciiIntRange(min=1), default=None, help="Replay only the first N requests.")
@click.option("--on-error", type=click.Choice(["stop", "skip"]), default="stop", show_default=True,
              help="At a bad trace line: stop (exit code 2) or skip it and report it.")
@click.option("--sweep", "do_sweep", is_flag=True,
              help="Replay at 1e4 .. 1e9 tokens (half-decades) and unlimited, and plot hit rate vs "
                   "capacity (--capacity-tokens is ignored).")
@click.option("--workers", type=_AsciiIntRange(min=1), default=None, metavar="N",
              help="With --sweep: processes replaying at once (default: every core, for a sweep big enough "
                   "to pay for starting them); 1 replays in this process.")
@click.option("--replay-all", is_flag=True,
              help="With --sweep: replay every row, also those of trie lru and hash that are read off the "
                   "one-pass LRU curve (marked *) by default: the same figures, to check them.")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON instead of tables.")
@click.option("--no-progress", is_flag=True, help="No progress bar (it is also off when stderr is not a terminal).")
@click.option("--to-kvs", type=click.Path(dir_okay=False, writable=True, path_type=Path), default=None,
              help="Write the replayed requests (use --first N) as a kvviz scenario file and exit "
                   "(- writes it to stdout, and what was written to stderr).")
@click.option("--ui", is_flag=True,
              help="Open the replay in the kvviz UI (the first 1,000 requests unless --first N; without "
                   "--capacity-tokens, a capacity of half the excerpt's distinct blocks, so that pages are evicted).")
def trace(file: Path, capacity_tokens: int | None, page_tokens: int, use_base: bool, policy_text: str,
          design_text: str, with_output: bool,
          concurrency: bool, prefill_ms_per_token: float, decode_ms_per_token: float, first: int | None,
          on_error: str, do_sweep: bool, workers: int | None, replay_all: bool, as_json: bool, no_progress: bool,
          to_kvs: Path | None, ui: bool, tokenizer_path: str | None) -> None:
    """Replay a Mooncake request trace (JSONL, plain or gzip) through the KV cache.

    FILE is a trace file or a shipped sample's name: conversation, synthetic (`kvviz help
    samples`), e.g. `kvviz trace conversation --sweep`. Each hash id is one page of --page-tokens tokens; requests share pages as far as their
    hash ids agree from the start. Prints requests, token hit rate, the trace's prefix-reuse
    ratio, pages evicted, peak pages held, requests that failed to fit, and the time taken.
    """
    if ui and (do_sweep or to_kvs is not None or as_json):
        _fail("--ui opens one replay in the UI: it does not combine with --sweep, --to-kvs or --json")
    if ui:
        require_terminal()  # before reading and converting up to 1,000 requests for nothing
        if first is None:
            first = UI_DEFAULT_REQUESTS
    if do_sweep and to_kvs is not None:
        _fail("--sweep and --to-kvs do not combine: write a scenario at one capacity")
    if workers is not None and not do_sweep:
        _fail("--workers sets the processes of a sweep: add --sweep (one replay runs in one process)")
    if replay_all and not do_sweep:
        _fail("--replay-all replays every row of a sweep: add --sweep (one replay is always replayed)")
    if to_kvs is not None:
        try:  # before any work: `--to-kvs t.jsonl` on t.jsonl would replace the trace
            refuse_overwriting_inputs(to_kvs, [file])
        except ValueError as error:
            _fail(str(error))
    try:
        loaded = read_trace(file, block_tokens=page_tokens, on_error=on_error, first=first,
                            tokenize=_tokenize(tokenizer_path))
    except TraceTooLarge as error:
        _fail(str(error))
    except TraceFormatError as error:
        _fail(f"{error} (use --on-error skip to leave bad lines out)")
    except OSError as error:
        _fail(f"cannot read {file}: {error.strerror or error}")
    except MemoryError:
        _fail(f"{file} is too large to load")
    if not loaded.requests:
        if loaded.skipped:  # one line, not a list of warnings followed by the error
            _fail(f"{file} has no valid requests: {plural(loaded.skipped_count, 'bad line')} skipped, the first "
                  f"{loaded.skipped[0]}")
        _fail(f"{file} has no valid requests")
    template = ReplayConfig(capacity_tokens=capacity_tokens, page_tokens=page_tokens, with_output=with_output,
                            concurrency=concurrency, prefill_ms_per_token=prefill_ms_per_token,
                            decode_ms_per_token=decode_ms_per_token)
    configs = _choices(policy_text, design_text, use_base, do_sweep, template)
    config = configs[0]  # a hash replay converts too: the language has `cache hash`
    show_progress = not no_progress and sys.stderr.isatty()
    requests = loaded.requests
    try:
        for choice in configs:
            check_design(choice)
        if do_sweep:
            check_sweep_size(requests, configs, sweep_capacities())
        else:
            check_replay_size(requests, config)
    except ReplayTooLarge as error:
        _fail(f"{file}: {error}")
    except ValueError as error:  # a design kvcore cannot build
        _fail(str(error))
    if loaded.skipped and not as_json and to_kvs is None:  # warnings only once nothing will refuse the run
        _report_skipped(loaded)
    if ui:
        source = click.get_current_context().get_parameter_source("capacity_tokens")
        _open_in_ui(loaded, requests, config, default_capacity=source is click.core.ParameterSource.DEFAULT)
        return
    if to_kvs is not None:
        try:
            scenario = trace_to_scenario(requests, config, source=loaded.name)
        except ValueError as error:
            _fail(f"cannot convert {file}: {error}")
        to_stdout = str(to_kvs) == "-"  # never a file named "-"
        try:
            if to_stdout:
                sys.stdout.write(scenario.text)
            else:
                write_text_atomic(to_kvs, scenario.text, inputs=[file])
        except ValueError as error:  # the trace was moved under the output's name since the check
            _fail(str(error))
        except OSError as error:
            _fail(f"cannot write {to_kvs}: {error.strerror or error}")
        if loaded.skipped and not as_json:  # only now: a refused conversion is one error line
            _report_skipped(loaded)
        written = "the scenario to stdout" if to_stdout else str(to_kvs)
        message = {"scenario": str(to_kvs), "requests": len(requests), "ops": scenario.ops,
                   "result": scenario.result.to_dict()}
        if as_json:
            click.echo(json.dumps(message, indent=2), err=to_stdout)
        else:
            click.echo(f"wrote {written}: {plural(len(requests), 'request')}, {plural(scenario.ops, 'op')} "
                       f"(token hit rate {percent(scenario.result.token_hit_rate)})", err=to_stdout)
        return
    reuse = prefix_reuse(requests, block_tokens=page_tokens)
    console = stdout_console()
    if do_sweep:
        source = TraceSource.of(file, requests, block_tokens=page_tokens, on_error=on_error, first=first,
                                tokenizer=tokenizer_path)
        try:
            _print_sweep(loaded, reuse, requests, configs, show_progress, as_json, console, source, workers,
                         replay_all)
        except TraceChanged as error:
            _fail(str(error))
        except SweepWorkerFailed as error:
            raise click.ClickException(str(error)) from None
        return
    with _progress(show_progress, len(requests), "replaying") as progress:
        result = replay(requests, config, progress=progress)
    if as_json:
        click.echo(json.dumps({"trace": _trace_json(loaded, reuse), "result": _with_misses(requests, result, {})},
                              indent=2))
        return
    console.print(_summary_table(loaded, reuse, result, requests))


def _print_sweep(loaded: Trace, reuse: PrefixReuse, requests, configs: Sequence[ReplayConfig], show_progress: bool,
                 as_json: bool, console, source: TraceSource, workers: int | None,
                 replay_all: bool = False) -> None:
    """Replay every choice at every capacity; print one table and one plot (or JSON).

    One choice prints as the sweep always has (its table of every figure, its plot, and JSON
    with ``sweep`` and ``unlimited``); several print a hit-rate column and a curve each, and
    JSON gains ``choices``: one entry per choice with its ``design``, ``policy``, ``sweep``
    and ``unlimited``. The replays run on a process pool (``workers``); the output is the same
    whatever the number of processes, but for the time column and ``wall_seconds``. An LRU
    curve (trie lru, hash) is also drawn as a continuous line from one pass of stack
    distances (:mod:`kvviz.trace.stack_distance`), where that pass is exact, and its rows
    there are read off that pass instead of replayed (``replay_all`` replays them): marked
    ``*`` in the tables, with ``source: "one-pass"`` in JSON (``"replay"`` for the others).
    """
    capacities = sweep_capacities()
    total = len(requests) * sweep_replay_count(requests, configs, capacities, replay_all=replay_all)
    with _progress(show_progress, total, "sweeping capacities") as progress:
        curves = sweep_choices(requests, configs, capacities, progress=progress, source=source, workers=workers,
                               lines=not as_json, replay_all=replay_all)
    known: dict = {}  # the trace's capacity-free miss classes, once per page size and order
    if as_json:
        data = {"trace": _trace_json(loaded, reuse)}
        if len(curves) == 1:
            data.update(sweep=[_with_misses(requests, r, known) for r in curves[0].results],
                        unlimited=_with_misses(requests, curves[0].unlimited, known))
        else:
            data["choices"] = [{"label": choice_label(c.unlimited), "design": c.config.cache,
                                "policy": c.config.policy,
                                "sweep": [_with_misses(requests, r, known) for r in c.results],
                                "unlimited": _with_misses(requests, c.unlimited, known)} for c in curves]
        click.echo(json.dumps(data, indent=2))
        return
    if len(curves) == 1:
        console.print(_sweep_table(loaded, curves[0].results, curves[0].unlimited))
        _print_misses(console, requests, curves, known)
        console.print()
        # Plain text through click: no Rich markup or wrapping may touch the plot.
        click.echo(hit_rate_plot(curves[0].results, curves[0].unlimited, line=curves[0].line))
        return
    # The title on a line of its own: as the table's title it wrapped into the narrow table.
    console.print(Text(_choices_title(loaded, curves), style="italic"), no_wrap=True, overflow="ellipsis")
    console.print(_choices_table(loaded, curves))
    _print_misses(console, requests, curves, known)
    console.print()
    click.echo(hit_rate_curves([Curve(choice_label(c.unlimited), c.results, c.unlimited, c.line) for c in curves]))


def _print_misses(console, requests, curves, known: dict) -> None:
    """A miss-breakdown table per choice of the sweep (none for the base cache)."""
    for curve in curves:
        if curve.unlimited.cache != BASE:
            console.print()
            console.print(_misses_table(f"Why prompt tokens missed: {choice_label(curve.unlimited)}", requests,
                                        (*curve.results, curve.unlimited), known))


UI_DEFAULT_REQUESTS = 1000


def ui_capacity(requests: Sequence[TraceRequest], config: ReplayConfig) -> int:
    """The UI's default capacity in tokens: half the excerpt's distinct blocks, and at least
    the largest request (so that every request fits).

    An unlimited cache never evicts, so the timeline would have no eviction to step to (``]``
    finds nothing). Every distinct block is published once, so a cache of half of them must
    evict; the first 1,000 conversation requests then hit 17.7% instead of 21.6%.
    """
    half = prefix_reuse(requests, block_tokens=config.page_tokens).distinct_blocks // 2
    largest = max(len(r.hash_ids) + (output_blocks(r, config.page_tokens) if config.with_output else 0)
                  for r in requests)
    return max(half, largest, 1) * config.page_tokens


def _open_in_ui(loaded: Trace, requests, config: ReplayConfig, *, default_capacity: bool) -> None:
    """Open the replay of ``requests`` as a timeline in the UI (frames are built lazily)."""
    from kvviz.core.session import Session

    note = ""
    if default_capacity:
        config = replace(config, capacity_tokens=ui_capacity(requests, config))
        note = ("The capacity is the UI's default, half the excerpt's distinct blocks (at least its largest "
                "request), so that pages are evicted; --capacity-tokens sets another.")
    with collector_paused():  # until the app settles the heap, once its first frame is painted
        try:
            converted = trace_to_scenario(requests, config, source=loaded.name, note=note)
        except ValueError as error:
            _fail(f"cannot open {loaded.path} in the UI: {error}")
        session = Session.from_scenario(converted.scenario, lazy=True, units=converted.units)
        # What was built holds no garbage cycles (the conversion's replayed cache broke its
        # own): frozen as it is, the collection when the app settles skips its ~270,000 objects.
        freeze_heap()
        launch_ui(session)


def _report_skipped(loaded: Trace) -> None:
    skipped = loaded.skipped
    click.echo(f"kvviz: warning: skipped {plural(loaded.skipped_count, 'bad line')} in {loaded.path}:", err=True)
    for problem in skipped[:_SKIPPED_SHOWN]:
        click.echo(f"  {problem}", err=True)
    if loaded.skipped_count > _SKIPPED_SHOWN:
        listed = ("--json lists them all" if loaded.skipped_count == len(skipped)
                  else f"--json lists the first {len(skipped):,}")
        click.echo(f"  ... and {loaded.skipped_count - _SKIPPED_SHOWN:,} more ({listed})", err=True)
