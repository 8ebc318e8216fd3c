# SPDX-License-Identifier: Apache-2.0
"""The cache rebuilt from the KV-event stream: a forest of blocks, by (key, medium).

A ``BlockStored`` adds a chain (block *i*'s parent is block *i−1*, the first one's is the event's
``parent_block_hash``); a ``BlockRemoved`` takes blocks out, one key at a time, so a removal
listing a chain child first or parent first ends the same; ``AllBlocksCleared`` empties the
forest (or one medium) and the counting goes on. The rules for what the stream does not settle:

- **Copies.** The same (key, medium) may be stored more than once (duplicate stores, several
  writers): the block counts its live ``copies``; a removal takes one copy, and the block leaves
  when none is left. The same key on two media is two blocks (a tier each).
- **Orphans.** A block is an *orphan* while its parent key is on no medium of the forest: stored
  after a late attach (its parent was cached before kvviz listened), stored child first, or left
  behind when its parent was removed. vLLM removes lazily (a freed block leaves only when it is
  reused), so children outlive their parents in the stream: they stay, as orphans, and stop being
  orphans if the parent key comes back.
- **Unknown removals.** Removing a block the forest does not hold is counted in
  ``removed_unknown``, never an error (a late attach, a lost batch). A removal that names no
  medium, or a medium the key is not on, takes the key's only block when the key is on exactly
  one medium and one side names none.

Cost: :meth:`Forest.apply` is O(what the batch changed) (plus the children whose orphan mark
flips); :meth:`Forest.state` is O(1) and shares every unchanged part with the previous state.
The digest is a set digest of the blocks (kvcore's AdHash, :class:`kvcore.snapshot.StateDigest`),
kept up to date block by block as a batch applies: every state's digest is O(1), so a bundle can
record one per step and ``kvviz open`` check them all in time linear in the steps.
The blocks live in a two-level copy-on-write table of 64 x 64 leaves (a block's leaf is fixed by
its key): a state holds the 64-entry top level; after a state is taken, the first change to a
leaf copies that leaf (about n/4096 blocks) and its 64-entry middle node, never the rest.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from kvcore.snapshot import StateDigest

from kvviz.core import limits

from kvviz.watch.wire import (AllBlocksCleared, Batch, BlockRemoved, BlockStored, Key, UnknownEvent, key_order, block_hash_text)

BlockId = tuple[Key, str | None]
"""A block of the forest: its key and its medium."""

_FAN = 64
_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15  # Fibonacci hashing: spreads sequential test keys and real hashes alike


def _slot(key: Key) -> int:
    """The leaf (0..4095) that holds ``key``'s blocks on every medium: deterministic (never
    Python's salted ``hash``), so equal forests have equal layouts."""
    if isinstance(key, int):
        return (((key & _MASK64) * _GOLDEN) & _MASK64) >> 52
    return zlib.crc32(key) & 0xFFF


def block_order(block_id: BlockId) -> tuple:
    """The canonical order of blocks: by key (:func:`~.wire.key_order`), then medium (none first)."""
    key, medium = block_id
    return (key_order(key), medium is not None, medium or "")


@dataclass(frozen=True, slots=True)
class ForestBlock:
    """One cached block as the stream told it."""

    key: Key
    tokens: tuple[int, ...]
    parent: Key | None
    medium: str | None
    lora: int | str | None
    stored_at: int
    """The step (1-based batch index of the timeline) that stored its first live copy."""
    copies: int
    """Stores minus removes of this (key, medium) still live (0 in a removal's report when the
    last copy left)."""
    orphan: bool
    """Its parent key is on no medium of the forest (a late attach, child-first order, or the
    parent was removed)."""


@dataclass(frozen=True)
class BatchEffect:
    """What one batch did to the forest."""

    stored: tuple[ForestBlock, ...]
    """Every block a BlockStored named, as it was right after the store (a duplicate with its
    raised ``copies``)."""
    removed: tuple[ForestBlock, ...]
    """Every removal that found its block, as it was right after (``copies`` 0: it left)."""
    removed_unknown: tuple[Key, ...]
    """Removals of blocks the forest did not hold."""
    duplicates: int
    """Stores of a (key, medium) already cached (a copy more)."""
    cleared: bool
    """An AllBlocksCleared came (its blocks are counted in ``cleared_blocks``, not listed)."""
    unknown_types: tuple[str, ...]
    """Event types this reader does not know, once per event."""
    orphaned: tuple[BlockId, ...] = ()
    """Blocks that became orphans because their parent key left the forest."""
    adopted: tuple[BlockId, ...] = ()
    """Orphans whose parent key came (back) into the forest."""
    cleared_blocks: int = 0
    """Blocks the batch's AllBlocksCleared events took out."""
    not_kept: int = 0
    """New blocks a BlockStored named that were not added: the forest held its cap
    (``Forest.max_blocks``)."""


@dataclass(frozen=True)
class ForestTotals:
    """Counts over every batch a :class:`Forest` applied (a clear resets the blocks, not these)."""

    batches: int = 0
    blocks_stored: int = 0
    duplicates: int = 0
    blocks_removed: int = 0
    removed_unknown: int = 0
    clears: int = 0
    cleared_blocks: int = 0
    unknown_events: int = 0
    peak_blocks: int = 0
    """Most blocks cached after any batch."""


# -- the frozen state ------------------------------------------------------------------------


class BlockMap(Mapping):
    """The blocks of a :class:`ForestState` by (key, medium): a read-only view of its table.
    Lookups are O(1); iteration is in table order (deterministic, not sorted: sort with
    :func:`block_order`)."""

    __slots__ = ("_top", "_size")

    def __init__(self, top: tuple, size: int) -> None:
        self._top, self._size = top, size

    def _leaf(self, key: Key) -> dict | None:
        slot = _slot(key)
        middle = self._top[slot >> 6]
        return None if middle is None else middle[slot & 63]

    def __getitem__(self, block_id: BlockId) -> ForestBlock:
        try:
            key, _medium = block_id
            leaf = self._leaf(key)
        except (TypeError, ValueError):
            raise KeyError(block_id) from None
        if leaf is None:
            raise KeyError(block_id)
        return leaf[block_id]

    def __contains__(self, block_id: object) -> bool:
        try:
            self[block_id]  # type: ignore[index]
        except KeyError:
            return False
        return True

    def __iter__(self) -> Iterator[BlockId]:
        for middle in self._top:
            if middle is not None:
                for leaf in middle:
                    if leaf:
                        yield from leaf

    def __len__(self) -> int:
        return self._size

    def on_key(self, key: Key) -> tuple[ForestBlock, ...]:
        """The blocks of ``key`` on every medium (none first, then by name)."""
        leaf = self._leaf(key) if isinstance(key, (int, bytes)) else None
        found = [block for (k, _m), block in (leaf or {}).items() if k == key and type(k) is type(key)]
        return tuple(sorted(found, key=lambda b: (b.medium is not None, b.medium or "")))


def _row(b: ForestBlock) -> dict:
    """``b`` as a row of :meth:`ForestState.to_dict`."""
    return {"key": block_hash_text(b.key), "medium": b.medium, "parent": None if b.parent is None else block_hash_text(b.parent),
            "tokens": list(b.tokens), "lora": b.lora, "stored_at": b.stored_at, "copies": b.copies,
            "orphan": b.orphan}


_quoted = json.encoder.encode_basestring_ascii  # type: ignore[attr-defined]  # json's own C quoting


def _value(value: object) -> str:
    """``value`` (None, a bool, an int or a string) as canonical JSON."""
    if value is None:
        return "null"
    if isinstance(value, str):
        return _quoted(value)
    return json.dumps(value)


def block_element(block: ForestBlock) -> str:
    """The element of ``block`` in the forest's set digest: ``["block",ROW]``, ROW the block's
    row of :meth:`ForestState.to_dict` as canonical JSON (sorted keys, no spaces, ASCII). Spelt
    out by hand: ``json.dumps`` of the row costs 3x this on every block a batch changes."""
    tokens = block.tokens
    token_text = ",".join(map(str, tokens)) if all(type(t) is int for t in tokens) else ",".join(map(_value, tokens))
    parent = "null" if block.parent is None else '"' + block_hash_text(block.parent) + '"'
    return (f'["block",{{"copies":{block.copies},"key":"{block_hash_text(block.key)}","lora":{_value(block.lora)},'
            f'"medium":{_value(block.medium)},"orphan":{"true" if block.orphan else "false"},"parent":{parent},'
            f'"stored_at":{block.stored_at},"tokens":[{token_text}]}}]')


class ForestState:
    """The forest after some step: frozen, cheap to take (it shares its table with the forest
    and with earlier states), compared by content. Indexes beyond ``blocks`` (children, roots,
    media) are built on first use, O(blocks), and kept; the digest is O(1)."""

    __slots__ = ("_top", "_size", "_sum", "_memo")

    def __init__(self, top: tuple = (None,) * _FAN, size: int = 0, digest_sum: int = 0) -> None:
        self._top, self._size, self._sum = top, size, digest_sum
        self._memo: dict[str, object] = {}

    @property
    def blocks(self) -> BlockMap:
        """Every cached block by (key, medium)."""
        return BlockMap(self._top, self._size)

    def __len__(self) -> int:
        return self._size

    def __repr__(self) -> str:
        return f"ForestState({self._size:,} blocks)"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ForestState):
            return NotImplemented
        if self._size != other._size:
            return False
        for mine, theirs in zip(self._top, other._top):
            if mine is theirs:
                continue  # shared structure: equal without a look
            for a, b in zip(mine or (None,) * _FAN, theirs or (None,) * _FAN):
                if a is not b and (a or {}) != (b or {}):
                    return False
        return True

    def __hash__(self) -> int:
        return hash(self.digest())

    def _children_index(self) -> dict[Key | None, list[ForestBlock]]:
        index = self._memo.get("children")
        if index is None:
            index = {}
            for block in sorted(self.blocks.values(), key=lambda b: block_order((b.key, b.medium))):
                index.setdefault(block.parent, []).append(block)
            self._memo["children"] = index
        return index  # type: ignore[return-value]

    def children(self, key: Key) -> tuple[ForestBlock, ...]:
        """The blocks whose parent is ``key``, on any medium, in :func:`block_order`."""
        return tuple(self._children_index().get(key, ()))

    def roots(self) -> tuple[ForestBlock, ...]:
        """The blocks that head a tree: no parent (a root of the cache), or a parent not cached
        (an orphan); in :func:`block_order`."""
        memo = self._memo.get("roots")
        if memo is None:
            ordered = sorted(self.blocks.values(), key=lambda b: block_order((b.key, b.medium)))
            memo = tuple(b for b in ordered if b.parent is None or b.orphan)
            self._memo["roots"] = memo
        return memo  # type: ignore[return-value]

    def by_medium(self) -> dict[str | None, int]:
        """Cached blocks per medium as sent (None: no medium named), none first then by name;
        show a medium with :func:`~.wire.medium_label`."""
        counts: dict[str | None, int] = {}
        for _key, medium in self.blocks:
            counts[medium] = counts.get(medium, 0) + 1
        return dict(sorted(counts.items(), key=lambda item: (item[0] is not None, item[0] or "")))

    def to_dict(self) -> dict:
        """The state as canonical JSON-ready data: blocks in :func:`block_order`, keys as
        :func:`~.wire.block_hash_text`."""
        blocks = sorted(self.blocks.values(), key=lambda b: block_order((b.key, b.medium)))
        return {
            "cached_blocks": self._size,
            "blocks": [_row(b) for b in blocks],
        }

    def digest(self) -> str:
        """The set digest of the blocks (:func:`block_element` of each, summed as
        :class:`kvcore.snapshot.StateDigest` sums): equal forests give equal digests, however
        they were reached. O(1): the forest keeps the sum as it changes."""
        digest = self._memo.get("digest")
        if digest is None:
            accumulator = StateDigest()
            accumulator.total = self._sum
            digest = self._memo["digest"] = accumulator.hexdigest()
        return digest  # type: ignore[return-value]


# -- the live forest -------------------------------------------------------------------------


class Forest:
    """The forest the stream builds, batch by batch: mutable; :meth:`apply` is O(changed).

    ``max_blocks`` (default ``MAX_WATCH_FOREST_BLOCKS``) caps the blocks held: a store of a new
    block into a full forest is not added, and counted in the effect's ``not_kept`` (a copy
    of a block held is still counted, a removal still takes it)."""

    def __init__(self, max_blocks: int | None = None) -> None:
        self.max_blocks = limits.MAX_WATCH_FOREST_BLOCKS if max_blocks is None else max_blocks
        self._top: list = [None] * _FAN
        self._size = 0
        self._present: dict[Key, int] = {}  # key -> how many media hold it
        self._children: dict[Key, dict[BlockId, None]] = {}  # parent key -> its children (ordered)
        self._totals = ForestTotals()
        self._digest = StateDigest()  # the set digest of the blocks, kept as they change
        self._start_sharing()
        self.copied = 0
        """Table entries copied on write so far: the cost :meth:`state` adds to later applies
        (tests and benchmarks read it)."""

    @classmethod
    def from_state(cls, state: ForestState, max_blocks: int | None = None) -> Forest:
        """A forest that goes on from ``state`` (a keyframe): O(blocks), to rebuild the parent
        index. Its :meth:`totals` start from zero."""
        forest = cls(max_blocks)
        forest._top = list(state._top)
        forest._size = state._size
        forest._digest.total = state._sum
        for (key, medium), block in state.blocks.items():
            forest._present[key] = forest._present.get(key, 0) + 1
            if block.parent is not None:
                forest._children.setdefault(block.parent, {})[(key, medium)] = None
        forest._start_sharing(state)
        return forest

    def __len__(self) -> int:
        return self._size

    def _start_sharing(self, state: ForestState | None = None) -> None:
        # Every node reachable from the top may be shared with a state now: copy before writing.
        self._middle_owned = [False] * _FAN
        self._leaf_owned: set[int] = set()  # membership only: never iterated
        self._state = state

    def state(self) -> ForestState:
        """The forest now, frozen: O(1) (64 references), the same object while nothing changes."""
        if self._state is None:
            self._start_sharing(ForestState(tuple(self._top), self._size, self._digest.total))
        return self._state  # type: ignore[return-value]

    def totals(self) -> ForestTotals:
        """Counts over every batch applied."""
        return self._totals

    # -- the table ---------------------------------------------------------------------------

    def get(self, block_id: BlockId) -> ForestBlock | None:
        """The block cached as (key, medium), or None."""
        slot = _slot(block_id[0])
        middle = self._top[slot >> 6]
        leaf = None if middle is None else middle[slot & 63]
        return None if leaf is None else leaf.get(block_id)

    def _writable_leaf(self, slot: int) -> dict:
        """Leaf ``slot``, copied first if a state may share it (and its middle node)."""
        self._state = None
        if slot in self._leaf_owned:
            return self._top[slot >> 6][slot & 63]
        high = slot >> 6
        middle = self._top[high]
        if not self._middle_owned[high]:
            middle = [None] * _FAN if middle is None else list(middle)
            self.copied += _FAN
            self._top[high] = middle
            self._middle_owned[high] = True
        leaf = middle[slot & 63]
        leaf = {} if leaf is None else dict(leaf)
        self.copied += len(leaf)
        middle[slot & 63] = leaf
        self._leaf_owned.add(slot)
        return leaf

    def _replace(self, old: ForestBlock, new: ForestBlock) -> None:
        """Put ``new`` where ``old`` (the same key and medium) was."""
        self._writable_leaf(_slot(new.key))[(new.key, new.medium)] = new
        self._digest.remove(block_element(old))
        self._digest.add(block_element(new))

    def _delete(self, block: ForestBlock) -> None:
        del self._writable_leaf(_slot(block.key))[(block.key, block.medium)]
        self._digest.remove(block_element(block))

    # -- the events --------------------------------------------------------------------------

    def apply(self, batch: Batch, step: int) -> BatchEffect:
        """Apply every event of ``batch`` (stored blocks get ``stored_at = step``); return what
        it did."""
        effect = _EffectBuilder()
        for event in batch.events:
            if isinstance(event, BlockStored):
                self._store(event, step, effect)
            elif isinstance(event, BlockRemoved):
                for key in event.hashes:
                    self._remove(key, event.medium, effect)
            elif isinstance(event, AllBlocksCleared):
                self._clear(event.medium, effect)
            elif isinstance(event, UnknownEvent):
                effect.unknown_types.append(event.type)
        result = effect.build()
        t = self._totals
        self._totals = ForestTotals(
            batches=t.batches + 1, blocks_stored=t.blocks_stored + len(result.stored),
            duplicates=t.duplicates + result.duplicates,
            blocks_removed=t.blocks_removed + len(result.removed),
            removed_unknown=t.removed_unknown + len(result.removed_unknown),
            clears=t.clears + sum(isinstance(e, AllBlocksCleared) for e in batch.events),
            cleared_blocks=t.cleared_blocks + result.cleared_blocks,
            unknown_events=t.unknown_events + len(result.unknown_types),
            peak_blocks=max(t.peak_blocks, self._size))
        return result

    def _leaf_for_write(self, key: Key) -> dict:
        """The leaf holding ``key``, writable (the hot path of :meth:`_writable_leaf`)."""
        slot = (((key & _MASK64) * _GOLDEN) & _MASK64) >> 52 if type(key) is int else _slot(key)
        if slot in self._leaf_owned:
            self._state = None
            return self._top[slot >> 6][slot & 63]
        return self._writable_leaf(slot)

    def _store(self, event: BlockStored, step: int, effect: _EffectBuilder) -> None:
        medium = event.medium
        present = self._present
        children = self._children
        stored = effect.stored
        parent = event.parent
        for index, key in enumerate(event.hashes):
            block_id = (key, medium)
            leaf = self._leaf_for_write(key)
            existing = leaf.get(block_id)
            if existing is not None:
                block = _with(existing, copies=existing.copies + 1)
                leaf[block_id] = block
                self._digest.remove(block_element(existing))
                self._digest.add(block_element(block))
                effect.duplicates += 1
                stored.append(block)
                parent = key
                continue
            if self._size >= self.max_blocks:
                effect.not_kept += 1
                parent = key
                continue
            block = ForestBlock(key, event.block_tokens(index), parent, medium, event.lora, step, 1,
                                parent is not None and parent not in present)
            leaf[block_id] = block
            self._digest.add(block_element(block))
            self._size += 1
            if parent is not None:
                siblings = children.get(parent)
                if siblings is None:
                    children[parent] = {block_id: None}
                else:
                    siblings[block_id] = None
            stored.append(block)
            held = present.get(key, 0)
            present[key] = held + 1
            if not held and key in children:
                self._mark_children(key, orphan=False, changed=effect.adopted)
            parent = key

    def _remove(self, key: Key, medium: str | None, effect: _EffectBuilder) -> None:
        block = self.get((key, medium)) if key in self._present else None
        if block is None:
            block = self._only_block_of(key, medium)
        if block is None:
            effect.removed_unknown.append(key)
            return
        if block.copies > 1:
            fewer = _with(block, copies=block.copies - 1)
            self._replace(block, fewer)
            effect.removed.append(fewer)
            return
        self._drop(block)
        effect.removed.append(_with(block, copies=0))
        if key not in self._present and key in self._children:
            self._mark_children(key, orphan=True, changed=effect.orphaned)

    def _only_block_of(self, key: Key, medium: str | None) -> ForestBlock | None:
        """A removal whose medium does not match: the key's only block, when one side names no
        medium (see the module's rules)."""
        if self._present.get(key) != 1:
            return None
        if medium is not None:
            return self.get((key, None))
        slot = _slot(key)
        leaf = self._top[slot >> 6][slot & 63]
        return next(block for (k, _m), block in leaf.items() if k == key and type(k) is type(key))

    def _drop(self, block: ForestBlock) -> None:
        """Take ``block`` out with all its copies (the caller reports it and marks orphans)."""
        block_id = (block.key, block.medium)
        self._delete(block)
        self._size -= 1
        if block.parent is not None:
            siblings = self._children.get(block.parent)
            if siblings is not None:
                siblings.pop(block_id, None)
                if not siblings:
                    del self._children[block.parent]
        held = self._present[block.key] - 1
        if held:
            self._present[block.key] = held
        else:
            del self._present[block.key]

    def _mark_children(self, key: Key, *, orphan: bool, changed: list[BlockId]) -> None:
        for child_id in self._children.get(key, ()):
            child = self.get(child_id)
            if child is not None and child.orphan != orphan:
                self._replace(child, _with(child, orphan=orphan))
                changed.append(child_id)

    def _clear(self, medium: str | None, effect: _EffectBuilder) -> None:
        effect.cleared = True
        if medium is None:
            effect.cleared_blocks += self._size
            self._top = [None] * _FAN
            self._size = 0
            self._digest = StateDigest()
            self._present.clear()
            self._children.clear()
            self._start_sharing()
            return
        # One medium: O(blocks), rare (no shipped publisher names a medium here).
        table = BlockMap(tuple(self._top), self._size)  # read, all collected before the first write
        doomed = sorted((b for b in table.values() if b.medium == medium),
                        key=lambda b: block_order((b.key, b.medium)))
        for block in doomed:
            self._drop(block)
        for block in doomed:
            if block.key not in self._present:
                self._mark_children(block.key, orphan=True, changed=effect.orphaned)
        effect.cleared_blocks += len(doomed)


def _with(block: ForestBlock, *, copies: int | None = None, orphan: bool | None = None) -> ForestBlock:
    """``block`` with another copy count or orphan mark (dataclasses.replace costs 4x this)."""
    return ForestBlock(block.key, block.tokens, block.parent, block.medium, block.lora, block.stored_at,
                       block.copies if copies is None else copies, block.orphan if orphan is None else orphan)


class _EffectBuilder:
    """The lists a batch's effect collects while it applies."""

    __slots__ = ("stored", "removed", "removed_unknown", "duplicates", "cleared", "unknown_types",
                 "orphaned", "adopted", "cleared_blocks", "not_kept")

    def __init__(self) -> None:
        self.stored: list[ForestBlock] = []
        self.removed: list[ForestBlock] = []
        self.removed_unknown: list[Key] = []
        self.duplicates = 0
        self.cleared = False
        self.unknown_types: list[str] = []
        self.orphaned: list[BlockId] = []
        self.adopted: list[BlockId] = []
        self.cleared_blocks = 0
        self.not_kept = 0

    def build(self) -> BatchEffect:
        return BatchEffect(stored=tuple(self.stored), removed=tuple(self.removed),
                           removed_unknown=tuple(self.removed_unknown), duplicates=self.duplicates,
                           cleared=self.cleared, unknown_types=tuple(self.unknown_types),
                           orphaned=tuple(self.orphaned), adopted=tuple(self.adopted),
                           cleared_blocks=self.cleared_blocks, not_kept=self.not_kept)
