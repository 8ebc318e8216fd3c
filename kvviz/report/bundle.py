# SPDX-License-Identifier: Apache-2.0
"""The replayable bug-report bundle: JSON that reproduces a step exactly.

Holds the schema, versions, cache config, the full script, the step of interest, a digest
per step, the snapshot at the step, its violations, the results of its ``expect`` lines,
how many expect lines the script has, and a short summary. Canonical (sorted keys, stable
layout) so bundles diff cleanly; plain JSON, so loading never runs code.

Opening a bundle replays its script and holds every recorded value to what the replay
derives: the per-step digests, the snapshot at the step, and the claims (config, title,
step count, the op at the step and its error, violations, the step's expects and their
results, the script's number of expects, the summary). A bundle whose claims disagree with
its replay *diverges* (``kvviz open`` exits 1); a bundle that is not of the schema's shape,
unknown fields included, is *malformed* (exit 2). Only the versions of the recording
machine cannot be derived: they are checked for shape and reported when they differ from
the running ones. (A bundle rewritten consistently everywhere is a bundle of another
script: without a secret key nothing can tell; what ``open`` promises is that everything a
bundle says is what its script does.)

Both sides hold one size limit, :data:`kvviz.core.limits.MAX_BUNDLE_BYTES`: an export that would
exceed it is refused before it is built when a cheap lower bound already does, and while it
is streamed otherwise, so no export writes what ``open`` refuses and none builds the whole
text in memory.
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kvcore
from kvcore import KVCacheError, Snapshot, SnapshotFormatError

from kvviz.core.jsonread import JsonNumberTooLong, loads
from kvviz.core.limits import MAX_BUNDLE_BYTES, MAX_SOURCE_BYTES
from kvviz.printable import printable
from kvviz.core.scenario import Scenario, ScenarioError, format_expect, format_scenario, parse_scenario
from kvviz.core.session import Frame, Session
from kvviz.report.atomic import OutputTooLarge, open_atomic
from kvviz.report.jsontext import iter_json, iter_json_blocks

SCHEMA = "kvviz.bundle/3"
#: Older schemas this kvviz still opens, each verified in every field it records.
#: ``kvviz.bundle/2`` has no ``substep`` (it points at a step only); ``kvviz.bundle/1`` has no
#: ``expects`` nor ``expect_count`` either: its expects are replayed and shown, not compared.
OLDER_SCHEMAS = ("kvviz.bundle/2", "kvviz.bundle/1")
#: Scripts with more steps than this open lazily (see open_bundle).
LAZY_ABOVE = 2_000
#: Longest version string a bundle may record (a version is shown, never parsed).
MAX_VERSION_CHARS = 200


class BundleError(Exception):
    """A bundle that cannot be opened: names the file and what was expected."""


class BundleTooLarge(ValueError):
    """An export whose bundle would be larger than ``kvviz open`` accepts; nothing is written."""


@dataclass(frozen=True)
class OpenedBundle:
    """A replayed bundle: the session, the bundled step, the first divergence if any, and
    notes (e.g. recorded with another kvviz version) that are worth saying but change nothing."""

    session: Session
    step: int
    divergence: str | None
    data: dict
    notes: tuple[str, ...] = ()
    substep: int | None = None
    """The sub-step of the step's op the bundle points at (0-based), or None: the step itself."""


# -- the shape of a bundle --------------------------------------------------------------------
#
# A type, a tuple of alternatives, a one-element list (a list of that) or a dict (exactly
# these keys). The snapshot is a dict here and is held to kvcore's format by a round trip.

_VIOLATION = {"invariant": int, "message": str, "pages": [int], "nodes": [int], "allocations": [int]}
SHAPE_V1: dict[str, Any] = {
    "schema": str,
    "versions": {"kvviz": str, "kvcore": str, "python": str, "platform": str},
    "config": {"kind": str, "pages": int, "tokens_per_page": int, "policy": str},
    "title": str,
    "backend": {"name": str, "version": str},
    "script": str,
    "step": int,
    "steps": int,
    "op": (str, None),
    "error": (None, {"kind": str, "message": str}),
    "digests": [str],
    "snapshot": dict,
    "violations": [_VIOLATION],
    "summary": str,
}
SHAPE_V2 = {**SHAPE_V1, "expects": [{"expect": str, "ok": bool}], "expect_count": int}
#: ``substep``: the moment inside the step's op a report points at: its index (0-based), its
#: kind and how many sub-steps the op has (both derived by the replay, so an edited index that
#: names another moment diverges), or null for the step itself.
SHAPE = {**SHAPE_V2, "substep": (None, {"index": int, "kind": str, "count": int})}
SHAPES = {SCHEMA: SHAPE, "kvviz.bundle/2": SHAPE_V2, "kvviz.bundle/1": SHAPE_V1}

#: The recorded values a replay derives, in the order a divergence names them.
CLAIMS = ("config", "title", "steps", "op", "error", "violations", "expects", "expect_count", "substep", "summary")


class SubstepError(ValueError):
    """A sub-step that the step's op does not have (or a step without an op)."""


def substep_claim(session: Session, step: int, substep: int | None) -> dict | None:
    """The bundle's ``substep`` value for sub-step ``substep`` of ``step``'s op (None: none).
    Raises :class:`SubstepError` naming the op's sub-steps when it has no such sub-step."""
    if substep is None:
        return None
    if step == 0:
        raise SubstepError("step 0 is the initial state: it has no op, so no sub-steps (give a step from 1)")
    subs = session.substeps(step)
    if not 0 <= substep < len(subs):
        raise SubstepError(f"sub-step {substep} does not exist: step {step}'s op has sub-steps 0..{len(subs) - 1}")
    return {"index": substep, "kind": subs[substep].kind, "count": len(subs)}


def session_script(session: Session) -> str:
    """The session's ops so far as a scenario text that replays it."""
    scenario = Scenario(title=session.title, description=session.description, config=session.config,
                        steps=tuple(session.steps), vocab=session.vocab)
    return format_scenario(scenario)


def summary(frame: Frame, session: Session, substep: int | None = None) -> str:
    """One paragraph for a human: where, what, and what is wrong (and the moment inside the
    op, ``substep``, when the report points at one)."""
    backend = getattr(session.backend, "name", "kvcore")
    version = getattr(session.backend, "version", "")
    cache = "kvcore " + session.config.kind if backend == "kvcore" else f"{backend} {version}".strip()
    parts = [f"Step {frame.index} of {len(session) - 1} of “{session.title or 'scenario'}” "
             f"({cache} cache, {session.config.pages} pages × {session.config.tokens_per_page} tokens)."]
    if frame.op is not None:
        parts.append(f"Op: `{frame.op.text}`" + (f", which failed: {frame.error.message}." if frame.error else "."))
    if substep is not None and frame.op is not None:
        subs = session.substeps(frame.index)
        if 0 <= substep < len(subs):
            parts.append(f"At sub-step {substep + 1} of {len(subs)} ({subs[substep].kind}): "
                         f"{subs[substep].sentence.rstrip('.')}.")
    if frame.violations:
        parts.append(f"{len(frame.violations)} invariant violation(s); first: {frame.violations[0]}.")
    else:
        parts.append("All invariants hold.")
    return " ".join(parts)


def _versions() -> dict:
    from kvviz import __version__

    return {"kvviz": __version__, "kvcore": kvcore.__version__, "python": platform.python_version(),
            "platform": platform.platform(terse=True)}


def _backend(session: Session) -> dict:
    return {"name": getattr(session.backend, "name", "kvcore"),
            "version": getattr(session.backend, "version", kvcore.__version__)}


def expect_results(frame: Frame) -> list[dict]:
    """The ``expect`` lines of ``frame``'s step and whether each held."""
    return [{"expect": format_expect(r.expect), "ok": r.ok} for r in frame.expects]


def expect_count(session: Session) -> int:
    """How many ``expect`` lines the whole script has: with the results at the step, what
    makes a script whose expects were deleted disagree with its bundle. (Only the step's
    results are recorded: evaluating every step's expects builds every frame, as ``kvviz
    check`` does, which costs a minute on a trace slice of a few thousand ops.)"""
    return sum(len(step.expects) for step in session.steps)


def claims(session: Session, step: int, schema: str = SCHEMA, substep: int | None = None) -> dict:
    """The bundle's values a replay of its script derives (see :data:`CLAIMS`), pointing at
    ``substep`` of the step's op (None: the step)."""
    frame = session.frame(step)
    derived = {
        "config": {"kind": session.config.kind, "pages": session.config.pages,
                   "tokens_per_page": session.config.tokens_per_page, "policy": session.config.policy},
        "title": session.title,
        "steps": len(session) - 1,
        "op": frame.op.text if frame.op is not None else None,
        "error": None if frame.error is None else {"kind": frame.error.kind, "message": frame.error.message},
        "violations": [v.to_dict() for v in frame.violations],
        "summary": summary(frame, session, substep),
    }
    if "expects" in SHAPES[schema]:
        derived["expects"] = expect_results(frame)
        derived["expect_count"] = expect_count(session)
    if "substep" in SHAPES[schema]:
        derived["substep"] = substep_claim(session, step, substep)
    return derived


def make_bundle(session: Session, step: int, substep: int | None = None) -> dict:
    """The bundle dict for ``step`` of ``session`` (at sub-step ``substep`` of its op, if given)."""
    frame = session.frame(step)
    return {
        "schema": SCHEMA,
        "versions": _versions(),
        "backend": _backend(session),
        "script": session_script(session),
        "step": step,
        "digests": [snapshot.digest() for snapshot in session.snapshots()],
        "snapshot": frame.snapshot.to_dict(),
        **claims(session, step, substep=substep),
    }


def dumps_bundle(bundle: dict) -> str:
    """Canonical JSON text of a bundle (sorted keys, two-space indent, trailing newline)."""
    return "".join(iter_json(bundle)) + "\n"


# -- writing ----------------------------------------------------------------------------------

# Fewest bytes one element takes in the canonical layout: its indent, its text, ",\n".
# A digest sits at depth 2, a free page at 3, a page row's fields at 4, a node's tokens and
# an allocation's tokens and pages at 5.
_FLOOR_DIGEST = 4 + 66 + 2
_FLOOR_PAGE_ROW = 6 + 2 + 5 * (8 + 1 + 2) + 6 + 3
_LISTED_INDENT = 10 + 2


def _digits(values) -> int:
    """Characters of the decimal texts of ``values`` (ints), counted a slice at a time at C
    speed: a million tokens take a few tens of milliseconds and no big string."""
    return sum(sum(map(len, map(str, values[i:i + 65_536]))) for i in range(0, len(values), 65_536))


def bundle_size_floor(session: Session, step: int | None = None) -> int:
    """A lower bound on the bytes of a bundle of ``session`` (counts and digits, no encoding).

    Without ``step``: from the config and the step count only, before any frame is built
    (a snapshot has a row per page of the pool, used or not). With ``step``: also every token
    and page listed by that step's nodes and allocations, each on a line of its own.
    """
    floor = len(session) * _FLOOR_DIGEST + session.config.pages * _FLOOR_PAGE_ROW
    if step is None:
        return floor
    snap = session.frame(step).snapshot
    lists = [n.tokens for n in snap.nodes] + [x for a in snap.allocations for x in (a.tokens, a.pages)]
    listed = sum(len(values) * _LISTED_INDENT + _digits(values) for values in lists)
    return floor + snap.free_count * 9 + listed


def write_bundle(session: Session, step: int, output: str | os.PathLike, *,
                 inputs: Iterable[str | os.PathLike] = (), substep: int | None = None) -> None:
    """Write step ``step``'s bundle to ``output``, streamed and capped at what ``open`` accepts.

    Raises :class:`BundleTooLarge` (a ValueError) before any work when the bundle is bound to
    be too large, or when streaming passes the limit (the partial file is removed); ValueError
    when ``output`` is one of ``inputs`` or the script would not open again, and
    :class:`SubstepError` (a ValueError) for a ``substep`` the op does not have; OSError when
    the file cannot be written.
    """
    limit = MAX_BUNDLE_BYTES
    contents = f"{len(session) - 1:,} steps, {session.config.pages:,} pages"
    floor = bundle_size_floor(session)  # from the config alone: no frame built yet
    if floor <= limit:
        floor = bundle_size_floor(session, step)
        snap = session.frame(step).snapshot
        contents += f", {sum(len(a.tokens) for a in snap.allocations):,} tokens in live allocations"
    if floor > limit:
        raise BundleTooLarge(
            f"{output}: the bundle of step {step} would take at least {floor:,} bytes ({contents}), more than "
            f"the {limit:,} bytes `kvviz open` accepts; nothing was written. Export a .md or .txt report "
            f"instead, or a smaller scenario")
    bundle = make_bundle(session, step, substep)
    _check_reopens(bundle["script"], session, output)
    with open_atomic(output, inputs=inputs, max_bytes=limit) as write:
        try:
            for block in iter_json_blocks(bundle):
                write(block)
            write("\n")
        except OutputTooLarge:
            raise BundleTooLarge(f"{output}: the bundle of step {step} is more than {limit:,} bytes, the most "
                                 f"`kvviz open` accepts; nothing was written. Export a .md or .txt report "
                                 f"instead, or a smaller scenario") from None


def _check_reopens(script: str, session: Session, output) -> None:
    """The bundled script must pass the parser's limits, as ``open`` will parse it, and parse
    back to the session's steps (else the bundle would diverge on its own replay)."""
    size = len(script.encode("utf-8"))
    if size > MAX_SOURCE_BYTES:
        raise BundleTooLarge(f"{output}: the bundle's script would be {size:,} bytes, more than the "
                             f"{MAX_SOURCE_BYTES:,} a scenario may have, so `kvviz open` would refuse it; "
                             f"nothing was written")
    try:
        parsed = parse_scenario(script, path="(the bundle's script)")
    except ScenarioError as exc:
        raise ValueError(f"{output}: the bundle's script would not open again ({exc}); nothing was "
                         f"written") from None
    replayed = [(s.op, s.expects) for s in parsed.steps]
    if replayed != [(s.op, s.expects) for s in session.steps] or parsed.config != session.config:
        raise ValueError(f"{output}: the session's script does not read back as the same steps (a kvviz "
                         f"bug in the scenario formatter; please report it); nothing was written")


# -- reading ----------------------------------------------------------------------------------


def load_bundle(path: str | Path) -> dict:
    """Read and validate a bundle file's shape, every field (not yet its content). Raises BundleError."""
    path = Path(path)
    limit = MAX_BUNDLE_BYTES
    try:
        if not path.is_file():  # a FIFO or a device would block or never end
            if path.exists():
                raise BundleError(f"{path}: not a regular file (expected a kvviz JSON bundle)")
        size = path.stat().st_size
        if size > limit:
            raise BundleError(f"{path}: {size} bytes is too large for a bundle (limit {limit})")
        with open(path, "rb") as file:
            raw = file.read(limit + 1)  # the file may have grown since stat()
    except OSError as exc:
        raise BundleError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if len(raw) > limit:
        raise BundleError(f"{path}: more than {limit} bytes is too large for a bundle")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BundleError(f"{path}: not UTF-8 text at byte {exc.start} (expected a kvviz JSON bundle)") from None
    try:
        data = loads(text)
    except JsonNumberTooLong as exc:
        raise BundleError(f"{path}:{exc.lineno}:{exc.colno}: {exc}; expected a kvviz bundle") from None
    except json.JSONDecodeError as exc:
        raise BundleError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON ({exc.msg}); "
                          f"expected a kvviz bundle (truncated file?)") from None
    except (ValueError, RecursionError) as exc:  # an integer of 5,000 digits, arrays nested 100,000 deep
        raise BundleError(f"{path}: not a kvviz bundle: the JSON is too deeply nested or holds a number too "
                          f"large to read ({type(exc).__name__})") from None
    if not isinstance(data, dict):
        raise BundleError(f"{path}: expected a JSON object with schema {SCHEMA!r}, got {type(data).__name__}")
    schema = data.get("schema")
    if not isinstance(schema, str) or schema not in SHAPES:
        shown = _shown(schema)
        raise BundleError(f"{path}: schema is {shown}, expected {SCHEMA!r} (not a kvviz bundle, or another "
                          f"version; this kvviz opens {_schema_list()})")
    problem = _shape_problem(data, SHAPES[schema], "")
    if problem:
        raise BundleError(f"{path}: {problem}")
    for key, value in data["versions"].items():
        if len(value) > MAX_VERSION_CHARS:
            raise BundleError(f"{path}: field 'versions.{key}' is {len(value)} characters, more than a version "
                              f"has (at most {MAX_VERSION_CHARS})")
    return data


_TYPE_NAMES = {str: "str", int: "int", bool: "bool", dict: "dict", list: "list", type(None): "null"}


def _schema_list() -> str:
    """The schemas this kvviz opens, short (an error line must stay one line): ``kvviz.bundle/3, /2, /1``."""
    head, *older = SHAPES
    return ", ".join([head] + [name[name.index("/"):] for name in older])


def _shape_problem(value: Any, shape: Any, where: str) -> str | None:
    """What is wrong with ``value`` against ``shape`` (None when it fits). ``where`` names the
    field; the depth is the shape's (at most three), never the data's."""
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            return None  # the caller reported the type
        for key, inner in shape.items():
            name = f"{where}.{key}" if where else key
            if key not in value or not _fits(value[key], inner):
                return f"field {name!r} is missing or not a {_describe(inner)}"
            problem = _shape_problem(value[key], inner, name)
            if problem:
                return problem
        unknown = sorted(set(value) - set(shape), key=str)
        if unknown:
            shown = ", ".join(_shown(k) for k in unknown[:3]) + (", ..." if len(unknown) > 3 else "")
            place = f"field {where!r}" if where else "the bundle"
            return f"{place} has unknown field(s) {shown} (a versioned bundle has no fields but its schema's)"
        return None
    if isinstance(shape, list):
        for i, item in enumerate(value):
            if not _fits(item, shape[0]):
                return f"field '{where}[{i}]' is not a {_describe(shape[0])}"
            problem = _shape_problem(item, shape[0], f"{where}[{i}]")
            if problem:
                return problem
        return None
    if isinstance(shape, tuple):
        for alternative in shape:
            if isinstance(alternative, dict) and isinstance(value, dict):
                return _shape_problem(value, alternative, where)
    return None


def _fits(value: Any, shape: Any) -> bool:
    if isinstance(shape, tuple):
        return any(_fits(value, alternative) for alternative in shape)
    if isinstance(shape, dict):
        return isinstance(value, dict)
    if isinstance(shape, list):
        return isinstance(value, list)
    if shape is None:
        return value is None
    if shape is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, shape)


def _describe(shape: Any) -> str:
    if isinstance(shape, tuple):
        return " or ".join(_describe(alternative) for alternative in shape)
    if isinstance(shape, dict):
        return "dict"
    if isinstance(shape, list):
        return "list"
    if shape is None:
        return "null"
    return _TYPE_NAMES.get(shape, shape.__name__)


def _shown(value: Any, limit: int = 60) -> str:
    """A value for a one-line message: compact JSON (or repr), abbreviated."""
    try:
        text = repr(value) if isinstance(value, str) or value is None else json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        text = repr(type(value))
    text = printable(text)  # JSON leaves C1 controls, bidi overrides and U+2028 as they are
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _row_difference(derived: Any, given: Any, where: str) -> str:
    """Where ``given`` (a bundle's snapshot) has more than ``derived`` (its round trip through
    kvcore's reader): the reader ignores unknown fields, a versioned bundle must not."""
    if isinstance(derived, dict) and isinstance(given, dict):
        extra = sorted(set(given) - set(derived), key=str)
        if extra:
            return f"{where}: unknown field {_shown(extra[0])}"
        for key in derived:
            if derived[key] != given.get(key):
                return _row_difference(derived[key], given.get(key), f"{where}.{key}")
    if isinstance(derived, list) and isinstance(given, list):
        if len(given) != len(derived):
            return f"{where}: {len(given)} fields where {kvcore.snapshot.SCHEMA} has {len(derived)}"
        for i, (a, b) in enumerate(zip(derived, given)):
            if a != b:
                return _row_difference(a, b, f"{where}[{i}]")
    return f"{where}: {_shown(given)} is not what {kvcore.snapshot.SCHEMA} reads back"


def open_bundle(path: str | Path, **session_kwargs) -> OpenedBundle:
    """Replay a bundle's script and hold every recorded value to the replay.

    Raises BundleError (naming the file) for a bundle that cannot be opened: malformed,
    unknown fields, a script that does not parse or cannot run on the recorded backend, a
    step outside the script. Returns the replay with ``divergence`` set to the first
    disagreement between what the bundle records and what the replay derives.
    """
    data = load_bundle(path)
    schema = data["schema"]
    try:
        scenario = parse_scenario(data["script"], path=f"{path} (script)")
    except ScenarioError as exc:
        raise BundleError(f"{path}: the bundled script does not parse: {exc}") from None
    try:
        bundled = Snapshot.from_dict(data["snapshot"])
    except SnapshotFormatError as exc:
        raise BundleError(f"{path}: the bundled snapshot is malformed: {exc}") from None
    if bundled.to_dict() != data["snapshot"]:
        raise BundleError(f"{path}: the bundled snapshot is malformed: "
                          f"{_row_difference(bundled.to_dict(), data['snapshot'], 'snapshot')}")
    name = data["backend"]["name"]
    from kvviz.backends.registry import BackendError, make_backend_factory

    try:
        factory = make_backend_factory(name)
    except BackendError as exc:
        raise BundleError(f"{path}: the bundle was recorded on backend {_shown(name)}: {exc}") from None
    # A long script opens lazily (frames built when looked at), as a trace slice does.
    session_kwargs.setdefault("lazy", len(scenario.steps) > LAZY_ABOVE)
    try:
        session = Session.from_scenario(scenario, backend_factory=factory, **session_kwargs)
    except (BackendError, KVCacheError, ValueError) as exc:  # a config the backend cannot run
        raise BundleError(f"{path}: the bundled script cannot run on backend {_shown(name)}: {exc}") from None
    step = data["step"]
    if not 0 <= step < len(session):
        raise BundleError(f"{path}: step {step} is outside the script's {len(session) - 1} steps")
    recorded = data.get("substep")
    if recorded:  # an index read from the file, bounded by the replay before anything uses it
        try:
            substep_claim(session, step, recorded["index"])
        except SubstepError as exc:
            raise BundleError(f"{path}: field 'substep': {exc}") from None
    try:
        divergence = _divergence(data, session, step, bundled, schema)
    except (BackendError, KVCacheError, ValueError) as exc:  # a replay of junk on a foreign backend
        raise BundleError(f"{path}: the bundled script cannot be replayed on backend {_shown(name)}: {exc}") from None
    notes = _version_notes(data, session)
    if divergence is not None and notes:
        divergence = f"{divergence} ({'; '.join(notes)})"
    recorded = data.get("substep")
    return OpenedBundle(session, step, divergence, data, notes, recorded["index"] if recorded else None)


def _divergence(data: dict, session: Session, step: int, bundled: Snapshot, schema: str) -> str | None:
    digests = data["digests"]
    if len(digests) != len(session):
        return f"the bundle lists {len(digests)} digests but the script has {len(session)} frames"
    for i, (expected, replayed) in enumerate(zip(digests, session.snapshots())):
        actual = replayed.digest()
        if actual != expected:
            return f"step {i} diverges: replay gives digest {actual[:12]}…, bundle recorded {printable(str(expected)[:12])}…"
    if session.frame(step).snapshot != bundled:
        return f"the bundled snapshot differs from the replayed state at step {step} (edited bundle?)"
    recorded = data.get("substep")
    try:
        derived = claims(session, step, schema, recorded["index"] if recorded else None)
    except SubstepError as exc:
        return f"the bundle points at a moment its replay does not have: {exc}"
    wrong = [key for key in CLAIMS if key in derived and derived[key] != data[key]]
    if data["backend"]["name"] == "kvcore" and data["backend"]["version"] != data["versions"]["kvcore"]:
        wrong.append("backend.version")  # kvcore's version, recorded twice
    if not wrong:
        return None
    first = wrong[0]
    if first == "backend.version":
        detail = (f"backend.version {_shown(data['backend']['version'])} is not versions.kvcore "
                  f"{_shown(data['versions']['kvcore'])}")
    else:
        detail = f"{first}: the bundle records {_shown(data[first])}, the replay gives {_shown(derived[first])}"
    also = f" (also wrong: {', '.join(wrong[1:])})" if len(wrong) > 1 else ""
    return f"the bundle's claims disagree with its replay at step {step}: {detail}{also}"


def _version_notes(data: dict, session: Session) -> tuple[str, ...]:
    """Versions cannot be derived; say when they differ from the ones replaying the bundle."""
    from kvviz import __version__

    notes = []
    recorded = data["versions"]
    for what, running in (("kvviz", __version__), ("kvcore", kvcore.__version__)):
        if recorded[what] != running:
            notes.append(f"recorded with {what} {_shown(recorded[what], 40)}, replayed with {running}")
    backend = data["backend"]
    version = getattr(session.backend, "version", None)
    if backend["name"] != "kvcore" and version is not None and backend["version"] != version:
        notes.append(f"recorded on {backend['name']} {_shown(backend['version'], 40)}, replayed on {version}")
    return tuple(notes)
