# SPDX-License-Identifier: Apache-2.0
"""The bundle of a watched stream's step: JSON that replays it exactly (``kvviz.watch-bundle/1``).

A bundle of step *N* holds the first *N* messages as they were received (each as a line of a
recording holds it: ``{"topic", "seq", "payload": base64}``, plus ``rank`` when not 0), the
digest of the forest after every step 0..*N* (so a changed message is caught at its own step,
even when its effect is gone a few steps later), the summary of the stream up to *N* and step
*N*'s narration. ``kvviz open`` replays the messages through a new
:class:`~kvviz.watch.timeline.WatchTimeline` and holds every recorded value to what the replay
derives: a digest, the summary or the narration that differs is a *divergence* (exit 1; the
first differing step is named and checking stops there); a file that is not of this shape,
unknown fields included, is *malformed* (exit 2). Only the versions of the recording machine
cannot be derived: they are reported when they differ.

Cost: a forest keeps its digest up to date as each batch applies
(:meth:`~kvviz.watch.forest.ForestState.digest` is O(1)), so writing and opening a
bundle are linear in its steps: measured on a generated recording of 10 new blocks per batch
(load 9 on 2 cores), 20,000 batches write in 57 s and open in 54 s where ``kvviz watch --print``
takes 25 s (before: 128 s and 337 s); 2,000 batches 2.6 s and 2.9 s, ``--print`` 2.0 s. Both sides hold :data:`kvviz.core.limits.MAX_WATCH_BUNDLE_STEPS`, checked before
any message is replayed.

The schema is written first, so ``kvviz open`` tells a watch bundle from a scenario bundle
by the first bytes (:func:`is_watch_bundle`) without parsing the file twice. Both sides hold
:data:`kvviz.core.limits.MAX_BUNDLE_BYTES`: writing is streamed and capped, reading is refused
above it before parsing.
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvviz.watch.recording import MARKS, Message, message_line, strict_base64
from kvviz.core.jsonread import JsonNumberTooLong, loads
from kvviz.core.limits import MAX_BUNDLE_BYTES, MAX_WATCH_BUNDLE_STEPS
from kvviz.printable import printable
from kvviz.report.atomic import OutputTooLarge, open_atomic

if TYPE_CHECKING:  # pragma: no cover
    from kvviz.watch.timeline import WatchTimeline

SCHEMA = "kvviz.watch-bundle/2"
EARLIER_SCHEMAS = ("kvviz.watch-bundle/1",)
"""Schemas of earlier kvvizes' bundles: refused with the reason (their digests are defined
otherwise), not reported as a divergence."""
SNIFF_BYTES = 256
"""Bytes :func:`is_watch_bundle` reads: the schema is the first field kvviz writes."""
FORMATS = (".json", ".md")
MAX_VERSION_CHARS = 200

#: The bundle's fields (besides ``schema``): name -> JSON type. Messages and digests are
#: checked row by row.
_FIELDS: dict[str, type | tuple[type, ...]] = {
    "versions": dict, "source": str, "step": int, "keyframe_every": int, "messages": list, "digests": list,
    "summary": dict, "narration": str,
}
_VERSIONS = ("kvviz", "python", "platform")


class WatchBundleError(Exception):
    """A watch bundle that cannot be opened: names the file and what was expected (exit 2)."""


@dataclass(frozen=True)
class OpenedWatchBundle:
    """A replayed watch bundle: the timeline of its messages, the bundled step (its last),
    the first divergence if any, and notes (another kvviz version recorded it)."""

    timeline: "WatchTimeline"
    step: int
    divergence: str | None
    notes: tuple[str, ...] = ()


# -- writing --------------------------------------------------------------------------------------


def _versions() -> dict:
    from kvviz import __version__

    return {"kvviz": __version__, "python": platform.python_version(), "platform": platform.platform(terse=True)}


def _digests(timeline: "WatchTimeline", step: int) -> Iterator[list]:
    """``[i, digest]`` of the forest after every step 0..``step``, from one pass over the
    timeline's states (each digest O(1))."""
    for i, state in enumerate(timeline.states()):
        if i > step:
            return
        yield [i, state.digest()]


def _refuse_steps(step: int, where: str) -> None:
    """ValueError when a bundle of ``step`` steps is past :data:`MAX_WATCH_BUNDLE_STEPS`."""
    if step > MAX_WATCH_BUNDLE_STEPS:
        raise ValueError(f"{where}: a watch bundle of step {step:,} is more than the {MAX_WATCH_BUNDLE_STEPS:,} "
                         f"steps `kvviz open` replays; nothing was replayed or written. Export an earlier step, "
                         f"or a .md report")


def make_watch_bundle(timeline: "WatchTimeline", step: int) -> dict:
    """The bundle dict of ``step`` (messages as recording lines' objects)."""
    upto = timeline.prefix(step)
    return {
        "schema": SCHEMA,
        "versions": _versions(),
        "source": timeline.source,
        "step": step,
        "keyframe_every": timeline.keyframe_every,
        "messages": [json.loads(message_line(m)) for m in upto.messages],
        "digests": list(_digests(upto, step)),
        "summary": upto.summary(),
        "narration": upto.frame(step).narration,
    }


def iter_bundle_text(bundle: dict) -> Iterable[str]:
    """The bundle's text, a piece at a time: the schema first (what :func:`is_watch_bundle`
    reads), then the other fields in sorted order, one message per line (bundles diff by
    message)."""
    yield "{\n" + f'  "schema": {json.dumps(bundle["schema"])}'
    for key in sorted(k for k in bundle if k != "schema"):
        if key == "messages":
            rows = bundle[key]
            yield ',\n  "messages": [' + ("" if rows else "]")
            for i, row in enumerate(rows):
                yield ("\n    " if i == 0 else ",\n    ") + json.dumps(row, sort_keys=True, ensure_ascii=True)
            if rows:
                yield "\n  ]"
        else:
            yield f",\n  {json.dumps(key)}: " + json.dumps(bundle[key], sort_keys=True, ensure_ascii=True)
    yield "\n}\n"


def dumps_watch_bundle(bundle: dict) -> str:
    """The whole text of a bundle (tests, small bundles)."""
    return "".join(iter_bundle_text(bundle))


def write_watch_bundle(timeline: "WatchTimeline", step: int, output: str | os.PathLike, *,
                       inputs: Iterable[str | os.PathLike] = ()) -> None:
    """Write the bundle of ``step`` to ``output``, streamed and capped at what ``open`` accepts.

    Raises ValueError (nothing written) when the bundle would pass
    :data:`~kvviz.core.limits.MAX_BUNDLE_BYTES` or ``output`` is one of ``inputs``; OSError when
    the file cannot be written.
    """
    _refuse_steps(step, str(output))
    payload_bytes = sum(len(m.payload) for m in timeline.messages_until(step))
    floor = payload_bytes * 4 // 3
    if floor > MAX_BUNDLE_BYTES:
        raise ValueError(f"{output}: the bundle of step {step} would take at least {floor:,} bytes (the base64 of "
                         f"{step:,} messages), more than the {MAX_BUNDLE_BYTES:,} bytes `kvviz open` accepts; "
                         f"nothing was written. Export an earlier step, or a .md report")
    bundle = make_watch_bundle(timeline, step)
    with open_atomic(output, inputs=inputs, max_bytes=MAX_BUNDLE_BYTES) as write:
        try:
            for piece in iter_bundle_text(bundle):
                write(piece)
        except OutputTooLarge:
            raise ValueError(f"{output}: the bundle of step {step} is more than {MAX_BUNDLE_BYTES:,} bytes, the "
                             f"most `kvviz open` accepts; nothing was written") from None


def write_watch_export(timeline: "WatchTimeline", step: int, output: str | os.PathLike, *,
                       inputs: Iterable[str | os.PathLike] = ()) -> None:
    """Step ``step`` of a watch to ``output``: ``.json`` a watch bundle, ``.md`` a Markdown
    report (:func:`kvviz.watch.markdown.watch_markdown`). ValueError for another suffix."""
    output = Path(output)
    suffix = output.suffix.lower()
    if suffix == ".json":
        write_watch_bundle(timeline, step, output, inputs=inputs)
    elif suffix == ".md":
        from kvviz.report.atomic import write_text_atomic
        from kvviz.watch.markdown import watch_markdown

        write_text_atomic(output, watch_markdown(timeline, step), inputs=inputs)
    else:
        raise ValueError(f"{output}: a watch exports as {' or '.join(FORMATS)}, not {suffix or '(no suffix)'!r}")


# -- reading --------------------------------------------------------------------------------------


def is_watch_bundle(path: str | os.PathLike) -> bool:
    """Whether the file at ``path`` starts as a watch bundle does (its schema first). False for
    anything unreadable: the scenario bundle's reader then says what is wrong."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(SNIFF_BYTES)
    except OSError:
        return False
    return b'"kvviz.watch-bundle/' in head


def _shown(value: Any, limit: int = 60) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def load_watch_bundle(path: str | os.PathLike) -> dict:
    """Read a watch bundle and check its shape (not yet its content). Raises WatchBundleError."""
    path = Path(path)
    try:
        if path.exists() and not path.is_file():
            raise WatchBundleError(f"{path}: not a regular file (expected a kvviz watch bundle)")
        size = path.stat().st_size
        if size > MAX_BUNDLE_BYTES:
            raise WatchBundleError(f"{path}: {size:,} bytes is too large for a bundle (limit {MAX_BUNDLE_BYTES:,})")
        with open(path, "rb") as handle:
            raw = handle.read(MAX_BUNDLE_BYTES + 1)
    except OSError as exc:
        raise WatchBundleError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if len(raw) > MAX_BUNDLE_BYTES:
        raise WatchBundleError(f"{path}: more than {MAX_BUNDLE_BYTES:,} bytes is too large for a bundle")
    try:
        data = loads(raw.decode("utf-8"))
    except JsonNumberTooLong as exc:
        raise WatchBundleError(f"{path}:{exc.lineno}:{exc.colno}: {exc}; expected a kvviz watch bundle") from None
    except UnicodeDecodeError as exc:
        raise WatchBundleError(f"{path}: not UTF-8 text at byte {exc.start} (expected a kvviz watch bundle)") from None
    except json.JSONDecodeError as exc:
        raise WatchBundleError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON ({exc.msg}); expected a kvviz "
                               f"watch bundle (truncated file?)") from None
    except (ValueError, RecursionError) as exc:
        raise WatchBundleError(f"{path}: not a kvviz watch bundle: the JSON is too deeply nested or holds a number "
                               f"too large to read ({type(exc).__name__})") from None
    problem = _shape_problem(data)
    if problem:
        raise WatchBundleError(f"{path}: {problem}")
    return data


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _shape_problem(data: Any) -> str | None:
    if not isinstance(data, dict):
        return f"expected a JSON object with schema {SCHEMA!r}, got {type(data).__name__}"
    if data.get("schema") in EARLIER_SCHEMAS:
        return (f"schema {data['schema']!r} is an earlier kvviz's (its digests are defined otherwise); export the "
                f"step again from its recording (kvviz watch --replay-file R --export-step N -o B.json)")
    if data.get("schema") != SCHEMA:
        return f"schema is {_shown(data.get('schema'))}, expected {SCHEMA!r}"
    unknown = sorted(set(data) - set(_FIELDS) - {"schema"})
    if unknown:
        return f"the bundle has unknown field(s) {', '.join(map(_shown, unknown[:3]))} (a versioned bundle has no " \
               f"fields but its schema's)"
    for name, kind in _FIELDS.items():
        value = data.get(name)
        if value is None or not isinstance(value, kind) or (kind is int and not _is_int(value)):
            return f"field {name!r} is missing or not a {getattr(kind, '__name__', kind)}"
    versions = data["versions"]
    if sorted(versions) != sorted(_VERSIONS) or not all(isinstance(v, str) and len(v) <= MAX_VERSION_CHARS
                                                        for v in versions.values()):
        return f"field 'versions' must hold {', '.join(_VERSIONS)}, each a string of at most {MAX_VERSION_CHARS} characters"
    if not 1 <= data["keyframe_every"] <= 1_000_000:
        return f"field 'keyframe_every' is {data['keyframe_every']}, expected 1..1000000"
    if data["step"] != len(data["messages"]):
        return f"field 'step' is {data['step']} but the bundle holds {len(data['messages'])} messages (one per step)"
    if data["step"] > MAX_WATCH_BUNDLE_STEPS:
        return (f"field 'step' is {data['step']:,}, more than the {MAX_WATCH_BUNDLE_STEPS:,} steps `kvviz open` "
                f"replays")
    for i, row in enumerate(data["digests"]):
        if not (isinstance(row, list) and len(row) == 2 and _is_int(row[0]) and isinstance(row[1], str)):
            return f"field 'digests[{i}]' is not a [step, digest] pair"
    return None


def _message(row: Any, i: int) -> Message:
    """Message ``i`` of a bundle, as a recording's line holds it; ValueError says what is wrong."""
    where = f"messages[{i}]"
    if not isinstance(row, dict):
        raise ValueError(f"{where} is not an object")
    unknown = sorted(set(row) - {"topic", "topic_b64", "seq", "payload", "rank", *MARKS})
    if unknown:
        raise ValueError(f"{where} has unknown field {_shown(unknown[0])}")
    seq, payload, rank = row.get("seq"), row.get("payload"), row.get("rank", 0)
    if not _is_int(seq) or not 0 <= seq < 2**64:
        raise ValueError(f"{where}: seq must be an integer from 0 to 2^64 - 1")
    if not _is_int(rank) or rank < 0:
        raise ValueError(f"{where}: rank must be an integer >= 0")
    marks = {name: row.get(name, False) for name in MARKS}
    if not all(isinstance(value, bool) for value in marks.values()):
        raise ValueError(f"{where}: {', '.join(MARKS)} must be true or false")
    if "topic_b64" in row:
        topic = strict_base64(row["topic_b64"], f"{where}.topic_b64", ValueError)
    elif isinstance(row.get("topic"), str):
        try:
            topic = row["topic"].encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(f"{where}: topic holds a lone surrogate") from None
    else:
        raise ValueError(f"{where}: topic must be a string")
    return Message(topic=topic, seq=seq, payload=strict_base64(payload, f"{where}.payload", ValueError), rank=rank,
                   **marks)


def open_watch_bundle(path: str | os.PathLike) -> OpenedWatchBundle:
    """Replay a watch bundle's messages and hold every recorded value to the replay.

    Raises WatchBundleError for a bundle that cannot be opened; returns the replay with
    ``divergence`` set to the first disagreement between the bundle and its replay.
    """
    data = load_watch_bundle(path)
    try:
        messages = [_message(row, i) for i, row in enumerate(data["messages"])]
    except ValueError as exc:
        raise WatchBundleError(f"{path}: {exc}") from None
    from kvviz.watch.timeline import WatchTimeline

    timeline = WatchTimeline.from_messages(messages, data["source"], data["keyframe_every"])
    step = data["step"]
    return OpenedWatchBundle(timeline, step, _divergence(data, timeline, step), _version_notes(data))


def _divergence(data: dict, timeline: WatchTimeline, step: int) -> str | None:
    recorded = data["digests"]
    if [s for s, _ in recorded] != list(range(step + 1)):
        return (f"the bundle records digests at steps {_steps_text([s for s, _ in recorded])}, but a bundle of step "
                f"{step} records one after every step, 0..{step} (edited bundle?)")
    for (at, expected), (_, actual) in zip(recorded, _digests(timeline, step)):
        if actual != expected:  # the first step that differs: the rest would only repeat it
            return f"step {at} diverges: replay gives digest {actual[:12]}…, bundle recorded {printable(str(expected)[:12])}…"
    summary = timeline.summary()
    wrong = sorted(key for key in set(summary) | set(data["summary"]) if summary.get(key) != data["summary"].get(key))
    if wrong:
        first = wrong[0]
        return (f"the bundle's summary disagrees with its replay: {first}: the bundle records "
                f"{_shown(data['summary'].get(first))}, the replay gives {_shown(summary.get(first))}"
                + (f" (also wrong: {', '.join(wrong[1:4])}{', ...' if len(wrong) > 4 else ''})" if len(wrong) > 1 else ""))
    narration = timeline.frame(step).narration
    if narration != data["narration"]:
        return f"the bundle's narration of step {step} is not the replay's: {_shown(narration, 80)}"
    return None


def _steps_text(steps: list[int]) -> str:
    shown = ", ".join(map(str, steps[:6]))
    return shown + (", ..." if len(steps) > 6 else "")


def _version_notes(data: dict) -> tuple[str, ...]:
    from kvviz import __version__

    recorded = data["versions"]["kvviz"]
    if recorded != __version__:
        return (f"recorded with kvviz {_shown(recorded, 40)}, replayed with {__version__}",)
    return ()


__all__ = ["SCHEMA", "OpenedWatchBundle", "WatchBundleError", "is_watch_bundle", "load_watch_bundle",
           "make_watch_bundle", "open_watch_bundle", "write_watch_bundle", "write_watch_export"]
