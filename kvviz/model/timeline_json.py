# SPDX-License-Identifier: Apache-2.0
"""The timeline as JSON lines, the machine interface of ``kvviz run --json``.

One object per line: a ``run`` header, then one ``step`` object per step in order, each
followed (with sub-steps) by one ``substep`` object per sub-step of its op.
:data:`JSON_HELP` documents every field (``kvviz help json`` prints it; a test holds it to
the keys the objects really have).

Each line is canonical JSON: sorted keys, no whitespace, ASCII only, the same text as
``json.dumps(obj, sort_keys=True, separators=(",", ":"))`` (a test holds it to that), so two
runs of one scenario print the same bytes. Snapshots are spliced in as
:meth:`kvcore.Snapshot.to_json` text, that same canonical form, which re-encodes only the
rows that changed since the last snapshot encoded, instead of being encoded again here.

Lines are produced one at a time (:func:`timeline_lines`): the frames of a long trace slice
are built as they are written, never gathered into one list.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from kvcore import Snapshot
from kvcore.events import event_to_dict

from ..backends import Call
from ..backends.registry import BACKENDS
from ..limits import MAX_STEP_STATE_PAGES
from .substeps import SUBSTEP_KINDS, SubStep

if TYPE_CHECKING:  # pragma: no cover
    from .session import Frame, Session
    from .substeps import OpSubSteps

SCHEMA = "kvviz.timeline/1"
"""The ``schema`` of the header object; bumped when a field changes meaning or goes away."""

_encode = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode  # Snapshot.to_json's own settings


def json_line(fields: dict[str, Any], snapshots: dict[str, Snapshot | None] | None = None) -> str:
    """One canonical line: ``fields`` with each of ``snapshots`` (None: ``null``) added as
    its ``to_dict()``, keys sorted at every level, without encoding a snapshot twice."""
    snapshots = snapshots or {}
    parts = {key: _encode(value) for key, value in fields.items()}
    for key, snap in snapshots.items():
        parts[key] = "null" if snap is None else snap.to_json()
    return "{" + ",".join(f"{_encode(key)}:{parts[key]}" for key in sorted(parts)) + "}"


def header_record(session: "Session", *, backend: str, step: int | None, substeps: bool, states: bool) -> dict:
    """The ``run`` object: what ran and what the lines after it hold."""
    config = session.config
    return {"type": "run", "schema": SCHEMA, "title": session.title, "kind": config.kind, "policy": config.policy,
            "pages": config.pages, "tokens_per_page": config.tokens_per_page, "backend": backend,
            "steps": len(session) - 1, "step": step, "substeps": substeps, "states": states}


def _op_dict(op) -> dict | None:
    if op is None:
        return None
    return {"text": op.text, "line": op.line, "kind": op.kind, "name": op.name,
            "tokens": None if op.tokens is None else list(op.tokens), "extra": op.extra, "append": op.append,
            "priority": op.priority}


def step_line(frame: "Frame", subs: "OpSubSteps | None" = None) -> str:
    """The ``step`` object of ``frame`` (with ``subs``, the summary of its sub-steps)."""
    snap = frame.snapshot
    text = snap.to_json()  # once: the digest is the sha256 of this very text
    fields = {
        "type": "step", "step": frame.index, "op": _op_dict(frame.op),
        "error": None if frame.error is None else {"kind": frame.error.kind, "message": frame.error.message},
        "narration": frame.narration, "explanation": frame.explanation,
        "violations": [v.to_dict() for v in frame.violations],
        "expects": [{"text": r.expect.text, "line": r.expect.line, "kind": r.expect.kind, "ok": r.ok,
                     "message": r.message} for r in frame.expects],
        "digest": hashlib.sha256(text.encode()).hexdigest(),
        "substeps": None if subs is None else {"count": len(subs), "source": subs.source, "note": subs.note},
    }
    return json_line(fields, {"snapshot": snap})


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


def timeline_lines(session: "Session", steps: Iterable[int], *, substeps: bool = False,
                   states: bool = False) -> Iterator[str]:
    """The ``step`` line of each of ``steps`` (frame indices, in the order given), each
    followed with ``substeps`` by its op's ``substep`` lines (with ``states``, each with the
    state after it). Built one frame at a time, as the lines are taken."""
    for i in steps:
        frame = session.frame(i)
        subs = session.substeps(i) if substeps and i >= 1 else None
        yield step_line(frame, subs)
        if subs is None:
            continue
        for k, sub in enumerate(subs):
            # state(k) builds a window of states around k on first asking; in order, each
            # window is built once.
            yield substep_line(i, sub, subs.state(k) if states else None)


def _kinds_table() -> str:
    width = max(map(len, SUBSTEP_KINDS))
    return "\n".join(f"      {kind:<{width}}  {meaning}" for kind, meaning in SUBSTEP_KINDS.items())


_BACKEND_NAMES = " or ".join(f'"{name}"' for name in BACKENDS)  # the registry's, so help names each backend

JSON_HELP = f"""\
kvviz run FILE --json: the timeline as JSON lines ({SCHEMA})

One JSON object per line, keys sorted, no whitespace, ASCII only: the same scenario prints
the same bytes. The first line is the `run` header; then one `step` object per step (step 0
is the initial state), in order; with --substeps each step's object is followed by one
`substep` object per sub-step of its op; with --states each sub-step carries the state after
it (bounded: see MAX_SUBSTEP_STATE_PAGES in the README's Limits). --step N prints only step N
(and its sub-steps). Every step line carries its whole snapshot, so the steps x the cache's
pages are bounded too, before the first line: at most MAX_STEP_STATE_PAGES ({MAX_STEP_STATE_PAGES:,};
e.g. 2 steps of a 1,000,000-page pool, 976 of 2,048 pages); use --step N beyond that.
--json excludes --print. Exit codes as --print: 1 when a printed step failed an expect or an
invariant (one line on stderr after the JSON), 2 for bad input.

`run` (the first line)
  type             "run"
  schema           "{SCHEMA}"
  title            the scenario's title ("" when it has none)
  kind             the cache kind that ran: "trie", "base" or "hash"
  policy           its eviction policy (lru, fifo, lfu, mru, filo, slru, priority)
  pages            pages in the cache's pool
  tokens_per_page  tokens one page holds
  backend          the cache that ran the scenario: {_BACKEND_NAMES}
  steps            the scenario's ops: step objects are numbered 0..steps
  step             the one step printed (--step N), or null for all of them
  substeps         true when `substep` objects follow their step's object
  states           true when sub-step objects carry their `state`

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
    invariant      its number, 1..6 (DESIGN.md's invariants)
    message        what is wrong
    pages, nodes, allocations   the pages, nodes and allocation ids involved
  expects          the script's expect lines of this step that were checked, each:
    text           the line, canonical
    line           its line in the file
    kind           the expect kind (free, cached, hit, ...: `kvviz help scenarios`)
    ok             true when it held
    message        what was expected and what was found
  digest           sha256 of the snapshot's canonical JSON (Snapshot.digest(); bundles and
                   `kvviz open` verify the same digests)
  snapshot         the state after the step, Snapshot.to_dict() (schema kvcore.snapshot/1):
                   kvcore.Snapshot.from_dict(obj["snapshot"]) gives it back exactly
  substeps         null without --substeps and at step 0; else a summary of the op's sub-steps:
    count          how many `substep` objects follow
    source         "events" (kvcore: every move it made) or "calls" (a foreign cache,
                   observed only between its calls)
    note           one sentence: what these sub-steps can and cannot show

`substep` (with --substeps, after its step's object, in order)
  type             "substep"
  step             the step whose op this is a sub-step of
  index            0, 1, ... within the op
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
                   the other fields are the event's; on shortfin {{"type": "Call", "method",
                   "what"}}: the call (lookup, allocate, publish_pages_for_tokens, release_pages,
                   free_allocated_pages, or record: kvviz's adapter's own bookkeeping); null
                   for an op refused before anything happened
  state            with --states, the state right after this sub-step as kvcore held it,
                   Snapshot.to_dict(); the last sub-step's state is the step's snapshot.
                   null without --states
"""
"""What ``kvviz help json`` prints: every field of every object :func:`timeline_lines` writes."""
