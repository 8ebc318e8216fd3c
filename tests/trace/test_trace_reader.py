# SPDX-License-Identifier: Apache-2.0
"""The Mooncake reader: real traces read cleanly; every kind of bad line is reported by line."""

import json
import math
from pathlib import Path

import pytest

from kvviz.core.mooncake import TraceFormatError, parse_line, prefix_reuse, read_trace

DATA = Path(__file__).parents[2].parent / "shared" / "data" / "mooncake"
CONVERSATION = DATA / "conversation_trace.jsonl"
SYNTHETIC = DATA / "synthetic_trace.jsonl"

needs_data = pytest.mark.skipif(not CONVERSATION.exists(), reason=f"Mooncake traces not found in {DATA}")


def line(timestamp=0, input_length=1000, output_length=10, hash_ids=(1, 2)):
    return json.dumps({"timestamp": timestamp, "input_length": input_length, "output_length": output_length,
                       "hash_ids": list(hash_ids)})


def write(tmp_path, *lines, name="trace.jsonl"):
    path = tmp_path / name
    path.write_bytes(b"\n".join(x if isinstance(x, bytes) else x.encode() for x in lines) + b"\n")
    return path


@needs_data
@pytest.mark.parametrize("path, count", [(CONVERSATION, 12_031), (SYNTHETIC, 3_993)])
def test_real_traces_read_without_a_bad_line(path, count):
    trace = read_trace(path)
    assert len(trace.requests) == count
    assert trace.skipped == ()
    assert all(len(r.hash_ids) == math.ceil(r.input_length / 512) for r in trace.requests)
    assert [r.index for r in trace.requests] == list(range(count))
    assert trace.requests[0].line == 1 and trace.requests[-1].line == count


@needs_data
def test_first_stops_after_n_requests():
    trace = read_trace(CONVERSATION, first=5)
    assert [r.name for r in trace.requests] == ["q0001", "q0002", "q0003", "q0004", "q0005"]
    assert trace.requests[0].hash_ids == tuple(range(14))
    assert trace.requests[0].input_length == 6758 and trace.requests[0].output_length == 500


def test_a_good_line_becomes_a_request_with_its_line_number(tmp_path):
    path = write(tmp_path, line(5, 1025, 7, (3, 4, 9)), "", line(6, 1, 0, (3,)))
    trace = read_trace(path)
    assert [(r.line, r.timestamp, r.input_length, r.output_length, r.hash_ids) for r in trace.requests] == [
        (1, 5, 1025, 7, (3, 4, 9)),
        (3, 6, 1, 0, (3,)),
    ]


def test_extra_fields_are_ignored():
    assert parse_line('{"timestamp": 1, "input_length": 3, "output_length": 0, "hash_ids": [7], "x": 1}') == (
        1, 3, 0, (7,))


def test_the_block_size_decides_how_many_hash_ids_a_prompt_needs():
    text = line(input_length=1000, hash_ids=(1, 2, 3, 4))
    assert parse_line(text, block_tokens=256)[3] == (1, 2, 3, 4)
    with pytest.raises(ValueError, match=r"needs ceil\(1000/512\) = 2 blocks"):
        parse_line(text)


BAD_LINES = {
    "not json": (b'{"timestamp": 0,', "not valid JSON"),
    "not an object": (b"[1, 2]", "expected a JSON object with fields timestamp, input_length, output_length, "
                                 "hash_ids; found a list"),
    "missing field": (b'{"timestamp": 0, "input_length": 5, "output_length": 1}', "missing field 'hash_ids'"),
    "missing fields": (b'{"hash_ids": []}', "missing fields 'timestamp', 'input_length', 'output_length'"),
    "negative length": (line(input_length=-3).encode(), "'input_length' must be a non-negative integer; found -3"),
    "string timestamp": (b'{"timestamp": "12", "input_length": 5, "output_length": 1, "hash_ids": [1]}',
                         "'timestamp' must be a non-negative integer; found \"12\""),
    "boolean output": (b'{"timestamp": 1, "input_length": 5, "output_length": true, "hash_ids": [1]}',
                       "'output_length' must be a non-negative integer; found true"),
    "float length": (b'{"timestamp": 1, "input_length": 5.5, "output_length": 1, "hash_ids": [1]}',
                     "'input_length' must be a non-negative integer; found 5.5"),
    "hash_ids not a list": (b'{"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": "1 2"}',
                            "'hash_ids' must be a list of non-negative integers; found \"1 2\""),
    "negative hash id": (line(hash_ids=(1, -2)).encode(), "item 1 is -2"),
    "float hash id": (line(hash_ids=(1, 2.5)).encode(), "item 1 is 2.5"),
    "too few hash ids": (line(input_length=1025, hash_ids=(1, 2)).encode(),
                         "'hash_ids' has 2 ids but input_length 1025 needs ceil(1025/512) = 3 blocks"),
    "not utf-8": (b'{"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": [1], "x": "\xff"}',
                  "not UTF-8 text (a bad byte)"),
    "nested 1,000 deep": (b'{"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": [1], "x": '
                          + b"[" * 1000 + b"]" * 1000 + b"}", "nested more than 16 brackets deep"),
    "hash id above the largest number": (line(input_length=5, hash_ids=(2**63,)).encode(),
                                         "'hash_ids' item 0 is 9223372036854775808, above 9,223,372,036,854,775,807"),
    "timestamp above the largest number": (line(timestamp=2**64).encode(),
                                           "'timestamp' is 18446744073709551616, above"),
    "a number of 5,000 digits": (b'{"timestamp": 1, "input_length": ' + b"9" * 5000 + b', "output_length": 1, '
                                 b'"hash_ids": [1]}', "a number too long to read"),
    "a line of more than a megabyte": (line(hash_ids=(1, 2)).encode()[:-1] + b' ' * 1_000_000 + b"}",
                                       "longer than 1,000,000 bytes"),
}

COLUMNS = {"not utf-8": 80, "not json": 17, "nested 1,000 deep": 78 + 16,
           "a number of 5,000 digits": len(b'{"timestamp": 1, "input_length": ') + 1}  # where the number starts


@pytest.mark.parametrize("kind", list(BAD_LINES))
def test_a_bad_line_stops_the_read_with_its_file_line_and_what_was_expected(tmp_path, kind):
    bad, expected = BAD_LINES[kind]
    path = write(tmp_path, line(), b"", bad, line())
    with pytest.raises(TraceFormatError) as raised:
        read_trace(path)
    problem = raised.value.problem
    assert problem.line == 3  # the blank line 2 still counts as a line
    assert expected in problem.message
    column = COLUMNS.get(kind)
    assert problem.column == column
    assert str(raised.value).startswith(f"{path}:3: " if column is None else f"{path}:3:{column}: ")


@pytest.mark.parametrize("kind", list(BAD_LINES))
def test_a_bad_line_is_skipped_and_listed_with_skip(tmp_path, kind):
    bad, expected = BAD_LINES[kind]
    path = write(tmp_path, line(), b"", bad, line(timestamp=9))
    trace = read_trace(path, on_error="skip")
    assert [(r.line, r.index, r.timestamp) for r in trace.requests] == [(1, 0, 0), (4, 1, 9)]
    assert [(p.line, expected in p.message) for p in trace.skipped] == [(3, True)]


def test_skip_lists_every_bad_line_in_file_order(tmp_path):
    lines = [line(), *(BAD_LINES[k][0] for k in BAD_LINES), line()]
    trace = read_trace(write(tmp_path, *lines), on_error="skip")
    assert [r.line for r in trace.requests] == [1, len(lines)]
    assert [p.line for p in trace.skipped] == list(range(2, len(lines)))


def test_first_counts_valid_requests_not_lines(tmp_path):
    path = write(tmp_path, b"oops", line(timestamp=1), line(timestamp=2), b"oops")
    trace = read_trace(path, on_error="skip", first=2)
    assert [r.timestamp for r in trace.requests] == [1, 2]
    assert [p.line for p in trace.skipped] == [1]  # line 4 was never read


def test_prefix_reuse_counts_leading_blocks_seen_before_capped_at_the_input():
    from kvviz.core.mooncake import TraceRequest

    requests = [
        TraceRequest(0, 1, 0, 1500, 0, (1, 2, 3)),
        TraceRequest(1, 2, 0, 1300, 0, (1, 2, 4)),  # 2 leading blocks seen: 1024 tokens
        TraceRequest(2, 3, 0, 1100, 0, (1, 2, 3)),  # 3 blocks seen, capped at 1100
        TraceRequest(3, 4, 0, 600, 0, (9, 2)),  # id 2 seen, but not as a prefix: 0
    ]
    reuse = prefix_reuse(requests)
    assert (reuse.input_tokens, reuse.reused_tokens) == (4500, 2124)
    assert (reuse.blocks, reuse.reused_blocks, reuse.distinct_blocks) == (11, 5, 6)


def test_the_trace_model_imports_neither_rich_nor_textual_and_the_command_no_textual():
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]

    def top_modules(statement):
        code = f"import sys; {statement}; print(' '.join(sorted({{m.split('.')[0] for m in sys.modules}})))"
        out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
        return set(out.stdout.split())

    model = top_modules("import kvviz.trace, kvviz.core.mooncake, kvviz.trace.replay, kvviz.trace.to_kvs")
    assert "rich" not in model and "textual" not in model
    assert "textual" not in top_modules("import kvviz.trace.command")


def test_skip_counts_every_bad_line_but_lists_only_the_first_thousand(tmp_path):
    path = write(tmp_path, *([b"{}"] * 1500), line())
    trace = read_trace(path, on_error="skip")
    assert (trace.skipped_count, len(trace.skipped)) == (1500, 1000)
    assert [p.line for p in trace.skipped] == list(range(1, 1001))
    assert len(trace.requests) == 1


def _padded(size: int) -> bytes:
    """A valid line of exactly ``size`` bytes (spaces before the closing brace)."""
    text = line().encode()
    return text[:-1] + b" " * (size - len(text)) + b"}"


def test_a_line_of_exactly_the_size_limit_is_read_and_one_byte_more_is_refused(tmp_path):
    from kvviz.core.limits import MAX_TRACE_LINE_BYTES

    at_limit = _padded(MAX_TRACE_LINE_BYTES)
    assert len(at_limit) == MAX_TRACE_LINE_BYTES
    trace = read_trace(write(tmp_path, at_limit, _padded(MAX_TRACE_LINE_BYTES + 1), line()), on_error="skip")
    assert [r.line for r in trace.requests] == [1, 3]  # the line after the long one is read intact
    assert [(p.line, p.message) for p in trace.skipped] == [
        (2, f"longer than {MAX_TRACE_LINE_BYTES:,} bytes (a request line is a few KB)")]


def test_nesting_at_the_limit_is_parsed_and_one_level_deeper_is_refused():
    from kvviz.core.limits import MAX_TRACE_NESTING

    def nested(depth):  # the object is depth 1, so the extra field holds depth - 1 lists
        return line()[:-1] + ', "x": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}"

    assert parse_line(nested(MAX_TRACE_NESTING)) == (0, 1000, 10, (1, 2))
    with pytest.raises(ValueError, match=f"nested more than {MAX_TRACE_NESTING} brackets deep"):
        parse_line(nested(MAX_TRACE_NESTING + 1))


def test_brackets_inside_strings_do_not_count_as_nesting():
    text = line()[:-1] + ', "x": "' + "[" * 40 + '\\" {{{{{{{{{{{{{{{{{{{{"}'
    assert parse_line(text) == (0, 1000, 10, (1, 2))
