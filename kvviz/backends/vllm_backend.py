# SPDX-License-Identifier: Apache-2.0
"""The vLLM backend: scenario ops on the real ``KVCacheManager`` of vLLM 0.33.0, on the CPU.

Needs the engine venv (``bash scripts/install-engines.sh VENV``). The manager is built the way
vLLM's own unit tests build it (``tests/v1/core/test_prefix_caching.py``): one full-attention
group of ``tokens_per_page``-token blocks, sha256 block hashes, no device tensors. Our four ops
map onto the scheduler's calls:

=========  ==================================================================================
acquire    a ``Request`` of the tokens; ``get_computed_blocks(request, cap)`` (``cap`` is
           vLLM's "recompute the last token" bound when the config says
           ``recompute_last_token``, else every token); ``allocate_slots`` for the rest and the
           extra slots, with ``delay_cache_blocks=True`` (publishing is its own op here)
publish    ``cache_blocks(request, n)``: ``n`` = the publish's tokens (appended to the request
           first when longer than its own)
extend     ``allocate_slots(request, new tokens + extra)``, then the tokens are appended to the
           request (as the scheduler records generated tokens)
release    ``free(request)`` (vLLM frees the blocks in reverse order)
=========  ==================================================================================

**Pages.** vLLM reserves block 0 as its null block, so a cache of ``pages`` pages is a
manager of ``pages + 1`` blocks, and vLLM's block ``b`` is kvviz's page ``b - 1``.

**State.** After every op the backend reads vLLM's own objects into a kvcore ``hash``
snapshot: each block's ``ref_cnt`` and ``block_hash``, the ``free_block_queue`` (head first),
each request's block table (``get_block_ids``) and the hash -> parent chain learned from the
requests' ``block_hashes``. A block's key is kvcore's chained key of the same tokens
(``kvcore.blockkey.block_key``; vLLM's sha256 of its parent hash and tokens maps one to one
onto it, and kvcore's checker verifies keys by recomputing them); a block is reachable when its
whole parent chain is cached. That full read (:meth:`VllmBackend._read_full`) costs
O(pages + cached blocks); after an op the backend reads only the blocks the op's calls touched
(:mod:`.vllm_reader`, which instruments this manager's ``BlockPool``), equal to the full read
byte for byte (``tests/engines/test_incremental_reads.py``) and costing what the op changed.
``full_reads=True`` reads in full after every op (the contract, and the benchmark's "before").

Misuse (unknown names, tokens that do not extend an allocation, ...) is refused before vLLM
is called, with kvcore's messages. Ops vLLM's API cannot express are refused with a one-line
reason (``priority=``, an acquire of no tokens, publish tokens that disagree).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kvcore import CacheAllocationFailure, InvalidOperation, KVCacheError, Snapshot, Stats
from kvcore import check_snapshot
from kvcore.base import pages_for
from kvcore.blockkey import block_key
from kvcore.incremental import IncrementalChecker
from kvcore.snapshot import CACHED, OWNED, AllocationInfo, BlockInfo, PageInfo, free_row

from kvviz.backends import HASH, ConfigLike, OpLike
from kvviz.backends.foreign import KnownIssue
from kvviz.backends.foreign_backend import (OP_EVENTS, EngineCalls, acquisition, check_config, extension, op_events,
                                            publish_tokens)
from kvviz.backends.vllm_code import VLLM_CODE
from kvviz.backends.vllm_reader import ChangedRows, Touched, instrument

try:
    import torch as _torch
    from vllm.sampling_params import SamplingParams as _SamplingParams
    from vllm.utils.hashing import sha256 as _sha256
    from vllm.v1.core.kv_cache_manager import KVCacheManager as _KVCacheManager
    from vllm.v1.core.kv_cache_utils import get_block_hash as _get_block_hash
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher as _get_request_block_hasher
    from vllm.v1.core.kv_cache_utils import init_none_hash as _init_none_hash
    from vllm.v1.kv_cache_interface import FullAttentionSpec as _FullAttentionSpec
    from vllm.v1.kv_cache_interface import KVCacheConfig as _KVCacheConfig
    from vllm.v1.kv_cache_interface import KVCacheGroupSpec as _KVCacheGroupSpec
    from vllm.v1.request import Request as _Request
except ImportError as exc:  # pragma: no cover - exercised only without the engine venv
    raise ImportError(f"the vllm backend needs vLLM 0.33.0 ({exc})", name=exc.name) from exc

VLLM_VERSION = "0.33.0"

OBSERVED_EVENTS = OP_EVENTS
"""What the backend reports: vLLM emits no per-move events, so only what two states show."""


KNOWN_ISSUES: dict[str, KnownIssue] = {}
"""None found: vLLM 0.33.0 agrees with kvcore's hash design op by op (tests/engines)."""


class VllmError(KVCacheError):
    """vLLM raised something (an assertion, a crash of the real cache)."""


@dataclass
class _Handle:
    id: int
    name: str
    request: object
    hit_tokens: int
    priority: int = 0


class VllmBackend(EngineCalls):
    """Drives one vLLM ``KVCacheManager``; allocations are addressed by name.

    Implements :class:`kvviz.backends.Backend`; :func:`vllm_backend` is its factory."""

    name = "vllm"
    version = VLLM_VERSION
    cache_name = "KVCacheManager"
    can_restore = False  # vLLM's pool has no way in but its own calls
    observes = OBSERVED_EVENTS
    substeps = "calls"
    pseudocode = VLLM_CODE
    known_issues: Mapping = KNOWN_ISSUES
    engine = "vLLM"
    error = VllmError

    def __init__(self, pages: int, tokens_per_page: int, recompute_last_token: bool = False,
                 full_reads: bool = False):
        self.pages = pages
        self.full_reads = full_reads  # read the whole pool after every op (the contract)
        self.tokens_per_page = tokens_per_page
        self.recompute_last_token = recompute_last_token
        _init_none_hash(_sha256)  # vLLM's fixed seed for sha256: the same keys in every run
        config = _KVCacheConfig(num_blocks=pages + 1, kv_cache_tensors=[], kv_cache_groups=[_KVCacheGroupSpec(
            ["layer"], _FullAttentionSpec(block_size=tokens_per_page, num_kv_heads=1, head_size=1,
                                          dtype=_torch.float32))])
        self.manager = _KVCacheManager(config, max_model_len=1 << 30, scheduler_block_size=tokens_per_page,
                                       hash_block_size=tokens_per_page, enable_caching=True)
        self._hasher = _get_request_block_hasher(tokens_per_page, _sha256)
        self._start()
        self._chain: dict[bytes, tuple[bytes | None, tuple[int, ...]]] = {}  # hash -> (parent, tokens)
        self._keys: dict[bytes, bytes] = {}  # vLLM's hash -> kvcore's key of the same chain
        self._seq: dict[tuple[int, bytes], int] = {}  # (page, hash) -> block id, in caching order
        self._next_seq = 1
        self._clock = 0
        self._learned: list[bytes] = []  # hashes learned since the last read, in order
        self._dirty: set[str] = set()  # allocation names the ops since the last read worked on
        pool = self.manager.block_pool
        self._touched = Touched(b.block_id - 1 for b in pool.free_block_queue.get_all_free_blocks())
        instrument(pool, self._touched)
        self._rows: ChangedRows | None = None
        self._checker = IncrementalChecker()
        self._snapshot = self._read()

    # -- the seam -------------------------------------------------------------------------

    def apply(self, op: OpLike) -> None:
        """Run one op through vLLM's calls; raises a KVCacheError if it fails (nothing changed)."""
        kind, name = op.kind, op.name
        run = self._op(op)
        before = self._snapshot
        self._dirty.add(name)
        saved = self._clock, dict(self._stats)
        self._clock += 1
        try:
            run()
        except KVCacheError:
            self._clock, self._stats = saved  # a refused op counts no tick, no lookup (kvcore's rule)
            raise
        finally:
            after = self._snapshot = self._read()
            self._events.extend(op_events(kind, name, before, after))

    def take_findings(self) -> tuple:
        """No known departures from kvcore's hash design are recognised (see :data:`KNOWN_ISSUES`)."""
        return ()

    def snapshot(self) -> Snapshot:
        """vLLM's state in kvcore's ``hash`` snapshot format; read afresh while watched."""
        return self._read() if self._watch is not None else self._snapshot

    def check(self, snapshot: Snapshot) -> list:
        """kvcore's invariant checker, ``check_snapshot``'s verdict: vLLM counts one reference
        per page per request, as kvcore's hash design does. Consecutive snapshots are checked at
        the cost of what changed (:class:`kvcore.incremental.IncrementalChecker`, told by the
        snapshot's ``_changes``); the first, and any it cannot relate, in full."""
        return self._checker.check(snapshot)

    def check_full(self, snapshot: Snapshot) -> list:
        """kvcore's invariant checker on the whole of ``snapshot`` (``kvviz check --full``)."""
        return check_snapshot(snapshot)

    # -- ops --------------------------------------------------------------------------------

    def _acquire(self, op: OpLike) -> None:
        name = op.name
        tokens = acquisition(op, self._handles)
        if op.priority:
            raise InvalidOperation(f"acquire {name} priority={op.priority}: vLLM's prefix cache has no eviction "
                                   f"priorities (its free queue is the order); run it on kvcore or drop priority=")
        if not tokens:
            raise InvalidOperation(f"acquire {name}: a vLLM request has at least one prompt token; give it tokens")
        request = _Request(request_id=f"{name}#{self._next_allocation_id}", prompt_token_ids=list(tokens),
                           sampling_params=_SamplingParams(max_tokens=1), pooling_params=None,
                           block_hasher=self._hasher)
        cap = len(tokens) - 1 if self.recompute_last_token else len(tokens)
        computed, hit, _ = self._call(f"acquire {name}", self.manager.get_computed_blocks, request, cap)
        self._stats["lookups"] += 1
        self._stats["lookup_tokens"] += len(tokens)
        # (0 new tokens when every token hit and no extra slots are asked: allocate_slots takes that too)
        blocks = self._call(f"acquire {name}", self.manager.allocate_slots, request, len(tokens) - hit + op.extra,
                            hit, computed, delay_cache_blocks=True)
        if blocks is None:
            free = self.manager.block_pool.get_num_free_blocks()
            raise CacheAllocationFailure(
                f"cannot acquire {name}: vLLM's allocate_slots refused {len(tokens)} tokens + {op.extra} extra "
                f"slots ({hit} tokens hit, {free} free blocks)",
                needed=pages_for(len(tokens) + op.extra, self.tokens_per_page), free=free, evictable=0)
        request.num_computed_tokens = len(tokens)
        self._stats["hit_tokens"] += hit
        self._handles[name] = _Handle(self._next_allocation_id, name, request, hit)
        self._next_allocation_id += 1

    def _publish(self, op: OpLike) -> None:
        name = op.name
        handle = self.handle(name)
        request = handle.request
        own = tuple(request.all_token_ids)
        count = len(own)
        if op.tokens is not None:
            tokens = publish_tokens(name, own, op.tokens, len(self._pages(request)), self.tokens_per_page)
            if len(tokens) > len(own):
                request.append_output_token_ids(list(tokens[len(own):]))
                request.num_computed_tokens = len(tokens)
            count = len(tokens)
        self._learn(request)
        self._call(f"publish {name}", self.manager.cache_blocks, request, count)

    def _extend(self, op: OpLike) -> None:
        name = op.name
        handle = self.handle(name)
        request = handle.request
        own = tuple(request.all_token_ids)
        new_tokens = extension(own, op)
        added = list(new_tokens[len(own):])
        needed = pages_for(len(new_tokens) + op.extra, self.tokens_per_page) - len(self._pages(request))
        if needed > 0:
            request.num_computed_tokens = len(own)
            blocks = self._call(f"extend {name}", self.manager.allocate_slots, request, len(added) + op.extra,
                                delay_cache_blocks=True)
            if blocks is None:
                free = self.manager.block_pool.get_num_free_blocks()
                raise CacheAllocationFailure(
                    f"cannot extend {name} to {len(new_tokens)} tokens + {op.extra} extra slots: vLLM's "
                    f"allocate_slots refused {needed} new page(s) ({free} free blocks)",
                    needed=needed, free=free, evictable=0)
        if added:
            request.append_output_token_ids(added)
        request.num_computed_tokens = len(new_tokens)

    def _release(self, name: str) -> None:
        handle = self.handle(name)
        self._learn(handle.request)
        self._call(f"release {name}", self.manager.free, handle.request)
        del self._handles[name]

    # -- internals --------------------------------------------------------------------------

    def _pages(self, request) -> list[int]:
        blocks = self.manager.coordinator.single_type_managers[0].req_to_blocks.get(request.request_id, [])
        return [b.block_id - 1 for b in blocks]

    def _learn(self, request) -> None:
        """Record each full block's parent hash and tokens, from the request's block hashes."""
        tpp, tokens = self.tokens_per_page, request.all_token_ids
        parent = None
        for i, block_hash in enumerate(request.block_hashes):
            block_hash = bytes(block_hash)
            if block_hash not in self._chain:
                block = tuple(tokens[i * tpp:(i + 1) * tpp])
                self._chain[block_hash] = (parent, block)
                self._keys[block_hash] = block_key(None if parent is None else self._keys[parent], block)
                self._learned.append(block_hash)
            parent = block_hash

    _block_hash = staticmethod(_get_block_hash)  # vLLM's hash of a block's hash-and-group key

    def _read(self) -> Snapshot:
        """vLLM's state now: from what the ops since the last read touched, or in full (while
        watched, with ``full_reads``, or when the touched calls cannot say)."""
        rows = self._rows
        if rows is not None and self._watch is None and not self.full_reads:
            dirty, self._dirty = self._dirty, set()
            for name in sorted(dirty):
                handle = self._handles.get(name)
                if handle is not None:
                    self._learn(handle.request)
            snap = rows.advance(self, dirty)
            if snap is not None:
                return snap
        return self._read_full()

    def _allocation_row(self, handle) -> AllocationInfo:
        """``handle``'s row: its tokens, its block table and how many leading blocks are cached."""
        blocks = self.manager.block_pool.blocks
        pages = self._pages(handle.request)
        published = 0
        for page in pages:
            if blocks[page + 1].block_hash is None:
                break
            published += 1
        return AllocationInfo(handle.id, handle.name, tuple(handle.request.all_token_ids), tuple(pages),
                              published, handle.hit_tokens, priority=handle.priority)

    def _read_full(self) -> Snapshot:
        """vLLM's pool, queue and requests in kvcore's hash snapshot format, read whole:
        O(pages + cached blocks + the live requests' blocks). The contract the reads from what
        changed are held to; the next of those starts from it."""
        for handle in self._handles.values():
            self._learn(handle.request)
        pool = self.manager.block_pool
        owners: dict[int, int] = {}
        allocations = []
        for h in sorted(self._handles.values(), key=lambda h: h.id):
            row = self._allocation_row(h)
            for page in row.pages:
                owners.setdefault(page, h.id)
            allocations.append(row)
        seen: dict[tuple[int, bytes], int] = {}
        cached: dict[bytes, int] = {}
        rows: list[PageInfo] = []
        blocks = []
        for block in pool.blocks[1:]:
            page = block.block_id - 1
            key = block.block_hash
            if key is None:
                state_owner = owners.get(page) if block.ref_cnt else None
                rows.append(PageInfo(page, OWNED, state_owner, None, block.ref_cnt) if block.ref_cnt
                            else free_row(page))
                continue
            key = bytes(_get_block_hash(key))
            seq = self._seq.get((page, key))
            if seq is None:
                seq = self._seq[(page, key)] = self._next_seq
                self._next_seq += 1
            seen[(page, key)] = seq
            cached.setdefault(key, seq)
            rows.append(PageInfo(page, CACHED, None, seq, block.ref_cnt))
            parent, tokens = self._chain.get(key, (None, ()))
            blocks.append((seq, page, key, parent, tokens))
        evicted = len(set(self._seq) - set(seen))
        self._stats["evictions"] += evicted
        self._seq = seen
        keys = self._keys
        infos = tuple(BlockInfo(seq, page, keys[key].hex(), None if parent is None else keys[parent].hex(), tokens,
                                _reachable(key, self._chain, cached))
                      for seq, page, key, parent, tokens in sorted(blocks))
        free = tuple(b.block_id - 1 for b in pool.free_block_queue.get_all_free_blocks())
        s = self._stats
        snap = Snapshot(kind=HASH, tokens_per_page=self.tokens_per_page, page_count=self.pages, clock=self._clock,
                        next_seq=self._next_seq, next_allocation_id=self._next_allocation_id, pages=tuple(rows),
                        free=free, nodes=(), allocations=tuple(allocations), heap=(),
                        stats=Stats(s["lookups"], s["lookup_tokens"], s["hit_tokens"], s["evictions"], s["dedups"]),
                        policy="lru", blocks=infos)
        self._touched.clear()
        self._touched.queue[:] = free  # the queue's mirror, from the walk of the queue itself
        self._learned, self._dirty = [], set()
        self._rows = None if self.full_reads else ChangedRows(self, snap)
        return snap


def _reachable(key: bytes, chain: dict, cached: dict) -> bool:
    """Whether every block above ``key`` is cached (an acquire can match it)."""
    parent = chain.get(key, (None, ()))[0]
    steps = 0
    while parent is not None and steps <= len(chain):
        if parent not in cached:
            return False
        parent = chain.get(parent, (None, ()))[0]
        steps += 1
    return True


def vllm_backend(config: ConfigLike, snapshot: Snapshot | None) -> VllmBackend:
    """The vLLM backend's factory: a fresh vLLM ``KVCacheManager`` for ``config`` (``cache hash``)."""
    check_config("vllm", config, snapshot, kind=HASH,
                 wrong_kind="the vllm backend drives vLLM's prefix cache, kvcore's 'hash' design; a {kind!r} "
                            "cache runs on kvcore (use `cache hash` in the script, or --backend kvcore)",
                 wrong_policy="vLLM's free queue is LRU; a {policy!r} policy runs on kvcore (use --backend kvcore)")
    return VllmBackend(config.pages, config.tokens_per_page,
                       recompute_last_token=bool(getattr(config, "recompute_last_token", False)))
