# SPDX-License-Identifier: Apache-2.0
"""The real data shipped with kvviz, by name: two Mooncake traces and two KV-event recordings.

Every command that reads a trace or a recording takes a sample's name where it takes a file
(``kvviz trace conversation --sweep``, ``kvviz watch --replay-file vllm-conversation``,
``--against-trace conversation``). A path that exists wins over a sample of the same name, so
a file of one's own is never shadowed. The files are gzip-compressed; the readers
(:func:`kvviz.core.mooncake.read_trace`, :func:`kvviz.watch.recording.read_recording`)
take gzip as they take plain text. Each folder holds its README and a NOTICE with the
licence and attribution. Standard library only, so any layer may ask where a sample is.
"""

from __future__ import annotations

import gzip
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

__all__ = ["SAMPLES", "Sample", "UnknownSample", "open_data", "resolve", "sample_names", "samples_help"]

_GZIP_MAGIC = b"\x1f\x8b"

_HERE = Path(__file__).resolve().parent


@dataclass(frozen=True, slots=True)
class Sample:
    """One shipped file: its ``name``, what it is (``"trace"`` or ``"recording"``), its path
    inside this package and one line saying what it holds."""

    name: str
    kind: str
    file: str
    about: str

    @property
    def path(self) -> Path:
        """Where the installed file is."""
        return _HERE / self.file


SAMPLES = (
    Sample("conversation", "trace", "mooncake/conversation_trace.jsonl.gz",
           "Mooncake FAST'25: 12,031 requests, one hour of Kimi chat traffic (Apache-2.0)"),
    Sample("synthetic", "trace", "mooncake/synthetic_trace.jsonl.gz",
           "Mooncake FAST'25: 3,993 requests built from ShareGPT, Leval and LooGLE (Apache-2.0)"),
    Sample("vllm-conversation", "recording", "kv-events/vllm-0.33.0-conversation-400.jsonl.gz",
           "vLLM 0.33.0's KV events for the first 400 conversation requests (topic kv)"),
    Sample("sglang-conversation", "recording", "kv-events/sglang-0.5.23-conversation-400.jsonl.gz",
           "SGLang 0.5.23's KV events for the first 400 conversation requests (empty topic)"),
)
"""Every sample, traces first."""


class UnknownSample(ValueError):
    """Neither a file nor a sample of the kind asked for: the message names the samples."""


def sample_names(kind: str) -> tuple[str, ...]:
    """The names of the samples of ``kind`` (``"trace"`` or ``"recording"``)."""
    return tuple(s.name for s in SAMPLES if s.kind == kind)


def resolve(text: str | os.PathLike[str], kind: str) -> str:
    """The file ``text`` names: itself when it exists (or names a folder), else the sample of
    ``kind`` called ``text``. Raises :class:`UnknownSample` when it is neither."""
    if os.path.lexists(text):
        return os.fspath(text)
    for sample in SAMPLES:
        if sample.kind == kind and sample.name == os.fspath(text):
            return str(sample.path)
    names = ", ".join(sample_names(kind))
    raise UnknownSample(f"{os.fspath(text)!r} is neither a file nor a {kind} sample ({names}; kvviz help samples)")


class _Gunzip(gzip.GzipFile):
    """A gzip stream whose damage (a cut-off or corrupt file) is an ``OSError`` saying so, as a
    plain file's read errors are, rather than ``EOFError`` or ``zlib.error``."""

    def read(self, size=-1):
        try:
            return super().read(size)
        except (EOFError, zlib.error) as error:
            raise gzip.BadGzipFile(f"not a whole gzip file ({error})") from None

    def readline(self, size=-1):
        try:
            return super().readline(size)
        except (EOFError, zlib.error) as error:
            raise gzip.BadGzipFile(f"not a whole gzip file ({error})") from None

    def peek(self, n):
        try:
            return super().peek(n)
        except (EOFError, zlib.error) as error:
            raise gzip.BadGzipFile(f"not a whole gzip file ({error})") from None


def open_data(path: str | os.PathLike[str]) -> BinaryIO:
    """``path`` opened for reading bytes, decompressed when it is gzip (known by its first two
    bytes, not its name). Its lines come out as a plain file's would; the readers' bounds count
    the decompressed bytes, so a small file that inflates to a huge one is refused the same way."""
    file = open(path, "rb")
    try:
        if file.peek(2)[:2] == _GZIP_MAGIC:
            stream = _Gunzip(fileobj=file, mode="rb")
            stream.myfileobj = file  # closing the stream closes the file too (GzipFile's own field for it)
            return stream  # type: ignore[return-value]
    except BaseException:
        file.close()
        raise
    return file


def samples_help() -> str:
    """The text of ``kvviz help samples``: every sample, what it holds and a command to try."""
    lines = ["kvviz help samples: the real data shipped with kvviz", "",
             "A command that reads a trace or a recording takes a sample's name where it takes a",
             "file (a file of that name in the current folder wins). The files are gzip-compressed",
             "JSON lines; the readers take gzip as they take plain text.", ""]
    for kind, title in (("trace", "Traces (kvviz trace NAME, kvviz watch ... --against-trace NAME)"),
                        ("recording", "KV-event recordings (kvviz watch --replay-file NAME)")):
        lines.append(title)
        lines += [f"  {s.name:<21}{s.about}" for s in SAMPLES if s.kind == kind]
        lines.append("")
    lines += ["Try:",
              "  kvviz trace conversation --sweep",
              "  kvviz watch --replay-file vllm-conversation --print",
              "  kvviz watch --replay-file vllm-conversation --against-trace conversation",
              "",
              "They are installed in the package's samples/ folder (kvviz/samples/), each folder",
              "with a README and a NOTICE: the Mooncake traces are Apache-2.0, copyright the",
              "Mooncake authors."]
    return "\n".join(lines) + "\n"
