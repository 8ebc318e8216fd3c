# SPDX-License-Identifier: Apache-2.0
"""``--against-trace`` with SGLang's design: a radix cache of pages, evicting least recently used
leaves, beside a recording, batch by batch and block by block by content.

SGLang's ``RadixCache`` (0.5.x, ``page_size`` tokens a page) publishes one ``BlockStored`` per
page of each node it inserts and one ``BlockRemoved`` per page of each leaf it evicts, and an
``AllBlocksCleared`` when it is reset (made). The shared SGLang recording ran, per request:
``match_prefix`` (the path's nodes take the access time; a match ending inside a node splits
it), lock the matched node, ``evict`` what the request's new pages need beyond the capacity,
unlock, ``insert`` the whole request (page-aligned; the new node takes a fresh time). Eviction
pops leaves by last access time, oldest first, each whole; a parent left childless and unlocked
joins the candidates. :class:`RadixModel` does the same on a logical clock (one tick per clock
read where SGLang reads ``time.monotonic()``), so the order is deterministic.

kvcore's trie is shortfin's design (no events of blocks), so this small model is what the
recording is judged against; :func:`against_radix` reports in :class:`AgainstReport` terms.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Sequence

from kvviz.core.designs import TRIE
from kvviz.watch.against import AgainstReport, _difference, _prompt_hit, _tally_events
from kvviz.watch.to_kvs import BlockContents, decode_messages, scaled_prompt

__all__ = ["RadixModel", "against_radix", "looks_like_sglang"]


class _Node:
    __slots__ = ("pages", "parent", "children", "lock", "time")

    def __init__(self, pages: list, parent: _Node | None, time: int) -> None:
        self.pages = pages  # [(tokens, content id)] per page
        self.parent = parent
        self.children: dict[tuple, _Node] = {}
        self.lock = 0
        self.time = time


class RadixModel:
    """A radix cache of pages with LRU leaf eviction, emitting content events (see the module doc)."""

    def __init__(self, page_tokens: int, capacity_tokens: int, contents: BlockContents) -> None:
        self.page = page_tokens
        self.capacity = capacity_tokens
        self.contents = contents
        self._clock = 0
        self.root = _Node([], None, self._tick())
        self.root.lock = 1
        self.size = 0  # tokens cached
        self.events: list[tuple[str, int]] = [("cleared", -1)]

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _split(self, node: _Node, at: int) -> _Node:
        """Cut ``node`` after ``at`` pages: the new node holds the head and is its parent."""
        head = _Node(node.pages[:at], node.parent, self._tick())
        head.lock = node.lock
        node.parent.children[node.pages[0][0]] = head
        node.pages = node.pages[at:]
        node.parent = head
        head.children[node.pages[0][0]] = node
        return head

    def _walk(self, pages: list, time: int) -> tuple[_Node, int]:
        """The deepest node matching ``pages`` from the root (splitting where a match ends inside
        a node) and the pages matched; every node on the way takes ``time``."""
        node, done = self.root, 0
        node.time = time
        while done < len(pages) and pages[done][0] in node.children:
            child = node.children[pages[done][0]]
            child.time = time
            same = 0
            while same < len(child.pages) and done + same < len(pages) and child.pages[same][0] == pages[done + same][0]:
                same += 1
            done += same
            if same < len(child.pages):
                return self._split(child, same), done
            node = child
        return node, done

    def _pages(self, tokens: Sequence[int]) -> list:
        out, parent = [], None
        for start in range(0, len(tokens) // self.page * self.page, self.page):
            piece = tuple(tokens[start:start + self.page])
            parent = self.contents.block(parent, piece)
            out.append((piece, parent))
        return out

    def request(self, tokens: Sequence[int]) -> int:
        """One request: match, lock, evict, unlock, insert. Returns the tokens it matched."""
        pages = self._pages(tokens)
        node, matched = self._walk(pages, self._tick())
        self._lock(node, 1)
        need = self.size + (len(pages) - matched) * self.page - self.capacity
        if need > 0:
            self._evict(need)
        self._lock(node, -1)
        node, done = self._walk(pages, self._tick())
        if done < len(pages):
            leaf = _Node(pages[done:], node, self._tick())
            node.children[pages[done][0]] = leaf
            self.size += len(leaf.pages) * self.page
            self.events += [("stored", content) for _, content in leaf.pages]
        return matched * self.page

    def _lock(self, node: _Node, delta: int) -> None:
        while node is not self.root:
            node.lock += delta
            node = node.parent

    def _leaves(self, node: _Node) -> list[_Node]:
        stack, out = [node], []
        while stack:
            walk = stack.pop()
            if walk.children:
                stack.extend(walk.children.values())
            elif walk is not self.root and walk.lock == 0:
                out.append(walk)
        return out

    def _evict(self, tokens: int) -> None:
        heap = [(leaf.time, n, leaf) for n, leaf in enumerate(self._leaves(self.root))]
        heapq.heapify(heap)
        order = len(heap)
        evicted = 0
        while evicted < tokens and heap:
            _time, _n, leaf = heapq.heappop(heap)
            del leaf.parent.children[leaf.pages[0][0]]
            evicted += len(leaf.pages) * self.page
            self.size -= len(leaf.pages) * self.page
            parent = leaf.parent
            if not parent.children and parent.lock == 0 and parent is not self.root:
                order += 1
                heapq.heappush(heap, (parent.time, order, parent))
            self.events += [("removed", content) for _, content in leaf.pages]

    def take_events(self) -> list[tuple[str, int]]:
        """The events since the last take."""
        events, self.events = self.events, []
        return events


def looks_like_sglang(messages: Sequence) -> str | None:
    """Why the recording looks like SGLang's publisher (one clause), or None: a negative block
    hash (SGLang sends signed int64, vLLM unsigned) in the first stores."""
    from kvviz.watch.wire import BlockStored, DecodeError, decode_payload

    for message in messages[:64]:
        try:
            batch = decode_payload(message.payload, seq=message.seq, topic="")
        except DecodeError:
            continue
        for event in batch.events:
            if isinstance(event, BlockStored) and any(isinstance(k, int) and k < 0 for k in event.hashes):
                return "its block hashes are signed 64-bit ints, as SGLang's publisher sends them (vLLM's are unsigned)"
    return None


def against_radix(messages: Sequence, requests: Sequence, *, page_tokens: int = 16, capacity_tokens: int = 48_000,
                  source: str = "", design_reason: str = "") -> AgainstReport:
    """The recording ``messages`` beside :class:`RadixModel` running ``requests`` (Mooncake
    requests, prompts as the recordings' recipe spells them), batch *i* (from 1) against
    request *i*, by content. Both sides' resets (AllBlocksCleared) are compared as events."""
    contents = BlockContents()
    recorded = decode_messages(messages, contents)
    model = RadixModel(page_tokens, capacity_tokens, contents)
    computed: list[list[tuple[str, int]]] = []
    hits = 0
    recording_hits: int | None = 0
    for index, request in enumerate(requests):
        prompt = scaled_prompt(request.hash_ids, request.input_length, page_tokens)
        hits += model.request(prompt)
        computed.append(model.take_events())
        if recording_hits is not None and index < len(recorded):
            hit = _prompt_hit(recorded[index], contents, prompt, page_tokens)
            recording_hits = None if hit is None else recording_hits + hit
    agreeing, differing, first = 0, [], None
    stores, removes = [0, 0, 0], [0, 0, 0]
    for index in range(max(len(recorded), len(computed))):
        ours = list(recorded[index].events) if index < len(recorded) else []
        if index < len(recorded) and recorded[index].cleared:
            ours.insert(0, ("cleared", -1))
        theirs = computed[index] if index < len(computed) else []
        _tally_events(ours, theirs, stores, removes)
        if index < len(recorded) and index < len(computed):
            if ours == theirs:
                agreeing += 1
            else:
                differing.append(index + 1)
                if first is None:
                    strip = [e for e in ours if e[0] != "cleared"], [e for e in theirs if e[0] != "cleared"]
                    first = dataclasses.replace(_difference(index + 1, recorded[index].seq, *strip, contents),
                                                other="the radix model")
    cleared_apart = tuple(b.index + 1 for b, sim in zip(recorded, computed)
                          if b.cleared != (("cleared", -1) in sim))
    return AgainstReport(
        source=source, scenario_title=f"{len(requests):,} requests of the trace on a radix cache",
        pages=capacity_tokens // page_tokens, tokens_per_page=page_tokens, recompute_last_token=False,
        recording_batches=len(recorded), scenario_batches=len(computed), batches_agreeing=agreeing,
        differing_batches=tuple(differing), stores_agreeing=stores[0], stores_only_by_recording=stores[1],
        stores_only_by_kvcore=stores[2], removes_agreeing=removes[0], removes_only_by_recording=removes[1],
        removes_only_by_kvcore=removes[2], kvcore_hit_tokens=hits,
        recording_hit_tokens=recording_hits if len(recorded) == len(computed) else None,
        first_divergence=first, removed_unknown=sum(b.unknown_removed for b in recorded),
        cleared_batches=cleared_apart,
        undecodable_batches=tuple(b.index + 1 for b in recorded if b.error is not None),
        notes=() if cleared_apart else ("resets (AllBlocksCleared) are compared as events: the model reset where "
                                        "the recording did",),
        design=TRIE, design_reason=design_reason)
