# SPDX-License-Identifier: Apache-2.0
"""Turn a slice of a trace into a scenario file (the kvviz scenario language).

The scenario is the exact op sequence the replay applied (same config, same order), so
opening it in kvviz reproduces the replay step by step: a trace excerpt becomes a demo or
a bug report. It is also a test: each acquire carries ``expect hit`` (and ``expect
evictions`` when it evicted), so ``kvviz check FILE`` verifies that the cache still does
what the replay measured. What is written::

    # comments: source, mapping, timing model
    title: ...
    description: ...
    cache trie pages=N tokens_per_page=1      (the replay's design: cache hash for --design hash)

    > q0001 arrives at 0.000 s (trace line 1): 6,758 prompt tokens in 14 blocks, ...
    acquire q0001 0..13 extra=1
    expect hit q0001 0
    publish q0001
    release q0001

Tokens are the requests' hash ids (one token = one 512-token block, see
:mod:`kvviz.trace.replay`); runs of consecutive ids are written as ranges ``a..b``. A request
that does not fit is an acquire with ``expect fail alloc``: it fails and changes nothing, in
the scenario as in the replay. The text comes from :func:`kvviz.core.scenario.format_scenario`,
the language's canonical writer, and :attr:`TraceScenario.scenario` is that text parsed back:
what ``--ui`` opens is exactly what ``--to-kvs`` writes and ``kvviz check`` reads, with every
op's and expect's canonical text (what the UI shows for a step) and every limit of the
language checked, so a slice the language would refuse is refused here, not by ``check``.

Units: the cache counts in blocks. The title starts with "1 page = 1 block of 512 tokens"
(shown wherever the scenario's title is), and :data:`TraceScenario.units` is the
:class:`~kvviz.core.narrate.Units` that narrates in blocks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvviz.core.limits import MAX_PAGES, MAX_SOURCE_BYTES
from kvviz.core.narrate import Units
from kvviz.core.scenario import CacheConfig, Expect, Op, Scenario, ScenarioError, Step, format_scenario, parse_scenario
from kvviz.core.mooncake import TraceRequest
from kvviz.trace.replay import OpRecord, ReplayConfig, ReplayResult, capacity_pages, replay, unlimited_pages
from kvviz.core.words import count as plural

__all__ = ["TraceScenario", "trace_to_scenario"]


@dataclass(frozen=True)
class TraceScenario:
    """A converted slice: the scenario (its text parsed back), its text, the replay it was
    recorded from, and the units its narration speaks in (blocks of the trace's size)."""

    scenario: Scenario
    text: str
    result: ReplayResult
    units: Units

    @property
    def ops(self) -> int:
        """Number of ops (steps) in the scenario, failed acquires included."""
        return len(self.scenario.steps)


def _seconds(time_ms: float) -> str:
    return f"{time_ms / 1000:,.3f} s"


def _first_seen(requests: Sequence[TraceRequest]) -> dict[str, tuple[int, str | None]]:
    """Per request (in replay order): leading blocks seen in an earlier request, and which
    request first had that prefix.

    Trace facts, independent of the cache: the narration says what *could* be shared; the
    ``expect hit`` line says what the cache actually matched.
    """
    children: dict[tuple[int, int], tuple[int, str]] = {}
    facts: dict[str, tuple[int, str | None]] = {}
    for request in requests:
        name = request.name  # a property that formats the name: once per request, not per block
        node, owner, matched = 0, None, 0
        for hash_id in request.hash_ids:
            entry = children.get((node, hash_id))
            if entry is None:
                break
            (node, owner), matched = entry, matched + 1
        for hash_id in request.hash_ids[matched:]:
            child = len(children) + 1
            children[(node, hash_id)] = (child, name)
            node = child
        facts[name] = (matched, owner)
    return facts


def _arrival(record: OpRecord, seen: dict[str, tuple[int, str | None]]) -> str:
    request = record.request
    matched, owner = seen[request.name]
    if matched == 0:
        shared = "no prefix seen before"
    elif matched == 1:
        shared = f"its first block was first seen in {owner}"
    else:
        shared = f"its first {matched:,} blocks were first seen in {owner}"
    output = f"{request.output_length:,} output tokens"
    if record.extra_blocks:
        output += f" (+{plural(record.extra_blocks, 'block')})"
    return (f"{request.name} arrives at {_seconds(record.time_ms)} (trace line {request.line}): "
            f"{request.input_length:,} prompt tokens in {plural(len(request.hash_ids), 'block')}, "
            f"{output}; {shared}.")


def trace_to_scenario(
    requests: Sequence[TraceRequest],
    config: ReplayConfig = ReplayConfig(),
    *,
    source: str = "a Mooncake trace",
    note: str = "",
) -> TraceScenario:
    """Replay ``requests`` with ``config`` and write the ops it applied as a scenario.

    ``source`` names the trace (a file name) in the title; ``note`` ends the description
    (e.g. why this capacity). O(total blocks).
    """
    needed = unlimited_pages(requests, config)
    if config.capacity_tokens is None:
        pages = needed
        capacity = f"unlimited capacity ({plural(pages, 'page')}: every block of the excerpt)"
    else:
        pages = capacity_pages(config.capacity_tokens, config.page_tokens)
        capacity = (f"{plural(config.capacity_tokens, 'token')} = {plural(pages, 'page')} of "
                    f"{config.page_tokens} tokens")
    notes = []
    if pages > needed:
        # Pages beyond every block of the slice are never taken (the free list is FIFO), so
        # the smaller pool behaves identically and stays within the language's page limit.
        notes.append(f"# The cache is written with {plural(needed, 'page')}: the excerpt never uses more, "
                     f"so it behaves exactly like {pages:,}.")
        pages = needed
    if pages > MAX_PAGES:
        raise ValueError(f"the excerpt needs {pages:,} pages; a scenario holds at most {MAX_PAGES:,}: "
                         "take fewer requests")
    # The replay's order: file order, or arrival order (stable) with concurrency.
    seen = _first_seen(sorted(requests, key=lambda r: r.timestamp) if config.concurrency else requests)
    steps: list[Step] = []

    def record(entry: OpRecord) -> None:
        request = entry.request
        name = request.name
        if entry.op in ("acquire", "fail"):
            op = Op("acquire", name, request.hash_ids, entry.extra_blocks)
            narration = _arrival(entry, seen)
            if entry.op == "fail":
                need = len(request.hash_ids) + entry.extra_blocks
                narration += (f" It needs up to {plural(need, 'page')} and does not fit: the acquire fails and "
                              "changes nothing.")
                expects = (Expect("fail", detail="alloc"),)
            else:
                matched = entry.matched_blocks
                if matched < seen[name][0]:
                    narration += (f" The cache matches {matched:,} of them "
                                  "(the others were evicted or are not published yet).")
                if matched:  # the hit in the trace's units, as the replay counts it
                    hit = min(matched * config.page_tokens, request.input_length)
                    narration += (f" From the cache: {matched:,} of {plural(len(request.hash_ids), 'block')}, "
                                  f"{hit:,} of its {request.input_length:,} prompt tokens.")
                expects = (Expect("hit", name, (entry.matched_blocks,)),)
                if entry.evicted_pages:
                    expects += (Expect("evictions", values=(entry.evicted_pages,)),)
            steps.append(Step(op, narration, expects))
        elif entry.op == "publish":
            narration = (f"{name} finishes prefill at {_seconds(entry.time_ms)}: its pages become shared."
                         if config.concurrency else "")
            steps.append(Step(Op("publish", name, None), narration))
        else:
            narration = (f"{name} finishes decoding at {_seconds(entry.time_ms)}: its pages are released."
                         if config.concurrency else "")
            steps.append(Step(Op("release", name, None), narration))

    result = replay(requests, config, recorder=record)
    first_number = requests[0].index + 1 if requests else 1
    last_number = requests[-1].index + 1 if requests else 0
    mode = "overlapping by arrival time" if config.concurrency else "one at a time"
    drafted = Scenario(
        # The units first: a header that truncates the title still says what a page is.
        title=f"{source}: 1 page = 1 block of {config.page_tokens} tokens, requests {first_number}-{last_number}",
        description=(f"{plural(len(requests), 'request')} of a Mooncake trace, replayed {mode} on a "
                     f"{config.cache} cache with {capacity}: token hit rate {result.token_hit_rate:.1%}, "
                     f"{plural(result.pages_evicted, 'page')} evicted, {result.failed_to_fit:,} failed to fit."
                     + (f" {note}" if note else "")),
        config=CacheConfig(config.cache, max(pages, 1), 1),
        steps=tuple(steps),
    )
    comments = [
        f"# Excerpt of {source} (requests {first_number}..{last_number}), converted by `kvviz trace --to-kvs`.",
        f"# One token = one {config.page_tokens}-token block of a prompt. Tokens are the trace's hash ids,",
        "# chained prefix hashes: requests share pages exactly as far as their prompts share a prefix.",
        "# `expect hit` counts matched blocks (tokens of this cache), as the replay measured them.",
    ]
    if config.concurrency:
        comments.append(
            f"# Timing model: prefill {config.prefill_ms_per_token:g} ms per uncached prompt token, "
            f"decode {config.decode_ms_per_token:g} ms per output token.")
    text = "\n".join(comments + notes) + "\n" + format_scenario(drafted)
    size = len(text.encode("utf-8"))
    if size > MAX_SOURCE_BYTES:  # said here, in the trace's terms, rather than as a parse error
        raise ValueError(f"the scenario for {plural(len(requests), 'request')} would be {size:,} bytes; kvviz "
                         f"reads scenarios of at most {MAX_SOURCE_BYTES:,}: take fewer requests (--first N)")
    try:
        scenario = parse_scenario(text)
    except ScenarioError as error:  # a limit of the language (tokens per op, extra=, ...)
        raise ValueError(f"the scenario would not read back (line {error.line}: {error.message}): "
                         "take fewer requests") from None
    return TraceScenario(scenario, text, result, Units(config.page_tokens))
