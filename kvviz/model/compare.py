# SPDX-License-Identifier: Apache-2.0
"""Differential runs: one scenario on kvcore's trie and on shortfin's, compared step by step.

Both runs are ordinary :class:`~kvviz.model.session.Session` s, so every frame of either
side can be viewed, exported or put side by side (``kvviz diff --ui``). After every step
the *observable* state of each side is reduced to an :class:`Observation`:

* the outcome of the op (``ok`` or the error kind),
* the number of free pages,
* the cached blocks, as token paths from the root,
* each live allocation's block table, structurally: page numbers legitimately differ
  (kvcore hands pages out first-in first-out, shortfin from the end of its free list), so
  a page is recorded as which earlier entry it aliases (its first appearance, counting
  allocations by name) and the token path of the node holding it, if any.

The first step whose observations differ is the :class:`Divergence`. The shortfin backend
recognises known departures from kvcore while it runs (:data:`KNOWN_ISSUES`); those seen up
to the divergence are its likely explanation. A divergence with none is unexplained: a
new behaviour of shortfin, or a bug of ours.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvcore import Snapshot

from ..backends.registry import make_backend_factory
from .scenario import Scenario
from .session import Frame, Session

FIELDS = ("outcome", "free", "cached", "block_tables")
FIELD_NAMES = {"outcome": "success or failure", "free": "free pages", "cached": "cached blocks",
               "block_tables": "block tables"}


class DiffError(ValueError):
    """A scenario that cannot be run on both backends."""


@dataclass(frozen=True)
class Observation:
    """What two caches can be compared on after a step (see the module docstring).

    ``block_tables`` is a tuple of ``(name, entries)``; each entry is ``(alias, block)``:
    ``alias`` numbers distinct pages by first appearance, ``block`` is the token path of the
    trie node holding the page, or None if no node holds it.
    """

    outcome: str
    free: int
    cached: tuple[tuple[int, ...], ...]
    block_tables: tuple[tuple[str, tuple[tuple[int, tuple[int, ...] | None], ...]], ...]

    def differences(self, other: "Observation") -> tuple[str, ...]:
        """The fields (of :data:`FIELDS`) on which the two observations differ."""
        return tuple(f for f in FIELDS if getattr(self, f) != getattr(other, f))

    def to_dict(self) -> dict:
        """JSON-able form."""
        return {"outcome": self.outcome, "free": self.free, "cached": [list(p) for p in self.cached],
                "block_tables": {name: [[alias, None if block is None else list(block)] for alias, block in entries]
                                 for name, entries in self.block_tables}}


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


def observe(frame: Frame) -> Observation:
    """The observable state after ``frame``'s op."""
    snap = frame.snapshot
    paths = token_paths(snap)
    holder = {n.page: n.id for n in snap.nodes if n.parent is not None and n.page is not None}
    aliases: dict[int, int] = {}
    tables = []
    for a in sorted(snap.allocations, key=lambda a: a.label):
        entries = []
        for p in a.pages:
            alias = aliases.setdefault(p, len(aliases))
            node = holder.get(p)
            entries.append((alias, paths.get(node) if node is not None else None))
        tables.append((a.label, tuple(entries)))
    return Observation("ok" if frame.error is None else frame.error.kind, snap.free_count,
                       tuple(sorted(paths.values())), tuple(tables))


@dataclass(frozen=True)
class Divergence:
    """The first step at which kvcore and shortfin can be told apart."""

    step: int
    op_text: str
    line: int
    fields: tuple[str, ...]
    kvcore: Observation
    shortfin: Observation
    findings: tuple = ()  # shortfin's findings of steps 1..step, in order

    @property
    def known(self) -> tuple[str, ...]:
        """Codes of the known issues seen up to this step, in order of first appearance."""
        return tuple(dict.fromkeys(f.code for f in self.findings))

    @property
    def explained(self) -> bool:
        """True when a known issue was seen at or before this step."""
        return bool(self.findings)


@dataclass
class DiffRun:
    """The two sessions of one scenario, shortfin's findings per frame, and the first divergence."""

    scenario: Scenario
    kvcore: Session
    shortfin: Session
    findings: tuple[tuple, ...]  # per frame index; frame 0 has none
    divergence: Divergence | None
    observations: list[tuple[Observation, Observation]] = field(repr=False, default_factory=list)

    def __len__(self) -> int:
        return len(self.kvcore)

    def frames(self, step: int) -> tuple[Frame, Frame]:
        """The kvcore and shortfin frames of ``step``, for side-by-side views."""
        return self.kvcore.frame(step), self.shortfin.frame(step)

    def findings_until(self, step: int) -> tuple:
        """shortfin's findings of steps 1..``step``."""
        return tuple(f for fs in self.findings[1:step + 1] for f in fs)


def run_diff(scenario: Scenario) -> DiffRun:
    """Run ``scenario`` on kvcore's trie and on shortfin's, step by step, and compare them.

    Raises :class:`DiffError` for a base-cache scenario (shortfin's cache is a trie),
    :class:`~kvviz.backends.BackendUnavailable` when shortfin is not installed and
    :class:`~kvviz.backends.BackendError` for another config shortfin cannot run.
    """
    if scenario.config.kind != "trie":
        raise DiffError(f"a diff compares kvcore's trie cache with shortfin's; this scenario runs a "
                        f"{scenario.config.kind!r} cache (its `cache` line says so)")
    common = dict(title=scenario.title, description=scenario.description, vocab=scenario.vocab)
    kv = Session(scenario.config, backend_factory=make_backend_factory("kvcore"), **common)
    sf = Session(scenario.config, backend_factory=make_backend_factory("shortfin"), **common)
    take = sf.backend.take_findings
    take()
    findings: list[tuple] = [()]
    observations = [(observe(kv.last), observe(sf.last))]
    divergence = None
    for index, step in enumerate(scenario.steps, start=1):
        narration, expects = step.narration_for(scenario.config.kind), step.expects_for(scenario.config.kind)
        kv_frame = kv.apply(step.op, narration, expects)
        sf_frame = sf.apply(step.op, narration, expects)
        findings.append(tuple(take()))
        ko, so = observe(kv_frame), observe(sf_frame)
        observations.append((ko, so))
        if divergence is None and ko != so:
            divergence = Divergence(index, step.op.text, step.op.line, ko.differences(so), ko, so,
                                    tuple(f for fs in findings[1:] for f in fs))
    return DiffRun(scenario, kv, sf, tuple(findings), divergence, observations)


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
    paths = token_paths(snap)
    lines = [f"outcome: {'ok' if frame.error is None else f'{frame.error.kind}: {frame.error.message}'}",
             f"free pages: {snap.free_count} {list(snap.free)}"]
    cached = [n for n in snap.nodes if n.parent is not None]
    if cached:
        lines.append("cached blocks:")
        for n in sorted(cached, key=lambda n: paths.get(n.id, ())):
            lines.append(f"  [{label(paths.get(n.id, n.tokens))}] page {n.page} ref {n.ref} (node {n.id})")
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


def _field_summary(field_name: str, d: Divergence, tpp: int, label) -> list[str]:
    k, s = d.kvcore, d.shortfin
    if field_name == "outcome":
        return [f"success or failure: kvcore {k.outcome}, shortfin {s.outcome}"]
    if field_name == "free":
        return [f"free pages: kvcore {k.free}, shortfin {s.free}"]
    if field_name == "cached":
        only_k = [p for p in k.cached if p not in s.cached]
        only_s = [p for p in s.cached if p not in k.cached]
        out = ["cached blocks:"]
        out += [f"  only in kvcore:   [{label(p)}]" for p in only_k]
        out += [f"  only in shortfin: [{label(p)}]" for p in only_s]
        return out
    kt, st = dict(k.block_tables), dict(s.block_tables)
    out = ["block tables (letters alias pages; =[...] is the cached block holding the page):"]
    for name in sorted(set(kt) | set(st)):
        if kt.get(name) != st.get(name):
            kd = describe_table(kt[name], label, tpp) if name in kt else "(not live)"
            sd = describe_table(st[name], label, tpp) if name in st else "(not live)"
            out.append(f"  {name}: kvcore {kd}; shortfin {sd}")
    return out


def format_report(run: DiffRun) -> str:
    """The plain-text report ``kvviz diff`` prints."""
    from ..backends.shortfin_backend import KNOWN_ISSUES, SHORTFIN_VERSION

    scenario = run.scenario
    name = scenario.path or scenario.title or "scenario"
    tpp = scenario.config.tokens_per_page
    label = run.kvcore.label_tokens
    steps = len(scenario.steps)
    head = f"{name}: kvcore trie vs shortfin {SHORTFIN_VERSION} TriePagedAttentionCache, {steps} steps"
    d = run.divergence
    if d is None:
        lines = [head, "no divergence: outcomes, free pages, cached blocks and block tables agree at every step"]
        seen = run.findings_until(steps)
        if seen:
            lines.append("shortfin showed known issues that did not change what is compared here:")
            lines += [f"  step {i}: {f.code}: {f.message}" for i, fs in enumerate(run.findings) for f in fs]
        return "\n".join(lines) + "\n"
    where = f" (line {d.line})" if d.line else ""
    lines = [head, f"first divergence at step {d.step}{where}: {d.op_text}",
             f"steps 0..{d.step - 1} agree" if d.step > 1 else "step 0 agrees", "", "what differs:"]
    for f in d.fields:
        lines += ["  " + x for x in _field_summary(f, d, tpp, label)]
    kv_frame, sf_frame = run.frames(d.step)
    lines += ["", f"kvcore at step {d.step}:"] + ["  " + x for x in state_lines(kv_frame, run.kvcore)]
    lines += ["", f"shortfin at step {d.step}:"] + ["  " + x for x in state_lines(sf_frame, run.shortfin)]
    lines.append("")
    if d.findings:
        lines.append("known shortfin issues seen up to this step (the likely explanation):")
        for i, fs in enumerate(run.findings[:d.step + 1]):
            for f in fs:
                issue = KNOWN_ISSUES[f.code]
                lines.append(f"  step {i}: {f.code} ({issue.kind}, {issue.source}): {f.message}")
        for code in d.known:
            lines.append(f"  {code}: {KNOWN_ISSUES[code].title}")
    else:
        lines.append("no known shortfin issue explains this divergence: a new finding (or a bug in kvviz)")
    return "\n".join(lines) + "\n"


def report_dict(run: DiffRun) -> dict:
    """The JSON report ``kvviz diff --json`` prints."""
    from ..backends.shortfin_backend import KNOWN_ISSUES, SHORTFIN_VERSION

    d = run.divergence
    out = {
        "schema": "kvviz.diff/1",
        "scenario": run.scenario.path or run.scenario.title,
        "shortfin_version": SHORTFIN_VERSION,
        "steps": len(run.scenario.steps),
        "findings": [{"step": i, "code": f.code, "kind": KNOWN_ISSUES[f.code].kind, "message": f.message}
                     for i, fs in enumerate(run.findings) for f in fs],
        "divergence": None,
    }
    if d is not None:
        kv_frame, sf_frame = run.frames(d.step)
        out["divergence"] = {
            "step": d.step, "line": d.line, "op": d.op_text, "fields": list(d.fields), "known": list(d.known),
            "explained": d.explained,
            "kvcore": {"observation": d.kvcore.to_dict(), "snapshot": kv_frame.snapshot.to_dict(),
                       "violations": [v.to_dict() for v in kv_frame.violations]},
            "shortfin": {"observation": d.shortfin.to_dict(), "snapshot": sf_frame.snapshot.to_dict(),
                         "violations": [v.to_dict() for v in sf_frame.violations]},
        }
    return out
