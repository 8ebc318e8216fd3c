# SPDX-License-Identifier: Apache-2.0
"""The shortfin backend's pseudo-code: its calls into shortfin 3.9.0 (lookup, allocate,
publish_pages_for_tokens, release_pages, free_allocated_pages) and kvviz's record of the
handle shortfin returns. Its sub-steps are those calls, observed between them (the backend's
``substeps`` is ``"calls"``), so each call lights its own line.

The backend brings this through the Backend Protocol (:attr:`kvviz.backends.Backend.pseudocode`):
the model holds no backend's code. Kept beside :mod:`.shortfin_backend` so the code pane's
tests and docs read it without shortfin installed.
"""

from __future__ import annotations

from kvviz.backends.code import block, call_code

__all__ = ["CALLS", "SHORTFIN_CODE"]

_SHORTFIN = block("""
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

# op -> (call, anchor), in the order the backend makes them; "record" is not shortfin's but
# kvviz's adapter keeping the handle shortfin returned (the last sub-step of substeps.build).
CALLS = {
    "acquire": (("lookup", "lookup"), ("allocate", "allocate"), ("record", "acquire-record")),
    "publish": (("publish_pages_for_tokens", "publish_pages_for_tokens"), ("record", "publish-record")),
    "extend": (("allocate", "extend-allocate"), ("record", "extend-record")),
    "release": (("release_pages", "release_pages"), ("free_allocated_pages", "free_allocated_pages"),
                ("record", "release-record")),
}
"""Each op's calls, in order, with the anchor of the line that makes each."""


SHORTFIN_CODE = call_code("shortfin", "the shortfin backend: calls into shortfin 3.9.0's trie cache",
                          "kvviz/backends/shortfin_backend.py ShortfinBackend", _SHORTFIN, CALLS)
"""The shortfin backend's pseudo-code and its call map."""
