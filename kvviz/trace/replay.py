# SPDX-License-Identifier: Apache-2.0
"""Replay a Mooncake trace through a kvcore cache and measure what prefix caching saves.

Mapping. Each hash id is one block of ``page_tokens`` (512) prompt tokens, and one block is
one cache page. The cache runs with ``tokens_per_page=1`` and the request's *hash ids are its
tokens*: because the ids are chained prefix hashes, two requests match in the trie exactly
as far as their prompts share a prefix, and one kvcore token stands for one 512-token page.
Capacity in pages is ``capacity_tokens // page_tokens``; kvcore's pool costs memory only for
the pages used, so any capacity up to ``MAX_CAPACITY_TOKENS`` costs what the trace uses (the
first 200 conversation requests peak at 27 MB at 3M, 1e12 and 1e15 tokens alike). A request's hit is
``matched pages x page_tokens``, capped at its input length (its last block is usually
partial). The partial last block is published like the others: its hash id names it
exactly, and this is what the trace's own prefix-reuse ratio counts.

Sequential replay (the default) takes the requests in file order; for each one: acquire
its blocks (plus output blocks with ``with_output``), publish, release. Only one request is
live at a time, so eviction pressure comes from the cached prefixes alone.

Concurrent replay (``concurrency=True``) models overlapping requests (see
:class:`ReplayConfig` for the timing model): a request acquires at its arrival timestamp,
publishes when its prefill is done and releases when its decode is done, so the pages of
in-flight requests are held (not evictable) while later requests arrive. At equal times,
releases come before publishes and publishes before acquires.

A request that cannot get its pages (``CacheAllocationFailure``: not enough free plus
evictable pages) is counted as *failed to fit*, gets no hit, and is dropped: the cache is
unchanged (kvcore guarantees a failed operation changes nothing). Its input tokens still
count in the hit rate's denominator, so the hit rate is "prefill saved over all requests".
"""

from __future__ import annotations

import gc
import hashlib
import heapq
import math
import os
import stat
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace

import kvcore
from kvcore import POLICIES, BasePagedAttentionCache, CacheAllocationFailure, PagePool, TriePagedAttentionCache

from kvviz.core.designs import BASE, HASH, TRIE, DesignKind
from kvviz.core.limits import MAX_CAPACITY_TOKENS, MAX_SWEEP_BLOCKS, MAX_TRACE_BLOCKS
from kvviz.core.mooncake import DEFAULT_BLOCK_TOKENS, TraceRequest, read_trace
from kvviz.trace.stack_distance import STACK_DESIGNS, LruCurve, lru_curve

__all__ = [
    "DEFAULT_DECODE_MS_PER_TOKEN",
    "DEFAULT_PREFILL_MS_PER_TOKEN",
    "DESIGNS",
    "OpRecord",
    "OpRecorder",
    "POLICIES",
    "ReplayConfig",
    "ReplayResult",
    "ReplayTooLarge",
    "SweepCurve",
    "SweepWorkerFailed",
    "TraceChanged",
    "TraceSource",
    "capacity_pages",
    "has_lru_line",
    "ONE_PASS",
    "from_one_pass",
    "check_design",
    "check_replay_size",
    "check_sweep_size",
    "output_blocks",
    "replay",
    "sweep",
    "sweep_capacities",
    "sweep_choices",
    "sweep_replay_count",
    "sweep_workers",
    "trace_fingerprint",
    "unlimited_pages",
]

DEFAULT_PREFILL_MS_PER_TOKEN = 0.1
"""Prefill cost per *uncached* prompt token: 0.1 ms, i.e. 10,000 tokens/s per request."""

DEFAULT_DECODE_MS_PER_TOKEN = 30.0
"""Decode cost per output token: 30 ms, a typical time between tokens for a large model."""

DESIGNS = (TRIE, HASH)
"""The designs ``--design`` chooses: SGLang's radix trie, vLLM's hash blocks (chained block hashes
and one free queue; ``kvcore.make_cache(HASH, ...)``). The base cache (``--base``) shares nothing."""

_CACHE_KINDS = (*DESIGNS, BASE)

@dataclass(frozen=True, slots=True)
class OpRecord:
    """One op the replay applied, for the scenario converter and tests.

    ``op`` is ``acquire``, ``publish``, ``release`` or ``fail`` (an acquire that did not fit;
    the cache is unchanged). ``time_ms`` is the modelled time of the op (the arrival time in
    sequential replay). For an acquire, ``matched_blocks`` is what the trie matched and
    ``evicted_pages`` how many pages it evicted; both are 0 for the other ops.
    """

    op: str
    request: TraceRequest
    extra_blocks: int
    time_ms: float
    matched_blocks: int = 0
    evicted_pages: int = 0


OpRecorder = Callable[[OpRecord], None]
"""Called with each :class:`OpRecord`, in the order the ops were applied."""

ProgressCallback = Callable[[int], None]
"""``progress(requests_done)``, called every few hundred requests and once at the end."""

_PROGRESS_EVERY = 500


@dataclass(frozen=True, slots=True)
class ReplayConfig:
    """How to replay a trace.

    ``capacity_tokens=None`` means unlimited: enough pages that nothing is ever evicted.
    With ``concurrency``, a request's pages are held from its arrival (``timestamp``, ms)
    for ``prefill_ms_per_token x (input_length - hit tokens)`` (prefill computes only
    what the cache missed) and then ``decode_ms_per_token x output_length`` (decode).
    The pages are published at the end of prefill and released at the end of decode.
    ``policy`` is the trie's eviction policy (kvcore's ``POLICIES``); the base cache never
    evicts and the hash design evicts by its free queue: both take only ``lru``, the default.
    """

    capacity_tokens: int | None = None
    page_tokens: int = DEFAULT_BLOCK_TOKENS
    cache: DesignKind = TRIE
    with_output: bool = False
    concurrency: bool = False
    prefill_ms_per_token: float = DEFAULT_PREFILL_MS_PER_TOKEN
    decode_ms_per_token: float = DEFAULT_DECODE_MS_PER_TOKEN
    policy: str = "lru"

    def __post_init__(self) -> None:
        capacity = self.capacity_tokens
        if capacity is not None and not 0 <= capacity <= MAX_CAPACITY_TOKENS:
            raise ValueError(f"capacity_tokens must be from 0 to {MAX_CAPACITY_TOKENS:,}, not {capacity:,}")
        if self.page_tokens < 1:
            raise ValueError(f"page_tokens must be at least 1, not {self.page_tokens}")
        if self.cache not in _CACHE_KINDS:
            raise ValueError(f"cache must be one of {', '.join(map(repr, _CACHE_KINDS))}, not {self.cache!r}")
        if self.policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}, not {self.policy!r}")
        if self.cache != TRIE and self.policy != "lru":
            raise ValueError(f"policy orders the trie's evictions; the {self.cache} cache takes none, "
                             f"not {self.policy!r}")
        for name in ("prefill_ms_per_token", "decode_ms_per_token"):
            value = getattr(self, name)
            # NaN passes `< 0`, and NaN or infinite durations make every figure meaningless.
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number of milliseconds, at least 0, not {value}")


class ReplayTooLarge(ValueError):
    """The requests hold more blocks (outputs included, with ``with_output``) than
    ``MAX_TRACE_BLOCKS``: raised by :func:`check_replay_size` before any work."""


@dataclass(frozen=True, slots=True)
class ReplayResult:
    """What one replay measured. Token figures are prompt tokens of the trace.

    ``peak_pages_held`` is the largest number of distinct pages referenced by live requests
    at once (pages eviction cannot touch); cached-but-unreferenced pages are not held.
    """

    cache: str
    capacity_tokens: int | None
    page_count: int
    page_tokens: int
    with_output: bool
    concurrency: bool
    requests: int
    served: int
    failed_to_fit: int
    input_tokens: int
    hit_tokens: int
    pages_evicted: int
    peak_pages_held: int
    peak_live_requests: int
    wall_seconds: float
    prefill_ms_per_token: float | None = None
    """The timing model of a concurrent replay (None for sequential)."""
    decode_ms_per_token: float | None = None
    policy: str = "lru"
    """The trie's eviction policy ("lru" for the base cache, which never evicts, and the hash design)."""
    source: str = "replay"
    """Where the figures come from: ``"replay"`` (this capacity replayed through kvcore) or
    ``"one-pass"`` (a sweep's row read off the one-pass LRU curve where it is exact, see
    :func:`sweep_choices`; no replay ran, so ``wall_seconds`` is 0.0)."""

    @property
    def token_hit_rate(self) -> float:
        """Hit tokens / input tokens of all replayed requests (0.0 when there are none)."""
        return self.hit_tokens / self.input_tokens if self.input_tokens else 0.0

    @property
    def requests_per_second(self) -> float:
        """Replay speed (requests / wall seconds)."""
        return self.requests / self.wall_seconds if self.wall_seconds > 0 else math.inf

    def to_dict(self) -> dict:
        """A JSON-able dict: the fields plus ``token_hit_rate``."""
        data = asdict(self)
        data["token_hit_rate"] = self.token_hit_rate
        return data


def capacity_pages(capacity_tokens: int, page_tokens: int = DEFAULT_BLOCK_TOKENS) -> int:
    """Pages that fit in ``capacity_tokens`` (whole pages only)."""
    return capacity_tokens // page_tokens


def output_blocks(request: TraceRequest, page_tokens: int = DEFAULT_BLOCK_TOKENS) -> int:
    """Blocks the output needs beyond the prompt's: the output first fills the partial last block."""
    return -(-(request.input_length + request.output_length) // page_tokens) - len(request.hash_ids)


def unlimited_pages(requests: Sequence[TraceRequest], config: ReplayConfig) -> int:
    """A page count that never runs out for these requests: every block of every request."""
    total = sum(len(r.hash_ids) for r in requests)
    if config.with_output:
        total += sum(output_blocks(r, config.page_tokens) for r in requests)
    return total


def check_replay_size(requests: Sequence[TraceRequest], config: ReplayConfig) -> int:
    """The blocks a replay of ``requests`` handles (its largest pool); raises
    :class:`ReplayTooLarge` beyond ``MAX_TRACE_BLOCKS``. O(requests)."""
    blocks = unlimited_pages(requests, config)
    if blocks > MAX_TRACE_BLOCKS:
        held = "prompt and output" if config.with_output else "prompt"
        who = "the request holds" if len(requests) == 1 else f"the {len(requests):,} requests hold"
        raise ReplayTooLarge(f"{who} {blocks:,} {held} blocks of {config.page_tokens} tokens; kvviz replays at "
                             f"most {MAX_TRACE_BLOCKS:,}: take fewer requests (--first N)"
                             + (" or drop --with-output" if config.with_output else ""))
    return blocks


def sweep_capacities(low: int = 10**4, high: int = 10**9, steps_per_decade: int = 2) -> tuple[int, ...]:
    """Log-spaced capacities in tokens from ``low`` to ``high``, rounded to integers.

    The default (two steps per decade) gives 10^4, 3.2x10^4, 10^5, ... 10^9: 11 points.
    """
    if low < 1 or high < low or steps_per_decade < 1:
        raise ValueError("need 1 <= low <= high and steps_per_decade >= 1")
    start = math.log10(low)
    steps = round((math.log10(high) - start) * steps_per_decade)
    return tuple(round(10 ** (start + i / steps_per_decade)) for i in range(steps + 1))


def _make_cache(config: ReplayConfig, page_count: int):
    if config.cache == TRIE:
        return TriePagedAttentionCache(PagePool(page_count), 1, config.policy)
    if config.cache == BASE:
        return BasePagedAttentionCache(PagePool(page_count), 1)
    return kvcore.make_cache(config.cache, page_count, 1, config.policy)


def check_design(config: ReplayConfig) -> None:
    """Raise ``ValueError`` (its message for people) when kvcore cannot build ``config``'s cache,
    before any work: a one-page probe (the hash design, while kvcore does not have it)."""
    try:
        _make_cache(config, 1)
    except kvcore.KVCacheError as error:
        raise ValueError(f"kvcore cannot build a {config.cache} cache: {error}") from None


def replay(
    requests: Sequence[TraceRequest],
    config: ReplayConfig = ReplayConfig(),
    *,
    progress: ProgressCallback | None = None,
    recorder: OpRecorder | None = None,
) -> ReplayResult:
    """Replay ``requests`` through a fresh cache and return the measurements.

    O(total blocks + evictions x log candidates) on the trie cache, and memory for the pages
    used whatever the capacity. Raises :class:`ReplayTooLarge` (before any work) for more than
    ``MAX_TRACE_BLOCKS`` blocks.
    """
    blocks = check_replay_size(requests, config)
    if config.capacity_tokens is None:
        page_count = blocks
    else:
        page_count = capacity_pages(config.capacity_tokens, config.page_tokens)
    run = _replay_concurrent if config.concurrency else _replay_sequential
    # The trie grows to ~10^5 long-lived nodes and nothing becomes garbage before the end, yet
    # CPython's cyclic GC would rescan them on every generation-2 pass: up to 40% of the time
    # at large capacities. Pause it for the replay (and restore the caller's setting).
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        started = time.perf_counter()
        cache = _make_cache(config, page_count)
        counts = run(requests, config, cache, progress, recorder)
        wall = time.perf_counter() - started
    finally:
        if gc_was_enabled:
            gc.enable()
    if progress is not None:
        progress(len(requests))
    served, failed, hit_tokens, evicted, peak_held, peak_live = counts
    if config.cache == HASH:
        # The hash design's free queue holds cached blocks too (eviction is lazy, when a page is
        # taken), so "pages missing beyond the free ones" undercounts: ask the cache itself.
        evicted = cache.snapshot().stats.evictions
    # Freed now by reference counting, not left to the cyclic collector: a process that
    # freezes its heap after converting a trace (trace --ui) would otherwise keep it for good.
    cache.dispose()
    return ReplayResult(
        cache=config.cache,
        capacity_tokens=config.capacity_tokens,
        page_count=page_count,
        page_tokens=config.page_tokens,
        with_output=config.with_output,
        concurrency=config.concurrency,
        requests=len(requests),
        served=served,
        failed_to_fit=failed,
        input_tokens=sum(r.input_length for r in requests),
        hit_tokens=hit_tokens,
        pages_evicted=evicted,
        peak_pages_held=peak_held,
        peak_live_requests=peak_live,
        wall_seconds=wall,
        prefill_ms_per_token=config.prefill_ms_per_token if config.concurrency else None,
        decode_ms_per_token=config.decode_ms_per_token if config.concurrency else None,
        policy=config.policy if config.cache == TRIE else "lru",
    )


def check_sweep_size(requests: Sequence[TraceRequest], configs: Sequence[ReplayConfig],
                     capacities: Sequence[int]) -> int:
    """The blocks a sweep of ``configs`` (one curve each) over ``capacities`` and unlimited
    replays in all; raises :class:`ReplayTooLarge` beyond ``MAX_SWEEP_BLOCKS`` (before any
    work: every replay costs about its blocks' time). O(requests)."""
    per_replay = max((check_replay_size(requests, c) for c in configs), default=0)
    replays = len(configs) * (len(capacities) + 1)
    total = per_replay * replays
    if total > MAX_SWEEP_BLOCKS:
        raise ReplayTooLarge(f"a sweep of {len(configs)} choice{'s' if len(configs) != 1 else ''} x "
                             f"{len(capacities) + 1} capacities is {replays:,} replays of {per_replay:,} blocks "
                             f"= {total:,} blocks; kvviz sweeps at most {MAX_SWEEP_BLOCKS:,}: take fewer "
                             f"choices or fewer requests (--first N)")
    return total


@dataclass(frozen=True)
class SweepCurve:
    """One choice of a sweep: its config, one result per capacity and the unlimited result;
    ``line`` its one-pass LRU curve (:mod:`kvviz.trace.stack_distance`) when it was asked for
    and describes this choice (trie lru or hash, sequential, no output pages), else None."""

    config: ReplayConfig
    results: tuple[ReplayResult, ...]
    unlimited: ReplayResult
    line: LruCurve | None = None


def has_lru_line(config: ReplayConfig) -> bool:
    """Whether Mattson's one pass describes ``config``'s replays: LRU on the trie or the hash
    design, sequential, without output pages (see :mod:`kvviz.trace.stack_distance`)."""
    return (config.cache in STACK_DESIGNS and config.policy == "lru" and not config.with_output
            and not config.concurrency)


ONE_PASS = "one-pass"
""":attr:`ReplayResult.source` of a sweep row read off the one-pass LRU curve, not replayed."""


def _largest_request(requests: Sequence[TraceRequest]) -> int:
    """The most blocks one request asks for: where the one-pass curve becomes exact."""
    return max((len(r.hash_ids) for r in requests), default=0)


def _from_line(config: ReplayConfig, capacity: int | None, largest: int, replay_all: bool) -> bool:
    """Whether a sweep takes ``config`` at ``capacity`` (None: unlimited) from the one-pass
    curve instead of replaying it: an LRU choice the pass describes, at a capacity of at
    least the largest request (and at least one page), unless ``replay_all``."""
    if replay_all or not has_lru_line(config):
        return False
    if capacity is None:  # every block of every request: at least the largest request
        return largest >= 1
    pages = capacity_pages(capacity, config.page_tokens)
    return pages >= largest and pages >= 1


def sweep_replay_count(requests: Sequence[TraceRequest], configs: Sequence[ReplayConfig],
                       capacities: Sequence[int], *, replay_all: bool = False) -> int:
    """The replays :func:`sweep_choices` runs (the rows it does not take from the one-pass
    curve): what its ``progress`` counts up to, in requests, times ``len(requests)``."""
    largest = _largest_request(requests)
    return sum(not _from_line(config, capacity, largest, replay_all)
               for config in configs for capacity in (*capacities, None))


def from_one_pass(line: LruCurve, requests: Sequence[TraceRequest], config: ReplayConfig) -> ReplayResult:
    """The :class:`ReplayResult` a sequential replay of ``requests`` under ``config`` (an LRU
    choice, :func:`has_lru_line`) measures, read off ``line`` (their one-pass curve) with
    ``source`` :data:`ONE_PASS`. Raises ``ValueError`` where the curve is not exact (below
    the largest request).

    Every figure is the replay's: at a capacity of at least the largest request every request
    fits (none fails, all are served), hit tokens and pages evicted are the curve's, the peak
    held is the largest request's blocks (one request live at a time, no output pages) and
    at most one request is live. Only ``wall_seconds`` is not: no replay ran (0.0)."""
    if not has_lru_line(config):
        raise ValueError(f"the one-pass LRU curve does not describe a {config.cache} {config.policy} replay "
                         f"(with output pages or concurrency)")
    if line.page_tokens != config.page_tokens or line.requests != len(requests):
        raise ValueError("the one-pass curve was computed from other requests or another page size")
    if config.capacity_tokens is None:
        page_count = unlimited_pages(requests, config)
    else:
        page_count = capacity_pages(config.capacity_tokens, config.page_tokens)
    hit_tokens = line.hit_tokens(page_count)  # raises below the bound
    return ReplayResult(
        cache=config.cache,
        capacity_tokens=config.capacity_tokens,
        page_count=page_count,
        page_tokens=config.page_tokens,
        with_output=False,
        concurrency=False,
        requests=len(requests),
        served=len(requests),
        failed_to_fit=0,
        input_tokens=line.input_tokens,
        hit_tokens=hit_tokens,
        pages_evicted=line.pages_evicted(page_count),
        peak_pages_held=line.exact_from_pages if requests else 0,
        peak_live_requests=1 if requests else 0,
        wall_seconds=0.0,
        policy="lru",
        source=ONE_PASS,
    )


@dataclass(frozen=True, slots=True)
class _LineTask:
    """A sweep's task: the one-pass LRU curve at ``page_tokens`` (the same for both designs)."""

    page_tokens: int


class TraceChanged(ValueError):
    """A sweep's worker read other requests from the trace than the caller did (the file was
    replaced or edited while the sweep ran): nothing is reported from a mixture."""


class SweepWorkerFailed(RuntimeError):
    """A sweep's worker process stopped without an answer (killed, out of memory)."""


def trace_fingerprint(requests: Sequence[TraceRequest]) -> str:
    """sha256 of every field of every request, in order: equal for the same requests only.
    O(blocks); about 20 ms of CPU for the conversation trace."""
    digest = hashlib.sha256()
    for r in requests:
        # Every field is an int of at most MAX_NUMBER (the reader refuses larger), so int64.
        fields = array("q", (r.index, r.line, r.timestamp, r.input_length, r.output_length, len(r.hash_ids)))
        fields.extend(r.hash_ids)
        digest.update(fields.tobytes())
    return digest.hexdigest()


@dataclass(frozen=True, slots=True)
class TraceSource:
    """Where a sweep's worker processes read the requests themselves: the trace's path, how
    the caller read it (:func:`kvviz.core.mooncake.read_trace`'s options) and the
    :func:`trace_fingerprint` of what it read. Only this small frozen value crosses to a
    worker, never the requests; a worker that reads anything else raises :class:`TraceChanged`."""

    path: str
    block_tokens: int
    on_error: str
    first: int | None
    fingerprint: str
    tokenizer: str | None = None
    """The tokenizer.json that cut the traffic's ``text`` lines (None: none)."""

    @classmethod
    def of(cls, path: str | os.PathLike[str], requests: Sequence[TraceRequest], *,
           block_tokens: int = DEFAULT_BLOCK_TOKENS, on_error: str = "stop", first: int | None = None,
           tokenizer: str | None = None) -> TraceSource:
        """The source of ``requests``, read from ``path`` with these options (an absolute
        path, so that a worker started elsewhere reads the same file)."""
        return cls(os.path.abspath(os.fspath(path)), block_tokens, on_error, first, trace_fingerprint(requests),
                   None if tokenizer is None else os.path.abspath(tokenizer))

    def rereadable(self) -> bool:
        """Whether workers can read it again: a regular file (a FIFO or a device cannot be
        read twice to the same requests)."""
        try:
            return stat.S_ISREG(os.stat(self.path).st_mode)
        except OSError:
            return False

    def read(self) -> tuple[TraceRequest, ...]:
        """The requests, read again; :class:`TraceChanged` unless they are the caller's."""
        try:
            tokenize = None
            if self.tokenizer is not None:
                from kvviz.core.tokenizer_file import load_tokenizer

                tokenize = load_tokenizer(self.tokenizer).encode
            requests = read_trace(self.path, block_tokens=self.block_tokens, on_error=self.on_error,
                                  first=self.first, tokenize=tokenize).requests
        except OSError as error:  # removed or made unreadable since the caller read it
            raise TraceChanged(f"{self.path} cannot be read again while the sweep runs: "
                               f"{error.strerror or error}; sweep again") from None
        except ValueError as error:  # a line that was valid no longer is (TraceFormatError)
            raise TraceChanged(f"{self.path} changed while the sweep ran: {error}; sweep again") from None
        if trace_fingerprint(requests) != self.fingerprint:
            raise TraceChanged(f"{self.path} changed while the sweep ran: its requests are not the ones read "
                               f"at the start; sweep again")
        return requests


POOL_MIN_BLOCKS = 2_000_000
"""A sweep of fewer blocks (all its replays together) runs in this process: starting workers
(an interpreter each, reading the trace again) costs about a second, what a sweep this small
costs whole."""


def sweep_workers() -> int:
    """The processes a sweep uses by default: every core this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _sweep_tasks(configs: Sequence[ReplayConfig], capacities: Sequence[int], lines: bool, largest: int,
                 replay_all: bool) -> tuple[ReplayConfig | _LineTask, ...]:
    """The one-pass curves first (one per page size: the longest tasks, started first), then
    one replay per choice and capacity, each choice's unlimited one last, leaving out the rows
    taken from a curve: the output's order."""
    wanted = [c for c in configs if has_lru_line(c)
              and (lines or any(_from_line(c, capacity, largest, replay_all) for capacity in (*capacities, None)))]
    line_tasks = dict.fromkeys(_LineTask(c.page_tokens) for c in wanted)
    return (*line_tasks, *(replace(config, capacity_tokens=capacity)
                           for config in configs for capacity in (*capacities, None)
                           if not _from_line(config, capacity, largest, replay_all)))


def _run_task(requests: Sequence[TraceRequest], task: ReplayConfig | _LineTask,
              progress: ProgressCallback | None = None) -> ReplayResult | LruCurve:
    if isinstance(task, _LineTask):
        return lru_curve(requests, page_tokens=task.page_tokens)
    return _replay_and_free(requests, task, progress)


def _replay_and_free(requests: Sequence[TraceRequest], config: ReplayConfig,
                     progress: ProgressCallback | None = None) -> ReplayResult:
    """:func:`replay`, then the cache's memory back before the next replay.

    A trie is a cycle of parent and child links, freed only by the cyclic collector, which
    :func:`replay` pauses; in a sweep of back-to-back replays it would not run between them
    and every trie would stay (the serial sweep of three choices peaked at 516 MB). Collecting
    here keeps one cache at a time per process (it costs up to ~0.9 s after an unlimited
    replay of the conversation trace: freeing 350k objects, paid at exit otherwise)."""
    result = replay(requests, config, progress=progress)
    gc.collect()
    return result


_worker_requests: tuple[TraceSource, tuple[TraceRequest, ...]] | None = None
"""A worker process's requests, read once from its source (one trace per sweep)."""


def _run_in_worker(source: TraceSource, task: ReplayConfig | _LineTask) -> ReplayResult | LruCurve:
    """A sweep's task in a worker process (top level, so any start method imports it)."""
    global _worker_requests
    if _worker_requests is None or _worker_requests[0] != source:
        _worker_requests = None  # the previous trace goes before the next is read
        _worker_requests = (source, source.read())
    return _run_task(_worker_requests[1], task)


def sweep_choices(
    requests: Sequence[TraceRequest],
    configs: Sequence[ReplayConfig],
    capacities: Sequence[int],
    *,
    progress: ProgressCallback | None = None,
    source: TraceSource | None = None,
    workers: int | None = None,
    lines: bool = False,
    replay_all: bool = False,
) -> tuple[SweepCurve, ...]:
    """:func:`sweep` for each of ``configs`` (a policy, a design), each also at unlimited capacity.

    Checks :func:`check_sweep_size` first (every row counted as a replay). ``progress``
    receives the number of requests replayed over the whole sweep (in a pool, as each replay
    ends), up to :func:`sweep_replay_count` times ``len(requests)``.

    The rows of an LRU choice the one-pass curve describes (:func:`has_lru_line`: trie lru
    or hash, sequential, no output pages) at every capacity where it is exact (at least the
    largest request's blocks, and unlimited) are read off that curve (:func:`from_one_pass`,
    ``source`` :data:`ONE_PASS`) instead of replayed: the same figures but ``wall_seconds``
    (tests/trace/test_trace_sweep_one_pass.py checks them equal row by row). ``replay_all``
    replays every row, as the sweep did before. The rows below the bound and every other
    policy are replayed.

    With a ``source`` (where ``requests`` were read from), the tasks run on a process pool
    of ``workers`` processes (default :func:`sweep_workers`, every core), one replay or curve
    per task; each worker reads the trace itself once and keeps one cache at a time, so a
    worker's memory is the trace's plus one replay's. The results are merged in the serial
    order, and every figure but ``wall_seconds`` is the serial sweep's. ``workers=None`` runs
    a sweep replaying fewer than :data:`POOL_MIN_BLOCKS` blocks, or of a source that is not a
    regular file, in this process; ``workers=1`` always does. Raises :class:`TraceChanged`
    when a worker read other requests, :class:`SweepWorkerFailed` when one died. ``lines``
    also computes each LRU choice's one-pass curve (:attr:`SweepCurve.line`) when no row
    needs it (with ``replay_all``); it is computed whenever a row is read off it.
    """
    check_sweep_size(requests, configs, capacities)
    largest = _largest_request(requests)
    tasks = _sweep_tasks(configs, capacities, lines, largest, replay_all)
    if workers is not None and workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    pooled = source is not None and workers != 1 and source.rereadable()
    if workers is None:
        workers = sweep_workers()
        replayed_blocks = sum(check_replay_size(requests, t) for t in tasks if isinstance(t, ReplayConfig))
        pooled = pooled and workers > 1 and replayed_blocks >= POOL_MIN_BLOCKS
    if pooled:
        results = _sweep_pooled(source, tasks, min(workers, len(tasks)), len(requests), progress)
    else:
        results = _sweep_serial(requests, tasks, progress)
    line_of = {task.page_tokens: line for task, line in zip(tasks, results) if isinstance(task, _LineTask)}
    replayed = iter(results[len(line_of):])
    curves = []
    for config in configs:
        line = line_of.get(config.page_tokens) if has_lru_line(config) else None
        line = None if line is None else replace(line, design=config.cache)
        rows = []
        for capacity in (*capacities, None):
            if _from_line(config, capacity, largest, replay_all):
                rows.append(from_one_pass(line, requests, replace(config, capacity_tokens=capacity)))
            else:
                rows.append(next(replayed))
        curves.append(SweepCurve(config, tuple(rows[:-1]), rows[-1], line))
    return tuple(curves)


def _sweep_serial(requests, tasks, progress) -> tuple[ReplayResult | LruCurve, ...]:
    results = []
    replayed = 0
    for task in tasks:
        offset = replayed * len(requests)
        shifted = None if progress is None else (lambda done, offset=offset: progress(offset + done))
        results.append(_run_task(requests, task, shifted))
        replayed += isinstance(task, ReplayConfig)
    return tuple(results)


def _expected_cost(task: ReplayConfig | _LineTask) -> tuple:
    """A sort key, cheapest last: a curve's pass, then the hash design (a sha256 per block),
    then the trie; larger capacities before smaller (more nodes kept, more to walk)."""
    if isinstance(task, _LineTask):
        return (0,)
    capacity = math.inf if task.capacity_tokens is None else task.capacity_tokens
    return (1, task.cache != HASH, -capacity)


def _sweep_pooled(source: TraceSource, tasks, workers: int, request_count: int,
                  progress) -> tuple[ReplayResult | LruCurve, ...]:
    # Imported here: only a sweep needs a process pool (``trace --ui`` opens without them).
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    # spawn: a fresh interpreter per worker, whatever the caller's threads (a progress bar
    # draws from one) and on every platform; the workers import only kvviz.trace and kvcore.
    context = multiprocessing.get_context("spawn")
    results: list[ReplayResult | LruCurve | None] = [None] * len(tasks)
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=context)
    try:
        # Longest first (the curves, the hash design's replays, large capacities), so that the
        # sweep does not end on one long task while the other workers wait.
        order = sorted(range(len(tasks)), key=lambda index: _expected_cost(tasks[index]))
        pending = {pool.submit(_run_in_worker, source, tasks[index]): index for index in order}
        done_count = 0
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            # In task order within a batch, so that progress and errors do not depend on timing.
            for future in sorted(finished, key=pending.__getitem__):
                index = pending.pop(future)
                results[index] = future.result()
                if isinstance(tasks[index], ReplayConfig):
                    done_count += 1
                    if progress is not None:
                        progress(done_count * request_count)
    except BrokenProcessPool as error:
        raise SweepWorkerFailed(f"a sweep worker process stopped without an answer ({error}); "
                                f"sweep again with fewer processes (--workers 1 runs in one)") from None
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return tuple(results)


def _replay_sequential(requests, config, cache, progress, recorder):
    """acquire, publish, release for each request in order. Returns the raw counts."""
    page_tokens = config.page_tokens
    with_output = config.with_output
    acquire = cache.acquire_pages_for_tokens
    available = cache.page_pool.available_page_count
    served = failed = hit_tokens = evicted = peak_held = 0
    for done, request in enumerate(requests, start=1):
        if progress is not None and done % _PROGRESS_EVERY == 0:
            progress(done)
        hash_ids = request.hash_ids
        extra = output_blocks(request, page_tokens) if with_output else 0
        free = available()
        try:
            allocation = acquire(hash_ids, extra)
        except CacheAllocationFailure:
            failed += 1
            if recorder is not None:
                recorder(OpRecord("fail", request, extra, request.timestamp))
            continue
        served += 1
        matched = allocation.hit_tokens  # in kvcore tokens = blocks
        held = len(hash_ids) + extra  # == len(allocation.pages), without copying the tuple
        # kvcore takes free pages first and evicts one node per missing page.
        evicted_now = held - matched - free
        if evicted_now > 0:
            evicted += evicted_now
        if held > peak_held:
            peak_held = held
        hit = matched * page_tokens
        input_length = request.input_length
        hit_tokens += hit if hit < input_length else input_length
        allocation.publish_pages_for_tokens()
        allocation.release_pages()
        if recorder is not None:
            now = request.timestamp
            recorder(OpRecord("acquire", request, extra, now, matched, max(evicted_now, 0)))
            recorder(OpRecord("publish", request, extra, now))
            recorder(OpRecord("release", request, extra, now))
    return served, failed, hit_tokens, evicted, peak_held, 1 if served else 0


# Event kinds, in the order they run at equal times: free pages before anyone needs them.
_RELEASE, _PUBLISH = 0, 1


def _replay_concurrent(requests, config, cache, progress, recorder):
    """Requests overlap by arrival time and hold their pages for a modelled duration."""
    page_tokens = config.page_tokens
    prefill = config.prefill_ms_per_token
    decode = config.decode_ms_per_token
    available = cache.page_pool.available_page_count
    # Arrival order; sorted() is stable, so equal timestamps keep file order.
    arrivals = sorted(requests, key=lambda r: r.timestamp)
    events: list[tuple[float, int, int, object, TraceRequest, int]] = []
    held_refs: dict[int, int] = {}  # page -> live allocations whose block table has it
    served = failed = hit_tokens = evicted = peak_held = peak_live = live = 0
    order = 0

    def hold(pages) -> None:
        for page in pages:
            held_refs[page] = held_refs.get(page, 0) + 1

    def unhold(pages) -> None:
        for page in pages:
            count = held_refs[page] - 1
            if count:
                held_refs[page] = count
            else:
                del held_refs[page]

    def run_until(now: float) -> None:
        nonlocal order, live, peak_held
        while events and events[0][0] <= now:
            when, kind, _, allocation, request, extra = heapq.heappop(events)
            if kind == _PUBLISH:
                before = allocation.pages
                allocation.publish_pages_for_tokens()
                after = allocation.pages
                if after != before:  # dedup: adopted another request's page, own copy freed
                    changed = [i for i in range(len(before)) if before[i] != after[i]]
                    unhold(before[i] for i in changed)
                    hold(after[i] for i in changed)
                    if len(held_refs) > peak_held:
                        peak_held = len(held_refs)
                if recorder is not None:
                    recorder(OpRecord("publish", request, extra, when))
                done_at = when + decode * request.output_length
                order += 1
                heapq.heappush(events, (done_at, _RELEASE, order, allocation, request, extra))
            else:
                unhold(allocation.pages)
                allocation.release_pages()
                live -= 1
                if recorder is not None:
                    recorder(OpRecord("release", request, extra, when))

    for done, request in enumerate(arrivals, start=1):
        if progress is not None and done % _PROGRESS_EVERY == 0:
            progress(done)
        now = request.timestamp
        run_until(now)
        extra = output_blocks(request, page_tokens) if config.with_output else 0
        free = available()
        try:
            allocation = cache.acquire_pages_for_tokens(request.hash_ids, extra)
        except CacheAllocationFailure:
            failed += 1
            if recorder is not None:
                recorder(OpRecord("fail", request, extra, now))
            continue
        served += 1
        live += 1
        if live > peak_live:
            peak_live = live
        matched = allocation.hit_tokens
        evicted_now = max(len(request.hash_ids) + extra - matched - free, 0)
        evicted += evicted_now
        if recorder is not None:
            recorder(OpRecord("acquire", request, extra, now, matched, evicted_now))
        hold(allocation.pages)
        if len(held_refs) > peak_held:
            peak_held = len(held_refs)
        hit = min(matched * page_tokens, request.input_length)
        hit_tokens += hit
        publish_at = now + prefill * (request.input_length - hit)
        order += 1
        heapq.heappush(events, (publish_at, _PUBLISH, order, allocation, request, extra))
    run_until(math.inf)
    return served, failed, hit_tokens, evicted, peak_held, peak_live


def sweep(
    requests: Sequence[TraceRequest],
    config: ReplayConfig,
    capacities: Sequence[int],
    *,
    progress: ProgressCallback | None = None,
) -> tuple[ReplayResult, ...]:
    """One replay per capacity (tokens), other settings from ``config``.

    ``progress`` receives the number of requests replayed over the whole sweep.
    """
    results = []
    for step, capacity in enumerate(capacities):
        offset = step * len(requests)
        step_progress = None if progress is None else (lambda done, offset=offset: progress(offset + done))
        results.append(replay(requests, replace(config, capacity_tokens=capacity), progress=step_progress))
    return tuple(results)
