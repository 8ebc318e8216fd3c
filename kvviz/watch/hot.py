# SPDX-License-Identifier: Apache-2.0
"""What is hot in a watched stream, and what each batch's request found cached.

**Hot prefixes** (:func:`hot_prefixes`): a chain stored under a cached parent means its request
hit that parent's whole path (the engine stores only what follows its hit), so every block on
the path counts one hit. A *hot prefix* ends at a block none of whose children has as many hits:
the longest prefix that many requests shared. They are ranked by hits, then by length. Blocks
are read by content (:func:`~kvviz.watch.to_kvs.decode_messages`), so a block stored again
under another hash counts as the same prefix.

**Per batch** (:func:`batch_match`): the batch's first stored chain starts right after what its
request matched: the parent's depth in the forest is the blocks it hit, as ``--against`` infers.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvviz.watch.to_kvs import ORPHAN, BlockContents, decode_messages
from kvviz.core.words import count

__all__ = ["HOT_LISTED", "BatchMatch", "HotPrefix", "batch_match", "hot_prefixes"]

HOT_LISTED = 5
"""Hot prefixes the pane, ``--print`` and ``--json`` list."""


@dataclass(frozen=True)
class HotPrefix:
    """A prefix many stored chains built on: ``hits`` chains, ``blocks`` blocks of ``tokens``
    tokens from the root; ``last_tokens`` the last block's token ids."""

    hits: int
    blocks: int
    tokens: int
    last_tokens: tuple[int, ...]

    def to_dict(self) -> dict:
        """JSON-able (``--json``'s ``hot_prefixes``)."""
        return {"hits": self.hits, "blocks": self.blocks, "tokens": self.tokens, "last_tokens": list(self.last_tokens)}

    def line(self, decode=None) -> str:
        """``42 hits: 16 blocks, tokens 0..255, ending [240 … 255]`` (and its text with ``decode``)."""
        last = self.last_tokens
        tail = f"[{last[0]} … {last[-1]}]" if len(last) > 2 else f"{list(last)}"
        text = "" if decode is None else f" {decode(last)!r}"
        return (f"{count(self.hits, 'hit')}: {count(self.blocks, 'block')}, tokens 0..{self.tokens - 1}, "
                f"ending {tail}{text}")


def hot_prefixes(messages, most: int = HOT_LISTED) -> list[HotPrefix]:
    """The ``most`` hottest prefixes of the stream made of ``messages`` (see the module doc).
    O(stored blocks x chain depth)."""
    contents = BlockContents()
    batches = decode_messages(messages, contents)
    parent_of: dict[int, int | None] = {}
    hits: dict[int, int] = {}
    for batch in batches:
        for chain in batch.stored_chains:
            if not chain or not contents.rooted(chain[-1]):
                continue
            walk = _parent(contents, chain[0], parent_of)
            for content in chain:
                parent_of.setdefault(content, _parent(contents, content, parent_of))
            while walk is not None:
                hits[walk] = hits.get(walk, 0) + 1
                walk = parent_of.get(walk)
    best_child: dict[int, int] = {}
    for content, n in hits.items():
        parent = parent_of.get(content)
        if parent is not None:
            best_child[parent] = max(best_child.get(parent, 0), n)
    ends = [content for content, n in hits.items() if best_child.get(content, 0) < n]
    found = []
    for content in ends:
        chain = contents.chain_tokens(content)
        own = contents.tokens(content)
        depth = _depth(content, parent_of)
        found.append(HotPrefix(hits[content], depth, len(chain), own))
    found.sort(key=lambda h: (-h.hits, -h.tokens, h.last_tokens))
    return found[:most]


def _parent(contents: BlockContents, content: int, parent_of: dict) -> int | None:
    """The parent content of a rooted block (None for a first block)."""
    if content in parent_of:
        return parent_of[content]
    parent = contents.parent(content)
    return None if parent is None or parent == ORPHAN else parent


def _depth(content: int, parent_of: dict) -> int:
    depth = 0
    walk: int | None = content
    while walk is not None:
        depth += 1
        walk = parent_of.get(walk)
    return depth


@dataclass(frozen=True)
class BatchMatch:
    """What one batch's request found cached, as its stores tell it."""

    matched_blocks: int | None
    """Blocks its first stored chain was stored under (None: not known, its parent is an orphan)."""
    matched_tokens: int | None
    stored_blocks: int

    def line(self) -> str:
        """``this batch's request matched 3 cached blocks (48 tokens) and stored 9``."""
        if self.stored_blocks == 0:
            return "this batch stored nothing (a request's batch that stores nothing hit every full block)"
        if self.matched_blocks is None:
            return (f"this batch's request stored {count(self.stored_blocks, 'block')} under a block whose "
                    "ancestors were never seen: what it matched is not known")
        return (f"this batch's request matched {count(self.matched_blocks, 'cached block')} "
                f"({count(self.matched_tokens, 'token')}) and stored {self.stored_blocks:,}")


def batch_match(frame) -> BatchMatch | None:
    """What step ``frame`` (a :class:`~kvviz.watch.timeline.WatchFrame`)'s request matched and stored;
    None for step 0 or an undecodable message. O(the chain's depth)."""
    effect = frame.effect
    if effect is None:
        return None
    stored = len(effect.stored)
    if not stored:
        return BatchMatch(0, 0, 0)
    first = effect.stored[0]
    blocks = tokens = 0
    walk = first.parent
    seen = set()
    state = frame.state.blocks
    while walk is not None and walk not in seen:
        seen.add(walk)
        on = state.on_key(walk)
        if not on:
            return BatchMatch(None, None, stored)
        blocks += 1
        tokens += len(on[0].tokens)
        walk = on[0].parent
    return BatchMatch(blocks, tokens, stored)
