# SPDX-License-Identifier: Apache-2.0
"""The vLLM backend's pseudo-code: its calls into vLLM 0.33.0's ``KVCacheManager``
(get_computed_blocks, allocate_slots, cache_blocks, free), one line each, lit by the backend's
``calls`` sub-steps. Kept beside :mod:`.vllm_backend` so it reads without vLLM installed."""

from __future__ import annotations

from kvviz.backends.code import block, call_code

__all__ = ["CALLS", "VLLM_CODE"]

_VLLM = block("""
def acquire(name, tokens, extra=0):                             @acquire
    request = Request(tokens, block_hasher)  # sha256 chain      @~request
    hit = manager.get_computed_blocks(request, cap)  # no ref    @get_computed_blocks
    manager.allocate_slots(request, rest + extra, hit)  # refs, takes from the queue head  @allocate_slots
def publish(name, tokens=None):                                 @publish
    manager.cache_blocks(request, len(tokens))  # full blocks under their hash  @cache_blocks
def extend(name, tokens, extra=0):                              @extend
    manager.allocate_slots(request, new + extra)  # more pages  @extend-allocate_slots
    request.append_output_token_ids(new)                        @~append
def release(name):                                              @release
    manager.free(request)  # reversed: the chain's tail is reused first  @free
""")

# "record" is not vLLM's but kvviz's adapter after its last call (the last sub-step of
# substeps.build): the request it keeps, its tokens appended.
CALLS = {
    "acquire": (("get_computed_blocks", "get_computed_blocks"), ("allocate_slots", "allocate_slots"),
                ("record", "allocate_slots")),
    "publish": (("cache_blocks", "cache_blocks"), ("record", "cache_blocks")),
    "extend": (("allocate_slots", "extend-allocate_slots"), ("record", "append")),
    "release": (("free", "free"), ("record", "free")),
}
"""Each op's calls, in order, with the anchor of the line that makes each."""


VLLM_CODE = call_code("vllm", "the vllm backend: calls into vLLM 0.33.0's KVCacheManager",
                      "kvviz/backends/vllm_backend.py VllmBackend", _VLLM, CALLS)
"""The vLLM backend's pseudo-code and its call map."""
