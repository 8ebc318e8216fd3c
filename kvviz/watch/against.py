# SPDX-License-Identifier: Apache-2.0
"""Judge a server against the textbook: a KV-event recording beside kvcore running the same requests.

The stream carries no request ids, hits or releases, so a server's stores and removals can only
be judged against a known input: the scenario of the requests that made the recording.
:func:`against` runs that scenario on kvcore's hash-block cache (vLLM's design) and aligns the two
streams batch by batch (batch *i*: message *i* of the recording, request *i*'s ops in the
scenario, counted from 1: batch *i* is step *i* of ``kvviz watch``, where ``--step i`` and ``g`` go) and block by block by **content**, the chain of token tuples from the root
(:class:`~kvviz.watch.to_kvs.BlockContents`), since every engine hashes differently.

A scenario's batches: its ops are cut before each acquire that follows a release, so
``acquire / publish / release`` per request is one batch per request, and
:func:`~kvviz.watch.to_kvs.recording_to_scenario`'s chains of one batch (acquired and
published one after another, released together) stay one batch.

A batch agrees **event for event** when both sides stored and removed the same blocks in the same
order. The report counts agreeing and differing stores and removes (as multisets per batch),
names the first divergence (what the recording stored or removed that kvcore did not, and the
reverse, as token ranges), and compares hit tokens: kvcore's, and the recording's as inferred
from where each batch's first stored chain starts (a batch that stored nothing hit every full
block of its request).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from kvcore import KVCacheError
from kvcore.events import BlockCached, BlockEvicted

from kvviz.backends import BackendError
from kvviz.backends.kvcore_backend import kvcore_backend
from kvviz.core.designs import HASH, design
from kvviz.core.scenario import Scenario, parse_scenario
from kvviz.core.words import count
from kvviz.watch.to_kvs import BlockContents, DecodedBatch, decode_messages

__all__ = ["AgainstReport", "BatchDifference", "against"]

LISTED_BLOCKS = 8
"""Blocks a difference lists per side and kind before saying how many more."""


@dataclass(frozen=True)
class BatchDifference:
    """Where one batch's two streams part: each field lists blocks (as token ranges, at most
    :data:`LISTED_BLOCKS`, then "and N more") that one side stored or removed and the other did
    not; ``order_only`` when both did the same things in another order."""

    batch: int
    """The batch's step: 1 for the first message (``kvviz watch --step N`` shows batch N)."""
    seq: int | None
    stored_only_by_recording: tuple[str, ...] = ()
    stored_only_by_kvcore: tuple[str, ...] = ()
    removed_only_by_recording: tuple[str, ...] = ()
    removed_only_by_kvcore: tuple[str, ...] = ()
    order_only: bool = False
    other: str = "kvcore"
    """What the recording was compared with, in the sentences (the ``*_by_kvcore`` fields are its)."""

    def sentences(self) -> list[str]:
        """The difference in words, one sentence per side and kind."""
        where = f"batch {self.batch}" + (f" (seq {self.seq})" if self.seq is not None else "")
        if self.order_only:
            return [f"{where}: both stored and removed the same blocks, in another order"]
        out = []
        for blocks, who, did, other in (
            (self.stored_only_by_recording, "the recording", "stored", self.other),
            (self.stored_only_by_kvcore, self.other, "stored", "the recording"),
            (self.removed_only_by_recording, "the recording", "removed", self.other),
            (self.removed_only_by_kvcore, self.other, "removed", "the recording"),
        ):
            if blocks:
                out.append(f"{where}: {who} {did} what {other} did not: {'; '.join(blocks)}")
        return out

    def to_dict(self) -> dict:
        """JSON-able."""
        return {"batch": self.batch, "seq": self.seq, "stored_only_by_recording": list(self.stored_only_by_recording),
                "stored_only_by_kvcore": list(self.stored_only_by_kvcore),
                "removed_only_by_recording": list(self.removed_only_by_recording),
                "removed_only_by_kvcore": list(self.removed_only_by_kvcore), "order_only": self.order_only}


@dataclass(frozen=True)
class AgainstReport:
    """What :func:`against` found. Counts are blocks (a BlockStored of 14 hashes is 14 stores)."""

    source: str
    """Where the scenario came from (its file), as given to :func:`against`."""
    scenario_title: str
    pages: int
    tokens_per_page: int
    recompute_last_token: bool
    recording_batches: int
    scenario_batches: int
    batches_agreeing: int
    """Batches compared (the shorter side's count) in which both sides did the same, in order."""
    differing_batches: tuple[int, ...]
    """Their steps (1-based, as the UI numbers batches), as are ``cleared_batches`` and
    ``undecodable_batches``."""
    stores_agreeing: int
    stores_only_by_recording: int
    stores_only_by_kvcore: int
    removes_agreeing: int
    removes_only_by_recording: int
    removes_only_by_kvcore: int
    kvcore_hit_tokens: int
    recording_hit_tokens: int | None
    """Inferred per batch from where its first stored chain starts; None when some batch is not
    one request (several acquires) or its stored chain is not on its request's tokens."""
    first_divergence: BatchDifference | None
    removed_unknown: int = 0
    """Removals of blocks the recording never stored (no content to align them by)."""
    cleared_batches: tuple[int, ...] = ()
    undecodable_batches: tuple[int, ...] = ()
    failed_ops: int = 0
    """Scenario ops kvcore refused (an acquire that did not fit, and the ops on its name)."""
    notes: tuple[str, ...] = field(default=())
    design: str = HASH
    """The design the recording was compared with: ``hash`` (kvcore's hash cache, vLLM's) or
    ``trie`` (a radix cache of pages with LRU leaf eviction, SGLang's)."""
    design_reason: str = ""
    """Why that design: ``--design``, or what in the stream chose it."""

    @property
    def agrees(self) -> bool:
        """Every batch on both sides, event for event, and the same number of batches."""
        return (not self.differing_batches and self.recording_batches == self.scenario_batches
                and not self.cleared_batches and not self.undecodable_batches and not self.removed_unknown)

    def lines(self) -> list[str]:
        """The report for ``--print``, one fact a line."""
        compared = min(self.recording_batches, self.scenario_batches)
        rule = ", recompute_last_token" if self.recompute_last_token else ""
        hits = "unknown" if self.recording_hit_tokens is None else f"{self.recording_hit_tokens:,}"
        scenario = self.source or "the scenario"
        if self.scenario_title:
            scenario += f" ({self.scenario_title})"
        beside = ("kvcore's hash cache (vLLM's design)" if self.design == HASH else
                  "a radix cache of pages, LRU leaf eviction (SGLang's design)")
        other = "kvcore" if self.design == HASH else "the radix model"
        out = [
            f"against {scenario}: the recording's {self.recording_batches:,} batches beside {beside}, "
            f"{count(self.pages, 'page')} of {count(self.tokens_per_page, 'token')}{rule}, "
            f"{self.scenario_batches:,} batches",
            f"design: {self.design}" + (f" ({self.design_reason})" if self.design_reason else ""),
            f"batches agreeing event for event: {self.batches_agreeing:,} of {compared:,}",
            f"stores: {self.stores_agreeing:,} agree, {self.stores_only_by_recording:,} only in the recording, "
            f"{self.stores_only_by_kvcore:,} only in {other}",
            f"removes: {self.removes_agreeing:,} agree, {self.removes_only_by_recording:,} only in the recording, "
            f"{self.removes_only_by_kvcore:,} only in {other}",
            f"hit tokens: {other} {self.kvcore_hit_tokens:,}, the recording {hits} "
            "(inferred from where each batch's stored chain starts)",
        ]
        if self.first_divergence is None:
            out.append("first divergence: none")
        else:
            out.extend(f"first divergence: {sentence}" for sentence in self.first_divergence.sentences())
        if self.recording_batches != self.scenario_batches:
            out.append(f"batch counts differ: the recording has {self.recording_batches:,}, "
                       f"the scenario {self.scenario_batches:,}")
        if self.removed_unknown:
            out.append(f"removals of blocks never stored: {self.removed_unknown:,} (not aligned)")
        if self.cleared_batches:
            out.append(f"AllBlocksCleared in batch{'es' if len(self.cleared_batches) > 1 else ''} "
                       f"{_listed(self.cleared_batches)} (a scenario cannot say it)")
        if self.undecodable_batches:
            out.append(f"undecodable batch{'es' if len(self.undecodable_batches) > 1 else ''}: "
                       f"{_listed(self.undecodable_batches)}")
        if self.failed_ops:
            out.append(f"scenario ops kvcore refused: {self.failed_ops:,}")
        out.extend(self.notes)
        return out

    def to_dict(self) -> dict:
        """JSON-able, for ``--json``."""
        return {
            "source": self.source, "scenario_title": self.scenario_title, "pages": self.pages,
            "tokens_per_page": self.tokens_per_page, "recompute_last_token": self.recompute_last_token,
            "recording_batches": self.recording_batches, "scenario_batches": self.scenario_batches,
            "batches_agreeing": self.batches_agreeing, "differing_batches": list(self.differing_batches),
            "stores": {"agreeing": self.stores_agreeing, "only_by_recording": self.stores_only_by_recording,
                       "only_by_kvcore": self.stores_only_by_kvcore},
            "removes": {"agreeing": self.removes_agreeing, "only_by_recording": self.removes_only_by_recording,
                        "only_by_kvcore": self.removes_only_by_kvcore},
            "hit_tokens": {"kvcore": self.kvcore_hit_tokens, "recording": self.recording_hit_tokens},
            "first_divergence": None if self.first_divergence is None else self.first_divergence.to_dict(),
            "removed_unknown": self.removed_unknown, "cleared_batches": list(self.cleared_batches),
            "undecodable_batches": list(self.undecodable_batches), "failed_ops": self.failed_ops,
            "agrees": self.agrees, "notes": list(self.notes), "design": self.design,
            "design_reason": self.design_reason,
        }


def _listed(values: Sequence[int], most: int = 10) -> str:
    shown = ", ".join(map(str, values[:most]))
    return shown + (f" and {len(values) - most:,} more" if len(values) > most else "")


@dataclass
class _KvcoreBatch:
    events: list[tuple[str, int]] = field(default_factory=list)
    acquires: list[tuple[int, ...]] = field(default_factory=list)  # the tokens of each acquire
    hit_tokens: int = 0


def _run_on_kvcore(scenario: Scenario, contents: BlockContents) -> tuple[list[_KvcoreBatch], int]:
    """The scenario on kvcore, batch by batch: each batch's stores and evictions in content
    terms, its acquires and hits; and how many ops kvcore refused."""
    backend = kvcore_backend(scenario.config, None)
    by_key: dict[str, int] = {}
    batches: list[_KvcoreBatch] = []
    released = True  # so that the first acquire opens batch 0
    failed = 0
    for step in scenario.steps:
        op = step.op
        if op.kind == "acquire" and released:
            batches.append(_KvcoreBatch())
            released = False
        elif op.kind == "release":
            released = True
        if not batches:
            batches.append(_KvcoreBatch())
        batch = batches[-1]
        try:
            backend.apply(op)
        except (KVCacheError, BackendError):
            failed += 1
            backend.take_events()
            continue
        if op.kind == "acquire":
            batch.acquires.append(tuple(op.tokens or ()))
            batch.hit_tokens += backend.allocation(op.name).hit_tokens
        for event in backend.take_events():
            if isinstance(event, BlockCached):
                parent = None if event.parent is None else by_key[event.parent]
                content = contents.block(parent, tuple(event.tokens))
                by_key[event.key] = content
                batch.events.append(("stored", content))
            elif isinstance(event, BlockEvicted):
                batch.events.append(("removed", by_key[event.key]))
    return batches, failed


def _inferred_hit(recorded: DecodedBatch, request: _KvcoreBatch, contents: BlockContents,
                  tokens_per_page: int) -> int | None:
    """Tokens the server's cache hit for the batch's one request: the full blocks before its
    first stored block, or all its full blocks when it stored none; None when that cannot be told."""
    if len(request.acquires) != 1:
        return None if request.acquires else 0
    return _prompt_hit(recorded, contents, request.acquires[0], tokens_per_page)


def _prompt_hit(batch: DecodedBatch, contents: BlockContents, prompt: Sequence[int],
                tokens_per_page: int) -> int | None:
    """Tokens the server matched for ``prompt``, the batch's one request: where its first stored
    block starts (all its full blocks when it stored none); None when that block is not rooted
    or not on the prompt's tokens (kvcore against a scenario, and the radix model, alike)."""
    stored = [content for kind, content in batch.events if kind == "stored"]
    if not stored:
        return len(prompt) // tokens_per_page * tokens_per_page
    first = stored[0]
    if not contents.rooted(first):
        return None
    chain = contents.chain_tokens(first)
    if tuple(prompt[:len(chain)]) != chain:  # the stored chain is not this request's
        return None
    return len(chain) - len(contents.tokens(first))


def _difference(index: int, seq: int | None, recorded: list[tuple[str, int]], computed: list[tuple[str, int]],
                contents: BlockContents) -> BatchDifference:
    only_recording = Counter(recorded) - Counter(computed)
    only_kvcore = Counter(computed) - Counter(recorded)
    if not only_recording and not only_kvcore:
        return BatchDifference(index, seq, order_only=True)

    def described(side: Counter, kind: str) -> tuple[str, ...]:
        # In stream order, each block as often as the side has it beyond the other.
        order = recorded if side is only_recording else computed
        left = Counter({event: n for event, n in side.items() if event[0] == kind})
        blocks = []
        for event in order:
            if left[event] > 0:
                left[event] -= 1
                blocks.append(event[1])
        shown = tuple(contents.describe(content) for content in blocks[:LISTED_BLOCKS])
        return shown + ((f"and {len(blocks) - LISTED_BLOCKS:,} more",) if len(blocks) > LISTED_BLOCKS else ())

    return BatchDifference(index, seq, described(only_recording, "stored"), described(only_kvcore, "stored"),
                           described(only_recording, "removed"), described(only_kvcore, "removed"))


def _tally_events(ours, theirs, stores: list[int], removes: list[int]) -> None:
    """Add one batch's ``stored`` and ``removed`` events to ``stores`` and ``removes``: [in
    both, only in ``ours`` (the recording), only in ``theirs`` (the model run)], each event
    counted as often as it stands (kvcore against a scenario, and the radix model, alike)."""
    for kind, tally in (("stored", stores), ("removed", removes)):
        mine = Counter(e for e in ours if e[0] == kind)
        other = Counter(e for e in theirs if e[0] == kind)
        both = sum((mine & other).values())
        tally[0] += both
        tally[1] += sum(mine.values()) - both
        tally[2] += sum(other.values()) - both


def against(messages: Sequence, scenario_text: str, *, source: str = "") -> AgainstReport:
    """Run ``scenario_text`` (a hash scenario: the requests that made the recording) on kvcore
    and align its events with ``messages`` (a recording's messages, in order) batch by batch, by
    block content (see the module doc).

    ``source`` names the scenario (its file) in parse errors and in the report.
    Raises :class:`~kvviz.core.scenario.ScenarioError` for scenario text that does not parse and
    ValueError (one line) for a scenario that is not for a hash cache. O(recorded blocks +
    scenario tokens)."""
    scenario = parse_scenario(scenario_text, source or None) if isinstance(scenario_text, str) else scenario_text
    config = scenario.config
    if not design(config.kind).has_words(BlockCached):  # the recording's blocks need a cache that stores blocks
        raise ValueError(f"--against runs the scenario on kvcore's hash cache (vLLM's design): its cache line says "
                         f"{config.kind}, write cache hash pages=N tokens_per_page=M")
    contents = BlockContents()
    recorded = decode_messages(messages, contents)
    computed, failed = _run_on_kvcore(scenario, contents)
    agreeing = 0
    differing: list[int] = []
    first: BatchDifference | None = None
    stores = [0, 0, 0]  # agreeing, only by the recording, only by kvcore
    removes = [0, 0, 0]
    recording_hits: int | None = 0
    for index in range(max(len(recorded), len(computed))):
        ours = recorded[index].events if index < len(recorded) else ()
        theirs = computed[index].events if index < len(computed) else []
        _tally_events(ours, theirs, stores, removes)
        if index < len(recorded) and index < len(computed):
            if list(ours) == theirs:
                agreeing += 1
            else:
                differing.append(index + 1)  # the step: the UI's numbering
                if first is None:
                    first = _difference(index + 1, recorded[index].seq, list(ours), theirs, contents)
            if recording_hits is not None:
                hit = _inferred_hit(recorded[index], computed[index], contents, config.tokens_per_page)
                recording_hits = None if hit is None else recording_hits + hit
    notes = []
    if len(recorded) != len(computed):
        recording_hits = None
    return AgainstReport(
        source=source, scenario_title=scenario.title, pages=config.pages, tokens_per_page=config.tokens_per_page,
        recompute_last_token=config.recompute_last_token, recording_batches=len(recorded),
        scenario_batches=len(computed), batches_agreeing=agreeing, differing_batches=tuple(differing),
        stores_agreeing=stores[0], stores_only_by_recording=stores[1], stores_only_by_kvcore=stores[2],
        removes_agreeing=removes[0], removes_only_by_recording=removes[1], removes_only_by_kvcore=removes[2],
        kvcore_hit_tokens=sum(batch.hit_tokens for batch in computed), recording_hit_tokens=recording_hits,
        first_divergence=first, removed_unknown=sum(batch.unknown_removed for batch in recorded),
        cleared_batches=tuple(batch.index + 1 for batch in recorded if batch.cleared),
        undecodable_batches=tuple(batch.index + 1 for batch in recorded if batch.error is not None),
        failed_ops=failed, notes=tuple(notes),
    )
