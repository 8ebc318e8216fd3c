# SPDX-License-Identifier: Apache-2.0
"""Fuzzing ``kvviz open`` with tampered bundles: real bundles of demos, exported in-process,
with JSON values, keys, types and sizes changed.

The promise: a tampered bundle either opens with every value it records derived again by the
replay (it re-exports to itself, the recording machine's versions aside), or is refused with
one line naming the file (``BundleError``; exit 2), or opens flagged as diverging (exit 1), or
opens verified at a step that fails a check (exit 1, as ``--print`` of that step: the README's
exit codes).
Never a traceback, never "every digest matches" for a changed value that the replay derives.
``KVVIZ_FUZZ_SCALE`` (default 1) multiplies the number of examples.
"""

from __future__ import annotations

import copy
import functools
import json
import tempfile
from pathlib import Path

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvviz.cli import cli
from kvviz.core.demos import load_demo
from kvviz.report.bundle import BundleError, make_bundle, open_bundle
from kvviz.core.scenario import parse_scenario
from kvviz.core.session import Session

from .bounds import alarm, fuzz_scale, memory_cap

SCALE = fuzz_scale()
MEMORY_HEADROOM = 1024 * 1024 * 1024
SECONDS_PER_EXAMPLE = 20

# A failed op, an eviction, expects that hold and one that does not.
STORY = """\
title: tamper with me
cache trie pages=3 tokens_per_page=2
acquire a 1..4
expect pages a 0 1
publish a
release a
acquire b 1 2 5 6 7 8
expect evictions 1
acquire c 1..40
expect fail alloc
extend b 9 9
expect free 1
"""
DEMOS = ("lru", "dedup", "bug-b5-ref-leak")
#: Fields of the recording machine: not derivable, so a change there is only reported.
UNDERIVED = ("versions",)


@functools.cache
def bundles() -> tuple[str, ...]:
    """Canonical texts of a few real bundles (each kind of step), exported in-process."""
    sessions = [Session.from_scenario(parse_scenario(STORY)),
                Session.from_scenario(parse_scenario(STORY.replace("cache trie", "cache base")))]
    sessions += [Session.from_scenario(load_demo(d)) for d in DEMOS]
    out = []
    for session in sessions:
        steps = {len(session) - 1}
        steps.add(next((i for i in range(1, len(session)) if session.frame(i).failed), 1))
        steps.add(next((i for i in range(1, len(session)) if session.frame(i).evictions), 1))
        out += [json.dumps(make_bundle(session, step), sort_keys=True) for step in sorted(steps)]
    return tuple(out)


# -- mutants ----------------------------------------------------------------------------------

SCALARS = (st.none() | st.booleans() | st.integers(-3, 3) | st.integers() | st.sampled_from([2**63, 2**70, -(2**63)])
           | st.text(max_size=6) | st.floats(allow_nan=False) | st.just(""))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.text(max_size=4), inner, max_size=3), max_leaves=8)
# Built afresh for every draw: a later edit of the same example may change them in place.
SIZES = st.sampled_from(range(4)).map(lambda i: ["x" * 10_000, list(range(2_000)),
                                                 [[0, "free", None, None, 0] for _ in range(500)], "é" * 300][i])


def containers(value, path=()):
    """Every (path, container) inside ``value``, the root included."""
    yield path, value
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, inner in items:
        if isinstance(inner, (dict, list)):
            yield from containers(inner, path + (key,))


def tweak(value, draw):
    """A small change of the same type where there is one: what a hand edit does."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + draw(st.sampled_from([-1, 1, 2, 100]))
    if isinstance(value, str):
        if not value:
            return "x"
        i = draw(st.integers(0, len(value) - 1))
        return value[:i] + draw(st.sampled_from(["", "0", "a", " ", "\n", "9"])) + value[i + 1:]
    return draw(VALUES)


@st.composite
def mutants(draw):
    """A real bundle with one to three edits: a value changed, tweaked, retyped or resized,
    a key removed or added, a list item dropped or duplicated; now and then on another backend."""
    data = json.loads(draw(st.sampled_from(bundles())))
    if draw(st.integers(0, 9)) == 0:  # another backend: shortfin cannot run a base cache, "vllm" is none
        data["backend"]["name"] = draw(st.sampled_from(["shortfin", "vllm", "", "KVCORE"]))
    for _ in range(draw(st.integers(1, 3))):
        places = list(containers(data))
        path, box = draw(st.sampled_from(places))
        keys = list(box) if isinstance(box, dict) else list(range(len(box)))
        action = draw(st.sampled_from(["tweak", "replace", "resize", "delete", "add", "duplicate"]))
        if action == "add" or not keys:
            if isinstance(box, dict):
                box[draw(st.text(min_size=1, max_size=6))] = draw(VALUES)
            else:
                box.append(draw(VALUES))
            continue
        key = draw(st.sampled_from(keys))
        if action == "tweak":
            box[key] = tweak(box[key], draw)
        elif action == "replace":
            box[key] = draw(VALUES)
        elif action == "resize":
            box[key] = draw(SIZES)
        elif action == "delete":
            del box[key]
        elif isinstance(box, list):
            box.insert(key, copy.deepcopy(box[key]))
        else:
            box[key] = [box[key], box[key]]
    return data


# -- the promise --------------------------------------------------------------------------------


def held_to_the_replay(data: dict, path: Path) -> None:
    """Open ``data``: refused with one line, flagged, or re-exporting to itself."""
    try:
        opened = open_bundle(path)
    except BundleError as exc:
        message = str(exc)
        assert "\n" not in message and message.startswith(f"{path}"), message
        return
    if opened.divergence is not None:
        assert "\n" not in opened.divergence
        return
    again = make_bundle(opened.session, opened.step)
    for key in again:
        if key in UNDERIVED or key == "script":
            continue  # the script is the source (any spelling that parses the same is it)
        if key == "backend" and data[key]["name"] != "kvcore":
            assert data[key]["name"] == again[key]["name"]
            continue
        assert again[key] == data[key], f"{key} was changed and the bundle still verifies"
    assert set(again) == set(data) or data["schema"] != again["schema"]
    assert parse_scenario(data["script"]).steps == parse_scenario(again["script"]).steps


@settings(max_examples=150 * SCALE, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mutants())
def test_a_tampered_bundle_is_refused_flagged_or_derived_again_in_full(data):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "tampered.json"
        path.write_text(json.dumps(data, sort_keys=True, indent=2), encoding="utf-8")
        with memory_cap(MEMORY_HEADROOM), alarm(SECONDS_PER_EXAMPLE):
            held_to_the_replay(data, path)


@settings(max_examples=25 * SCALE, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mutants())
def test_kvviz_open_exits_0_1_or_2_with_one_line_and_never_a_traceback(data):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "tampered.json"
        path.write_text(json.dumps(data, sort_keys=True, indent=2), encoding="utf-8")
        with memory_cap(MEMORY_HEADROOM), alarm(SECONDS_PER_EXAMPLE):
            result = CliRunner().invoke(cli, ["open", str(path), "--print"], prog_name="kvviz")
    assert result.exit_code in (0, 1, 2), (result.exit_code, result.exception, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout
    if result.exit_code == 2:
        assert result.stderr.count("\n") == 1 and str(path) in result.stderr, result.stderr
    if result.exit_code == 1:
        if "replay diverges from the bundle" in result.stderr:
            assert "every digest matches" not in result.stderr
        else:  # an honest bundle of a step that fails a check (an expect, an invariant): exit 1 as --print
            assert "every digest matches" in result.stderr, result.stderr
            assert "check failed:" in result.stderr and f"(step {data['step']})" in result.stderr, result.stderr
    if result.exit_code == 0:
        assert "every digest matches" in result.stderr
