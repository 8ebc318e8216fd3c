# SPDX-License-Identifier: Apache-2.0
"""Fuzzing the trace reader and ``kvviz trace`` with mutations of real Mooncake lines.

The promise: whatever a trace line holds, reading it gives valid requests or one located
error (``file:line[:column]: ...``), and the command exits 0 or exits 2 with one line on
stderr, never a traceback, never more memory than a cap or more time than an alarm, and
never writes a scenario that kvviz would refuse to read.

The mutants start from six lines of the shared conversation trace (copied here, so the test
runs without the data) and change bytes, numbers, fields, nesting and sizes. ``KVVIZ_FUZZ_SCALE``
(default 1) multiplies the number of examples: ``KVVIZ_FUZZ_SCALE=100`` is the soak run.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvviz.cli import cli
from kvviz.core.limits import MAX_NUMBER
from kvviz.core.scenario import parse_scenario_file
from kvviz.core.mooncake import TraceFormatError, read_trace
from kvviz.trace.replay import ReplayConfig
from kvviz.trace.to_kvs import trace_to_scenario

from .bounds import alarm, fuzz_scale, memory_cap

SCALE = fuzz_scale()

# Lines 1, 2, 4 and 6 of conversation_trace.jsonl, and lines 67 and 134, which share a
# five-block prefix (a second turn of one conversation).
EXCERPT = (
    '{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, '
    '11, 12, 13]}',
    '{"timestamp": 0, "input_length": 7322, "output_length": 490, "hash_ids": [0, 14, 15, 16, 17, 18, 19, 20, 21, '
    '22, 23, 24, 25, 26, 27]}',
    '{"timestamp": 0, "input_length": 2290, "output_length": 316, "hash_ids": [0, 42, 43, 44, 45]}',
    '{"timestamp": 0, "input_length": 4834, "output_length": 173, "hash_ids": [0, 59, 60, 61, 62, 63, 64, 65, 66, 67]}',
    '{"timestamp": 21000, "input_length": 2651, "output_length": 366, "hash_ids": [0, 1541, 1542, 1543, 1544, 1545]}',
    '{"timestamp": 48000, "input_length": 3024, "output_length": 111, "hash_ids": [0, 1541, 1542, 1543, 1544, 3753]}',
)
FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")

MEMORY_HEADROOM = 1024 * 1024 * 1024
"""Address space a single example may add to the test process (RLIMIT_AS)."""
SECONDS_PER_EXAMPLE = 10


# -- mutants -------------------------------------------------------------------------------------

EXTREME_INTS = st.sampled_from([0, 1, -1, 511, 512, 513, MAX_NUMBER, MAX_NUMBER + 1, 2**64, 10**30, -(2**63)])
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | EXTREME_INTS | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
NUMBER_TEXTS = st.sampled_from(["1e999", "-0", "NaN", "Infinity", "-Infinity", "1.0", "9" * 5000, "1e5", "0x10",
                                "\u0663", "00", "9223372036854775808", "-9223372036854775809", "1E+3", ""])
_NUMBER = re.compile(r"-?[0-9]+")


@st.composite
def byte_mutant(draw, line: bytes) -> bytes:
    data = bytearray(line)
    for _ in range(draw(st.integers(1, 4))):
        where = draw(st.integers(0, len(data)))
        action = draw(st.sampled_from(["replace", "insert", "delete", "repeat"]))
        if action == "replace" and where < len(data):
            data[where] = draw(st.integers(0, 255))
        elif action == "insert":
            data[where:where] = draw(st.binary(min_size=1, max_size=8))
        elif action == "delete":
            del data[where:where + draw(st.integers(1, 16))]
        else:
            chunk = data[where:where + draw(st.integers(1, 32))]
            data[where:where] = chunk * draw(st.integers(1, 50))
    return bytes(data)


@st.composite
def field_mutant(draw, line: str) -> str:
    record = json.loads(line)
    field = draw(st.sampled_from(FIELDS + ("extra",)))
    if draw(st.integers(0, 4)) == 0 and field in record:
        del record[field]
    elif field == "hash_ids" and draw(st.booleans()):
        ids = record["hash_ids"]
        position = draw(st.integers(0, len(ids)))
        action = draw(st.sampled_from(["set", "insert", "drop", "grow"]))
        if action == "set" and position < len(ids):
            ids[position] = draw(JSON_VALUES)
        elif action == "insert":
            ids.insert(position, draw(EXTREME_INTS))
        elif action == "drop" and ids:
            ids.pop(min(position, len(ids) - 1))
        else:  # a longer prompt that stays consistent: more blocks, more tokens
            extra = draw(st.integers(1, 3000))
            ids.extend(range(10**6, 10**6 + extra))
            record["input_length"] += 512 * extra
    else:
        record[field] = draw(JSON_VALUES)
    return json.dumps(record, allow_nan=True)


@st.composite
def number_mutant(draw, line: str) -> str:
    numbers = list(_NUMBER.finditer(line))
    match = numbers[draw(st.integers(0, len(numbers) - 1))]
    return line[:match.start()] + draw(NUMBER_TEXTS) + line[match.end():]


@st.composite
def nesting_mutant(draw, line: str) -> str:
    depth = draw(st.integers(1, 3000))
    inner = "[" * depth + ("]" * depth if draw(st.booleans()) else "")
    return line[:-1] + f', "x": {inner}}}'


@st.composite
def size_mutant(draw, line: str) -> str:
    # Near the line-size limit (1,000,000 bytes) either side, and a giant output_length.
    if draw(st.booleans()):
        return line[:-1] + " " * draw(st.sampled_from([999_000, 1_000_001])) + "}"
    record = json.loads(line)
    record["output_length"] = draw(st.sampled_from([10**6, 10**9, MAX_NUMBER]))
    return json.dumps(record)


@st.composite
def mutant_line(draw) -> bytes:
    line = draw(st.sampled_from(EXCERPT))
    kind = draw(st.sampled_from(["same", "bytes", "field", "field", "number", "nesting", "size"]))
    if kind == "same":
        return line.encode()
    if kind == "bytes":
        return draw(byte_mutant(line.encode()))
    mutate = {"field": field_mutant, "number": number_mutant, "nesting": nesting_mutant, "size": size_mutant}[kind]
    return draw(mutate(line)).encode("utf-8", "surrogatepass")


TRACES = st.lists(mutant_line(), min_size=1, max_size=5)


def write_trace(folder: Path, lines: list[bytes]) -> Path:
    path = folder / "trace.jsonl"
    path.write_bytes(b"\n".join(line.replace(b"\n", b" ") for line in lines) + b"\n")
    return path


def assert_valid(request) -> None:
    for value in (request.timestamp, request.input_length, request.output_length, *request.hash_ids):
        assert type(value) is int and 0 <= value <= MAX_NUMBER
    assert len(request.hash_ids) == -(-request.input_length // 512)


FUZZ = settings(max_examples=80 * SCALE, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.large_base_example])


# -- the reader ------------------------------------------------------------------------------------


@FUZZ
@given(lines=TRACES, on_error=st.sampled_from(["stop", "skip"]))
def test_reading_a_mutated_trace_gives_valid_requests_or_one_located_error(lines, on_error):
    with tempfile.TemporaryDirectory() as folder, memory_cap(MEMORY_HEADROOM), alarm(SECONDS_PER_EXAMPLE):
        path = write_trace(Path(folder), lines)
        try:
            trace = read_trace(path, on_error=on_error)
        except TraceFormatError as error:
            assert on_error == "stop"
            message = str(error)
            assert "\n" not in message and message.startswith(f"{path}:{error.problem.line}")
            assert 1 <= error.problem.line <= len(lines)
            return
        for request in trace.requests:
            assert_valid(request)
        for problem in trace.skipped:
            assert "\n" not in str(problem)
        assert len(trace.requests) + len(trace.skipped) == sum(1 for line in lines if line.replace(b"\n", b" ").strip())
        if trace.requests:
            try:
                converted = trace_to_scenario(trace.requests, ReplayConfig(capacity_tokens=20 * 512))
            except ValueError:
                return  # refused with a message (too large for a scenario), never written
            assert converted.ops >= len(trace.requests)


# -- the command ----------------------------------------------------------------------------------

CAPACITIES = st.sampled_from(["3M", "1e15", "1e16", "unlimited", "\u0663", "1e+3", "1.0e3", "1e99", "nan", "0",
                              "4096", "1e999999999", "-5"]) | st.text(max_size=6)
COUNTS = st.sampled_from(["1", "2", "3", "\u0663", "0", "-1", "99999999999999999999"])
TIMES = st.sampled_from(["0.1", "1e+1", ".5", "nan", "inf", "-1", "\u0663", "1e999"])


@st.composite
def trace_options(draw) -> list[str]:
    options = []
    if draw(st.booleans()):
        options += ["--capacity-tokens", draw(CAPACITIES)]
    if draw(st.booleans()):
        options += ["--first", draw(COUNTS)]
    for flag in ("--with-output", "--concurrency", "--base", "--json"):
        if draw(st.integers(0, 3)) == 0:
            options.append(flag)
    if draw(st.booleans()):
        options += ["--on-error", "skip"]
    if draw(st.integers(0, 4)) == 0:
        options += [draw(st.sampled_from(["--prefill-ms-per-token", "--decode-ms-per-token"])), draw(TIMES)]
    return options


@FUZZ
@given(lines=TRACES, options=trace_options(), to_kvs=st.sampled_from([None, "out.kvs", "trace.jsonl"]))
def test_the_trace_command_exits_0_or_2_with_one_line_and_writes_only_what_kvviz_reads(lines, options, to_kvs):
    with tempfile.TemporaryDirectory() as folder, memory_cap(MEMORY_HEADROOM), alarm(SECONDS_PER_EXAMPLE):
        folder = Path(folder)
        path = write_trace(folder, lines)
        original = path.read_bytes()
        args = ["trace", str(path), "--no-progress", *options]
        if to_kvs is not None:
            args += ["--to-kvs", str(folder / to_kvs)]
        result = CliRunner().invoke(cli, args, catch_exceptions=True)
        assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
        assert result.exit_code in (0, 2), result.output
        assert "Traceback" not in result.output
        assert path.read_bytes() == original  # the input is never overwritten
        if result.exit_code == 2:
            assert len(result.stderr.splitlines()) == 1 and result.stderr.startswith("kvviz: error: "), result.stderr
        elif to_kvs is not None:
            parse_scenario_file(folder / to_kvs)  # what --to-kvs writes, check reads
        written = {p.name for p in folder.iterdir()} - {"trace.jsonl", "out.kvs"}
        assert written == set()  # no temporary file left behind
