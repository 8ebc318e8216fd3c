# SPDX-License-Identifier: Apache-2.0
"""The SGLang backend's pseudo-code: its calls into SGLang 0.5.23's ``RadixCache``
(match_prefix, inc_lock_ref, evict, insert, dec_lock_ref), one line each, lit by the backend's
``calls`` sub-steps. Kept beside :mod:`.sglang_backend` so it reads without SGLang installed."""

from __future__ import annotations

from kvviz.backends.code import block, call_code

__all__ = ["CALLS", "SGLANG_CODE"]

_SGLANG = block("""
def acquire(name, tokens, extra=0):                             @acquire
    match = tree.match_prefix(tokens)  # refreshes times; may split  @match_prefix
    tree.inc_lock_ref(match.last_node)  # locks the path         @inc_lock_ref
    tree.evict(missing tokens)  # whole leaves, oldest first     @evict
    pages = matched + pool.take(rest)                           @~take
def publish(name, tokens=None):                                 @publish
    tree.insert(full pages, their slots)  # dups freed           @insert
    tree.inc_lock_ref(new node); tree.dec_lock_ref(old node)    @publish-inc_lock_ref
def extend(name, tokens, extra=0):                              @extend
    tree.evict(missing tokens); pages += pool.take(more)        @extend-evict
def release(name):                                              @release
    tree.dec_lock_ref(node); pool.free(unpublished pages)       @dec_lock_ref
""")

# "record" is not SGLang's but kvviz's adapter after its last call (the last sub-step of
# substeps.build): the pages it takes from its pool or frees, the handle it keeps.
CALLS = {
    "acquire": (("match_prefix", "match_prefix"), ("inc_lock_ref", "inc_lock_ref"), ("evict", "evict"),
                ("dec_lock_ref", "acquire"), ("record", "take")),
    "publish": (("insert", "insert"), ("inc_lock_ref", "publish-inc_lock_ref"),
                ("dec_lock_ref", "publish-inc_lock_ref"), ("record", "publish-inc_lock_ref")),
    "extend": (("evict", "extend-evict"), ("record", "extend-evict")),
    "release": (("dec_lock_ref", "dec_lock_ref"), ("record", "dec_lock_ref")),
}
"""Each op's calls, in order, with the anchor of the line that makes each."""


SGLANG_CODE = call_code("sglang", "the sglang backend: calls into SGLang 0.5.23's RadixCache",
                        "kvviz/backends/sglang_backend.py SglangBackend", _SGLANG, CALLS)
"""The SGLang backend's pseudo-code and its call map."""
