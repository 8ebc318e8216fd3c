"""The replayable bug-report bundle: JSON that reproduces a step exactly.

Holds the schema, versions, cache config, the full script, the step of interest, a digest
per step, the snapshot at the step, its violations and a short summary. Canonical (sorted
keys, stable layout) so bundles diff cleanly; plain JSON, so loading never runs code.
Opening a bundle replays the script and verifies every digest.
"""

from __future__ import annotations

import json
import platform
from dataclasses import dataclass
from pathlib import Path

import kvcore
from kvcore import Snapshot, SnapshotFormatError

from ..limits import MAX_BUNDLE_BYTES
from ..model.scenario import Scenario, ScenarioError, format_scenario, parse_scenario
from ..model.session import Frame, Session

SCHEMA = "kvviz.bundle/1"
#: Scripts with more steps than this open lazily (see open_bundle).
LAZY_ABOVE = 2_000


class BundleError(Exception):
    """A bundle that cannot be opened: names the file and what was expected."""


@dataclass(frozen=True)
class OpenedBundle:
    """A replayed bundle: the session, the bundled step, and the first divergence if any."""

    session: Session
    step: int
    divergence: str | None
    data: dict


def session_script(session: Session) -> str:
    """The session's ops so far as a scenario text that replays it."""
    scenario = Scenario(title=session.title, description=session.description, config=session.config,
                        steps=tuple(session.steps), vocab=session.vocab)
    return format_scenario(scenario)


def summary(frame: Frame, session: Session) -> str:
    """One paragraph for a human: where, what, and what is wrong."""
    backend = getattr(session.backend, "name", "kvcore")
    version = getattr(session.backend, "version", "")
    cache = "kvcore " + session.config.kind if backend == "kvcore" else f"{backend} {version}".strip()
    parts = [f"Step {frame.index} of {len(session) - 1} of “{session.title or 'scenario'}” "
             f"({cache} cache, {session.config.pages} pages × {session.config.tokens_per_page} tokens)."]
    if frame.op is not None:
        parts.append(f"Op: `{frame.op.text}`" + (f", which failed: {frame.error.message}." if frame.error else "."))
    if frame.violations:
        parts.append(f"{len(frame.violations)} invariant violation(s); first: {frame.violations[0]}.")
    else:
        parts.append("All invariants hold.")
    return " ".join(parts)


def _versions() -> dict:
    from .. import __version__

    return {"kvviz": __version__, "kvcore": kvcore.__version__, "python": platform.python_version(),
            "platform": platform.platform(terse=True)}


def make_bundle(session: Session, step: int) -> dict:
    """The bundle dict for ``step`` of ``session``."""
    frame = session.frame(step)
    digests = [snapshot.digest() for snapshot in session.snapshots()]
    return {
        "schema": SCHEMA,
        "versions": _versions(),
        "config": {"kind": session.config.kind, "pages": session.config.pages,
                   "tokens_per_page": session.config.tokens_per_page, "policy": session.config.policy},
        "title": session.title,
        "backend": {"name": getattr(session.backend, "name", "kvcore"),
                    "version": getattr(session.backend, "version", kvcore.__version__)},
        "script": session_script(session),
        "step": step,
        "steps": len(session) - 1,
        "op": frame.op.text if frame.op is not None else None,
        "error": None if frame.error is None else {"kind": frame.error.kind, "message": frame.error.message},
        "digests": digests,
        "snapshot": frame.snapshot.to_dict(),
        "violations": [v.to_dict() for v in frame.violations],
        "summary": summary(frame, session),
    }


def dumps_bundle(bundle: dict) -> str:
    """Canonical JSON text of a bundle (sorted keys, two-space indent, trailing newline)."""
    return json.dumps(bundle, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def load_bundle(path: str | Path) -> dict:
    """Read and validate a bundle file's shape (not yet its content). Raises BundleError."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_BUNDLE_BYTES:
            raise BundleError(f"{path}: {size} bytes is too large for a bundle (limit {MAX_BUNDLE_BYTES})")
        with open(path, "rb") as file:
            raw = file.read(MAX_BUNDLE_BYTES + 1)  # the file may have grown since stat()
    except OSError as exc:
        raise BundleError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if len(raw) > MAX_BUNDLE_BYTES:
        raise BundleError(f"{path}: more than {MAX_BUNDLE_BYTES} bytes is too large for a bundle")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BundleError(f"{path}: not UTF-8 text at byte {exc.start} (expected a kvviz JSON bundle)") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BundleError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON ({exc.msg}); "
                          f"expected a kvviz bundle (truncated file?)") from None
    except (ValueError, RecursionError) as exc:  # an integer of 5,000 digits, arrays nested 100,000 deep
        raise BundleError(f"{path}: not a kvviz bundle: the JSON is too deeply nested or holds a number too "
                          f"large to read ({type(exc).__name__})") from None
    if not isinstance(data, dict):
        raise BundleError(f"{path}: expected a JSON object with schema {SCHEMA!r}, got {type(data).__name__}")
    schema = data.get("schema")
    if schema != SCHEMA:
        shown = repr(schema) if len(repr(schema)) <= 60 else repr(schema)[:57] + "..."
        raise BundleError(f"{path}: schema is {shown}, expected {SCHEMA!r} (not a kvviz bundle, or another version)")
    for key, typ in (("script", str), ("step", int), ("digests", list), ("snapshot", dict), ("config", dict)):
        if not isinstance(data.get(key), typ) or isinstance(data.get(key), bool):
            raise BundleError(f"{path}: field {key!r} is missing or not a {typ.__name__}")
    return data


def open_bundle(path: str | Path, **session_kwargs) -> OpenedBundle:
    """Replay a bundle's script and verify every per-step digest and the bundled snapshot."""
    data = load_bundle(path)
    try:
        scenario = parse_scenario(data["script"], path=f"{path} (script)")
    except ScenarioError as exc:
        raise BundleError(f"{path}: the bundled script does not parse: {exc}") from None
    try:
        bundled = Snapshot.from_dict(data["snapshot"])
    except SnapshotFormatError as exc:
        raise BundleError(f"{path}: the bundled snapshot is malformed: {exc}") from None
    backend = data.get("backend", {"name": "kvcore"})
    name = backend.get("name") if isinstance(backend, dict) else None
    from ..backends.registry import BackendError, make_backend_factory

    try:
        factory = make_backend_factory(name if isinstance(name, str) else "?")
    except BackendError as exc:
        raise BundleError(f"{path}: the bundle was recorded on backend {name!r}: {exc}") from None
    # A long script opens lazily (frames built when looked at), as a trace slice does.
    session_kwargs.setdefault("lazy", len(scenario.steps) > LAZY_ABOVE)
    session = Session.from_scenario(scenario, backend_factory=factory, **session_kwargs)
    step = data["step"]
    if not 0 <= step < len(session):
        raise BundleError(f"{path}: step {step} is outside the script's {len(session) - 1} steps")
    digests = data["digests"]
    divergence = None
    if len(digests) != len(session):
        divergence = f"the bundle lists {len(digests)} digests but the script has {len(session)} frames"
    for i, (expected, replayed) in enumerate(zip(digests, session.snapshots())):
        actual = replayed.digest()
        if actual != expected:
            divergence = (f"step {i} diverges: replay gives digest {actual[:12]}…, bundle recorded "
                          f"{str(expected)[:12]}…")
            break
    if divergence is None and session.frame(step).snapshot != bundled:
        divergence = f"the bundled snapshot differs from the replayed state at step {step} (edited bundle?)"
    return OpenedBundle(session, step, divergence, data)
