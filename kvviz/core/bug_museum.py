# SPDX-License-Identifier: Apache-2.0
"""The bug museum's catalogue: the bugs of docs/bugs.md (shortfin's, in its seed, 3.1.0 and 3.9.0;
SGLang's and mini-sglang's) and, for each whose buggy code is known, that code written as
changes to the lines of kvcore's algorithms.

Data only, as docs/bugs.md and the demos tell it: :mod:`kvviz.core.pseudocode` builds the buggy
variants the code pane shows beside ours from it (and checks every anchor names a line of
ours), and :data:`~kvviz.backends.registry.MUSEUM_PREFIXES` names the demos that replay
each bug. It lives with the backends, beside shortfin's known issues, because what it knows
is other caches' bugs; the model holds the machinery, not the exhibits.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

__all__ = ["BUGS", "NO_VARIANT", "VARIANTS"]

BUGS: Mapping[str, str] = MappingProxyType({
    "B1": "heap tie `TypeError` (shortfin seed, Windows)",
    "B2": "parent stays in the leaf set after gaining a child (3.1.0)",
    "B3": "a publish that creates nothing marks an interior node as leaf (3.1.0)",
    "B4": "duplicate publish overwrites the child (3.1.0)",
    "B4b": "second publisher keeps its reference on root (3.9.0)",
    "B5": "reference leaks when allocation fails (3.1.0)",
    "B6": "unpublished pages never return on release (3.1.0)",
    "B7": "cache keeps the caller's token list (3.1.0)",
    "B8": "non-monotonic publish (3.1.0)",
    "B9": "lookup takes no reference (3.9.0)",
    "B10": "zero-page allocation steals a reference (3.9.0)",
    "B11": "releasing a stale handle after publish (3.9.0)",
    "B12": "extend evicts the allocation's own page (3.1.0)",
    "S1": "`evictable_size` double-counts shared pages (SGLang #35270)",
    "S2": "node itself never locked (mini-sglang PR #52)",
})
"""Every bug of docs/bugs.md, by id: its one-line description (docs/bugs.md's words)."""

# What each buggy cache did, on our lines. The sources: shortfin's seed and 3.1.0 as their
# bug-museum demos narrate them, 3.9.0 as installed (the shortfin extra), mini-sglang's PR.
VARIANTS: Mapping[str, tuple[str, Mapping[str, str | None]]] = MappingProxyType({
    "B1": ("evict", {  # the seed (shark-ai de4d2fec3): TrieNode has no __lt__
        "heap-key": "heap = [(n.access_time, n) for n in leaves]; heapify(heap)  # tie: TypeError",
        "top": "_, victim = heappop(heap)        # (wall-clock time, node) pairs"}),
    "B2": ("publish", {  # 3.1.0: create_child in the loop, leaves.add(cur_node) after it
        "create": "child = Node(block, allocation.pages[i])  # ref 0: no ref of its own",
        "link": "parent.children[block] = child   # parent stays in the leaf set",
        "refs": "leaves.add(path[-1]); path[-1].ref += 1; old_end.ref -= 1  # the end only"}),
    "B3": ("publish", {
        "monotonic": "if full <= len(path): leaves.add(path[-1]); return  # has children"}),
    "B4": ("publish", {
        "look": "child = None                      # never looked up",
        "link": "parent.children[block] = child    # replaces the node there"}),
    "B4b": ("publish", {
        "ref": "child.last_access = now           # no ref: it stays on the root",
        "refs": "if a node was created: old_end.ref -= 1; new_end.ref += 1"}),
    "B5": ("acquire", {
        "hit": "node.ref += 1; hit = len(matched) * tokens_per_page  # before the check",
        "fail": "raise CacheAllocationFailure      # node keeps that ref: leaked",
        "ref": "n.hits += 1                       # (referenced before the check)"}),
    "B6": ("release", {
        "free": "pass                              # the tail is never given back"}),
    "B7": ("extend", {
        "copy": "# no copy: tokens is the caller's own list",
        "prefix": "if len(tokens) == len(allocation.tokens): return  # same list: equal",
        "store": "allocation.tokens = tokens        # the caller's list from now on"}),
    "B8": ("publish", {
        "monotonic": "if full <= allocation.published: allocation.published = full; return",
        "loop": "for i in range(allocation.published, full):  # from the count moved back"}),
    "B9": ("acquire", {  # 3.9.0: lookup, then allocate: acquire_free_pages, evict_pages, ref
        "fits?": "if needed > free: evict_pages(needed - free)  # our match too: no ref yet",
        "fail": "pages = acquire_free_pages(needed)  # can be the page just matched",
        "count": None, "in-heap": None, "unheap": None, "swap": None, "uncandidate": None,
        "ref": "pass                              # no ref here: allocate takes it later",
        "return": "matched[-1].ref += 1; return allocation  # the ref, after the pages"}),
    "B10": ("acquire", {
        "ref": "if needed > 0: n.ref += 1         # 0 new pages: no ref taken"}),
    "S2": ("acquire", {
        "in-heap": "if n in heap and n is not matched[-1]:  # the last stays one",
        "ref": "if n is not matched[-1]: n.ref += 1  # ancestors only"}),
})
"""Each bug whose buggy code docs/bugs.md (with its demo) describes, by id: the algorithm of ours it
changes and its changes, ``{anchor: the buggy line}`` (None: the buggy code has no such line)."""

NO_VARIANT: Mapping[str, str] = MappingProxyType({
    "B11": "a stale handle released after publish: a misuse of shortfin's API, not a line of an algorithm "
           "(and no demo)",
    "B12": "docs/bugs.md gives only the effect; its cause is B2's reference counting (see bug-b2-parent-leaf)",
    "S1": "docs/bugs.md names SGLang's evictable_size counter but not the code that updates it",
})
"""The bugs without a variant, and why."""
