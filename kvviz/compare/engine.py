# SPDX-License-Identifier: Apache-2.0
"""Side-by-side runs: one scenario on two cache configurations, compared step by step.

A configuration is a :class:`SideSpec`: a cache kind (trie, hash or base), the trie's eviction
policy and the backend that runs it. ``kvviz compare`` puts any two side by side
(:func:`run_compare`: ``trie:lru`` against ``trie:lfu``, the trie against the hash design);
``kvviz diff`` is the special case of the reference backend's trie against another
backend's, the same config on both (:func:`run_diff`: kvcore's against shortfin's): the same
:class:`CompareRun`, the same report (:func:`format_compare`) and the same JSON
(:func:`compare_dict`, :data:`COMPARE_SCHEMA`).

Both runs are ordinary :class:`~kvviz.core.session.Session` s, so every frame of either
side can be viewed, exported or put side by side (``kvviz diff --ui``, ``kvviz compare``).
After every step the *observable* state of each side is reduced to an :class:`Observation`:

* the outcome of the op (``ok`` or the error kind),
* the number of free pages holding nothing (the hash design's free queue also holds ref-0
  cached blocks: those count as cached, as a trie's evictable nodes do),
* the cached blocks, as token paths from the root (and a hash cache's unreachable blocks),
* each live allocation's block table, structurally: page numbers legitimately differ
  (kvcore hands pages out first-in first-out, shortfin from the end of its free list), so
  a page is recorded as which earlier entry it aliases (its first appearance, counting
  allocations by name) and the token path of the node holding it, if any.

The first step whose observations differ is the :class:`Divergence`. Each side also keeps
running :class:`Counters` (hit tokens, pages computed and reused, evictions, failed ops), so
two policies can be told apart by what they save, not only by where they first differ.

A foreign backend recognises its known departures from the reference while it runs
(:attr:`kvviz.backends.Backend.known_issues`); those seen up to the divergence are
its likely explanation. A divergence with none is unexplained: a new behaviour of that
cache, or a bug of ours. The report's words about the foreign side (its name, version,
cache class and known issues) come from its backend.

Narration and expect lines were written for the script's header (its kind and policy). A
side runs them as :class:`~kvviz.core.session.ScopedScript` says for ``kvviz run
--trie/--base``: on the header's kind, every line; on another kind, only the lines tagged for
that kind. A side on the header's kind with another policy runs none of them (they say who
the header's policy evicts), and its step 0 says so; :attr:`Side.expects_checked` and
:attr:`Side.expects_unchecked` count what each side checked.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace

from kvcore import Snapshot

from kvviz.backends.registry import (BACKENDS, DIFF_BACKEND, ENGINE_KINDS, REFERENCE_BACKEND, BackendError,
                                 make_backend_factory)
from kvviz.core.designs import BASE, HASH, TRIE, design, design_of
from kvviz.core.free_queue import free_page_count, queue_text
from kvviz.core.words import count, did_you_mean
from kvviz.core.scenario import CacheConfig, Scenario, Step
from kvviz.core.scenario.values import POLICIES
from kvviz.core.session import Frame, ScopedScript, Session

FIELDS = ("outcome", "free", "cached", "block_tables", "unreachable")
FIELD_NAMES = {"outcome": "success or failure", "free": "free pages", "cached": "cached blocks",
               "block_tables": "block tables", "unreachable": "unreachable cached blocks"}


class DiffError(ValueError):
    """A scenario or side configuration that cannot be run on both sides."""


@dataclass(frozen=True)
class Observation:
    """What two caches can be compared on after a step (see the module docstring).

    ``block_tables`` is a tuple of ``(name, entries)``; each entry is ``(alias, block)``:
    ``alias`` numbers distinct pages by first appearance, ``block`` is the token path of the
    cached block (trie node or hash block) holding the page, or None if none holds it.
    ``cached`` holds the paths of the blocks an acquire can reach; ``unreachable`` those of a
    hash cache's blocks whose parent was evicted (from their first cached ancestor on; a trie
    has none). ``free`` counts pages that hold nothing: a page in the hash design's free queue
    that still holds a cached block (eviction is lazy) counts as cached.
    """

    outcome: str
    free: int
    cached: tuple[tuple[int, ...], ...]
    block_tables: tuple[tuple[str, tuple[tuple[int, tuple[int, ...] | None], ...]], ...]
    unreachable: tuple[tuple[int, ...], ...] = ()

    def differences(self, other: "Observation") -> tuple[str, ...]:
        """The fields (of :data:`FIELDS`) on which the two observations differ."""
        return tuple(f for f in FIELDS if getattr(self, f) != getattr(other, f))

    def to_dict(self) -> dict:
        """JSON-able form."""
        return {"outcome": self.outcome, "free": self.free, "cached": [list(p) for p in self.cached],
                "block_tables": {name: [[alias, None if block is None else list(block)] for alias, block in entries]
                                 for name, entries in self.block_tables},
                "unreachable": [list(p) for p in self.unreachable]}


def token_paths(snap: Snapshot) -> dict[int, tuple[int, ...]]:
    """Each trie node's token path: the tokens of the nodes from the root down to it."""
    nodes = {n.id: n for n in snap.nodes}
    paths: dict[int, tuple[int, ...]] = {}
    for n in snap.nodes:
        if n.parent is None or n.id in paths:
            continue
        chain, cur = [], n  # walk up to a node whose path is known (or a root)
        while cur is not None and cur.parent is not None and cur.id not in paths and len(chain) <= len(nodes):
            chain.append(cur)
            cur = nodes.get(cur.parent)
        base = paths.get(cur.id, ()) if cur is not None else ()
        for m in reversed(chain):
            base = paths[m.id] = base + m.tokens
    return paths


@dataclass(frozen=True, slots=True)
class CachedBlock:
    """One cached block of either design, as the comparison sees it: its token ``path`` from
    the first block, its ``page``, its ``ref``, what the cache calls it (``node 3``, ``block 2``)
    and whether an acquire can reach it. A hash block whose parent was evicted is unreachable;
    its ``path`` then starts at its first cached ancestor (the tokens before are gone)."""

    path: tuple[int, ...]
    page: int
    ref: int
    name: str
    reachable: bool = True


def cached_blocks(snap: Snapshot) -> list[CachedBlock]:
    """The snapshot's cached blocks, sorted by path: the trie's nodes or the hash design's blocks."""
    if snap.blocks:
        by_key = {}
        for b in snap.blocks:  # two pages may cache one key: the smaller id is the one lookups find
            by_key.setdefault(b.key, b)
        paths: dict[str, tuple[int, ...]] = {}

        def path(b) -> tuple[int, ...]:
            chain = []
            while b is not None and b.key not in paths and len(chain) <= len(by_key):
                chain.append(b)
                b = by_key.get(b.parent) if b.parent is not None else None
            known = paths[b.key] if b is not None and b.key in paths else ()
            for link in reversed(chain):
                known = paths[link.key] = known + link.tokens
            return known

        rows = [CachedBlock(path(b), b.page, snap.pages[b.page].ref if 0 <= b.page < len(snap.pages) else 0,
                            f"block {b.id}", b.reachable) for b in snap.blocks]
    else:
        node_paths = token_paths(snap)
        rows = [CachedBlock(node_paths.get(n.id, n.tokens), n.page, n.ref, f"node {n.id}")
                for n in snap.nodes if n.parent is not None]
    return sorted(rows, key=lambda r: (r.path, r.name))


def observe(frame: Frame) -> Observation:
    """The observable state after ``frame``'s op."""
    snap = frame.snapshot
    blocks = cached_blocks(snap)
    holder = {b.page: b.path for b in blocks if b.page is not None}
    aliases: dict[int, int] = {}
    tables = []
    for a in sorted(snap.allocations, key=lambda a: a.label):
        entries = []
        for p in a.pages:
            alias = aliases.setdefault(p, len(aliases))
            entries.append((alias, holder.get(p)))
        tables.append((a.label, tuple(entries)))
    # The hash design's free queue also holds its ref-0 cached blocks (evicted lazily, when the
    # page is taken): compare pages that hold nothing, which is what a trie's free pages are.
    empty = free_page_count(snap)
    return Observation("ok" if frame.error is None else frame.error.kind, empty,
                       tuple(sorted(b.path for b in blocks if b.reachable)), tuple(tables),
                       tuple(sorted(b.path for b in blocks if not b.reachable)))


# -- the two configurations ------------------------------------------------------------------

COMPARE_KINDS = (TRIE, HASH, BASE)
"""The cache kinds a side may name. ``hash`` (vLLM's design) is accepted here whatever the
backend runs today: the backend factory refuses a kind it cannot build, with its own words."""

POLICY_KINDS = (TRIE,)
"""The kinds whose evictions follow a policy: the base cache never evicts and the hash design
evicts by its free queue, so a policy on them would be a setting that does nothing."""


@dataclass(frozen=True)
class SideSpec:
    """One side's configuration: ``kind``, ``policy`` (``lru`` for kinds without one) and the
    ``backend`` that runs it (a name of :data:`~kvviz.backends.registry.BACKENDS`)."""

    kind: str
    policy: str = "lru"
    backend: str = REFERENCE_BACKEND

    @property
    def setting(self) -> str:
        """The kind and its policy: ``trie:lru``, ``base``, ``hash`` (whichever backend runs it)."""
        return f"{self.kind}:{self.policy}" if self.kind in POLICY_KINDS else self.kind

    @property
    def label(self) -> str:
        """:attr:`setting`, prefixed with the backend when it is not kvcore (``shortfin trie:lru``)."""
        return self.setting if self.backend == REFERENCE_BACKEND else f"{self.backend} {self.setting}"

    def config(self, header: CacheConfig) -> CacheConfig:
        """The header's pool and page size with this side's kind and policy (and a hash header's
        ``recompute_last_token``, vLLM's rule, on a hash side: it decides what a hit covers)."""
        recompute = header.recompute_last_token and header.kind == self.kind == HASH
        return CacheConfig(self.kind, header.pages, header.tokens_per_page, self.policy, recompute_last_token=recompute)

    def to_dict(self) -> dict:
        """JSON-able form."""
        return {"kind": self.kind, "policy": self.policy, "backend": self.backend, "label": self.label}


def parse_side(text: str, header: CacheConfig, backend: str = REFERENCE_BACKEND) -> SideSpec:
    """``KIND[:POLICY]`` (``trie:lfu``, ``base``, ``hash``) as a :class:`SideSpec` on ``backend``.

    A trie without a policy evicts by the header's policy when the header is a trie too (the
    script's own setting), else by lru. Raises :class:`DiffError` with one line naming what was
    expected for an unknown kind, policy or backend, or a policy on a kind that has none.
    """
    kind, sep, policy = str(text).strip().lower().partition(":")
    if kind not in COMPARE_KINDS:
        raise DiffError(f"{text!r} is not a cache configuration: expected KIND[:POLICY] with KIND one of "
                        f"{', '.join(COMPARE_KINDS)} (e.g. trie:lfu){did_you_mean(kind, COMPARE_KINDS)}")
    if backend not in BACKENDS:
        raise DiffError(f"unknown backend {backend!r} (expected one of: {', '.join(BACKENDS)})")
    if not sep:
        policy = header.policy if kind in POLICY_KINDS and header.kind == kind else "lru"
    elif kind not in POLICY_KINDS:
        why = design(kind).clause("no_policy")
        raise DiffError(f"{text!r}: the {kind} cache {why} and takes no policy (give {kind!r} alone)")
    elif policy not in POLICIES:
        raise DiffError(f"{text!r}: unknown policy {policy!r}{did_you_mean(policy, POLICIES)} (expected one "
                        f"of: {', '.join(POLICIES)})")
    return SideSpec(kind, policy, backend)


# -- counters ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Counters:
    """One side's running totals after a step, from its snapshots' stats and frames.

    ``hit_tokens`` and ``evictions`` are the cache's own :class:`~kvcore.Stats`. A page
    ``reused`` was matched in the cache by an acquire (its allocation's hit tokens, in pages);
    a page ``computed`` is one an allocation was given to fill: the rest of an acquire's block
    table, and the pages an extend added. ``failures`` counts failed ops.
    """

    hit_tokens: int = 0
    pages_computed: int = 0
    pages_reused: int = 0
    evictions: int = 0
    failures: int = 0

    def after(self, before: Snapshot | None, frame: Frame) -> "Counters":
        """These totals carried over ``frame`` (whose previous snapshot is ``before``)."""
        snap = frame.snapshot
        computed = reused = 0
        if before is not None:
            tpp = snap.tokens_per_page
            old = {a.id: a for a in before.allocations}
            for a in snap.allocations:
                previous = old.get(a.id)
                if previous is None:
                    hit_pages = a.hit_tokens // tpp
                    reused += hit_pages
                    computed += len(a.pages) - hit_pages
                elif len(a.pages) > len(previous.pages):
                    computed += len(a.pages) - len(previous.pages)
        return Counters(snap.stats.hit_tokens, self.pages_computed + computed, self.pages_reused + reused,
                        snap.stats.evictions, self.failures + (frame.error is not None))

    def to_dict(self) -> dict:
        """JSON-able form (the field names)."""
        return {name: getattr(self, name) for name in self.__slots__}


# -- a run of both sides ----------------------------------------------------------------------


@dataclass
class Side:
    """One side of a run: its key (``left`` or ``right``: widget ids and JSON), the ``name``
    reports use, its column ``title``, its spec and session, and per frame its backend's
    findings and its :class:`Counters`."""

    key: str
    name: str
    title: str
    spec: SideSpec
    session: Session
    findings: list[tuple] = field(default_factory=lambda: [()])
    counters: list[Counters] = field(default_factory=lambda: [Counters()])
    expects_checked: int = 0
    expects_unchecked: int = 0
    expects_note: str = ""
    """Why the script's untagged lines were left out on this side ("" when they were not)."""

    @property
    def foreign(self) -> bool:
        """Whether another backend than the reference runs this side (its known issues count)."""
        return self.spec.backend != REFERENCE_BACKEND

    @property
    def version(self) -> str | None:
        """The foreign backend's version (``3.9.0``); None for the reference."""
        return self.session.backend.version if self.foreign else None

    @property
    def cache_class(self) -> str | None:
        """The foreign cache's class (``TriePagedAttentionCache``); None for the reference."""
        return self.session.backend.cache_name if self.foreign else None

    @property
    def description(self) -> str:
        """The side once, for a report's header: ``kvcore trie:lru``, ``shortfin 3.9.0 trie:lru
        (TriePagedAttentionCache)`` (a foreign backend's version and cache class are its own)."""
        name = self.session.backend.name
        if not self.foreign:
            return f"{name} {self.spec.setting}"
        return f"{name} {self.version} {self.spec.setting} ({self.cache_class})"


class _SideRunner:
    """Builds one side step by step (the two sides advance together, so a backend's findings
    can be taken after each step), with the script's lines scoped as the module doc says."""

    def __init__(self, scenario: Scenario, key: str, name: str, title: str, spec: SideSpec, name_side: bool):
        """``name_side``: say which side a backend refused (a compare's sides differ; a diff's
        refusals keep the backend's own words)."""
        header = scenario.config
        script = replace(scenario, config=replace(header, policy=spec.policy))
        note, unchecked = "", 0
        if spec.kind == header.kind and spec.policy != header.policy:
            unchecked = sum(len(step.expects_for(spec.kind)) for step in scenario.steps)
            note = (f"written for the {header.kind} cache evicting by {header.policy}; this side evicts by "
                    f"{spec.policy}")
            notice = (f"This script was {note}: its narration is left out (what is shown comes from this "
                      f"cache's own events)" + (f", and its {count(unchecked, 'expect line')} "
                                                f"{'are' if unchecked != 1 else 'is'} not checked" if unchecked else "")
                      + ".")
            script = replace(script, description=notice + (f"\n\n{scenario.description}" if scenario.description
                                                            else ""),
                             steps=tuple(Step(step.op) for step in scenario.steps))
        self.plan = ScopedScript(script, spec.kind)
        if self.plan.foreign:
            unchecked = self.plan.unchecked_expects
            note = f"written for the {header.kind} cache; this side runs the {spec.kind} cache"
        self.steps = script.steps
        try:
            session = Session(spec.config(header), title=scenario.title, description=self.plan.description,
                              vocab=scenario.vocab, backend_factory=make_backend_factory(spec.backend))
        except BackendError as exc:
            if not name_side:
                raise
            raise type(exc)(f"the {key} side ({spec.label}) cannot run: {exc}") from None
        session.written_for = header.kind
        session.unchecked_expects = unchecked
        self.side = Side(key, name, title, spec, session, expects_unchecked=unchecked, expects_note=note)
        session.backend.take_findings()

    def apply(self, index: int) -> Frame:
        """Apply step ``index`` (0-based) and record its findings and counters."""
        side, step = self.side, self.steps[index]
        before = side.session.last.snapshot
        expects = self.plan.expects(step)
        frame = side.session.apply(step.op, self.plan.narration(step), expects)
        side.expects_checked += len(expects)
        side.findings.append(tuple(side.session.backend.take_findings()))
        side.counters.append(side.counters[-1].after(before, frame))
        return frame


@dataclass(frozen=True)
class Divergence:
    """The first step at which the two sides can be told apart."""

    step: int
    op_text: str
    line: int
    fields: tuple[str, ...]
    left: Observation
    right: Observation
    findings: tuple = ()  # both sides' findings of steps 1..step, in order

    @property
    def known(self) -> tuple[str, ...]:
        """Codes of the known issues seen up to this step, in order of first appearance."""
        return tuple(dict.fromkeys(f.code for f in self.findings))

    @property
    def explained(self) -> bool:
        """True when a known issue was seen at or before this step."""
        return bool(self.findings)


@dataclass
class CompareRun:
    """The two sides of one scenario, their observations per step and the first divergence."""

    scenario: Scenario
    left: Side
    right: Side
    observations: list[tuple[Observation, Observation]] = field(repr=False, default_factory=list)
    divergence: Divergence | None = None
    command: str = "compare"
    """The command that made the run (``compare`` or ``diff``), for titles."""

    def __len__(self) -> int:
        return len(self.left.session)

    @property
    def sides(self) -> tuple[Side, Side]:
        """Left, right."""
        return self.left, self.right

    def frames(self, step: int) -> tuple[Frame, Frame]:
        """The left and right frames of ``step``, for side-by-side views."""
        return self.left.session.frame(step), self.right.session.frame(step)

    def differences(self, step: int) -> tuple[str, ...]:
        """The compared fields (of :data:`FIELDS`) that differ at ``step``."""
        left, right = self.observations[step]
        return left.differences(right)

    def findings_until(self, step: int) -> tuple:
        """Both sides' findings of steps 1..``step``, left first at each step."""
        return tuple(f for i in range(1, step + 1) for side in self.sides for f in side.findings[i])


def side_names(left: SideSpec, right: SideSpec) -> tuple[str, str]:
    """How reports name the two sides: by what tells them apart, the backend (``kvcore``,
    ``shortfin``), the setting (``trie:lru``, ``trie:fifo``) or both; ``left`` and ``right``
    when nothing does."""
    parts = [(spec.backend if left.backend != right.backend else "",
              spec.setting if left.setting != right.setting else "") for spec in (left, right)]
    names = tuple(" ".join(p for p in part if p) for part in parts)
    return names if all(names) else ("left", "right")


def run_compare(scenario: Scenario, left: SideSpec, right: SideSpec, command: str = "compare") -> CompareRun:
    """Run ``scenario`` on the ``left`` and on the ``right`` configuration, step by step, and
    find the first divergence (``command``, ``compare`` or ``diff``, titles the app).

    Sides are keyed ``left`` and ``right`` and named by :func:`side_names`. Raises
    :class:`~kvviz.backends.BackendError` for a configuration its backend cannot run
    (:class:`~kvviz.backends.BackendUnavailable` when its packages are not installed); a
    compare says which side, a diff keeps the backend's own words.
    """
    names = side_names(left, right)
    runners = [_SideRunner(scenario, key, name, f"{key} · {spec.label}", spec, name_side=command == "compare")
               for key, name, spec in zip(("left", "right"), names, (left, right))]
    left_side, right_side = (runner.side for runner in runners)
    observations = [(observe(left_side.session.last), observe(right_side.session.last))]
    divergence = None
    for index, step in enumerate(scenario.steps):
        lo, ro = (observe(runner.apply(index)) for runner in runners)
        observations.append((lo, ro))
        if divergence is None and lo != ro:
            step_number = index + 1
            findings = tuple(f for i in range(1, step_number + 1) for side in (left_side, right_side)
                             for f in side.findings[i])
            divergence = Divergence(step_number, step.op.text, step.op.line, lo.differences(ro), lo, ro, findings)
    return CompareRun(scenario, left_side, right_side, observations, divergence, command)


def run_diff(scenario: Scenario, backend: str = DIFF_BACKEND) -> CompareRun:
    """``kvviz diff``: :func:`run_compare` of the reference backend's design of ``backend``'s
    kind (left) against ``backend`` (right), as ``kvviz compare --right-backend BACKEND`` runs
    it (shortfin and SGLang: the trie; vLLM: the hash design, whatever kind the script's header
    names, so every demo can run on vLLM). The app's column titles are each side's backend
    (the right one with its version).

    Raises :class:`DiffError` for a trie backend given a scenario whose cache is not a trie,
    :class:`~kvviz.backends.BackendUnavailable` when ``backend``'s packages are not installed
    and :class:`~kvviz.backends.BackendError` for another config it cannot run.
    """
    if backend == REFERENCE_BACKEND:  # both sides would be one backend
        raise DiffError(f"a diff compares {REFERENCE_BACKEND} with another backend, not with itself "
                        f"(expected one of: {', '.join(b for b in BACKENDS if b != REFERENCE_BACKEND)})")
    kind = ENGINE_KINDS.get(backend, TRIE)
    if kind == TRIE and not design(scenario.config.kind).tree:
        raise DiffError(f"a diff compares {REFERENCE_BACKEND}'s trie cache with {backend}'s; this scenario runs a "
                        f"{scenario.config.kind!r} cache (its `cache` line says so)")
    policy = scenario.config.policy if kind == TRIE else "lru"
    run = run_compare(scenario, SideSpec(kind, policy, REFERENCE_BACKEND), SideSpec(kind, policy, backend), "diff")
    run.left.title = f"{REFERENCE_BACKEND} {kind}"
    run.right.title = f"{run.right.session.backend.name} {run.right.version}"
    return run


# -- reports --------------------------------------------------------------------------------


def _letters(alias: int) -> str:
    out = ""
    alias += 1
    while alias:
        alias, r = divmod(alias - 1, 26)
        out = chr(ord("a") + r) + out
    return out


def describe_table(entries, label, tpp: int) -> str:
    """A structural block table: ``a=[1 2 3 4] b`` (letters alias pages; ``=`` names the block
    of the node holding the page, by its last page of tokens)."""
    if not entries:
        return "(no pages)"
    parts = []
    for alias, block in entries:
        text = _letters(alias)
        if block is not None:
            depth = len(block) // tpp
            text += f"=[{label(block[-tpp:])}]" + (f"@{depth}" if depth > 1 else "")
        parts.append(text)
    return " ".join(parts)


def state_lines(frame: Frame, session: Session) -> list[str]:
    """The state of one side at a step, with real page numbers, one fact per line."""
    snap = frame.snapshot
    label = session.label_tokens
    lines = [f"outcome: {'ok' if frame.error is None else f'{frame.error.kind}: {frame.error.message}'}"]
    if design_of(snap).lazy:  # free and cached overlap: the pages holding nothing, then the queue
        lines.append(f"free pages: {free_page_count(snap)} (holding nothing)")
        lines.append(f"free queue, head first (* holds a cached block): {queue_text(snap)}")
    else:
        lines.append(f"free pages: {snap.free_count} {list(snap.free)}")
    cached = cached_blocks(snap)
    if cached:
        lines.append("cached blocks:")
        for b in cached:
            lines.append(f"  [{label(b.path)}] page {b.page} ref {b.ref} ({b.name})"
                         + ("" if b.reachable else " unreachable: its parent was evicted"))
    else:
        lines.append("cached blocks: none")
    if snap.allocations:
        lines.append("block tables:")
        for a in sorted(snap.allocations, key=lambda a: a.label):
            pages = " ".join(str(p) if i < a.published else f"({p})" for i, p in enumerate(a.pages))
            lines.append(f"  {a.label}: [{pages}] published {a.published}, {len(a.tokens)} tokens")
    else:
        lines.append("block tables: no live allocations")
    root = snap.node(0)
    if root is not None and root.ref:
        lines.append(f"root ref: {root.ref}")
    for v in frame.violations:
        lines.append(f"violation: {v}")
    return lines


def field_summary(field_name: str, left: Observation, right: Observation, names: tuple[str, str], tpp: int,
                  label) -> list[str]:
    """What differs in one compared field, in words: ``names`` are the two sides' names, ``label``
    writes tokens (as the scenario spelled them)."""
    k, s = left, right
    kn, sn = names
    if field_name == "outcome":
        return [f"success or failure: {kn} {k.outcome}, {sn} {s.outcome}"]
    if field_name == "free":
        return [f"free pages: {kn} {k.free}, {sn} {s.free}"]
    if field_name in ("cached", "unreachable"):
        width = max(len(kn), len(sn)) + len("only in :") + 1
        mine, theirs = getattr(k, field_name), getattr(s, field_name)
        in_k, in_s = Counter(mine), Counter(theirs)
        only_k = [p for p in mine if p not in in_s]
        only_s = [p for p in theirs if p not in in_k]
        out = [f"{FIELD_NAMES[field_name]}:"]
        out += [f"  {f'only in {kn}:'.ljust(width)}[{label(p)}]" for p in only_k]
        out += [f"  {f'only in {sn}:'.ljust(width)}[{label(p)}]" for p in only_s]
        # A hash cache keeps a block computed twice twice (vLLM's copies); the trie dedups it.
        out += [f"  [{label(p)}] is cached {_times(in_k[p])} in {kn}, {_times(in_s[p])} in {sn}"
                for p in dict.fromkeys(mine) if p in in_s and in_k[p] != in_s[p]]
        if len(out) == 1:  # every block on both sides, as often: only their order differs
            out.append("  the same blocks on both sides, listed in another order")
        return out
    kt, st = dict(k.block_tables), dict(s.block_tables)
    out = ["block tables (letters alias pages; =[...] is the cached block holding the page):"]
    for name in sorted(set(kt) | set(st)):
        if kt.get(name) != st.get(name):
            kd = describe_table(kt[name], label, tpp) if name in kt else "(not live)"
            sd = describe_table(st[name], label, tpp) if name in st else "(not live)"
            out.append(f"  {name}: {kn} {kd}; {sn} {sd}")
    if len(out) == 1:  # the tables differ in a way their letters do not show
        out.append("  the same tables as written here; the pages they alias differ")
    return out


def _times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n:,} times")


def divergence_summary(run: CompareRun, step: int) -> list[str]:
    """Every compared field that differs at ``step``, in words (empty when both sides agree)."""
    left, right = run.observations[step]
    names = (run.left.name, run.right.name)
    label = run.left.session.label_tokens
    tpp = run.scenario.config.tokens_per_page
    return [line for f in left.differences(right) for line in field_summary(f, left, right, names, tpp, label)]


# -- the report of both commands (kvviz compare --print, kvviz diff) -------------------------------

COUNTER_COLUMNS = (("hit", "hit_tokens"), ("computed", "pages_computed"), ("reused", "pages_reused"),
                   ("evicted", "evictions"), ("failed", "failures"))
"""The table's counter columns per side: heading and :class:`Counters` field."""

_OP_WIDTH = 30


def _expect_failures(side: Side) -> int:
    session = side.session
    return sum(len(session.frame(i).expect_failures) for i in range(len(session)))


def expects_line(side: Side) -> str:
    """Which of the script's expect lines this side checked, and why the others were not."""
    checked = side.expects_checked
    text = f"{side.key} ({side.spec.label}) checked {count(checked, 'expect line')}"
    if checked:
        text += f", {_expect_failures(side):,} failed"
    if side.expects_unchecked:
        text += f"; {side.expects_unchecked:,} left out: the script was {side.expects_note}"
    return text


#: Failed expect lines and invariant violations listed per side; the rest are counted.
MAX_FAILED_CHECKS_LISTED = 10


def _failed_checks(side: Side) -> list[str]:
    """One line per failed expect and invariant violation of ``side`` (bounded), under a
    heading; none when every check held."""
    session = side.session
    found: list[str] = []
    total = 0
    for i in range(1, len(session)):
        frame = session.frame(i)
        for r in frame.expect_failures:
            total += 1
            if len(found) < MAX_FAILED_CHECKS_LISTED:
                found.append(f"  line {r.expect.line}, step {i} `{r.expect.text}`: {r.message}")
        for v in frame.violations:
            total += 1
            if len(found) < MAX_FAILED_CHECKS_LISTED:
                found.append(f"  step {i} `{frame.op.text}`: {v}")
    if not found:
        return []
    more = [f"  ... and {total - len(found):,} more"] if total > len(found) else []
    return [f"failed on {side.key} ({side.spec.label}):", *found, *more]


def _counter_text(c: Counters) -> str:
    return (f"hit {count(c.hit_tokens, 'token')}, {c.pages_computed:,} pages computed, {c.pages_reused:,} reused, "
            f"{count(c.evictions, 'eviction')}, {count(c.failures, 'failed op')}")


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def _table(run: CompareRun) -> list[str]:
    """One row per step: the op, whether the sides differ, and each side's outcome and counters."""
    d = run.divergence
    widths = [max(len(heading), 5) for heading, _ in COUNTER_COLUMNS]
    side_width = len("outcome") + sum(w + 1 for w in widths)
    heads = ["step", "op".ljust(_OP_WIDTH), "diff "]
    top = " " * (len("step") + 1 + _OP_WIDTH + 1 + 5)
    for side in run.sides:
        top += " | " + _short(f"{side.key}: {side.spec.label}", side_width).ljust(side_width)
        heads.append("| " + "outcome".ljust(7) + "".join(" " + h.rjust(w) for (h, _), w in zip(COUNTER_COLUMNS, widths)))
    rows = [top.rstrip(), " ".join(heads)]
    for step in range(len(run)):
        frames = run.frames(step)
        op = frames[0].op.text if frames[0].op is not None else "start"
        mark = "first" if d is not None and step == d.step else ("x" if run.differences(step) else "")
        cells = [f"{step:>4}", _short(op, _OP_WIDTH).ljust(_OP_WIDTH), mark.ljust(5)]
        for side, frame in zip(run.sides, frames):
            c = side.counters[step]
            outcome = "-" if frame.op is None else ("ok" if frame.error is None else "FAIL")
            cells.append("| " + outcome.ljust(7) + "".join(" " + f"{getattr(c, name):,}".rjust(w)
                                                           for (_, name), w in zip(COUNTER_COLUMNS, widths)))
        rows.append(" ".join(cells).rstrip())
    return rows


def _known_issues(run: CompareRun, side: Side) -> list[str]:
    """What ``side``'s backend knows of (a foreign side: the reference has no known issues):
    the known issues it saw up to the first divergence, its likely explanation; that none
    explains it; or, when the sides agree, the known issues it showed all the same. Its words
    (name, issues, their titles and sources) are its backend's."""
    backend = side.session.backend
    issues, name = backend.known_issues, backend.name
    d = run.divergence
    seen = [(i, f) for i, fs in enumerate(side.findings[:len(run) if d is None else d.step + 1]) for f in fs]
    if d is None:
        if not seen:
            return []
        return [f"{name} showed known issues that did not change what is compared here:",
                *(f"  step {i}: {f.code}: {f.message}" for i, f in seen)]
    if not seen:
        return [f"no known {name} issue explains this divergence: a new finding (or a bug in kvviz)"]
    lines = [f"known {name} issues seen up to this step (the likely explanation):"]
    lines += [f"  step {i}: {f.code} ({issues[f.code].kind}, {issues[f.code].source}): {f.message}" for i, f in seen]
    lines += [f"  {code}: {issues[code].title}" for code in dict.fromkeys(f.code for _, f in seen)]
    return lines


def report_header(run: CompareRun) -> str:
    """The report's first line: the scenario, each side once (:attr:`Side.description`), its
    steps and its pool."""
    scenario = run.scenario
    config = scenario.config
    left, right = run.sides
    return (f"{scenario.path or scenario.title or 'scenario'}: {left.description} vs {right.description}, "
            f"{count(len(scenario.steps), 'step')}, {count(config.pages, 'page')} of "
            f"{count(config.tokens_per_page, 'token')}")


def format_compare(run: CompareRun) -> str:
    """The plain-text report ``kvviz compare --print`` and ``kvviz diff`` print: the header,
    which expects each side checked and what failed, the first divergence and what differs
    there, a foreign side's known issues, a table of every step with both sides' running
    counters, the totals and both states at the first divergence."""
    lines = [report_header(run)]
    lines += [f"expects: {expects_line(side)}" for side in run.sides]
    for side in run.sides:  # what failed is shown, not only counted: "no divergence" is about the sides
        lines += _failed_checks(side)
    d = run.divergence
    if d is None:
        lines.append("no divergence: outcomes, free pages, cached blocks and block tables agree at every step")
    else:
        where = f" (line {d.line})" if d.line else ""
        lines += [f"first divergence at step {d.step}{where}: {d.op_text}",
                  f"steps 0..{d.step - 1} agree" if d.step > 1 else "step 0 agrees", "what differs:"]
        lines += ["  " + x for x in divergence_summary(run, d.step)]
    for side in run.sides:
        if side.foreign:
            lines += ["", *_known_issues(run, side)]
    lines += ["", *_table(run), "", "totals:"]
    lines += [f"  {side.key} {side.spec.label}: {_counter_text(side.counters[-1])}" for side in run.sides]
    if d is not None:
        for side, frame in zip(run.sides, run.frames(d.step)):
            lines += ["", f"{side.key} {side.spec.label} at step {d.step}:"]
            lines += ["  " + x for x in state_lines(frame, side.session)]
    return "\n".join(lines) + "\n"


COMPARE_SCHEMA = "kvviz.compare/2"
"""The schema of the JSON ``kvviz compare --json`` and ``kvviz diff --json`` print."""

COMPARE_JSON_HELP = f"""\
kvviz compare --json, kvviz diff --json: both sides, every step ({COMPARE_SCHEMA})

One JSON object, keys sorted, indented. kvviz diff FILE --json prints the object kvviz
compare FILE --right trie --right-backend shortfin --json prints (the reference on the
left, the backend on the right). Exit codes as the text report: 0 when the sides agree at every step,
1 at a divergence, 2 for bad input.

  schema            "{COMPARE_SCHEMA}"
  scenario          the scenario's path (or its title)
  steps             the scenario's ops: records run from step 0 (the start) to steps
  sides             "left" and "right", each:
    kind, policy    the cache kind and its eviction policy ("lru" for a kind without one)
    backend         the cache that runs the side ({', '.join(BACKENDS)})
    label           kind:policy, after the backend when it is not kvcore (shortfin trie:lru)
    version         a foreign backend's version (shortfin's 3.9.0); null for kvcore
    cache_class     a foreign backend's cache class (TriePagedAttentionCache); null for kvcore
    expects_checked, expects_failed   the script's expect lines this side checked, failed
    expects_unchecked, expects_note   the lines left out on this side, and why
  findings          the known issues a foreign side's backend saw, in step order, each:
    step, side      the step (1..steps) and "left" or "right"
    code, kind      the issue's code (B10, SG2) and "defect" or "design"
    message         what the backend saw
  first_divergence  null when the sides agree at every step; else:
    step, line, op  the first step where they differ, its line in the file, its op
    fields          the compared fields that differ: outcome, free, cached, block_tables,
                    unreachable
    known           codes of the known issues seen up to this step, first seen first
    explained       true when one was seen (the likely explanation)
    left, right     each side there: observation (the compared fields), snapshot (its
                    whole state) and violations (its broken invariants)
  records           one object per step per side, in step order, left first:
    step, side      the step (0 = the start) and "left" or "right"
    op              the op's text (null at step 0)
    outcome         "ok", the error kind of a failed op, or null at step 0
    differs         the compared fields on which the two sides differ at this step
    hit_tokens      the cache's running total of tokens matched by acquires (its stats)
    pages_computed  running total of pages allocations were given to fill
    pages_reused    running total of pages acquires matched in the cache
    evictions       the cache's running total of evicted pages (its stats)
    failures        running total of failed ops
    expect_failures, violations   this step's failed expect lines and invariant violations
    digest          the snapshot's sha256 (kvviz open verifies the same digests)
"""
"""The JSON's fields, field by field: ``kvviz help compare`` prints it and
docs/reference/json.md is generated from it (with the keys of the schemas it replaced)."""


def _at_divergence(observation: Observation, frame: Frame) -> dict:
    return {"observation": observation.to_dict(), "snapshot": frame.snapshot.to_dict(),
            "violations": [v.to_dict() for v in frame.violations]}


def compare_dict(run: CompareRun) -> dict:
    """The JSON report ``kvviz compare --json`` and ``kvviz diff --json`` print: schema
    :data:`COMPARE_SCHEMA`, its fields in :data:`COMPARE_JSON_HELP`."""
    d = run.divergence
    records = []
    for step in range(len(run)):
        differs = list(run.differences(step))
        for side, frame in zip(run.sides, run.frames(step)):
            records.append({
                "step": step, "side": side.key, "op": frame.op.text if frame.op is not None else None,
                "outcome": None if frame.op is None else ("ok" if frame.error is None else frame.error.kind),
                "differs": differs, **side.counters[step].to_dict(),
                "expect_failures": len(frame.expect_failures), "violations": len(frame.violations),
                "digest": frame.snapshot.digest()})
    findings = [{"step": i, "side": side.key, "code": f.code,
                 "kind": side.session.backend.known_issues[f.code].kind, "message": f.message}
                for i in range(len(run)) for side in run.sides for f in side.findings[i]]
    return {
        "schema": COMPARE_SCHEMA,
        "scenario": run.scenario.path or run.scenario.title,
        "steps": len(run.scenario.steps),
        "sides": {side.key: {**side.spec.to_dict(), "version": side.version, "cache_class": side.cache_class,
                             "expects_checked": side.expects_checked, "expects_failed": _expect_failures(side),
                             "expects_unchecked": side.expects_unchecked, "expects_note": side.expects_note}
                  for side in run.sides},
        "findings": findings,
        "first_divergence": None if d is None else {
            "step": d.step, "line": d.line, "op": d.op_text, "fields": list(d.fields), "known": list(d.known),
            "explained": d.explained,
            **{side.key: _at_divergence(observation, frame)
               for side, observation, frame in zip(run.sides, (d.left, d.right), run.frames(d.step))}},
        "records": records,
    }
