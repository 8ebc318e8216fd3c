# SPDX-License-Identifier: Apache-2.0
"""A KV-event recording as a scenario, and the block contents both sides of ``--against`` share.

The stream says which chains of blocks a server cached, never which requests asked for them, so
:func:`recording_to_scenario` writes each stored chain as the request that would store it on a
hash cache: its whole content from the root (the parent's chain, then the chain's own tokens)
acquired, published, and released when its batch is done::

    cache hash pages=10488 tokens_per_page=16

    > batch 0 (seq 0): stored a chain of 14 blocks.
    acquire b0000 0..223
    publish b0000
    release b0000

A batch that stored nothing is ``acquire bNNNN`` (no tokens) and its release, so batch *i* of
the scenario is always message *i* of the recording (what :func:`kvviz.watch.against.against`
aligns on). Chains of one batch are acquired and published one after the other, then released
together: a chain that continues an earlier one of the same batch finds it cached.

The default ``pages`` holds every distinct block the recording stores, so kvcore never has to
evict one that the recording later builds on; a chain whose parent was never stored (a late
attach) cannot be spelled from the root and is left out, with a comment saying so.

:class:`BlockContents` names a block by its content: the chain of token tuples from the root,
interned as one int per block (O(1) per block, whatever the chain's depth), so two engines that
hash differently still agree on what a block *is*.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvviz.core.designs import HASH
from kvviz.watch.wire import AllBlocksCleared, Batch, BlockRemoved, BlockStored, DecodeError, decode_payload
from kvviz.core.limits import MAX_PAGES, MAX_SOURCE_BYTES, MAX_TOKENS_PER_PAGE
from kvviz.core.scenario import CacheConfig, Op, Scenario, ScenarioError, Step, format_ints, format_scenario, parse_scenario
from kvviz.core.words import count as counted

__all__ = ["BlockContents", "DecodedBatch", "block_size_counts", "decode_messages", "pages_needed",
           "recording_to_scenario", "requests_scenario", "scaled_prompt", "usual_block_size"]


ORPHAN = -1
"""The content id standing for "ancestors never seen": the parent of a chain whose parent key
was never stored (the stream was joined late, or the parent was removed before the subscriber
saw it). Blocks below it have a content, but not one that can be spelled from the root."""


class BlockContents:
    """Block contents interned as ints: ``block(parent, tokens)`` is the same id for the same
    chain of token tuples from the root, whichever stream asked. Memory O(distinct blocks)."""

    __slots__ = ("_ids", "_parent", "_tokens", "_depth", "_start")

    def __init__(self) -> None:
        self._ids: dict[tuple[int | None, tuple[int, ...]], int] = {}
        self._parent: list[int | None] = []
        self._tokens: list[tuple[int, ...]] = []
        self._depth: list[int] = []  # blocks from the root, this one included (0: under an orphan)
        self._start: list[int] = []  # its first token's position in its chain (rooted blocks)

    def block(self, parent: int | None, tokens: tuple[int, ...]) -> int:
        """The id of the block holding ``tokens`` under ``parent`` (None: a first block;
        :data:`ORPHAN`: under ancestors never seen). O(len(tokens)) for the dict key."""
        key = (parent, tokens)
        found = self._ids.get(key)
        if found is not None:
            return found
        content = len(self._tokens)
        self._ids[key] = content
        self._parent.append(parent)
        self._tokens.append(tokens)
        if parent is None:
            depth, start = 1, 0
        elif parent == ORPHAN:
            depth, start = 0, 0
        else:
            depth = self._depth[parent] + 1 if self._depth[parent] else 0
            start = self._start[parent] + len(self._tokens[parent])
        self._depth.append(depth)
        self._start.append(start)
        return content

    def find(self, parent: int | None, tokens: tuple[int, ...]) -> int | None:
        """The id of the block holding ``tokens`` under ``parent``, or None when no stream
        interned it (nothing is added)."""
        return self._ids.get((parent, tuple(tokens)))

    def parent(self, content: int) -> int | None:
        """The block's parent: None for a first block, :data:`ORPHAN` under ancestors never seen."""
        return self._parent[content]

    def rooted(self, content: int) -> bool:
        """Whether the block's whole chain is known from the root."""
        return self._depth[content] > 0

    def start(self, content: int) -> int:
        """The position of the block's first token in its chain (a rooted block only)."""
        return self._start[content]

    def tokens(self, content: int) -> tuple[int, ...]:
        """The block's own tokens."""
        return self._tokens[content]

    def chain_tokens(self, content: int) -> tuple[int, ...]:
        """Every token from the root to the end of the block (a rooted block only). O(chain)."""
        parts: list[tuple[int, ...]] = []
        walk: int | None = content
        while walk is not None and walk != ORPHAN:
            parts.append(self._tokens[walk])
            walk = self._parent[walk]
        return tuple(token for part in reversed(parts) for token in part)

    def describe(self, content: int) -> str:
        """A block for people, as token ranges: ``block 3 (positions 32..47): 4224..4239``; a
        block under unseen ancestors says so instead of a position."""
        tokens = format_ints(self._tokens[content]) or "no tokens"
        depth = self._depth[content]
        if not depth:
            return f"a block under unseen ancestors: {tokens}"
        size = len(self._tokens[content])
        first = self._start[content]
        return f"block {depth} (positions {first}..{first + size - 1}): {tokens}"


@dataclass(frozen=True)
class DecodedBatch:
    """One message of a recording in content terms: what it stored and removed, in order.

    ``events`` is ``("stored" | "removed", content id)`` per block, in the order the batch said
    them; ``unknown_removed`` counts removals of keys never stored (no content to align);
    ``cleared`` whether it said AllBlocksCleared; ``error`` why it could not be decoded (None
    when it could); ``stored_chains`` each BlockStored's blocks, in order."""

    index: int
    seq: int
    events: tuple[tuple[str, int], ...]
    stored_chains: tuple[tuple[int, ...], ...]
    unknown_removed: int
    cleared: bool
    block_sizes: tuple[int, ...]
    error: str | None = None


def _topic(topic: bytes | str) -> str:
    return topic if isinstance(topic, str) else bytes(topic).decode("utf-8", "replace")


def decode_messages(messages: Sequence, contents: BlockContents) -> list[DecodedBatch]:
    """Each message (``.topic``, ``.seq``, ``.payload``: a recording's
    :class:`~kvviz.watch.recording.Message`) as a :class:`DecodedBatch`, its blocks
    interned in ``contents``. A key is tracked per (key, medium) as the stream says it; a key
    stored again keeps its content. O(total blocks)."""
    by_key: dict[tuple[object, str | None], int] = {}
    batches: list[DecodedBatch] = []
    for index, message in enumerate(messages):
        try:
            batch: Batch = decode_payload(message.payload, seq=message.seq, topic=_topic(message.topic))
        except DecodeError as error:
            batches.append(DecodedBatch(index, message.seq, (), (), 0, False, (), str(error)))
            continue
        events: list[tuple[str, int]] = []
        chains: list[tuple[int, ...]] = []
        sizes: list[int] = []
        unknown = 0
        cleared = False
        for event in batch.events:
            if isinstance(event, BlockStored):
                if event.block_size <= 0:
                    continue  # a placeholder: no blocks to align
                sizes.append(event.block_size)
                parent = None if event.parent is None else by_key.get((event.parent, event.medium), ORPHAN)
                chain = []
                for i, key in enumerate(event.hashes):
                    parent = contents.block(parent, tuple(event.block_tokens(i)))
                    by_key[(key, event.medium)] = parent
                    events.append(("stored", parent))
                    chain.append(parent)
                chains.append(tuple(chain))
            elif isinstance(event, BlockRemoved):
                for key in event.hashes:
                    content = by_key.get((key, event.medium))
                    if content is None:
                        unknown += 1
                    else:
                        events.append(("removed", content))
            elif isinstance(event, AllBlocksCleared):
                cleared = True
        batches.append(DecodedBatch(index, message.seq, tuple(events), tuple(chains), unknown, cleared,
                                    tuple(sizes)))
    return batches


def block_size_counts(batches: Sequence[DecodedBatch]) -> dict[int, int]:
    """Stored chains per block size, sizes in increasing order (what ``--to-kvs`` chooses a
    page size from)."""
    counts: dict[int, int] = {}
    for batch in batches:
        for size in batch.block_sizes:
            counts[size] = counts.get(size, 0) + 1
    return dict(sorted(counts.items()))


def usual_block_size(sizes: dict[int, int]) -> int:
    """The size most stored chains have (the smaller one of a tie); 16 when none was stored
    (vLLM's default block size)."""
    if not sizes:
        return 16
    return max(sizes, key=lambda size: (sizes[size], -size))


def pages_needed(contents: BlockContents, batches: Sequence[DecodedBatch], tokens_per_page: int) -> int:
    """Pages enough for kvcore never to evict a block the recording builds on: every full
    page of ``tokens_per_page`` tokens that some rooted stored block ends in or crosses (a page
    is named by the block holding its last token and that token's offset in it, so the count
    is exact when the recording's blocks are pages, an upper bound when they are cut
    otherwise), plus one partial page per chain a batch holds at once. At least 1. O(blocks)."""
    full = 0
    ragged = False  # a block that starts or ends inside a page: chains hold partial pages
    for content in {content for batch in batches for chain in batch.stored_chains for content in chain
                    if contents.rooted(content)}:
        start = contents.start(content)
        end = start + len(contents.tokens(content))
        full += end // tokens_per_page - start // tokens_per_page  # page ends in (start, end]
        ragged = ragged or bool(start % tokens_per_page or end % tokens_per_page)
    partial = max((len(batch.stored_chains) for batch in batches), default=0) if ragged else 0
    return max(full + partial, 1)


def recording_to_scenario(messages: Sequence, *, tokens_per_page: int | None = None,
                          pages: int | None = None, recompute_last_token: bool = False,
                          source: str = "a KV-event recording") -> str:
    """The canonical scenario text (kvviz's language) of ``messages``: each stored chain an
    acquire of its whole content from the root and a publish, each batch's chains released at
    its end, one batch per message (see the module doc).

    ``tokens_per_page`` defaults to the stored blocks' size, or for a recording that mixes
    sizes (LMCache's chunks beside the GPU's blocks) to the size most chains have
    (:func:`usual_block_size`; the scenario's comments say so): a chain's tokens are the same
    whatever the page size, kvcore cuts them into its own pages. ``pages`` defaults to
    :func:`pages_needed`; ``recompute_last_token`` writes vLLM's hit cap on the cache line.
    Raises ValueError, one line, for a recording the language cannot hold (over the limits).
    O(tokens written)."""
    contents = BlockContents()
    batches = decode_messages(messages, contents)
    sizes = block_size_counts(batches)
    chosen = tokens_per_page is None
    if chosen:
        tokens_per_page = usual_block_size(sizes)
    if not 1 <= tokens_per_page <= MAX_TOKENS_PER_PAGE:
        raise ValueError(f"tokens_per_page must be 1..{MAX_TOKENS_PER_PAGE:,}, not {tokens_per_page}")
    distinct = {content for batch in batches for chain in batch.stored_chains for content in chain
                if contents.rooted(content)}
    if pages is None:
        pages = pages_needed(contents, batches, tokens_per_page)
    if not 1 <= pages <= MAX_PAGES:
        raise ValueError(f"the scenario needs {pages:,} pages; a scenario holds 1..{MAX_PAGES:,}: give fewer pages")
    steps: list[Step] = []
    left_out = 0
    for batch in batches:
        name = f"b{batch.index:04d}"
        rooted = [chain for chain in batch.stored_chains if chain and contents.rooted(chain[-1])]
        left_out += len(batch.stored_chains) - len(rooted)
        narration = _batch_narration(batch, rooted)
        if not rooted:
            steps.append(Step(Op("acquire", name, ()), narration))
            steps.append(Step(Op("release", name, None)))
            continue
        names = [name if len(rooted) == 1 else f"{name}.{k + 1}" for k in range(len(rooted))]
        for k, (chain, label) in enumerate(zip(rooted, names)):
            steps.append(Step(Op("acquire", label, contents.chain_tokens(chain[-1])), narration if k == 0 else ""))
            steps.append(Step(Op("publish", label, None)))
        steps.extend(Step(Op("release", label, None)) for label in names)
    drafted = Scenario(
        title=f"{source}: {len(batches):,} batches as requests on a hash cache",
        description=(f"Each chain of blocks the server stored, acquired from the root and published, one batch per "
                     f"message; {len(distinct):,} distinct blocks stored, on pages of {counted(tokens_per_page, 'token')}."),
        config=CacheConfig(HASH, pages, tokens_per_page, "lru", recompute_last_token),
        steps=tuple(steps),
    )
    comments = [f"# {source}, converted by kvviz watch --to-kvs: batch i is message i of the recording."]
    if len(sizes) > 1 or (sizes and tokens_per_page not in sizes):
        stored_as = ", ".join(f"{n:,} of {size}" for size, n in sizes.items())
        why = " (the size most chains have)" if chosen and len(sizes) > 1 else ""
        comments.append(f"# The recording stores chains of blocks of several sizes or another size ({stored_as} "
                        f"tokens): pages of {counted(tokens_per_page, 'token')}{why}; kvcore cuts each chain into its own "
                        "pages, so its blocks are not the recording's one for one.")
    if left_out:
        comments.append(f"# {left_out:,} stored chains whose parent was never stored are left out "
                        "(their tokens from the root are unknown).")
    undecodable = sum(1 for batch in batches if batch.error is not None)
    if undecodable:
        comments.append(f"# {undecodable:,} messages could not be decoded: their batches store nothing here.")
    text = "\n".join(comments) + "\n" + format_scenario(drafted)
    size = len(text.encode("utf-8"))
    if size > MAX_SOURCE_BYTES:
        raise ValueError(f"the scenario would be {size:,} bytes; kvviz reads scenarios of at most "
                         f"{MAX_SOURCE_BYTES:,}: record fewer batches")
    try:
        parse_scenario(text)
    except ScenarioError as error:  # a limit of the language (tokens per op or per scenario)
        raise ValueError(f"the scenario would not read back (line {error.line}: {error.message})") from None
    return text


def _batch_narration(batch: DecodedBatch, rooted: list[tuple[int, ...]]) -> str:
    if batch.error is not None:
        return f"batch {batch.index} (seq {batch.seq}) could not be decoded: {batch.error}"
    if not rooted:
        return f"batch {batch.index} (seq {batch.seq}): stored nothing."
    lengths = ", ".join(f"{len(chain):,}" for chain in rooted)
    noun = "a chain" if len(rooted) == 1 else f"{len(rooted)} chains"
    return f"batch {batch.index} (seq {batch.seq}): stored {noun} of {lengths} blocks."


MOONCAKE_BLOCK_TOKENS = 512
"""Tokens of one Mooncake hash id (one block of the trace's prompts)."""


def scaled_prompt(hash_ids: Sequence[int], input_length: int, block_tokens: int = 16) -> tuple[int, ...]:
    """A Mooncake request's prompt as the shipped recordings spell it: hash id ``h`` is the
    tokens ``h*B .. h*B+B-1``, and the length is scaled by ``B/512`` (Python's ``round``), at
    least 1 and at most every block (``kvviz/samples/kv-events/README.md``)."""
    b = block_tokens
    count = min(len(hash_ids) * b, max(1, round(input_length * b / MOONCAKE_BLOCK_TOKENS)))
    return tuple(h * b + j for h in hash_ids for j in range(b))[:count]


def requests_scenario(requests: Sequence, *, block_tokens: int = 16, gpu_blocks: int = 3000,
                      recompute_last_token: bool = True, source: str = "a Mooncake trace") -> str:
    """The canonical scenario of the requests that made the shipped vLLM recording: each
    request (``.hash_ids``, ``.input_length``: :class:`kvviz.core.mooncake.TraceRequest`) as
    ``acquire / publish / release`` of :func:`scaled_prompt`, in order, on a hash cache of
    ``gpu_blocks - 1`` pages (vLLM's ``BlockPool`` keeps block 0 as its null block: it is
    popped from the free queue at start and never handed out, so 3,000 blocks hold 2,999 pages'
    worth, in the same order), with vLLM's hit cap when ``recompute_last_token``."""
    if gpu_blocks < 2:
        raise ValueError(f"gpu_blocks must be at least 2 (one is vLLM's null block), not {gpu_blocks}")
    steps: list[Step] = []
    for index, request in enumerate(requests):
        name = f"r{index:04d}"
        prompt = scaled_prompt(request.hash_ids, request.input_length, block_tokens)
        narration = (f"request {index}: {len(prompt):,} prompt tokens from {len(request.hash_ids):,} hash ids "
                     f"({request.input_length:,} tokens in the trace).")
        steps.append(Step(Op("acquire", name, prompt), narration))
        steps.append(Step(Op("publish", name, None)))
        steps.append(Step(Op("release", name, None)))
    drafted = Scenario(
        # The report names the trace already; the recipe is the shipped recordings' (vLLM's and
        # SGLang's alike), so the title names neither.
        title=f"{len(steps) // 3:,} requests of the trace, each acquired, published and released in turn",
        description=(f"From {source}. Hash id h is the tokens h*{block_tokens}..h*{block_tokens}+{block_tokens - 1}, prompt lengths "
                     f"scaled by {block_tokens}/{MOONCAKE_BLOCK_TOKENS}; {gpu_blocks:,} vLLM blocks less its null "
                     f"block = {gpu_blocks - 1:,} pages; acquire, publish, release per request."),
        config=CacheConfig(HASH, gpu_blocks - 1, block_tokens, "lru", recompute_last_token),
        steps=tuple(steps),
    )
    return format_scenario(drafted)
