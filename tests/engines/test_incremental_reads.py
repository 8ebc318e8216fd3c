# SPDX-License-Identifier: Apache-2.0
"""The engine backends' reads of what an op changed (kvviz/backends/vllm_reader.py,
sglang_reader.py) against their full reads, the contract: two backends run the same ops, one
reading only what the instrumented calls touched, one re-reading the whole engine
(``full_reads=True``), and after every op their snapshots are the same JSON, and the
incremental one's ``_changes`` names exactly the rows that are not the very objects of the
snapshot before (so the backend's invariant check, told by them, gives the full check's
verdict). Every demo and a few hundred seeded random scenarios, on both engines; and a read
that misses one instrumented call is caught."""

from __future__ import annotations

import ast
import inspect
import random
import textwrap

import pytest
from engine_guard import require_engine

require_engine("vllm")
require_engine("sglang")

from kvcore import KVCacheError, check_snapshot  # noqa: E402
from kvviz.backends import sglang_reader, vllm_reader  # noqa: E402
from kvviz.backends.sglang_backend import SglangBackend  # noqa: E402
from kvviz.backends.vllm_backend import VllmBackend  # noqa: E402
from kvviz.core.demos import demo_names, load_demo  # noqa: E402
from kvviz.core.scenario import CacheConfig, Op, Scenario, Step, format_scenario  # noqa: E402

ENGINES = ("vllm", "sglang")
RANDOM_SCENARIOS = 300  # per engine


def backends(engine: str, config) -> tuple:
    """(reads what changed, reads in full) for ``config``."""
    if engine == "vllm":
        recompute = bool(getattr(config, "recompute_last_token", False))
        return (VllmBackend(config.pages, config.tokens_per_page, recompute),
                VllmBackend(config.pages, config.tokens_per_page, recompute, full_reads=True))
    return (SglangBackend(config.pages, config.tokens_per_page),
            SglangBackend(config.pages, config.tokens_per_page, full_reads=True))


def changed_rows(before, after) -> tuple[set, set, set]:
    """The ids of the node (or block) rows, the pages and the allocation ids whose rows in
    ``after`` are not the very objects of ``before``'s (added, changed or gone)."""
    def by_id(rows):
        return {r.id: r for r in rows}

    rows = "blocks" if after.kind == "hash" else "nodes"
    out = []
    for old, new in ((by_id(getattr(before, rows)), by_id(getattr(after, rows))),
                     (dict(enumerate(before.pages)), dict(enumerate(after.pages))),
                     (by_id(before.allocations), by_id(after.allocations))):
        out.append({i for i in old.keys() | new.keys() if old.get(i) is not new.get(i)})
    return tuple(out)


def first_mismatch(engine: str, scenario: Scenario, watch_every: int = 0) -> str | None:
    """Where the two reads of ``scenario`` first differ (a sentence), or None: after every op,
    the same JSON, the same error, events and findings, ``_changes`` that name exactly the
    rows that changed, and the backend's check (of what changed) the full check's verdict.
    With ``watch_every`` k, every k-th op is watched (as sub-steps are built): the states
    read between the engine's calls are compared too, and the reads after it start from them."""
    incremental, full = backends(engine, scenario.config)
    before = incremental.snapshot()
    if before.to_json() != full.snapshot().to_json():
        return "the first reads differ"
    violations = len(incremental.check(before))
    for i, step in enumerate(scenario.steps, 1):
        errors, seen = [], []
        for backend in (incremental, full):
            states: list[str] = []
            if watch_every and i % watch_every == 0:
                backend.watch(lambda call, backend=backend, states=states: states.append(backend.snapshot().to_json()))
            try:
                backend.apply(step.op)
                errors.append(None)
            except KVCacheError as exc:
                errors.append((type(exc).__name__, str(exc)))
            backend.watch(None)
            seen.append(states)
        after = incremental.snapshot()
        where = f"step {i} ({step.op.text or step.op.kind})"
        if errors[0] != errors[1]:
            return f"{where}: errors differ {errors}"
        if seen[0] != seen[1]:
            return f"{where}: the states between the engine's calls differ"
        if after.to_json() != full.snapshot().to_json() or after != full.snapshot():
            return f"{where}: the snapshots differ"
        if incremental.take_events() != full.take_events():
            return f"{where}: the events differ"
        if [(f.code, f.message) for f in incremental.take_findings()] != \
                [(f.code, f.message) for f in full.take_findings()]:
            return f"{where}: the findings differ"
        verdict = [str(v) for v in incremental.check(after)]
        if verdict != [str(v) for v in check_snapshot(after)]:
            return f"{where}: the check of what changed says {verdict}, the full check does not"
        violations += len(verdict)
        if after is before or (watch_every and i % watch_every == 0):
            before = after
            continue  # a refused op that changed nothing (its state is the one before), or a watched op (read in full)
        changes = after._changes
        if changes is None or changes.before() is not before:
            return f"{where}: the snapshot does not say what changed since the one before"
        told = (set(changes.nodes), set(changes.pages), set(changes.allocations))
        if told != changed_rows(before, after):
            return f"{where}: _changes says {told}, the rows say {changed_rows(before, after)}"
        if sorted(changes.nodes) != list(changes.nodes) or sorted(changes.pages) != list(changes.pages):
            return f"{where}: _changes is not sorted"
        before = after
    if not violations and not watch_every and incremental._checker.full_checks != 1:
        return f"healthy all along, but checked in full {incremental._checker.full_checks} times"
    return None


def random_scenario(rng: random.Random, engine: str) -> Scenario:
    """A small cache and up to 40 ops over a tiny alphabet: shared prefixes, pages running out,
    evictions, extends, publishes of more tokens, and misuse that is refused; one in three
    larger (up to 40 pages, 8 names, prompts of 8 pages: deeper trees, longer queues)."""
    tpp = rng.choice((1, 2, 4))
    large = rng.random() < 1 / 3
    pages = rng.randint(10, 40) if large else rng.randint(2, 9)
    names, most = ("abcdefgh", 8) if large else ("abcd", 3)
    live: dict[str, tuple] = {}
    steps = []
    stems = ((1, 2, 3, 5) * 8, (1, 2, 1, 2) * 8)
    for _ in range(rng.randint(5, 40)):
        kind = rng.choice(("acquire", "acquire", "publish", "publish", "extend", "release", "misuse"))
        if kind == "misuse":
            name = rng.choice("abcde")
            op = rng.choice((Op("release", name, None), Op("publish", name, (9, 9)),
                             Op("acquire", name, (), 0), Op("acquire", name, (1,), 0, priority=1)))
            live.pop(name, None) if op.kind == "release" else None
        elif kind == "acquire" or not live:
            free = [n for n in names if n not in live]
            if not free:
                continue
            name = rng.choice(free)
            tokens = rng.choice(stems)[:rng.randint(1, most * tpp)] + tuple(
                rng.choice((7, 8, 9)) for _ in range(rng.randint(0, tpp)))
            op = Op("acquire", name, tokens, rng.choice((0, 0, 1, tpp)))
            live[name] = tokens
        else:
            name = rng.choice(sorted(live))
            if kind == "publish":
                cut = rng.choice((None, None, rng.randint(0, len(live[name]))))
                op = Op("publish", name, None if cut is None else live[name][:cut])
            elif kind == "extend":
                more = tuple(rng.choice((1, 2, 7)) for _ in range(rng.randint(0, 2 * tpp)))
                op = Op("extend", name, more, rng.choice((0, 0, 1)), True)
                live[name] += more
            else:
                op = Op("release", name, None)
                del live[name]
        steps.append(Step(op))
    kind = "hash" if engine == "vllm" else "trie"
    return Scenario(config=CacheConfig(kind, pages, tpp, recompute_last_token=engine == "vllm" and rng.random() < 0.5),
                    steps=tuple(steps))


@pytest.mark.parametrize("engine", ENGINES)
def test_the_read_of_what_changed_equals_the_full_read_after_every_op_of_every_demo(engine):
    mismatches = {name: m for name in demo_names() if (m := first_mismatch(engine, load_demo(name))) is not None}
    assert not mismatches, mismatches


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
def test_the_read_of_what_changed_equals_the_full_read_on_random_scenarios(engine):
    rng = random.Random(35_035)
    ops = refused = 0
    for _ in range(RANDOM_SCENARIOS):
        scenario = random_scenario(rng, engine)
        mismatch = first_mismatch(engine, scenario)
        assert mismatch is None, format_scenario(scenario) + "\n" + mismatch
        ops += len(scenario.steps)
    assert ops >= 15 * RANDOM_SCENARIOS, ops  # real scenarios, not just configs


@pytest.mark.parametrize("engine", ENGINES)
def test_reads_between_the_engines_calls_and_after_them_agree_when_some_ops_are_watched(engine):
    """Sub-steps watch an op and read the engine between its calls (in full); the ops after
    it read what changed again, from there."""
    mismatches = {name: m for name in demo_names()
                  if (m := first_mismatch(engine, load_demo(name), watch_every=3)) is not None}
    assert not mismatches, mismatches


def test_a_real_cache_is_read_in_full_after_an_op_only_when_asked():
    """The backends read what changed by default; ``full_reads`` reads in full after every op
    (what the benchmark's "before" measures)."""
    for engine in ENGINES:
        incremental, full = backends(engine, CacheConfig("hash" if engine == "vllm" else "trie", 4, 2))
        for backend in (incremental, full):
            backend.apply(Op("acquire", "a", (1, 2, 3), 0))
        assert incremental.snapshot()._changes is not None and full.snapshot()._changes is None


# Calls whose report no other call repeats on kvviz's ops (the others are doubly covered: a
# release's free_blocks touches the pages its allocation leaves, a lookup's path is locked next).
DROPPED = [("vllm", vllm_reader, "POOL_CALLS", "_insert_block_hash"),
           ("vllm", vllm_reader, "QUEUE_CALLS", "remove"),
           ("vllm", vllm_reader, "QUEUE_CALLS", "prepend_n"),
           ("sglang", sglang_reader, "TREE_CALLS", "_split_node"),
           ("sglang", sglang_reader, "TREE_CALLS", "_delete_leaf")]


@pytest.mark.parametrize("engine, module, calls, dropped", DROPPED, ids=[d[3] for d in DROPPED])
def test_a_read_that_misses_an_instrumented_call_is_caught(monkeypatch, engine, module, calls, dropped):
    """A control: with one engine method left uninstrumented, the comparison above fails on
    the demos, so it is not one that cannot fail."""
    monkeypatch.setattr(module, calls, tuple(c for c in getattr(module, calls) if c != dropped))
    caught = [name for name in demo_names() if first_mismatch(engine, load_demo(name)) is not None]
    assert caught, f"no demo caught a read that misses {dropped}"


def writers(cls, fields: set[str], calls: set[tuple[str, str]]) -> set[str]:
    """The methods ``cls`` defines (its own source, read with ``ast``) that assign to one of
    ``fields`` on any object (``x.ref_cnt += 1``, ``node.children[k] = ...``) or make one of
    ``calls`` (``block.reset_hash()`` as ``("", "reset_hash")``, ``self.evictable_leaves.add(n)``
    as ``("evictable_leaves", "add")``)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    out = set()
    for method in tree.body[0].body:
        if not isinstance(method, ast.FunctionDef):
            continue
        for node in ast.walk(method):
            targets = node.targets if isinstance(node, ast.Assign) else (
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
            for target in targets:
                for item in target.elts if isinstance(target, ast.Tuple) else [target]:
                    while isinstance(item, ast.Subscript):
                        item = item.value
                    if isinstance(item, ast.Attribute) and item.attr in fields:
                        out.add(method.name)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                owner = node.func.value.attr if isinstance(node.func.value, ast.Attribute) else ""
                if ("", node.func.attr) in calls or (owner, node.func.attr) in calls:
                    out.add(method.name)
    return out


def test_the_engines_writers_of_what_a_snapshot_shows_are_the_instrumented_calls():
    """Why the instrumented calls are enough: in the classes kvviz drives, the methods that
    write a block's ``ref_cnt``, its hash or the free queue's links (vLLM), or a radix node's
    access time, lock count, key, pages, parent, children or the evictable leaves (SGLang), are
    exactly the ones instrumented, besides the constructors (which run before). An engine
    upgrade that adds a writer fails here."""
    from sglang.srt.mem_cache.radix_cache import RadixCache
    from vllm.v1.core.block_pool import BlockPool
    from vllm.v1.core.kv_cache_utils import FreeKVCacheBlockQueue

    block = {"ref_cnt", "_block_hash", "prev_free_block", "next_free_block"}
    hashes = {("", "set_block_hash"), ("", "reset_hash")}
    assert writers(BlockPool, block, hashes) == set(vllm_reader.POOL_CALLS)
    assert writers(FreeKVCacheBlockQueue, block, hashes) == set(vllm_reader.QUEUE_CALLS) | {"__init__"}
    manager = VllmBackend(4, 2).manager
    driven = {cls for obj in (manager, manager.coordinator, *manager.coordinator.single_type_managers)
              for cls in type(obj).__mro__ if cls.__module__.startswith("vllm")}
    # _apply_cow adds a reference to a block get_new_blocks has just handed out (so noted), and
    # only for a prefix hit that ends inside a block: never when blocks are hash blocks, as here.
    assert {(cls.__name__, name) for cls in driven for name in writers(cls, block, hashes)} == {
        ("SingleTypeKVCacheManager", "_apply_cow")}
    tree = {"last_access_time", "lock_ref", "children", "parent", "key", "value", "root_node", "evictable_leaves"}
    sets = {("evictable_leaves", verb) for verb in ("add", "remove", "discard", "clear")} | {
        ("children", "pop"), ("children", "clear")}
    assert {name for cls in RadixCache.__mro__ if cls.__module__.startswith("sglang")
            for name in writers(cls, tree, sets)} == set(sglang_reader.TREE_CALLS) | {"__init__"}


def test_every_instrumented_method_is_one_the_engine_has_and_its_wrapper_takes_its_parameters():
    """An engine upgrade that renames a method or a parameter (a caller passing it by name)
    fails here, not as a silently stale read."""
    vllm, sglang = VllmBackend(4, 2), SglangBackend(4, 2)
    pool = vllm.manager.block_pool
    for obj, names in ((pool, vllm_reader.POOL_CALLS), (pool.free_block_queue, vllm_reader.QUEUE_CALLS),
                       (sglang.cache, sglang_reader.TREE_CALLS)):
        for name in names:
            real = inspect.signature(getattr(type(obj), name)).parameters
            wrapper = inspect.signature(getattr(obj, name)).parameters.values()
            named = [p.name for p in wrapper if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
            assert named == list(real)[1:1 + len(named)], (type(obj).__name__, name)
            assert len(named) == len(real) - 1 or any(p.kind == p.VAR_POSITIONAL for p in wrapper), name
