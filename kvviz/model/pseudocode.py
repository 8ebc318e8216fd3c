# SPDX-License-Identifier: Apache-2.0
"""The pseudo-code the sub-step pane shows, and which of its lines produced each sub-step.

The algorithms are data: each :class:`Algorithm` is 10 to 30 lines of Python-like
pseudo-code, true to what kvcore does (``kvcore/trie.py``, ``kvcore/base.py``,
``kvcore/heap.py``'s watched sifts), each :class:`Line` carrying an **anchor**, a short
name unique in its algorithm (``walk``, ``fits?``, ``swap``, ``cut``, ...). Line numbers are
derived, so sub-steps are mapped by anchor (:data:`SUBSTEP_LINES`, the one table) and an
edit of the text cannot silently point a sub-step at the wrong line.

Algorithms (:data:`ALGORITHMS`):

=============  ============================================================================
``acquire``    the trie's acquire: walk, fit check, references, take pages, call ``evict``
``publish``    the trie's publish: touch the path, adopt cached blocks (dedup), create nodes
``extend``     extend, kvcore's one method for both caches (the base cache has nothing
               evictable, so there it never reaches ``evict``)
``release``    the trie's release: drop references deepest first, push new candidates and
               sift them up, free the unpublished tail
``evict``      eviction, one victim at a time: pop the heap's top (or let the victim's
               parent take its slot: the cascade), sift down by swaps, cut the victim out
               of the trie, give its page to the allocation
``base``       the base cache (no sharing): its acquire, publish and release in one short
               algorithm, since the trie's lines (walk, heap, nodes) do not apply to it
``shortfin``   the shortfin backend's calls into shortfin 3.9.0 (lookup, allocate,
               publish_pages_for_tokens, release_pages, free_allocated_pages) and kvviz's
               record of the handle shortfin returns: its sub-steps are those calls,
               observed between them
``hash``       kvcore's hash-block cache (vLLM's design): its acquire, extend, publish and
               release, and the take from the free queue's head (lazy eviction) they share
=============  ============================================================================

The heap's sifts are lines of the algorithms that cause them (the remove in ``acquire``
and ``publish``, the push in ``release``, the pop in ``evict``) rather than an algorithm of
their own: each sift has one caller, and the lines sit where the learner is reading.

:func:`lines_for` says which lines produced a sub-step; eviction's sub-steps inside an
acquire or an extend are in ``evict``, and :func:`call_stack` also gives the caller's line
(the pane switches algorithms like a call stack). :func:`buggy_variant` gives, for a
bug-museum demo, the buggy code beside ours (:class:`Variant`): every bug of BUGS.md whose
buggy code it (with the demo's narration) describes has one; B11 (no demo; a stale handle
is API misuse, not a line), B12 (BUGS.md gives its effect, whose cause is B2's reference
counting) and S1 (SGLang's counter is named, its code is not) have none
(:data:`NO_VARIANT` says why).

Pure data and functions: no kvcore, textual or kvviz.ui import.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePath

# -- algorithms -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Line:
    """One line of pseudo-code: its 1-based ``number``, its ``text`` (indentation included),
    its ``anchor`` (a name unique in the algorithm), whether it is ``structural`` (a loop
    header, a comment, a ``return``: never lit by a sub-step of its own) and the algorithm
    it ``calls`` (the caller's frame of :func:`call_stack`), if any."""

    number: int
    text: str
    anchor: str
    structural: bool = False
    calls: str | None = None


@dataclass(frozen=True, slots=True)
class Algorithm:
    """A named piece of pseudo-code: ``title`` says what it is, ``source`` what it is true to."""

    name: str
    title: str
    source: str
    lines: tuple[Line, ...]

    def numbers(self, *anchors: str) -> tuple[int, ...]:
        """The line numbers of ``anchors``, in that order; KeyError for an unknown anchor."""
        by_anchor = {line.anchor: line.number for line in self.lines}
        try:
            return tuple(by_anchor[a] for a in anchors)
        except KeyError as e:
            raise KeyError(f"{self.name} has no line anchored {e.args[0]!r}") from None

    def line(self, anchor: str) -> Line:
        """The line anchored ``anchor``."""
        return self.lines[self.numbers(anchor)[0] - 1]

    def texts(self) -> tuple[str, ...]:
        """The lines' texts, line 1 first (what the pane prints)."""
        return tuple(line.text for line in self.lines)


def _block(*parts: str) -> str:
    """Pieces of pseudo-code (triple-quoted strings) as one block, line after line."""
    return "\n".join(part.strip("\n") for part in parts)


def _parse(name: str, title: str, source: str, block: str) -> Algorithm:
    """An algorithm from a block of ``text  @anchor`` lines.

    ``@~anchor`` marks a structural line, ``@anchor>other`` a line calling algorithm
    ``other``. Raises ValueError for a line without an anchor or an anchor used twice, so a
    broken table fails at import, not in the pane.
    """
    lines: list[Line] = []
    seen: set[str] = set()
    for number, raw in enumerate(block.splitlines(), 1):
        text, sep, tag = raw.rpartition("  @")
        if not sep or not tag:
            raise ValueError(f"pseudo-code {name} line {number} has no anchor: {raw!r}")
        structural = tag.startswith("~")
        anchor, _, calls = tag.lstrip("~").partition(">")
        if anchor in seen:
            raise ValueError(f"pseudo-code {name} uses anchor {anchor!r} twice")
        seen.add(anchor)
        lines.append(Line(number, text.rstrip(), anchor, structural, calls or None))
    return Algorithm(name, title, source, tuple(lines))


# The tail both acquire and extend end with: free pages first, then evictions (kvcore's
# BasePagedAttentionCache._grow, which both call).
_GROW = """
    if needed > 0:                                              @~grow
        taken = free_list.take(min(needed, free))  # its front  @take
        allocation.pages += taken                               @~append
        if needed > len(taken):                                 @~short
            allocation.pages += evict(allocation, needed - len(taken))  @evict-call>evict
"""

_ACQUIRE = _block("""
def acquire(tokens, extra=0, priority=0):                       @start
    node, matched = root, []                                    @~init
    for block in the full pages of tokens:                      @~loop
        child = node.children.get(block)                        @look
        if child is None: break           # matching stops      @stop
        matched.append(child); node = child                     @walk
    hit = len(matched) * tokens_per_page                        @~hit
    needed = pages_for(len(tokens) - hit + extra)               @~needed
    if needed > free + evictable - (ref-0 nodes in matched):    @fits?
        raise CacheAllocationFailure      # nothing changed     @fail
    now = clock = clock + 1                                     @tick
    allocation = Allocation(tokens, [n.page for n in matched])  @match
    for n in matched:                                           @~refs
        if n.ref == 0: evictable -= 1     # ours now, not evictable  @~count
        if n in heap:                     # childless, ref 0    @~in-heap
            heap.remove(n)                # last entry fills n's slot  @unheap
            sift that entry up or down: swap while out of order  @swap
            n is no longer an eviction candidate                @uncandidate
        n.ref += 1; n.hits += 1           # ref > 0: not evicted  @ref
    for n in matched: n.priority = max(n.priority, priority)    @~priority
    for n in matched: n.last_access = now                       @touch
""", _GROW, """
    return allocation                                           @~return
""")

_PUBLISH = _block("""
def publish(allocation, tokens=None):                           @start
    tokens = checked tokens (the base cache's checks)           @check
    now = clock = clock + 1                                     @tick
    path, full = allocation.path, len(tokens) // tokens_per_page  @~path
    for n in path[:full]: n.last_access = now                   @touch
    if full <= len(path): return          # nothing new         @~monotonic
    parent = path[-1] if path else root                         @~parent
    for i in range(len(path), full):                            @~loop
        block = page i of tokens                                @~block
        child = parent.children.get(block)                      @~look
        if child is not None:             # published first     @~found
            if child.ref == 0: evictable -= 1  # ours now       @~count
            if child in heap:             # childless, ref 0    @~in-heap
                heap.remove(child)        # last entry fills its slot  @unheap
                sift that entry up or down: swap while out of order  @swap
                child is no longer an eviction candidate        @uncandidate
            own, allocation.pages[i] = allocation.pages[i], child.page  @dedup
            free_list.give([own])         # our copy goes back  @free
            child.ref += 1; child.last_access = now             @ref
            child.priority = max(child.priority, allocation.priority)  @~priority
        else:                             # new: ref 1, touched now  @~else
            child = Node(block, allocation.pages[i], allocation.priority)  @create
            parent.children[block] = child                      @link
        path.append(child); parent = child                      @~advance
    # each node on the path holds one reference for allocation  @~refs
""")

_EXTEND = _block("""
def extend(allocation, tokens, extra=0):                        @start
    check the allocation is live and extra >= 0                 @check
    tokens = tuple(tokens)                # our own copy        @~copy
    if tokens do not start with allocation.tokens: refuse       @~prefix
    needed = pages_for(len(tokens) + extra) - len(allocation.pages)  @~needed
    if needed > free + evictable:         # 0 in the base cache  @fits?
        raise CacheAllocationFailure      # nothing changed     @fail
    now = clock = clock + 1                                     @tick
    allocation.tokens = tokens                                  @store
""", _GROW)

_RELEASE = _block("""
def release(allocation):                                        @start
    check the allocation is live                                @check
    now = clock = clock + 1                                     @tick
    for n in reversed(allocation.path):   # deepest first       @~loop
        n.ref -= 1                                              @unref
        if n.ref == 0:                                          @~zero
            evictable += 1                # once its children go  @~count
            if not n.children:            # childless too       @~childless
                heap.push(n, key(n))      # at the array's end  @push
                while n's slot > 0 and key(n) < key(its heap parent):  @sift-compare
                    swap n with its heap parent     # sift up   @swap
                n is an eviction candidate now, in key order    @candidate
    tail = allocation.pages[len(allocation.path):]  # unpublished  @~tail
    free_list.give(tail)                                        @free
    allocation.released = True            # it holds nothing    @release
""")

_EVICT = _block("""
def evict(allocation, count):             # pages still needed  @~def
    # key(n): lru (last_access, seq), priority (priority, last_access, seq)  @~heap-key
    for _ in range(count):                # one victim a turn   @~cascade
        victim = heap[0]                  # the smallest key    @top
        parent = victim.parent                                  @~parent
        if parent is not root and parent.ref == 0 and no other child:  @leaf?
            heap[0] = parent              # the cascade: it takes slot 0  @replace-top
        else:                                                   @~else
            last = heap.pop()             # the array's end     @pop
            if heap: heap[0] = last       # it fills the top's slot  @fill
        i = 0                             # sift down from the top  @~sift
        while slot i has a child:                               @~while
            c = the child slot of i with the smaller key        @pick-child
            if key(heap[i]) <= key(heap[c]): break              @sift-compare
            swap heap[i] and heap[c]; i = c                     @swap
        del parent.children[victim.tokens]  # out of the trie   @cut
        allocation.pages.append(victim.page); evictable -= 1    @give
        if parent took slot 0: it is a candidate now (a leaf)   @candidate
""")

_BASE = _block("""
def acquire(tokens, extra=0):             # extra token slots  @acquire
    tokens = tuple(tokens)                # our own copy        @~copy
    needed = pages_for(len(tokens) + extra)                     @~needed
    if needed > free_list.count():        # nothing evictable   @fits?
        raise CacheAllocationFailure      # nothing changed     @fail
    now = clock = clock + 1                                     @tick
    allocation = Allocation(tokens, pages=[])  # hit 0: no sharing  @match
    allocation.pages += free_list.take(needed)                  @take
    return allocation                                           @~return
def publish(allocation, tokens=None):                           @publish
    check it is live; longer tokens must fit in its pages       @publish-check
    allocation.tokens = the longer of tokens and its own        @~publish-store
    now = clock = clock + 1               # and nothing else    @publish-tick
def release(allocation):                                        @release
    check it is live                                            @release-check
    now = clock = clock + 1                                     @release-tick
    free_list.give(allocation.pages)      # every page          @free
    allocation.released = True            # it holds nothing    @released
""")

_SHORTFIN = _block("""
def acquire(name, tokens, extra=0):       # extra token slots  @acquire
    info = cache.lookup(tokens)           # full pages; no ref  @lookup
    rest = tokens[info.num_tokens:]                             @~rest
    block = pages_for(len(rest) + extra) if extra else 0        @~block
    info = cache.allocate(rest, info, block)  # evicts if short  @allocate
    handles[name] = info                  # kvviz's record      @acquire-record
def publish(name, tokens=None):                                 @publish
    info = cache.publish_pages_for_tokens(handles[name])  # ref moves  @publish_pages_for_tokens
    handles[name] = info                  # kvviz's record      @publish-record
def extend(name, tokens, extra=0):                              @extend
    needed = pages_for(len(tokens) + extra) - len(info.pages)   @~needed
    if needed <= 0: info.tokens = tokens; return  # no call     @~room
    info = cache.allocate(new tokens, info, needed)  # evicts if short  @extend-allocate
    handles[name] = info                  # kvviz's record      @extend-record
def release(name):                                              @release
    cache.release_pages(handles[name])    # ref -1 on its last node  @release_pages
    cache.free_allocated_pages(its unpublished pages)           @free_allocated_pages
    del handles[name]                     # kvviz's record      @release-record
""")

_HASH = _block("""
def acquire(tokens, extra=0):                                   @acquire
    matched = the longest run of cached keys from block 0       @~lookup
    needed = pages_for(len(tokens) + extra) - len(matched)      @~needed
    if needed > len(queue) - queued(matched):                   @fits?
        raise CacheAllocationFailure      # nothing changed     @fail
    now = clock = clock + 1                                     @tick
    allocation = Allocation(tokens, [b.page for b in matched])  @match
    for block in matched:                                       @~hits
        if ref[block.page] == 0: queue.remove(block.page)       @dequeue
        ref[block.page] += 1                                    @ref
    take(allocation, needed)                                    @~take-call
def extend(allocation, tokens, extra=0):                        @extend
    needed = pages_for(len(tokens) + extra) - len(pages)        @~extend-needed
    if needed > len(queue): raise CacheAllocationFailure        @extend-fail
    now = clock = clock + 1; allocation.tokens = tokens         @extend-tick
    take(allocation, needed)                                    @~extend-take
def take(allocation, needed):             # the queue's head    @~take-def
    for page in queue[:needed]:                                 @~head
        if page caches a block: uncache it  # lazy eviction     @drop
    allocation.pages += queue.popleft(needed)                   @take
def publish(allocation, tokens=None):                           @publish
    now = clock = clock + 1                                     @publish-tick
    for each newly full block i: key = sha256(parent, tokens)   @~blocks
        cache[key].append(allocation.pages[i])  # dups too      @cache
def release(allocation):                                        @release
    now = clock = clock + 1                                     @release-tick
    for page in reversed(allocation.pages):                     @~pages
        if page caches a block: ref[page] -= 1                  @unref
    queue: caching nothing -> head; ref 0 -> tail, last first   @queue
    allocation.released = True            # it holds nothing    @released
""")

ALGORITHMS: Mapping[str, Algorithm] = {a.name: a for a in (
    _parse("acquire", "acquire: match the cached prefix, reference it, take or evict the rest",
           "kvcore/trie.py TriePagedAttentionCache.acquire_pages_for_tokens, base.py _grow", _ACQUIRE),
    _parse("publish", "publish: share the allocation's full pages as trie nodes",
           "kvcore/trie.py TriePagedAttentionCache._publish", _PUBLISH),
    _parse("extend", "extend: more tokens for a live allocation, more pages if needed",
           "kvcore/base.py BasePagedAttentionCache._extend and _grow", _EXTEND),
    _parse("release", "release: drop the references, new candidates join the heap",
           "kvcore/trie.py TriePagedAttentionCache._release, heap.py WatchedHeap.push", _RELEASE),
    _parse("evict", "evict: pop the heap's smallest key, sift down, give the page",
           "kvcore/trie.py TriePagedAttentionCache._evict_narrated, heap.py WatchedHeap", _EVICT),
    _parse("base", "the base cache: pages per request, nothing shared",
           "kvcore/base.py BasePagedAttentionCache", _BASE),
    _parse("hash", "the hash-block cache (vLLM's design): chained block keys, one free queue",
           "kvcore/hashblock.py HashBlockPagedAttentionCache", _HASH),
    _parse("shortfin", "the shortfin backend: calls into shortfin 3.9.0's trie cache",
           "kvviz/backends/shortfin_backend.py ShortfinBackend", _SHORTFIN),
)}
"""Every algorithm the pane can show, by name."""

CACHE_KINDS = ("trie", "base", "hash", "shortfin")
"""The cache kinds with pseudo-code (``shortfin``: the shortfin backend's calls)."""

NO_LINES: tuple[str, tuple[int, ...]] = ("", ())
"""What :func:`lines_for` returns for a cache kind without pseudo-code."""


def algorithm_for(op_kind: str, cache_kind: str = "trie") -> str:
    """The algorithm an op of ``op_kind`` runs on a ``cache_kind`` cache (the call stack's
    outermost frame); "" for a cache kind without pseudo-code."""
    if cache_kind == "trie":
        return op_kind
    if cache_kind == "base":
        return "extend" if op_kind == "extend" else "base"  # extend is one method for both
    if cache_kind in ("shortfin", "hash"):
        return cache_kind  # one algorithm holds all of its ops
    return ""


# -- which lines produced a sub-step ----------------------------------------------------------

# Keys: (cache kind, op kind, sub-step kind, qualifier); values: (algorithm, anchors). The
# qualifier tells apart what one (op, kind) pair can be (see _qualifier); "" when it cannot.
_Key = tuple[str, str, str, str]
# op -> (call, anchor), in the order the backend makes them; "record" is not shortfin's but
# kvviz's adapter keeping the handle shortfin returned (substeps.py's last sub-step).
_SHORTFIN_CALLS = {
    "acquire": (("lookup", "lookup"), ("allocate", "allocate"), ("record", "acquire-record")),
    "publish": (("publish_pages_for_tokens", "publish_pages_for_tokens"), ("record", "publish-record")),
    "extend": (("allocate", "extend-allocate"), ("record", "extend-record")),
    "release": (("release_pages", "release_pages"), ("free_allocated_pages", "free_allocated_pages"),
                ("record", "release-record")),
}


def _table() -> dict[_Key, tuple[str, tuple[str, ...]]]:
    """Build :data:`SUBSTEP_LINES`: every sub-step kind in every op it can occur in."""
    t: dict[_Key, tuple[str, tuple[str, ...]]] = {}

    def own(cache: str, op: str, algorithm: str, rows: dict) -> None:
        for kind, anchors in rows.items():
            kind, _, qualifier = kind.partition("/")
            t[(cache, op, kind, qualifier)] = (algorithm, anchors)

    removal = {"uncandidate": ("uncandidate",), "unheap": ("unheap",), "swap/unheap": ("swap",)}
    own("trie", "acquire", "acquire", {
        "start": ("start",), "refused": ("start",), "walk": ("look", "walk"), "stop": ("look", "stop"),
        "fail": ("fits?", "fail"), "tick": ("tick",), "match": ("match",), **removal, "ref": ("ref",),
        "touch": ("touch",), "take": ("take",)})
    own("trie", "publish", "publish", {
        "start": ("start",), "refused": ("start", "check"), "tick": ("tick",), "touch": ("touch",), **removal,
        "dedup": ("dedup", "free"), "ref": ("ref",), "create": ("create", "link")})
    own("trie", "extend", "extend", {
        "start": ("start",), "refused": ("start", "check"), "fail": ("fits?", "fail"), "tick": ("tick", "store"),
        "take": ("take",)})
    own("trie", "release", "release", {
        "start": ("start",), "refused": ("start", "check"), "tick": ("tick",), "unref": ("unref",),
        "push": ("push",), "swap/push": ("sift-compare", "swap"), "candidate": ("candidate",), "free": ("free",),
        "release": ("release",)})
    for op in ("acquire", "extend"):  # eviction happens inside both: the evict algorithm
        own("trie", op, "evict", {
            "pop": ("top", "pop", "fill"), "pop/cascade": ("top", "leaf?", "replace-top"),
            "swap/pop": ("pick-child", "sift-compare", "swap"), "evict": ("cut", "give"),
            "candidate": ("candidate",)})
    own("base", "acquire", "base", {
        "start": ("acquire",), "refused": ("acquire",), "fail": ("fits?", "fail"), "tick": ("tick",),
        "match": ("match",), "take": ("take",)})
    own("base", "publish", "base", {"start": ("publish",), "refused": ("publish", "publish-check"),
                                    "tick": ("publish-tick",)})
    own("base", "release", "base", {
        "start": ("release",), "refused": ("release", "release-check"), "tick": ("release-tick",),
        "free": ("free",), "release": ("released",)})
    own("base", "extend", "extend", {
        "start": ("start",), "refused": ("start", "check"), "fail": ("fits?", "fail"), "tick": ("tick", "store"),
        "take": ("take",)})
    own("hash", "acquire", "hash", {
        "start": ("acquire",), "refused": ("acquire",), "fail": ("fits?", "fail"), "tick": ("tick",),
        "match": ("match",), "dequeue": ("dequeue",), "ref": ("ref",), "drop": ("drop",), "take": ("take",)})
    own("hash", "extend", "hash", {
        "start": ("extend",), "refused": ("extend",), "fail": ("extend-fail",), "tick": ("extend-tick",),
        "drop": ("drop",), "take": ("take",)})
    own("hash", "publish", "hash", {"start": ("publish",), "refused": ("publish",), "tick": ("publish-tick",),
                                    "cache": ("cache",)})
    own("hash", "release", "hash", {
        "start": ("release",), "refused": ("release",), "tick": ("release-tick",), "unref": ("unref",),
        "queue": ("queue",), "release": ("released",)})
    for op, calls in _SHORTFIN_CALLS.items():  # each op's def line is anchored by its name
        own("shortfin", op, "shortfin", {"start": (op,), "refused": (op,),
                                         **{f"call/{call}": (anchor,) for call, anchor in calls}})
    return t


SUBSTEP_LINES: Mapping[_Key, tuple[str, tuple[str, ...]]] = _table()
"""The one table: ``(cache kind, op kind, sub-step kind, qualifier) -> (algorithm, anchors)``.

Sub-step kinds are :data:`kvviz.model.substeps.SUBSTEP_KINDS`. The qualifier is "" except:
``swap`` says which heap move it sifts after (``unheap``, ``push`` or ``pop``); ``pop`` is
``cascade`` when the victim's parent took its slot; ``call`` names the shortfin call.
"""

# The heap moves a swap can sift after, per op; the last is the one assumed when the
# context does not say (acquire sifts once after its one removal, but at every victim of
# an eviction).
_SIFTS = {"acquire": ("unheap", "pop"), "publish": ("unheap",), "release": ("push",), "extend": ("pop",)}


def _qualifier(cache_kind: str, op_kind: str, kind: str, context: Mapping) -> str:
    """The qualifier of ``kind`` in :data:`SUBSTEP_LINES`, read from the sub-step's context."""
    if kind == "swap" and cache_kind == "trie":
        sifts = _SIFTS.get(op_kind, ("",))
        after = context.get("after")
        if after in sifts:
            return after
        if context.get("direction") == "up":  # an eviction sifts down only
            return sifts[0]
        return sifts[-1]
    if kind == "pop":
        return "cascade" if context.get("cascade") else ""
    if kind == "call":
        call = context.get("call")
        if call is None:  # the op's first call: acquire's lookup, release's release_pages
            calls = _SHORTFIN_CALLS.get(op_kind, ())
            return calls[0][0] if calls else ""
        return call
    return ""


def lines_for(op_kind: str, substep_kind: str, *, cache_kind: str = "trie",
              context: Mapping | None = None) -> tuple[str, tuple[int, ...]]:
    """The algorithm and the 1-based line numbers that produced a ``substep_kind`` sub-step
    inside an ``op_kind`` op on a ``cache_kind`` cache (``trie``, ``base``, or ``shortfin``
    for the shortfin backend's calls; a ``call`` sub-step is shortfin's whatever
    ``cache_kind`` says, since only that backend makes them).

    ``context`` (the sub-step's, from :mod:`kvviz.model.substeps`) refines three kinds:
    ``swap``: ``after`` = the heap move it sifts after (``"unheap"``, ``"push"``,
    ``"pop"``), else ``direction`` ``"up"`` means not an eviction's; ``pop``: ``cascade`` =
    True when the victim's parent took its slot; ``call``: ``call`` = the method's name.
    Eviction's sub-steps inside acquire or extend are in ``evict``. A cache kind without
    pseudo-code gives :data:`NO_LINES`; a pair that cannot occur raises KeyError.
    """
    if substep_kind == "call":
        cache_kind = "shortfin"
    if cache_kind not in CACHE_KINDS:
        return NO_LINES
    q = _qualifier(cache_kind, op_kind, substep_kind, context or {})
    entry = SUBSTEP_LINES.get((cache_kind, op_kind, substep_kind, q))
    if entry is None:
        raise KeyError(f"no pseudo-code line for a {substep_kind!r} sub-step of {op_kind!r} on a {cache_kind} cache"
                       + (f" ({q})" if q else ""))
    algorithm, anchors = entry
    return algorithm, ALGORITHMS[algorithm].numbers(*anchors)


def call_stack(op_kind: str, substep_kind: str, *, cache_kind: str = "trie",
               context: Mapping | None = None) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The frames of the call stack at that sub-step, outermost first, each ``(algorithm,
    lines)``: one frame, or for eviction's sub-steps the op's line that calls ``evict`` and
    then :func:`lines_for`'s frame. Empty for a cache kind without pseudo-code."""
    inner = lines_for(op_kind, substep_kind, cache_kind=cache_kind, context=context)
    if inner == NO_LINES:
        return ()
    outer = caller(op_kind, inner[0], cache_kind="shortfin" if substep_kind == "call" else cache_kind)
    return (inner,) if outer is None else (outer, inner)


def caller(op_kind: str, algorithm: str, *, cache_kind: str = "trie") -> tuple[str, tuple[int, ...]] | None:
    """The frame below which ``algorithm`` runs in an ``op_kind`` op: the op's algorithm
    and its lines that call ``algorithm`` (acquire's ``evict(...)`` line for an eviction),
    or None when ``algorithm`` is the op's own. Works from a built sub-step's
    ``algorithm`` alone (``SubStep`` keeps no context)."""
    outer = algorithm_for(op_kind, cache_kind)
    if not outer or algorithm == outer:
        return None
    return outer, tuple(line.number for line in ALGORITHMS[outer].lines if line.calls == algorithm)


# -- the bug museum: buggy code beside ours ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class Bug:
    """A bug of BUGS.md: its ``id`` and its one-line ``description`` (BUGS.md's words)."""

    id: str
    description: str


BUGS: Mapping[str, Bug] = {b.id: b for b in (
    Bug("B1", "heap tie `TypeError` (shortfin seed, Windows)"),
    Bug("B2", "parent stays in the leaf set after gaining a child (3.1.0)"),
    Bug("B3", "a publish that creates nothing marks an interior node as leaf (3.1.0)"),
    Bug("B4", "duplicate publish overwrites the child (3.1.0)"),
    Bug("B4b", "second publisher keeps its reference on root (3.9.0)"),
    Bug("B5", "reference leaks when allocation fails (3.1.0)"),
    Bug("B6", "unpublished pages never return on release (3.1.0)"),
    Bug("B7", "cache keeps the caller's token list (3.1.0)"),
    Bug("B8", "non-monotonic publish (3.1.0)"),
    Bug("B9", "lookup takes no reference (3.9.0)"),
    Bug("B10", "zero-page allocation steals a reference (3.9.0)"),
    Bug("B11", "releasing a stale handle after publish (3.9.0)"),
    Bug("B12", "extend evicts the allocation's own page (3.1.0)"),
    Bug("S1", "`evictable_size` double-counts shared pages (SGLang #35270)"),
    Bug("S2", "node itself never locked (mini-sglang PR #52)"),
)}
"""Every bug of BUGS.md, by id."""


@dataclass(frozen=True, slots=True)
class Variant:
    """A buggy variant of one of our algorithms, line for line beside ours.

    ``theirs`` keeps our numbering: a line the buggy code does not have is "" there.
    ``ours_differ`` and ``theirs_differ`` are the 1-based numbers of the lines that differ
    on each side (the same numbers, since the numbering is kept).
    """

    algorithm: str
    ours: tuple[str, ...]
    theirs: tuple[str, ...]
    ours_differ: tuple[int, ...]
    theirs_differ: tuple[int, ...]
    bug: str
    description: str


def _variant(bug: str, algorithm: str, changes: Mapping[str, str | None]) -> Variant:
    """Our ``algorithm`` with the lines anchored in ``changes`` replaced (None: absent in
    theirs). A replacement is written without indentation; it gets our line's."""
    algo = ALGORITHMS[algorithm]
    ours = algo.texts()
    theirs = list(ours)
    for anchor, text in changes.items():
        mine = algo.line(anchor)
        indent = mine.text[:len(mine.text) - len(mine.text.lstrip())]
        theirs[mine.number - 1] = "" if text is None else indent + text
    differ = tuple(sorted(algo.numbers(*changes)))
    return Variant(algorithm, ours, tuple(theirs), differ, differ, bug, BUGS[bug].description)


# What each buggy cache did, on our lines. The sources: shortfin's seed and 3.1.0 as their
# bug-museum demos narrate them, 3.9.0 as installed (the shortfin extra), mini-sglang's PR.
VARIANTS: Mapping[str, Variant] = {v.bug: v for v in (
    _variant("B1", "evict", {  # the seed (shark-ai de4d2fec3): TrieNode has no __lt__
        "heap-key": "heap = [(n.access_time, n) for n in leaves]; heapify(heap)  # tie: TypeError",
        "top": "_, victim = heappop(heap)        # (wall-clock time, node) pairs"}),
    _variant("B2", "publish", {  # 3.1.0: create_child in the loop, leaves.add(cur_node) after it
        "create": "child = Node(block, allocation.pages[i])  # ref 0: no ref of its own",
        "link": "parent.children[block] = child   # parent stays in the leaf set",
        "refs": "leaves.add(path[-1]); path[-1].ref += 1; old_end.ref -= 1  # the end only"}),
    _variant("B3", "publish", {
        "monotonic": "if full <= len(path): leaves.add(path[-1]); return  # has children"}),
    _variant("B4", "publish", {
        "look": "child = None                      # never looked up",
        "link": "parent.children[block] = child    # replaces the node there"}),
    _variant("B4b", "publish", {
        "ref": "child.last_access = now           # no ref: it stays on the root",
        "refs": "if a node was created: old_end.ref -= 1; new_end.ref += 1"}),
    _variant("B5", "acquire", {
        "hit": "node.ref += 1; hit = len(matched) * tokens_per_page  # before the check",
        "fail": "raise CacheAllocationFailure      # node keeps that ref: leaked",
        "ref": "n.hits += 1                       # (referenced before the check)"}),
    _variant("B6", "release", {
        "free": "pass                              # the tail is never given back"}),
    _variant("B7", "extend", {
        "copy": "# no copy: tokens is the caller's own list",
        "prefix": "if len(tokens) == len(allocation.tokens): return  # same list: equal",
        "store": "allocation.tokens = tokens        # the caller's list from now on"}),
    _variant("B8", "publish", {
        "monotonic": "if full <= allocation.published: allocation.published = full; return",
        "loop": "for i in range(allocation.published, full):  # from the count moved back"}),
    _variant("B9", "acquire", {  # 3.9.0: lookup, then allocate: acquire_free_pages, evict_pages, ref
        "fits?": "if needed > free: evict_pages(needed - free)  # our match too: no ref yet",
        "fail": "pages = acquire_free_pages(needed)  # can be the page just matched",
        "count": None, "in-heap": None, "unheap": None, "swap": None, "uncandidate": None,
        "ref": "pass                              # no ref here: allocate takes it later",
        "return": "matched[-1].ref += 1; return allocation  # the ref, after the pages"}),
    _variant("B10", "acquire", {
        "ref": "if needed > 0: n.ref += 1         # 0 new pages: no ref taken"}),
    _variant("S2", "acquire", {
        "in-heap": "if n in heap and n is not matched[-1]:  # the last stays one",
        "ref": "if n is not matched[-1]: n.ref += 1  # ancestors only"}),
)}
"""The buggy variant of every bug whose buggy code BUGS.md (with its demo) describes, by id."""

NO_VARIANT: Mapping[str, str] = {
    "B11": "a stale handle released after publish: a misuse of shortfin's API, not a line of an algorithm "
           "(and no demo)",
    "B12": "BUGS.md gives only the effect; its cause is B2's reference counting (see bug-b2-parent-leaf)",
    "S1": "BUGS.md names SGLang's evictable_size counter but not the code that updates it",
}
"""The bugs without a variant, and why."""

_DEMO_BUG = re.compile(r"^(?:bug|shortfin)-([bs]\d+[a-z]?)-", re.IGNORECASE)


def demo_bug(demo_name: str) -> str | None:
    """The BUGS.md id a bug-museum demo replays (``bug-b4b-root-ref`` -> ``"B4b"``;
    ``shortfin-b9-...`` too), or None for any other demo. Accepts a name, a file name or a
    path."""
    m = _DEMO_BUG.match(PurePath(demo_name).name)
    if m is None:
        return None
    raw = m.group(1)
    bug = raw[0].upper() + raw[1:].lower()
    return bug if bug in BUGS else None


def buggy_variant(demo_name: str) -> Variant | None:
    """The buggy code of the bug ``demo_name`` replays, beside ours; None for a demo that is
    not in the bug museum, and for the bugs of :data:`NO_VARIANT` (B11, B12, S1)."""
    bug = demo_bug(demo_name)
    return VARIANTS.get(bug) if bug is not None else None
