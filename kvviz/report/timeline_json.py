# SPDX-License-Identifier: Apache-2.0
"""The timeline as JSON lines, the machine interface of ``kvviz run --json``.

One object per line: a ``run`` header, then one ``step`` object per step in order, each
followed (with sub-steps) by one ``substep`` object per sub-step of its op.
:data:`JSON_HELP` documents every field (``kvviz help json`` prints it; a test holds it to
the keys the objects really have).

A step costs what its op changed (schema ``kvviz.timeline/3``): the first step line printed
carries its state whole (``snapshot``), every later one only its ``changes`` from the line
before (:mod:`kvviz.report.state_changes`), and each its state's ``state_digest``
(:meth:`kvcore.Snapshot.state_digest`, a set digest kept up to date from the changes), so a
reader can rebuild and verify every state (:func:`read_states`) at the cost of what changed.
The first and the last step lines (and any carrying a ``snapshot``) also carry ``digest``,
:meth:`kvcore.Snapshot.digest` (sha256 of the whole canonical JSON, what bundles record),
which costs the whole state. ``--snapshots`` writes every state whole, as schema 1 did.
Schema 2 (every line's ``digest``, no ``state_digest``) is still read.

Each line is canonical JSON: sorted keys, no whitespace, ASCII only, the same text as
``json.dumps(obj, sort_keys=True, separators=(",", ":"))`` (a test holds it to that), so two
runs of one scenario print the same bytes. States are spliced in as text already encoded
(:meth:`kvcore.Snapshot.to_json`, the changes), never encoded twice.

Lines are produced one at a time (:func:`timeline_lines`, :class:`TimelineWriter`): the
frames of a long trace slice are written as they are built, never gathered into one list.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from kvcore import Snapshot
from kvcore.events import event_to_dict
from kvcore.state_digest import STATE_DIGEST_SCHEME

from kvviz.backends import Call
from kvviz.backends.registry import BACKENDS
from kvviz.core.designs import HASH, KVCORE_DESIGNS
from kvviz.core.limits import MAX_STEP_STATE_PAGES, MAX_TIMELINE_JSON_ITEMS
from kvviz.report.state_changes import FORMAT as CHANGES_FORMAT
from kvviz.report.state_changes import StateReader, StateWriter
from kvviz.core.substeps import SUBSTEP_KINDS, SubStep

if TYPE_CHECKING:  # pragma: no cover
    from kvviz.core.scenario import CacheConfig, Op
    from kvviz.core.session import Frame, Session
    from kvviz.core.substeps import OpSubSteps

SCHEMA = "kvviz.timeline/3"
"""The ``schema`` of the header object; bumped when a field changes meaning or goes away
(2: a step's state is its ``changes`` from the step line before, after the first; 3: every
step's ``state_digest``, its ``digest`` only on the first and last lines and whole states)."""

_encode = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode  # Snapshot.to_json's own settings


def json_line(fields: dict[str, Any], snapshots: dict[str, Snapshot | None] | None = None,
              texts: dict[str, str | None] | None = None) -> str:
    """One canonical line: ``fields`` with each of ``snapshots`` (None: ``null``) added as
    its ``to_dict()`` and each of ``texts`` (canonical JSON already, None: ``null``) as it
    is, keys sorted at every level, without encoding a snapshot twice."""
    parts = {key: _encode(value) for key, value in fields.items()}
    for key, snap in (snapshots or {}).items():
        parts[key] = "null" if snap is None else snap.to_json()
    for key, text in (texts or {}).items():
        parts[key] = "null" if text is None else text
    return "{" + ",".join(f"{_encode(key)}:{parts[key]}" for key in sorted(parts)) + "}"


def header_record(session: "Session", *, backend: str, step: int | None, substeps: bool, states: bool,
                  snapshots: bool = False, steps: int | None = None) -> dict:
    """The ``run`` object: what ran and what the lines after it hold. ``steps``: the
    scenario's ops, when the session is still running them."""
    config = session.config
    return {"type": "run", "schema": SCHEMA, "title": session.title, "kind": config.kind, "policy": config.policy,
            "pages": config.pages, "tokens_per_page": config.tokens_per_page, "backend": backend,
            "steps": len(session) - 1 if steps is None else steps, "step": step, "substeps": substeps,
            "states": states, "changes": None if snapshots or step is not None else CHANGES_FORMAT}


def _op_dict(op) -> dict | None:
    if op is None:
        return None
    return {"text": op.text, "line": op.line, "kind": op.kind, "name": op.name,
            "tokens": None if op.tokens is None else list(op.tokens), "extra": op.extra, "append": op.append,
            "priority": op.priority}


def step_line(frame: "Frame", subs: "OpSubSteps | None" = None, writer: StateWriter | None = None, *,
              whole: bool = False, digest: bool = False) -> str:
    """The ``step`` object of ``frame`` (with ``subs``, the summary of its sub-steps). Its
    state is written by ``writer`` (the run's: its changes from the state it wrote last, or
    whole with ``whole`` or on its first line); without one, whole. ``digest``: carry the
    state's ``digest`` even when written as changes (the last line)."""
    written = (writer or StateWriter()).write(frame.snapshot, whole=whole, digest=digest)
    fields = {
        "type": "step", "step": frame.index, "op": _op_dict(frame.op),
        "error": None if frame.error is None else {"kind": frame.error.kind, "message": frame.error.message},
        "narration": frame.narration, "explanation": frame.explanation,
        "violations": [v.to_dict() for v in frame.violations],
        "expects": [{"text": r.expect.text, "line": r.expect.line, "kind": r.expect.kind, "ok": r.ok,
                     "message": r.message} for r in frame.expects],
        "digest": written.digest, "state_digest": written.state_digest,
        "substeps": None if subs is None else {"count": len(subs), "source": subs.source, "note": subs.note},
    }
    return json_line(fields, texts={"snapshot": written.snapshot, "changes": written.changes})


def event_dict(event: object) -> dict | None:
    """A sub-step's event as JSON: a kvcore event as :func:`kvcore.events.event_to_dict`
    (``type`` = its class), a foreign cache's call as ``{"type": "Call", "method", "what"}``,
    and None for a refused op (nothing happened)."""
    if event is None:
        return None
    if isinstance(event, Call):
        return {"type": "Call", **asdict(event)}
    return event_to_dict(event)


def substep_line(step: int, sub: SubStep, state: Snapshot | None) -> str:
    """The ``substep`` object of ``sub``, the ``index``-th sub-step of step ``step``'s op;
    ``state`` is the snapshot after it, or None when states were not asked for."""
    focus = sub.focus
    fields = {
        "type": "substep", "step": step, "index": sub.index, "kind": sub.kind, "sentence": sub.sentence,
        "algorithm": sub.algorithm, "lines": list(sub.lines),
        "focus": {"nodes": list(focus.nodes), "pages": list(focus.pages), "slots": list(focus.slots),
                  "allocation": focus.allocation},
        "event": event_dict(sub.event),
    }
    return json_line(fields, {"state": state})


class TimelineWriter:
    """The ``step`` (and ``substep``) lines of one run, a frame at a time, in order: the
    first state whole, each later one as its changes (``snapshots``: every state whole).
    ``last``: the index of the last step to be written, whose line carries its ``digest``
    too (None: not known, only whole states carry it)."""

    def __init__(self, session: "Session", *, substeps: bool = False, states: bool = False,
                 snapshots: bool = False, last: int | None = None):
        self.session = session
        self.substeps, self.states, self.snapshots = substeps, states, snapshots
        self.last = last
        self._writer = StateWriter()

    def lines(self, frame: "Frame") -> Iterator[str]:
        """``frame``'s step line, then (with sub-steps) its op's sub-step lines."""
        i = frame.index
        subs = self.session.substeps(i) if self.substeps and i >= 1 else None
        yield step_line(frame, subs, self._writer, whole=self.snapshots, digest=i == self.last)
        if subs is None:
            return
        for k, sub in enumerate(subs):
            # state(k) builds a window of states around k on first asking; in order, each
            # window is built once.
            yield substep_line(i, sub, subs.state(k) if self.states else None)


def timeline_lines(session: "Session", steps: Iterable[int], *, substeps: bool = False,
                   states: bool = False, snapshots: bool = False) -> Iterator[str]:
    """The ``step`` line of each of ``steps`` (frame indices, in the order given), each
    followed with ``substeps`` by its op's ``substep`` lines (with ``states``, each with the
    state after it). Built one frame at a time, as the lines are taken; the first state is
    whole, each later one its changes from the one before (every one whole with ``snapshots``);
    the last one carries its ``digest``."""
    steps = list(steps)
    writer = TimelineWriter(session, substeps=substeps, states=states, snapshots=snapshots,
                            last=steps[-1] if steps else None)
    for i in steps:
        yield from writer.lines(session.frame(i))


def read_states(lines: Iterable[str | dict], *, snapshots: bool = True,
                states: bool = True) -> Iterator[tuple[dict, Any]]:
    """Each ``step`` object of a ``kvviz run --json`` output (lines or parsed objects) with
    its state rebuilt (:class:`~kvviz.report.state_changes.StateReader`), in order: a
    :class:`kvcore.Snapshot`, or with ``snapshots=False`` the ``Snapshot.to_dict()``-shaped
    dict (no validation pass: a big pool's states come faster), or with ``states=False``
    None: every state is rebuilt and verified but not handed out, so a step costs what it
    changed (a state handed out is a copy, O(the state) in C).

    Each rebuilt state is verified: a ``kvviz.timeline/3`` line's ``state_digest`` against
    the reader's own, kept up to date from the changes as the writer keeps it (O(what
    changed) a step), and its ``digest``, where given, against the sha256 of the rebuilt
    state's canonical JSON (O(the state): the first and last lines); a ``kvviz.timeline/2``
    line (no ``state_digest``) by its ``digest``, every line. Raises ValueError, one line
    naming the step, when a line's changes do not apply or a digest is not the line's: the
    text was changed, or the reader and the writer disagree."""
    reader = StateReader()
    for line in lines:
        obj = json.loads(line) if isinstance(line, str) else line
        if obj.get("type") != "step":
            continue
        step = obj.get("step")
        try:
            if obj.get("snapshot") is not None:
                reader.whole(obj["snapshot"])
            else:
                reader.apply(obj["changes"])
        except (KeyError, IndexError, TypeError, AttributeError, ValueError) as error:
            raise ValueError(f"step {step}: its state does not rebuild from the line ({type(error).__name__}: "
                             f"{error})") from None
        if "state_digest" in obj:  # kvviz.timeline/3
            if reader.state_digest != obj["state_digest"]:
                raise ValueError(f"step {step}: the rebuilt state's state_digest {reader.state_digest} is not the "
                                 f"line's {obj['state_digest']}: the line was changed, or the reader and the writer "
                                 f"disagree")
            check = obj.get("digest") is not None
        else:  # kvviz.timeline/2: every line's digest
            check = True
        state = reader.state() if states or check else None
        if check:
            digest = hashlib.sha256(_encode(state).encode()).hexdigest()  # the canonical text
            if digest != obj.get("digest"):
                raise ValueError(f"step {step}: the rebuilt state's digest {digest} is not the line's "
                                 f"{obj.get('digest')}: the line was changed, or the reader and the writer disagree")
        yield obj, (Snapshot.from_dict(state) if snapshots else state) if states else None


def state_items_bound(config: "CacheConfig", ops: Iterable["Op"]) -> int:
    """An upper bound, from the scenario alone (before any op runs), on the JSON values
    (numbers, strings, nulls) the states of ``kvviz run --json`` hold: the first state whole,
    then each op's changes. What one op can change: its allocation's row (its tokens and
    pages), the rows of the pages and nodes it holds or takes, one eviction per page it takes
    (a page row, a node gone), and for each such node a heap sift (an edit per level) and a
    free-list entry. A hash cache's eviction can flip every cached block's reachability, so
    there an op taking pages counts every block row of the pool. Checked against
    :data:`~kvviz.core.limits.MAX_TIMELINE_JSON_ITEMS`; a test holds real output under it."""
    pages, tpp = max(config.pages, 1), config.tokens_per_page
    levels = pages.bit_length() + 1  # a heap sift moves one slot per level
    node_row = 9 + tpp
    per_page = 5 + node_row + 1 + 4 * levels  # page row, node row, free entry, heap edits
    total = 6 * pages + 64  # the first state: every page's row and the free list
    held: dict[str | None, tuple[int, int]] = {}  # allocation -> (tokens, extra)
    for op in ops:
        tokens, extra = held.get(op.name, (0, 0))
        given = 0 if op.tokens is None else len(op.tokens)
        if op.kind == "acquire":
            tokens, extra = given, op.extra
        elif op.kind == "extend":
            tokens, extra = (tokens + given if op.append else max(tokens, given)), max(extra, op.extra)
        elif op.kind == "publish":
            tokens = max(tokens, given)
        held[op.name] = (tokens, extra)
        spans = -(-(tokens + extra) // tpp)
        takes = op.kind in ("acquire", "extend")
        total += 32 + 2 * given + tokens + spans + spans * per_page * (2 if takes else 1)
        if op.kind != "release" and config.kind == HASH:  # evicting or caching a parent
            total += pages * (6 + tpp)
    return total


def _kinds_table() -> str:
    width = max(map(len, SUBSTEP_KINDS))
    return "\n".join(f"      {kind:<{width}}  {meaning}" for kind, meaning in SUBSTEP_KINDS.items())


_BACKEND_NAMES = " or ".join(f'"{name}"' for name in BACKENDS)  # the registry's, so help names each backend
_KIND_NAMES = ", ".join(f'"{name}"' for name in KVCORE_DESIGNS[:-1]) + f' or "{KVCORE_DESIGNS[-1]}"'  # the designs'


JSON_HELP = f"""\
kvviz run FILE --json: the timeline as JSON lines ({SCHEMA})

One JSON object per line, keys sorted, no whitespace, ASCII only: the same scenario prints
the same bytes. The first line is the `run` header; then one `step` object per step (step 0
is the initial state), in order; with --substeps each step's object is followed by one
`substep` object per sub-step of its op; with --states each sub-step carries the state after
it (bounded: see MAX_SUBSTEP_STATE_PAGES in kvviz/core/limits.py). --step N prints only step N
(and its sub-steps).

A step costs what its op changed: the first step object carries its state whole
(`snapshot`), every later one only its `changes` from the step object before it, and each
its `state_digest`, which a writer and a reader keep up to date from the changes, so a
reader rebuilds every state and checks it at the cost of what changed (Python:
kvviz.report.timeline_json.read_states, which still reads kvviz.timeline/2). The first and
the last step objects also carry `digest`, the sha256 of the whole state that bundles
record. The values of state written are bounded before the first line, counted from what
each op can change: at most MAX_TIMELINE_JSON_ITEMS ({MAX_TIMELINE_JSON_ITEMS:,}).
--snapshots writes every state whole instead; then the steps x the cache's pages are
bounded: at most MAX_STEP_STATE_PAGES ({MAX_STEP_STATE_PAGES:,}; e.g. 2 steps of a
1,000,000-page pool, 976 of 2,048 pages), as for --step N.
--json excludes --print. Exit codes as --print: 1 when a printed step failed an expect or an
invariant (one line on stderr after the JSON), 2 for bad input.

`run` (the first line)
  type             "run"
  schema           "{SCHEMA}"
  title            the scenario's title ("" when it has none)
  kind             the cache kind that ran: {_KIND_NAMES}
  policy           its eviction policy (lru, fifo, lfu, mru, filo, slru, priority)
  pages            pages in the cache's pool
  tokens_per_page  tokens one page holds
  backend          the cache that ran the scenario: {_BACKEND_NAMES}
  steps            the scenario's ops: step objects are numbered 0..steps
  step             the one step printed (--step N), or null for all of them
  substeps         true when `substep` objects follow their step's object
  states           true when sub-step objects carry their `state`
  changes          "{CHANGES_FORMAT}": after the first, step objects carry their state's
                   `changes` (the format's version); null: every step carries its `snapshot`
                   (--snapshots, --step N)

`step` (one per step)
  type             "step"
  step             the step's index: 0 is the initial state, step i is the state after op i
  op               null at step 0; else the op:
    text           its canonical one-line form, as in a scenario file
    line           the line of the scenario file it came from (0: not from a file)
    kind           "acquire", "publish", "extend" or "release"
    name           the allocation it works on
    tokens         the tokens it names (a list of ints), or null (release, publish without tokens)
    extra          extra token slots (extra=N)
    append         true for `extend NAME + TOKENS` (tokens added, not replacing)
    priority       priority=N of an acquire (0 when not given)
  error            null, or the failed op's error: a failed op changed nothing
    kind           "CacheAllocationFailure" (does not fit) or "InvalidOperation" (a misuse)
    message        what was asked and what was available
  narration        the text shown with the step: the script's narration if it has one, else
                   the explanation
  explanation      kvviz's own sentence of what the op did
  violations       broken invariants after the step (healthy: []), each:
    invariant      its number: 1..6 on a trie or base cache, 6..11 on a hash cache
                   (kvcore/invariants.py NAMES; docs/invariants.md)
    message        what is wrong
    pages, nodes, allocations   the pages, nodes and allocation ids involved
  expects          the script's expect lines of this step that were checked, each:
    text           the line, canonical
    line           its line in the file
    kind           the expect kind (free, cached, hit, ...: `kvviz help scenarios`)
    ok             true when it held
    message        what was expected and what was found
  digest           sha256 of the state's canonical JSON (Snapshot.digest(); bundles and
                   `kvviz open` verify the same digests): on the first and the last step
                   objects and on every one carrying its `snapshot`, else null (it costs the
                   whole state)
  state_digest     the state's set digest (kvcore's Snapshot.state_digest(), scheme
                   {STATE_DIGEST_SCHEME}), on every step object: each of the state's
                   elements, a canonical JSON array, is hashed to a 2048-bit number
                   H(e) = shake_256("{STATE_DIGEST_SCHEME}\\n" + e), 256 bytes big-endian;
                   their sum modulo 2**2048 is the accumulator; state_digest is the hex
                   sha256 of "{STATE_DIGEST_SCHEME}\\n" + its 256 bytes big-endian. The
                   elements: ["field",NAME,VALUE] for schema, kind, policy, tokens_per_page,
                   page_count, clock, next_seq, next_allocation_id, stats;
                   ["pages",I,ROW] for each page row (I its index); ["nodes",ROW],
                   ["allocations",ROW] and (hash) ["blocks",ROW] for each row, or
                   ["nodes-at",I,ROW] (...) for each row of a table whose ids do not
                   increase; ["free",A,B] for each pair of neighbours in
                   [null] + free + [null] when no page is listed twice, else
                   ["free-at",I,PAGE] for each; ["heap",I,NODE] for each heap slot. A step
                   takes out the elements its changes removed and puts in the new ones
  snapshot         the state after the step whole, Snapshot.to_dict() (schema
                   kvcore.snapshot/1): kvcore.Snapshot.from_dict(obj["snapshot"]) gives it
                   back exactly; on the first step object (and on every one with --snapshots
                   or --step N), else null
  changes          null where `snapshot` is given; else the state as the changes from the
                   state of the step object before (apply them to it, in the order below):
    clock, next_seq, next_allocation_id, stats   the new values of those snapshot fields
    pages          the page rows that changed, whole ([page, state, owner, node, ref]):
                   each replaces the row of its page
    nodes, allocations, blocks   the rows new or changed, whole (blocks: a hash cache's
                   only): a known id's row is replaced in place, a new id's row goes after
                   every row kept (ids only grow)
    nodes_gone, allocations_gone, blocks_gone   the ids of the rows that left
    free, heap     edits of those lists, [start, delete, [items]], applied in order as
                   list[start:start+delete] = items (start counts in the list edited so far)
                   (the other snapshot fields never change within a run)
  substeps         null without --substeps and at step 0; else a summary of the op's sub-steps:
    count          how many `substep` objects follow
    source         "events" (kvcore: every move it made) or "calls" (a foreign cache,
                   observed only between its calls)
    note           one sentence: what these sub-steps can and cannot show

`substep` (with --substeps, after its step's object, in order)
  type             "substep"
  step             the step whose op this is a sub-step of
  index            0, 1, ... within the op: people count from 1 (index + 1 is the UI's
                   "sub-step k/n", export --substep K and the --print --substeps list)
  kind             what happened, one of:
{_kinds_table()}
  sentence         the sentence that says it (the UI's narration line inside an op)
  algorithm        the pseudo-code algorithm that did it (acquire, publish, extend, release,
                   evict, ...)
  lines            its line numbers in that algorithm, 1-based ([] when not known)
  focus            what moves, for a view to highlight:
    nodes          trie node ids
    pages          physical pages
    slots          heap array slots (indices into the snapshot's `heap`)
    allocation     the allocation's name, or null
  event            what kvcore reported, kvcore.events.event_to_dict(): `type` names the
                   event class (OpStarted, Walked, HeapPopped, HeapSwapped, Evicted, ...) and
                   the other fields are the event's; from a backend observed between its
                   calls (source "calls") {{"type": "Call", "method", "what"}}: the method
                   called, in that backend's own names, and what it was asked; null for an op
                   refused before anything happened
  state            with --states, the state right after this sub-step as kvcore held it,
                   Snapshot.to_dict(); the last sub-step's state is the step's snapshot.
                   null without --states
"""
"""What ``kvviz help json`` prints: every field of every object :func:`timeline_lines` writes."""
