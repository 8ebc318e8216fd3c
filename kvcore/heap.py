# SPDX-License-Identifier: Apache-2.0
"""An indexed binary min-heap of eviction candidates.

Each item stores its own array position in ``item.hpos`` (-1 when absent), so removing a
node that stops being a candidate (an acquire matched it, a publish adopted it) is
O(log n) instead of a scan, and the heap is never rebuilt from all leaves (SGLang's
RadixCache does rebuild, at about 11 ms per evict call on a large tree).

Keys are plain ints: the trie encodes its policy's key tuple (``(last_access, seq)`` for
lru) with its policy's packing (:mod:`kvcore.policies`), which orders exactly like the
tuples but compares faster.
"""

from __future__ import annotations

from typing import Any

class IndexedHeap:
    """Min-heap of items with an ``hpos`` slot, keyed by ints. push/pop/remove O(log n)."""

    __slots__ = ("_keys", "_items")

    def __init__(self) -> None:
        self._keys: list[int] = []
        self._items: list[Any] = []

    def __len__(self) -> int:
        return len(self._items)

    def items(self) -> list[Any]:
        """The items in array order (index 0 is the minimum). O(n) copy."""
        return list(self._items)

    def keys(self) -> list[int]:
        """The keys in array order."""
        return list(self._keys)

    def arrays(self) -> tuple[list[int], list[Any]]:
        """The live key and item arrays, for a caller's inlined hot loop (the trie's
        eviction). Whoever writes them keeps both in step and every ``item.hpos`` right."""
        return self._keys, self._items

    def peek(self) -> Any | None:
        """The item with the smallest key, or None. O(1)."""
        return self._items[0] if self._items else None

    def push(self, item: Any, key: int) -> None:
        """Add ``item`` (not already present) with ``key``."""
        # _sift_up inlined (a push per release): most pushes are of the newest key, which
        # stays at the bottom after one comparison.
        keys = self._keys
        items = self._items
        pos = len(items)
        keys.append(key)
        items.append(item)
        while pos > 0:
            parent = (pos - 1) >> 1
            parent_key = keys[parent]
            if key >= parent_key:
                break
            keys[pos] = parent_key
            moved = items[parent]
            items[pos] = moved
            moved.hpos = pos
            pos = parent
        keys[pos] = key
        items[pos] = item
        item.hpos = pos

    def pop(self) -> Any:
        """Remove and return the item with the smallest key."""
        items = self._items
        top = items[0]
        top.hpos = -1
        last_key = self._keys.pop()
        last_item = items.pop()
        if items:
            self._keys[0] = last_key
            items[0] = last_item
            self._sift_down(0)
        return top

    def replace_top(self, item: Any, key: int) -> Any:
        """Pop the minimum and push ``item`` in one sift (heapq's heapreplace). O(log n).

        Eviction cascades use it: the evicted leaf's parent often becomes a candidate at once.
        """
        items = self._items
        top = items[0]
        top.hpos = -1
        items[0] = item
        self._keys[0] = key
        self._sift_down(0)
        return top

    def remove(self, item: Any) -> None:
        """Remove ``item``, which must be present."""
        self._remove_at(item.hpos)

    def append_raw(self, item: Any, key: int) -> None:
        """Append without sifting: used by restore to reproduce an exact array order."""
        item.hpos = len(self._items)
        self._keys.append(key)
        self._items.append(item)

    def _remove_at(self, pos: int) -> None:
        keys = self._keys
        items = self._items
        items[pos].hpos = -1
        last_key = keys.pop()
        last_item = items.pop()
        if pos == len(items):
            return
        keys[pos] = last_key
        items[pos] = last_item
        last_item.hpos = pos
        if pos > 0 and last_key < keys[(pos - 1) >> 1]:
            self._sift_up(pos)
        else:
            self._sift_down(pos)

    def _sift_up(self, pos: int) -> None:
        keys = self._keys
        items = self._items
        key = keys[pos]
        item = items[pos]
        while pos > 0:
            parent = (pos - 1) >> 1
            parent_key = keys[parent]
            if key >= parent_key:
                break
            keys[pos] = parent_key
            moved = items[parent]
            items[pos] = moved
            moved.hpos = pos
            pos = parent
        keys[pos] = key
        items[pos] = item
        item.hpos = pos

    def _sift_down(self, pos: int) -> None:
        """The one sift down of this class (pop, replace_top, remove). A pop sifted Floyd's
        way (heapq's) would cost about the same: measured in Python bytecodes per pop on a
        heap of random keys, 538 vs 535 at 1,000 entries and 874 vs 918 at 100,000; and pop
        is off the hot path (the trie's batch eviction inlines its own)."""
        keys = self._keys
        items = self._items
        n = len(keys)
        key = keys[pos]
        item = items[pos]
        while True:
            child = 2 * pos + 1
            if child >= n:
                break
            right = child + 1
            if right < n and keys[right] < keys[child]:
                child = right
            child_key = keys[child]
            if key <= child_key:
                break
            keys[pos] = child_key
            moved = items[child]
            items[pos] = moved
            moved.hpos = pos
            pos = child
        keys[pos] = key
        items[pos] = item
        item.hpos = pos


class WatchedHeap(IndexedHeap):
    """The heap a watched cache uses: the same operations, with every move reported.

    Sifts here swap one pair of slots at a time, the textbook way, and report each swap
    (``IndexedHeap`` moves a hole instead, which is faster but never holds a whole array
    between moves). With distinct keys (every key ends in a unique ``seq``) both leave the
    same array after each operation: the state machine test replays both. ``reporter`` gets
    ``pushed(item, slot)``, ``popped(top, moved)``, ``removed(item, slot, moved)`` and
    ``swapped(direction, item, slot, other, other_slot)`` right after each move, when the
    arrays and every ``hpos`` are consistent.
    """

    __slots__ = ("reporter",)

    def __init__(self, reporter, keys: list[int] | None = None, items: list[Any] | None = None) -> None:
        super().__init__()
        self.reporter = reporter
        if keys is not None:  # take over a live heap's arrays (watching starts mid-life)
            self._keys, self._items = keys, items

    def push(self, item: Any, key: int) -> None:
        """Add ``item`` at the array's end, then sift it up."""
        self._keys.append(key)
        self._items.append(item)
        item.hpos = slot = len(self._items) - 1
        self.reporter.pushed(item, slot)
        self._sift_up(slot)

    def pop(self) -> Any:
        """Remove the top: the last entry takes its slot, then sifts down."""
        items = self._items
        top = items[0]
        top.hpos = -1
        last_key = self._keys.pop()
        last_item = items.pop()
        if not items:
            self.reporter.popped(top, None)
            return top
        self._keys[0] = last_key
        items[0] = last_item
        last_item.hpos = 0
        self.reporter.popped(top, last_item)
        self._sift_down(0)
        return top

    def replace_top(self, item: Any, key: int) -> Any:
        """Pop the top and put ``item`` in its slot in one sift down."""
        items = self._items
        top = items[0]
        top.hpos = -1
        items[0] = item
        self._keys[0] = key
        item.hpos = 0
        self.reporter.popped(top, item)
        self._sift_down(0)
        return top

    def _remove_at(self, pos: int) -> None:
        keys = self._keys
        items = self._items
        removed = items[pos]
        removed.hpos = -1
        last_key = keys.pop()
        last_item = items.pop()
        if pos == len(items):
            self.reporter.removed(removed, pos, None)
            return
        keys[pos] = last_key
        items[pos] = last_item
        last_item.hpos = pos
        self.reporter.removed(removed, pos, last_item)
        if pos > 0 and last_key < keys[(pos - 1) >> 1]:
            self._sift_up(pos)
        else:
            self._sift_down(pos)

    def _swap(self, direction: str, a: int, b: int) -> None:
        """Swap slots ``a`` (the moving item's) and ``b``, then report it."""
        keys = self._keys
        items = self._items
        keys[a], keys[b] = keys[b], keys[a]
        items[a], items[b] = items[b], items[a]
        items[a].hpos = a
        items[b].hpos = b
        self.reporter.swapped(direction, items[b], a, items[a], b)

    def _sift_up(self, pos: int) -> None:
        keys = self._keys
        while pos > 0:
            parent = (pos - 1) >> 1
            if keys[pos] >= keys[parent]:
                break
            self._swap("up", pos, parent)
            pos = parent

    def _sift_down(self, pos: int) -> None:
        keys = self._keys
        n = len(keys)
        while True:
            child = 2 * pos + 1
            if child >= n:
                break
            if child + 1 < n and keys[child + 1] < keys[child]:
                child += 1
            if keys[pos] <= keys[child]:
                break
            self._swap("down", pos, child)
            pos = child
