# SPDX-License-Identifier: Apache-2.0
"""Recordings: the shared ones read and written back byte for byte, nothing lost for odd
topics, every bad line refused as FILE:LINE:COL, every bound held, no odd target written."""

from __future__ import annotations

import base64
import os

import pytest

from kvviz.watch import recording
from kvviz.watch.recording import (Message, RecordingError, RecordingExists, RecordingWriter, message_line,
                                                read_recording)

from .wire_reference import SGLANG, VLLM, read_lines

LINE = '{"topic": "kv", "seq": 3, "payload": "kwGQAA=="}'


@pytest.mark.parametrize("path", [VLLM, SGLANG], ids=["vllm", "sglang"])
def test_a_shared_recording_reads_and_writes_back_byte_for_byte(path, tmp_path):
    messages = read_recording(path)
    expected = read_lines(path)
    assert [(m.topic, m.seq, m.payload, m.rank) for m in messages] == [
        (r["topic"].encode(), r["seq"], r["payload"], 0) for r in expected]
    copy = tmp_path / "copy.jsonl"
    with RecordingWriter(copy) as writer:
        for message in messages:
            writer.write(message)
    assert copy.read_bytes() == path.read_bytes() and writer.messages == 400


def test_the_rank_is_written_only_when_it_is_not_zero():
    assert '"rank"' not in message_line(Message(b"kv", 1, b"\x90"))
    assert message_line(Message(b"kv", 1, b"\x90", rank=2)) == '{"topic": "kv", "seq": 1, "payload": "kA==", "rank": 2}'


def test_the_replayed_and_restart_marks_are_written_only_when_true_and_read_back(tmp_path):
    plain, marked = Message(b"kv", 1, b"\x90"), Message(b"kv", 0, b"\x90", replayed=True, restart=True)
    assert message_line(plain) == '{"topic": "kv", "seq": 1, "payload": "kA=="}'
    assert message_line(marked) == '{"topic": "kv", "seq": 0, "payload": "kA==", "replayed": true, "restart": true}'
    path = tmp_path / "marked.jsonl"
    path.write_text(message_line(plain) + "\n" + message_line(marked) + "\n")
    assert read_recording(path) == [plain, marked]


@pytest.mark.parametrize("mark", ["replayed", "restart"])
def test_a_mark_that_is_not_true_or_false_is_refused_with_its_line(tmp_path, mark):
    path = tmp_path / "bad.jsonl"
    path.write_text(LINE + "\n" + LINE[:-1] + f', "{mark}": 1}}\n')
    with pytest.raises(RecordingError, match=f':2:1: "{mark}" must be true or false'):
        read_recording(path)


def test_a_topic_that_is_not_utf8_survives_the_round_trip(tmp_path):
    odd = Message(b"\xff\xfekv", 7, b"\x00\x01", rank=1)
    path = tmp_path / "odd.jsonl"
    path.write_text(message_line(odd) + "\n" + message_line(Message(b"", 8, b"")) + "\n")
    assert read_recording(path) == [odd, Message(b"", 8, b"")]


def test_blank_lines_are_skipped_and_unknown_keys_ignored(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text("\n" + LINE[:-1] + ', "received_at": 5}\n   \n' + LINE + "\n")
    assert [m.seq for m in read_recording(path)] == [3, 3]


@pytest.mark.parametrize("line, where, says", [
    ('{"topic": "kv", "seq": 3, "payload": "kwGQAA=="', ":1:48:", "not JSON"),
    ("[1, 2]", ":1:1:", "expected an object"),
    ('{"topic": 5, "seq": 3, "payload": ""}', ":1:1:", '"topic" must be a string'),
    ('{"topic": "kv", "seq": -1, "payload": ""}', ":1:1:", '"seq" must be an int'),
    ('{"topic": "kv", "seq": true, "payload": ""}', ":1:1:", '"seq" must be an int'),
    ('{"topic": "kv", "seq": 18446744073709551616, "payload": ""}', ":1:1:", '"seq" must be an int'),
    ('{"topic": "kv", "payload": ""}', ":1:1:", '"seq" must be an int'),
    ('{"topic": "kv", "seq": 1, "payload": "not base64!"}', ":1:1:", '"payload" is not valid base64'),
    ('{"topic": "kv", "seq": 1}', ":1:1:", '"payload" must be a base64 string'),
    ('{"topic": "kv", "seq": 1, "payload": "", "rank": -2}', ":1:1:", '"rank" must be an int'),
    ('{"topic": "\\ud800", "seq": 1, "payload": ""}', ":1:1:", "lone surrogate"),
    ("[" * 100_000, ":1:1:", "nested too deep"),
])
def test_a_bad_line_is_refused_with_its_file_line_and_column(tmp_path, line, where, says):
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(RecordingError) as refused:
        read_recording(path)
    message = str(refused.value)
    assert message.startswith(f"{path}{where}") and says in message and "\n" not in message


def test_a_bad_line_after_good_ones_names_its_own_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_bytes((LINE + "\n\n" + LINE + "\n").encode() + b'{"topic": "\xff"}\n')
    with pytest.raises(RecordingError, match=r"bad.jsonl:4:12: not UTF-8"):
        read_recording(path)


def test_a_last_line_cut_off_is_ignored_with_one_warning_naming_it(tmp_path):
    path = tmp_path / "cut.jsonl"
    path.write_text(LINE + "\n" + LINE + "\n" + LINE[:30])
    warnings: list[str] = []
    assert [m.seq for m in read_recording(path, on_warning=warnings.append)] == [3, 3]
    assert warnings == [f"{path}:3: the last line is cut off (a recording whose writer stopped mid-line): ignored"]


@pytest.mark.parametrize("text", [LINE + "\n" + LINE[:30] + "\n", LINE[:30] + "\n" + LINE + "\n",
                                  LINE[:30] + "\n" + LINE])
def test_a_bad_line_that_ends_in_a_newline_or_is_not_the_last_is_still_refused(tmp_path, text):
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    warnings: list[str] = []
    with pytest.raises(RecordingError, match="not JSON"):
        read_recording(path, on_warning=warnings.append)
    assert warnings == []


def test_a_json_complaint_is_whole_not_cut_at_starting_at(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"topic": "kv", "seq": 3, "payload": "kwGQ\n')
    with pytest.raises(RecordingError) as refused:
        read_recording(path)
    assert str(refused.value) == f"{path}:1:38: not JSON: Unterminated string starting at column 38"


def test_a_missing_file_or_a_folder_is_refused_in_one_line(tmp_path):
    with pytest.raises(RecordingError, match="cannot read the recording: No such file"):
        read_recording(tmp_path / "nope.jsonl")
    with pytest.raises(RecordingError, match="not a regular file"):
        read_recording(tmp_path)


def test_each_recording_bound_holds_at_its_edge(tmp_path, monkeypatch):
    path = tmp_path / "r.jsonl"
    path.write_text((LINE + "\n") * 3)
    size = path.stat().st_size
    monkeypatch.setattr(recording, "MAX_RECORDING_BYTES", size)
    assert len(read_recording(path)) == 3
    monkeypatch.setattr(recording, "MAX_RECORDING_BYTES", size - 1)
    with pytest.raises(RecordingError, match=f"has {size:,} bytes; the limit is {size - 1:,}"):
        read_recording(path)
    monkeypatch.setattr(recording, "MAX_RECORDING_BYTES", size)
    monkeypatch.setattr(recording, "MAX_RECORDING_LINE_BYTES", len(LINE) + 1)
    assert len(read_recording(path)) == 3
    monkeypatch.setattr(recording, "MAX_RECORDING_LINE_BYTES", len(LINE))
    with pytest.raises(RecordingError, match=r":1:1: the line is longer than"):
        read_recording(path)
    monkeypatch.setattr(recording, "MAX_RECORDING_LINE_BYTES", len(LINE) + 1)
    monkeypatch.setattr(recording, "MAX_RECORDING_MESSAGES", 3)
    assert len(read_recording(path)) == 3
    monkeypatch.setattr(recording, "MAX_RECORDING_MESSAGES", 2)
    with pytest.raises(RecordingError, match=r":3:1: more than 2 messages"):
        read_recording(path)


def test_a_long_line_is_refused_without_reading_it_whole(tmp_path, monkeypatch):
    path = tmp_path / "long.jsonl"
    path.write_bytes(b'{"payload": "' + b"A" * 5_000_000 + b'"}\n')
    monkeypatch.setattr(recording, "MAX_RECORDING_LINE_BYTES", 1000)
    read_sizes = []
    real_bounded = recording._bounded_lines

    def spy(stream, where):
        real_readline = stream.readline

        class Spy:
            def readline(self, limit=-1):
                line = real_readline(limit)
                read_sizes.append(len(line))
                return line
        return real_bounded(Spy(), where)
    monkeypatch.setattr(recording, "_bounded_lines", spy)
    with pytest.raises(RecordingError, match="longer than 1,000 bytes"):
        read_recording(path)
    assert read_sizes == [1001]


def test_the_writer_flushes_every_line_as_it_is_written(tmp_path):
    path = tmp_path / "live.jsonl"
    writer = RecordingWriter(path)
    writer.write(Message(b"kv", 0, b"\x90"))
    assert read_recording(path) == [Message(b"kv", 0, b"\x90")]
    writer.write(Message(b"kv", 1, b"\x91\x01", rank=3))
    assert len(read_recording(path)) == 2
    writer.close()
    writer.close()


def test_the_writer_refuses_an_existing_file_and_leaves_it_untouched(tmp_path):
    path = tmp_path / "shared.jsonl"
    path.write_text("a recording someone else made\n")
    path.chmod(0o444)  # read-only: root could still truncate it
    with pytest.raises(RecordingExists) as refused:
        RecordingWriter(path)
    assert str(refused.value) == (f"{path} exists: kvviz never overwrites a recording; "
                                  "remove it or name another")
    assert path.read_text() == "a recording someone else made\n"


def test_the_writer_refuses_a_symlink_even_a_dangling_one(tmp_path):
    link = tmp_path / "link.jsonl"
    link.symlink_to(tmp_path / "nowhere.jsonl")
    with pytest.raises(RecordingExists):
        RecordingWriter(link)
    assert not (tmp_path / "nowhere.jsonl").exists()


def test_the_writer_refuses_a_folder_or_a_fifo_and_writes_nothing(tmp_path):
    with pytest.raises(RecordingError, match="not a regular file"):
        RecordingWriter(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(RecordingError, match="not a regular file"):
        RecordingWriter(fifo)  # and does not block waiting for a reader
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo"]


def test_a_refusal_of_the_whole_file_reads_file_colon_what():
    error = RecordingError("rec.jsonl", 0, 0, "not a regular file")
    assert str(error) == "rec.jsonl: not a regular file"
    assert (error.path, error.line, error.column) == ("rec.jsonl", 0, 0)
    assert str(RecordingError("rec.jsonl", 4, 9, "x")) == "rec.jsonl:4:9: x"


def test_message_line_is_base64_of_the_payload_exactly():
    payload = bytes(range(256))
    line = message_line(Message(b"kv", 2**64 - 1, payload))
    assert base64.b64decode(line.split('"payload": "')[1].split('"')[0]) == payload


# -- the writer keeps to the reader's bounds, and a failing disk stops only the recording ------


def test_a_message_the_reader_would_refuse_is_not_written_so_the_recording_reads_back(tmp_path):
    # One 20 MiB payload is a line of 28 MB after base64: past MAX_RECORDING_LINE_BYTES.
    path, heard = tmp_path / "big.jsonl", []
    small, big = Message(b"kv", 0, b"\x90"), Message(b"kv", 1, b"\x00" * (20 * 1024 * 1024))
    with RecordingWriter(path, on_note=heard.append) as writer:
        assert writer.write(small) and not writer.write(big) and writer.write(Message(b"kv", 2, b"\x90"))
    assert (writer.messages, writer.refused, writer.failure) == (2, 1, None)
    assert [m.seq for m in read_recording(path)] == [0, 2]
    (note,) = heard
    assert note.startswith(f"{path}: message seq 1 not recorded: its line of ") and "MAX_RECORDING_LINE_BYTES" in note


class FullDisk:
    """A text stream whose writes fail with ENOSPC after ``room`` lines, like a disk that fills."""

    def __init__(self, stream, room: int):
        self.stream, self.room = stream, room

    def write(self, text: str) -> int:
        if self.room == 0:
            raise OSError(28, "No space left on device")
        self.room -= 1
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()

    @property
    def closed(self) -> bool:
        return self.stream.closed

    def fileno(self) -> int:
        return self.stream.fileno()

    def close(self) -> None:
        self.stream.close()
        raise OSError(28, "No space left on device")


def test_a_full_disk_stops_the_recording_says_so_once_and_never_raises(tmp_path):
    path, heard = tmp_path / "full.jsonl", []
    writer = RecordingWriter(path, on_note=heard.append)
    writer._stream = FullDisk(writer._stream, room=3)
    written = [writer.write(Message(b"kv", seq, b"\x90")) for seq in range(10)]
    writer.close()
    assert written == [True] * 3 + [False] * 7
    assert (writer.messages, writer.lost) == (3, 7)
    assert writer.failure == f"{path}: recording stopped after 3 messages: No space left on device"
    assert heard == [f"{writer.failure}; watching goes on"]
    assert [m.seq for m in read_recording(path)] == [0, 1, 2]


def test_the_writer_stops_at_the_readers_message_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(recording, "MAX_RECORDING_MESSAGES", 2)
    path = tmp_path / "many.jsonl"
    with RecordingWriter(path) as writer:
        assert [writer.write(Message(b"kv", seq, b"\x90")) for seq in range(3)] == [True, True, False]
    assert "reached its limit" in writer.failure and len(read_recording(path)) == 2
