# SPDX-License-Identifier: Apache-2.0
"""The live side of ``kvviz watch``: subscribe to a server's KV-event stream over ZeroMQ.

One ``SUB`` socket per data-parallel rank (rank *r* at port + *r*, as vLLM and SGLang bind
them), a background thread that receives **and decodes** every message (so the UI thread
only drains a queue), per-rank ``seq`` bookkeeping, and replay of missed batches from the
server's replay endpoint (one ``DEALER`` per rank, at the replay port + *r*).

What the thread survives, and how it says so (``Received.note``, worded once in ``NOTES``):

- a message of 3 frames (topic, seq, payload) is the norm; frames past the third are ignored
  (noted); 2 frames are (seq, payload), or (topic, payload) when the first frame is not 8
  bytes or starts with the subscribed topic (ROCm ATOM sends ``[topic, payload]`` with a topic
  and the payload alone without); 1 frame is the payload alone. A message without a well-formed 8-byte seq frame is
  numbered as the rank's next seq and noted.
- a seq that jumps ahead is a gap: with a replay endpoint, the missing batches are asked for
  (first an empty delimiter frame then the 8-byte big-endian start seq, the only request vLLM's
  and SGLang's replay ``ROUTER`` accept; when nothing answers within ``replay_wait`` seconds,
  the seq alone, while still listening for a late answer to the first). The answer is read by
  the same poll loop as the live sockets, a frame at a time, so **live messages keep flowing
  while a replay is read**: the message that revealed the gap is delivered at once (noted
  ``gap …: replay asked``), and what the replay brings is delivered when it ends, in seq order,
  each noted ``replayed`` (duplicates dropped), the last one saying what is still missing. A
  :class:`~kvviz.watch.timeline.WatchTimeline` puts such late messages back in their place
  (each rank's steps stay in seq order). One replay per rank at a time: gaps met meanwhile are
  merged into the next request. A replay is bounded by ``REPLAY_TOTAL_S`` seconds and
  ``MAX_WATCH_REPLAY_MESSAGES`` frames. Without a replay endpoint a gap is noted on the
  message after it.
- a first message whose seq is above 0 is a late attach: with a replay endpoint, everything
  before it that the server still keeps is asked for the same way (noted ``seqs 0-N came
  before: replay asked``): live messages go on, and the history, delivered when the replay
  ends, each ``replayed`` (``Message.replayed``), is put by a timeline before the rank's first
  step (so the view ends with the server's whole buffer, not the middle of it).
- a seq that goes backwards (or repeats) is a publisher restart (noted); with a replay
  endpoint the new publisher's batches before it are asked for the same way, so the view
  restarts whole.
- a reconnect (a second handshake on a rank) may hide a restart whose new seq already passed
  the old one: the first message after it is not trusted to continue the old seqs. With a
  replay endpoint, the server is asked from the last seq received, and the rank's messages
  wait for the answer's first frame only: the same payload at that seq proves the same
  publisher (the rest of the answer fills the gap as any gap's, read while live messages go
  on), anything else is a restart (the message is marked ``Message.restart``, the view resets
  there and the new publisher's buffer is asked for as a late attach's history).
- a payload that cannot be decoded is delivered with ``error`` set and counted; never fatal.
- a frame over ``MAX_FRAME_BYTES`` is refused by ZeroMQ before it is allocated
  (``ZMQ_MAXMSGSIZE``), which drops that connection; the subscriber then connects again
  itself (ZeroMQ would not: it treats the refusal as a protocol error and gives the peer up).

This is the only kvviz module that imports ``zmq``, and it does so only when a subscriber is
built, so ``import kvviz.cli`` works without the ``watch`` extra. It writes no files: the CLI
records what ``poll()`` returns.
"""

from __future__ import annotations

import queue
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from kvviz.watch.recording import Message
from kvviz.watch.stream import Gap, Restart, SeqTracker
from kvviz.watch.wire import WATCH_EXTRA_MISSING, Batch, DecodeError, decode_payload
from kvviz.core import limits
from kvviz.core.limits import MAX_EVENT_PAYLOAD_BYTES, MAX_WATCH_PENDING, MAX_WATCH_RANKS, MAX_WATCH_REPLAY_MESSAGES

SEQ_BYTES = 8
END_OF_REPLAY = b"\xff" * SEQ_BYTES
"""The replay answer's end marker: seq -1 as a signed 8-byte big-endian integer."""

DEFAULT_HWM = 1_000
"""Messages a SUB socket may queue before ZeroMQ stops reading the connection (ZeroMQ's own
default). The decoded queue behind it is bounded in bytes (``MAX_WATCH_PENDING_BYTES``); this
count only has to absorb the moments the thread spends decoding, and each message in it is at
most ``MAX_FRAME_BYTES`` per frame (a typical vLLM batch is 3.3 KB: 3.3 MB)."""

MAX_FRAME_BYTES = MAX_EVENT_PAYLOAD_BYTES
"""ZeroMQ's ``ZMQ_MAXMSGSIZE`` on every socket kvviz reads: a frame claiming more (a topic, a
seq or a payload) is refused from its header, before anything is allocated, and its connection
dropped; the decoder would refuse such a payload anyway."""

MESSAGE_OVERHEAD_BYTES = 256
"""What one queued message costs besides its frames and its decoded batch: the ``Received``
and ``Message`` objects and the bytes objects' headers (tracemalloc over the shared vLLM and
SGLang recordings: 185 bytes, plus 33 per bytes object)."""

DECODED_BYTES_PER_PAYLOAD_BYTE = 10
"""A decoded batch's size per payload byte, an upper estimate (tracemalloc over the shared
recordings: 6.9 for vLLM 0.33's, 9.3 for SGLang 0.5.23's): msgpack's one-byte ints become
28-byte Python ints in lists."""

POLL_MS = 100
"""How long the thread waits on its sockets before it looks at the stop flag: the bound on
how long ``stop()`` takes."""

BURST = 256
"""Messages received from one ready socket before polling again: fewer poll calls per
message at full speed, and no rank starves the others."""

REPLAY_IDLE_S = 2.0
"""Seconds a replay answer may pause between two of its messages before kvviz gives up on
the rest (and notes what is still missing)."""

REPLAY_TOTAL_S = 5.0
"""Seconds one replay answer may take in all, however steadily it trickles in (live messages go
on meanwhile): then what it did not bring is noted missing. Only a reconnect's check holds the
receiving thread (every rank's messages) before its message is delivered, and only until the
answer's first frame (``replay_wait`` per envelope, then ``REPLAY_IDLE_S``): the rest of that
answer is read while live messages go on. A request in an envelope the rank's endpoint answered
before may wait this long for its first frame (a slow server answers requests one by one)."""

ENVELOPES = ("delimited", "bare")
"""Replay request envelopes, in the order tried: an empty delimiter frame then the 8-byte seq
(the only request vLLM's and SGLang's ROUTERs accept: they check for 3 frames with the
identity, and log "Invalid replay request" otherwise), then the seq alone (a ROUTER that
reads the last frame). The first that answers is kept for that rank."""

NOTES = {
    "replayed": "replayed",
    "unnumbered": "no seq frame: numbered {seq}",
    "extra_frames": "{frames} frames: the last {extra} ignored",
    "short_seq": "seq frame of {size} bytes: numbered {seq}",
    "gap": "gap {span} not replayed",
    "gap_asked": "gap {span}: replay asked, live messages go on meanwhile",
    "history_asked": "seqs {span} came before: replay asked, live messages go on meanwhile",
    "gap_partly": "gap {span} partly replayed: {missing} missing",
    "restart": "restart: seq {seq} after {previous}",
    "reconnect_restart": "restart: seq {seq} after {previous}, on a new connection {why}",
    "reconnect_unproven": "a new connection after seq {previous}: the replay endpoint did not answer, "
                          "so a publisher restart cannot be ruled out",
}
"""Every note the subscriber writes, worded once. Notes on one message are joined by "; ".
``gap`` and ``restart`` notes start with those words, so a reader can count them."""

NOTHING_ARRIVED_HINT = ("the usual causes: a wrong port or rank offset (rank r publishes at port + r), "
                        "a wrong topic (vLLM's is `kv`: --topic kv; SGLang's is empty: no --topic), "
                        "a server started without --kv-events-config, or a host that does not resolve")
"""What to check when a live watch has received nothing, worded once (the CLI's last line,
the UI's banner until the first message)."""


def connection_words(connected: tuple[bool, ...]) -> str:
    """Each rank's ZeroMQ handshake in words: "connected" or "not connected" for one rank;
    "rank 0 connected, rank 1 not connected" for a few; "3 of 8 ranks connected" for more."""
    if len(connected) == 1:
        return "connected" if connected[0] else "not connected"
    if len(connected) <= 4:
        return ", ".join(f"rank {r} {'connected' if up else 'not connected'}" for r, up in enumerate(connected))
    return f"{sum(connected):,} of {len(connected):,} ranks connected"


def nothing_arrived_line(stats: SubscriberStats, endpoints: tuple[str, ...]) -> str:
    """One line for a live watch that received nothing: where it listened, whether ZeroMQ's
    handshake came up (not connected: the port or host; connected: the topic or the server's
    events config), and :data:`NOTHING_ARRIVED_HINT`."""
    where = endpoints[0] if len(endpoints) == 1 else f"{endpoints[0]} … {endpoints[-1]}"
    return f"no messages arrived from {where} ({connection_words(stats.connected)}): {NOTHING_ARRIVED_HINT}"


def memory_help() -> str:
    """What a live watch's subscriber holds in memory, and its bounds, in words (``kvviz help
    watch``, beside the timeline's)."""
    return f"""\
Memory of a live watch:
  Each ZeroMQ frame is at most {MAX_FRAME_BYTES:,} bytes (ZMQ_MAXMSGSIZE): a bigger one is
  refused from its header, unallocated, and kvviz connects again. ZeroMQ queues at most
  {DEFAULT_HWM:,} messages per rank; the decoded queue behind it at most
  {limits.MAX_WATCH_PENDING_BYTES:,} bytes (MAX_WATCH_PENDING_BYTES), a message counted as its frames,
  {DECODED_BYTES_PER_PAYLOAD_BYTE} bytes per payload byte decoded, and {MESSAGE_OVERHEAD_BYTES} bytes of
  objects: 37 KB for a 3.3 KB vLLM batch, about 1,800 of them. When nobody takes them the
  receiving thread waits, and what the server then drops is a gap, said and replayed.
  A replay answer may take {REPLAY_TOTAL_S:g} s and {MAX_WATCH_REPLAY_MESSAGES:,} frames at most;
  live messages go on meanwhile, and what it brings is put back in its place (the steps after
  the gap derived again, "repaired: N messages inserted before batch X").
  --record writes only lines --replay-file reads (a message over MAX_RECORDING_LINE_BYTES is
  counted and not written); a disk that fills stops the recording, not the watch (one line,
  exit 1)."""


_ENDPOINT = re.compile(r"tcp://(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.\-_]*):(?P<port>[0-9]{1,5})")


GIVEN_UP_S = 0.5
"""Seconds after a peer dropped by which ZeroMQ has scheduled its reconnect (it does so at
once, announcing ``EVENT_CONNECT_RETRIED``); past them with no retry, the subscriber connects
again itself."""

SOCKETS_PER_RANK = 5
"""ZeroMQ sockets one rank may hold: its SUB, the two pairs of the SUB's monitor, and up to two
replay DEALERs (one kept, one trying the other envelope)."""
SPARE_SOCKETS = 16
FILES_PER_RANK = 8
"""Open files one rank may hold: a mailbox per socket and a TCP connection per SUB/DEALER
(measured: 3 per rank idle, without replays)."""
SPARE_FILES = 64
_EMFILE = 24


def _allow_open_files(needed: int) -> None:
    """Raise this process's soft limit of open files to ``needed`` (up to the hard limit, as
    any process may), or :class:`EndpointError` in one line when the hard limit is lower."""
    try:
        import resource
    except ImportError:  # not POSIX: ZeroMQ's own error says so if it comes to that
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    if hard != resource.RLIM_INFINITY and hard < needed:
        raise EndpointError(f"these ranks need about {needed:,} open files and this process may open "
                            f"{hard:,} (ulimit -Hn): follow fewer ranks")
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


class EndpointError(ValueError):
    """An endpoint kvviz cannot connect to; ``str()`` is one line saying what to type."""


def parse_endpoint(endpoint: str, ranks: int = 1, what: str = "endpoint") -> tuple[str, int]:
    """``tcp://HOST:PORT`` -> ``(HOST, PORT)``, checked so that ``PORT + ranks - 1`` is a port.

    A bind address (``tcp://*:5557``, what a server's config says) is refused with the fix:
    a subscriber connects to the server's host."""
    if not isinstance(endpoint, str):
        raise EndpointError(f"{what} must be text like tcp://127.0.0.1:5557, not {type(endpoint).__name__}")
    if endpoint.startswith("tcp://*") or endpoint.startswith("tcp://0.0.0.0"):
        raise EndpointError(
            f"{what} {endpoint!r} is where a server binds; connect to its host instead, "
            f"e.g. tcp://127.0.0.1:{endpoint.rpartition(':')[2] or '5557'}"
        )
    match = _ENDPOINT.fullmatch(endpoint)
    if match is None:
        raise EndpointError(f"{what} {endpoint!r} is not tcp://HOST:PORT (e.g. tcp://127.0.0.1:5557)")
    port = int(match["port"])
    if not 1 <= port <= 65535:
        raise EndpointError(f"{what} {endpoint!r}: port {port} is not between 1 and 65535")
    if port + ranks - 1 > 65535:
        raise EndpointError(f"{what} {endpoint!r}: {ranks} ranks need ports {port}..{port + ranks - 1}, past 65535")
    return match["host"], port


def rank_endpoint(host: str, port: int, rank: int) -> str:
    """The endpoint of data-parallel rank ``rank``: the base port + rank."""
    return f"tcp://{host}:{port + rank}"


@dataclass(frozen=True)
class Received:
    """One message as the subscriber delivers it, in order: the raw message (what a recording
    keeps), its decoded batch (``None`` when ``error`` says why it could not be decoded), and
    a note in words when something about its arrival is worth saying (see ``NOTES``)."""

    message: Message
    batch: Batch | None
    error: str | None
    note: str | None = None


@dataclass(frozen=True)
class RankStats:
    """One rank's socket: where it points, whether ZeroMQ's handshake with the server is up,
    and the last seq delivered (``None`` before the first)."""

    endpoint: str
    connected: bool
    messages: int
    last_seq: int | None


@dataclass(frozen=True)
class SubscriberStats:
    """The subscriber's counters at one moment (a frozen copy: read it from any thread).

    ``messages``/``bytes`` count every delivered message and its payload bytes, replayed
    ones included; ``gaps`` counts gaps seen, ``missing`` the seqs no replay filled;
    ``replays_asked`` counts requests sent (both envelopes), ``replays_answered`` the replays
    that got an answer, ``replayed`` the messages they delivered; ``duplicates`` replayed
    messages dropped because their seq had already come; ``unnumbered`` messages without a
    seq frame; ``failure`` is why the thread stopped early (``None`` while it runs or after
    a clean stop); ``hook_errors`` counts the times ``on_received`` raised (the message was
    still delivered), ``hook_error`` is the first such error in one line; ``reconnects`` the
    connections kvviz made again itself after ZeroMQ gave a peer up (refused: a frame over
    ``MAX_FRAME_BYTES``, a protocol error); ``pending_bytes`` what the queued messages cost now (bounded by
    ``MAX_WATCH_PENDING_BYTES``)."""

    messages: int = 0
    bytes: int = 0
    undecodable: int = 0
    gaps: int = 0
    missing: int = 0
    restarts: int = 0
    replays_asked: int = 0
    replays_answered: int = 0
    replayed: int = 0
    duplicates: int = 0
    unnumbered: int = 0
    ranks: tuple[RankStats, ...] = ()
    failure: str | None = None
    hook_errors: int = 0
    hook_error: str | None = None
    reconnects: int = 0
    pending_bytes: int = 0

    @property
    def connected(self) -> tuple[bool, ...]:
        """Per rank: is the socket's handshake with the server up."""
        return tuple(r.connected for r in self.ranks)

    @property
    def last_seq(self) -> tuple[int | None, ...]:
        """Per rank: the last seq delivered."""
        return tuple(r.last_seq for r in self.ranks)


@dataclass
class _Counters:
    """The thread's mutable counters behind ``Subscriber.stats`` (guarded by its lock)."""

    messages: int = 0
    bytes: int = 0
    undecodable: int = 0
    gaps: int = 0
    missing: int = 0
    restarts: int = 0
    replays_asked: int = 0
    replays_answered: int = 0
    replayed: int = 0
    duplicates: int = 0
    unnumbered: int = 0
    hook_errors: int = 0
    hook_error: str | None = None
    reconnects: int = 0
    connected: list[bool] = field(default_factory=list)
    rank_messages: list[int] = field(default_factory=list)
    last_seq: list[int | None] = field(default_factory=list)
    failure: str | None = None


def _zmq():
    """``zmq``, imported when a subscriber starts: kvviz works without the watch extra."""
    try:
        import zmq
    except ImportError:
        raise ImportError(WATCH_EXTRA_MISSING) from None
    return zmq


class Subscriber:
    """Subscribes to ``endpoint`` (rank *r* at its port + *r*) and delivers every message,
    decoded, in arrival order: a replay's messages (a gap's, a late attach's or a restarted
    publisher's history) come after the live ones that went on while it was read, in seq
    order, each noted ``replayed`` and marked ``Message.replayed`` (a recording keeps the mark).

    ``topic`` filters on the topic frame's prefix (empty: everything, which a publisher that
    sends an empty topic or a single frame needs). ``replay_endpoint`` is the server's replay
    ``ROUTER`` (rank *r* at its port + *r*); without it a gap is only noted. ``hwm`` is the
    SUB sockets' receive high-water mark. ``on_received`` is called on the background thread
    after each message is queued, in delivery order (a wake-up hook, or a recorder; ``poll()``
    still returns the message; an exception it raises is counted in ``stats``, not fatal).
    ``replay_wait`` is how long one envelope's replay request waits for a first answer before
    the next envelope is tried (the earlier request is still heard meanwhile); once an envelope
    answered, its later requests wait ``REPLAY_TOTAL_S``.

    Endpoint errors raise ``EndpointError`` here, before anything connects."""

    def __init__(
        self,
        endpoint: str,
        *,
        topic: str = "",
        ranks: int = 1,
        replay_endpoint: str | None = None,
        hwm: int = DEFAULT_HWM,
        on_received: Callable[[Received], None] | None = None,
        replay_wait: float = 0.5,
    ) -> None:
        if not isinstance(ranks, int) or not 1 <= ranks <= MAX_WATCH_RANKS:
            raise EndpointError(f"--ranks {ranks!r}: expected 1 to {MAX_WATCH_RANKS}")
        if not isinstance(hwm, int) or hwm < 0:
            raise EndpointError(f"high-water mark {hwm!r}: expected a count >= 0 (0: unlimited)")
        host, port = parse_endpoint(endpoint, ranks)
        self.endpoints = tuple(rank_endpoint(host, port, r) for r in range(ranks))
        self.replay_endpoints: tuple[str, ...] = ()
        if replay_endpoint is not None:
            replay_host, replay_port = parse_endpoint(replay_endpoint, ranks, "replay endpoint")
            self.replay_endpoints = tuple(rank_endpoint(replay_host, replay_port, r) for r in range(ranks))
        self.topic = topic
        self.ranks = ranks
        self.hwm = hwm
        self.replay_wait = replay_wait
        self._on_received = on_received
        self._queue: queue.Queue[Received] = queue.Queue(maxsize=MAX_WATCH_PENDING)
        self._pending_bytes = 0  # what the queued messages cost (message_cost), under _room
        self._room = threading.Condition()
        self._notices: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._counters = _Counters(
            connected=[False] * ranks, rank_messages=[0] * ranks, last_seq=[None] * ranks
        )
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._context = None
        self._subs: list = []
        self._monitors: list = []
        self._dealers: list = [None] * ranks
        self._envelope: list[str | None] = [None] * ranks
        self._tracker = SeqTracker()
        self._handshakes = [0] * ranks
        self._reconnected = [False] * ranks  # a new connection since the rank's last message
        self._last_payload: list[bytes | None] = [None] * ranks  # what proves a reconnect's publisher
        self._given_up_by: list[float | None] = [None] * ranks  # when a dropped peer counts as given up
        self._poller = None  # the thread's poller: the SUBs, their monitors, the replays' DEALERs
        self._jobs: list[_ReplayJob | None] = [None] * ranks  # each rank's replay under way
        # the next one to ask, gaps merged: (first, last, topic, seqs missing in it)
        self._queued: list[tuple[int, int, bytes, int] | None] = [None] * ranks

    # -- the caller's side -------------------------------------------------------------------

    def start(self) -> None:
        """Connects the sockets (on this thread, so a bad endpoint fails here) and starts the
        background thread that receives and decodes."""
        if self._thread is not None:
            raise RuntimeError("this subscriber has already started")
        zmq = _zmq()
        endpoint = self.endpoints[0]
        try:
            _allow_open_files(self.ranks * FILES_PER_RANK + SPARE_FILES)
            self._context = zmq.Context()
            # ZeroMQ's default of 1,023 sockets is 341 ranks (a SUB and its monitor's pair each).
            self._context.set(zmq.MAX_SOCKETS, self.ranks * SOCKETS_PER_RANK + SPARE_SOCKETS)
            for endpoint in self.endpoints:
                sub = self._context.socket(zmq.SUB)
                sub.setsockopt(zmq.LINGER, 0)
                sub.setsockopt(zmq.IPV6, 1)  # tcp://[::1]:5557, or a host name with only an IPv6 address
                sub.setsockopt(zmq.RCVHWM, self.hwm)
                sub.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_BYTES)
                self._subs.append(sub)
                self._monitors.append(
                    sub.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED
                                           | zmq.EVENT_CONNECT_RETRIED)
                )
                sub.setsockopt(zmq.SUBSCRIBE, self.topic.encode("utf-8"))
                sub.connect(endpoint)
        except zmq.ZMQError as error:
            self._close()
            raise EndpointError(f"cannot connect to {endpoint}: {error}"
                                + (f" (--ranks {self.ranks}: fewer ranks, or a higher `ulimit -n`)"
                                   if error.errno == _EMFILE else "")) from None
        except EndpointError:
            self._close()
            raise
        self._thread = threading.Thread(target=self._run, name="kvviz-watch-subscriber", daemon=True)
        self._thread.start()

    def poll(self, max_items: int = 1000) -> list[Received]:
        """Up to ``max_items`` received messages, oldest first, without waiting. Thread-safe."""
        out: list[Received] = []
        while len(out) < max_items:
            try:
                out.append(self._queue.get_nowait())
            except queue.Empty:
                break
        if out:
            with self._room:
                self._pending_bytes -= sum(message_cost(r) for r in out)
                self._room.notify_all()
        return out

    def tell(self, line: str) -> None:
        """Queue a one-line notice for whoever shows the watch (the UI, at its next poll):
        what the caller's hook met, e.g. a recording that stopped. Thread-safe."""
        self._notices.put(line)

    def notices(self) -> list[str]:
        """The notices told since the last call, oldest first. Thread-safe."""
        out: list[str] = []
        while True:
            try:
                out.append(self._notices.get_nowait())
            except queue.Empty:
                return out

    @property
    def pending(self) -> int:
        """Messages received and decoded that no :meth:`poll` has taken yet (approximate while
        the thread runs): what a UI catching up on a backlog says is waiting."""
        return self._queue.qsize()

    def stop(self) -> None:
        """Stops the thread (within ``POLL_MS`` plus a replay in progress), then closes every
        socket (linger 0: nothing waits for the network) and the context. Idempotent."""
        self._stopping.set()
        with self._room:
            self._room.notify_all()
        if self._thread is not None:
            self._thread.join()
        self._close()

    @property
    def running(self) -> bool:
        """Is the background thread receiving."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def stats(self) -> SubscriberStats:
        """The counters now (a frozen copy)."""
        with self._lock:
            c = self._counters
            ranks = tuple(
                RankStats(endpoint, c.connected[r], c.rank_messages[r], c.last_seq[r])
                for r, endpoint in enumerate(self.endpoints)
            )
            return SubscriberStats(
                messages=c.messages, bytes=c.bytes, undecodable=c.undecodable, gaps=c.gaps,
                missing=c.missing, restarts=c.restarts, replays_asked=c.replays_asked,
                replays_answered=c.replays_answered, replayed=c.replayed, duplicates=c.duplicates,
                unnumbered=c.unnumbered, ranks=ranks, failure=c.failure, hook_errors=c.hook_errors,
                hook_error=c.hook_error, reconnects=c.reconnects, pending_bytes=self._pending_bytes,
            )

    def __enter__(self) -> Subscriber:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _close(self) -> None:
        for sub in self._subs:
            try:
                sub.disable_monitor()
            except Exception:  # noqa: BLE001 - already closed or never monitored: nothing to undo
                pass
        job_dealers = [dealer for job in self._jobs if job is not None for _, dealer in job.asked]
        for sock in [*self._monitors, *self._subs, *(d for d in self._dealers if d is not None), *job_dealers]:
            sock.close(linger=0)
        self._jobs = [None] * self.ranks
        self._monitors, self._subs, self._dealers = [], [], [None] * self.ranks
        if self._context is not None:
            self._context.term()
            self._context = None

    # -- the background thread ----------------------------------------------------------------

    def _run(self) -> None:
        zmq = _zmq()
        try:
            poller = self._poller = zmq.Poller()
            for sock in (*self._subs, *self._monitors):
                poller.register(sock, zmq.POLLIN)
            while not self._stopping.is_set():
                ready = dict(poller.poll(self._poll_ms()))
                for rank, monitor in enumerate(self._monitors):
                    if monitor in ready:
                        self._on_monitor(rank, monitor)
                self._reconnect_given_up()
                for job in [job for job in self._jobs if job is not None]:
                    self._advance(job, ready)
                for rank, sub in enumerate(self._subs):
                    if sub not in ready:
                        continue
                    # A reconnect's handshake must be seen before the new connection's first
                    # message, whichever socket the poll happened to list first.
                    self._on_monitor(rank, self._monitors[rank])
                    for _ in range(BURST):
                        try:
                            frames = sub.recv_multipart(zmq.NOBLOCK)
                        except zmq.Again:
                            break
                        self._on_frames(rank, frames)
                        if self._stopping.is_set():
                            return
        except Exception as error:  # noqa: BLE001 - the thread must say why it stopped, not vanish
            with self._lock:
                self._counters.failure = f"{type(error).__name__}: {error}"

    def _on_monitor(self, rank: int, monitor) -> None:
        from zmq.utils.monitor import recv_monitor_message

        zmq = _zmq()
        while True:
            try:
                event = recv_monitor_message(monitor, zmq.NOBLOCK)
            except zmq.Again:
                return
            with self._lock:
                if event["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                    self._counters.connected[rank] = True
                    self._reconnected[rank] = self._handshakes[rank] > 0
                    self._handshakes[rank] += 1
                elif event["event"] == zmq.EVENT_DISCONNECTED:
                    self._counters.connected[rank] = False
            if event["event"] == zmq.EVENT_DISCONNECTED:
                self._given_up_by[rank] = time.monotonic() + GIVEN_UP_S
            else:  # ZeroMQ is reconnecting (a retry is scheduled) or has reconnected
                self._given_up_by[rank] = None

    def _reconnect_given_up(self) -> None:
        """Connects again each SUB whose peer dropped without ZeroMQ scheduling a retry within
        ``GIVEN_UP_S``. ZeroMQ reconnects by itself after a network error, but not after a
        protocol error (a frame over ``ZMQ_MAXMSGSIZE``, a bad greeting): it gives that
        endpoint up for good. What the socket still holds is read first (a disconnect drops it)."""
        zmq = _zmq()
        now = time.monotonic()
        for rank, due in enumerate(self._given_up_by):
            if due is None or now < due:
                continue
            self._given_up_by[rank] = None
            sub, endpoint = self._subs[rank], self.endpoints[rank]
            while not self._stopping.is_set():
                try:
                    frames = sub.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                self._on_frames(rank, frames)
            try:
                sub.disconnect(endpoint)
            except zmq.ZMQError:  # the endpoint was already forgotten: nothing to undo
                pass
            sub.connect(endpoint)
            with self._lock:
                self._counters.reconnects += 1

    def _on_frames(self, rank: int, frames: list[bytes]) -> None:
        """One live message: split its frames, place its seq, ask for what came before it (a
        gap, a late attach's history, a restarted publisher's buffer): the answer is read in
        the poll loop while this message and the later ones are delivered."""
        topic, seq_frame, payload, notes = self._split(frames, self.topic.encode("utf-8"))
        seq = self._seq_of(rank, seq_frame, notes)
        previous = self._tracker.last(rank)
        reconnected, self._reconnected[rank] = self._reconnected[rank], False
        restart = False
        if previous is None:
            self._tracker.observe(rank, seq)
            if seq > 0 and self.replay_endpoints:  # a late attach: the history is asked for, not waited for
                notes.append(self._history_later(rank, seq, topic))
        elif reconnected and self.replay_endpoints and seq > previous:
            more, restart = self._after_reconnect(rank, seq, previous, topic)
            notes.extend(more)
        else:
            outcome = self._tracker.observe(rank, seq)
            if isinstance(outcome, Gap) and self.replay_endpoints:
                notes.append(self._replay_later(rank, outcome.first, outcome.last, topic))
            elif isinstance(outcome, Gap):
                notes.extend(self._fill_gap(rank, outcome.first, outcome.last, topic))
            elif isinstance(outcome, Restart):
                notes.extend(self._restart(rank, seq, NOTES["restart"].format(seq=seq, previous=previous), topic))
        self._deliver(Message(topic=topic, seq=seq, payload=payload, rank=rank, restart=restart),
                      "; ".join(notes) or None)

    def _after_reconnect(self, rank: int, seq: int, previous: int, topic: bytes) -> tuple[list[str], bool]:
        """The first message on a new connection, its seq past the last one received: the
        same publisher (fill the gap) or a restarted one that outran the old seq (restart).
        The replay endpoint decides: asked from ``previous``, the same publisher answers the
        payload received at ``previous``. Only that first answer is waited for (see
        :meth:`_check_replay`); the rest of the gap, or the new publisher's history, is read in
        the poll loop while live messages go on. Returns the message's notes, and whether it
        starts a new publisher's run (``Message.restart``: its seq does not show it)."""
        self._cancel_replay(rank)
        checked = self._check_replay(rank, previous, seq - 1, topic)
        if checked is None:  # no answer: nothing tells a restart from a gap; the seq is trusted
            self._tracker.observe(rank, seq)
            unproven = NOTES["reconnect_unproven"].format(previous=previous)
            return [unproven] + (self._fill_gap(rank, previous + 1, seq - 1, topic, {}) if seq > previous + 1
                                 else []), False
        job, ended = checked
        echo = job.answered.pop(previous, None)
        if echo is not None and echo[1] == self._last_payload[rank]:
            self._tracker.observe(rank, seq)
            if seq == previous + 1 or ended:  # nothing missing, or the whole answer is in already
                self._close_check(job, ended)
                return ([] if seq == previous + 1 else self._fill_gap(rank, previous + 1, seq - 1, topic, job.answered)), False
            job.first, job.wanted = previous + 1, seq - 1 - previous
            self._jobs[rank] = job  # the rest of the gap comes in the poll loop, a gap's fill like any
            return [NOTES["gap_asked"].format(span=f"{job.first}" if job.first == job.last else f"{job.first}-{job.last}")], False
        why = ("(the replay endpoint's seq {0} differs from the one received)" if echo is not None
               else "(the replay endpoint no longer has seq {0})").format(previous)
        if echo is not None:
            job.answered[previous] = echo  # the new publisher's seq: part of its history
        return self._restart(rank, seq, NOTES["reconnect_restart"].format(seq=seq, previous=previous, why=why),
                             topic, (job, ended)), True

    def _restart(self, rank: int, seq: int, note: str, topic: bytes,
                 checked: tuple[_ReplayJob, bool] | None = None) -> list[str]:
        """A restarted publisher at ``seq``: forget the old seqs and ask (in the poll loop) for
        what the new one sent before ``seq`` (with a replay endpoint). A reconnect's check
        (``checked``: its replay, whether it ended) already asks the new publisher from the old
        last seq: it is read on as that part of the history, and the seqs before it are asked
        next (a slow server answers one request after the other). Returns the notes for the
        message at ``seq``, ``note`` first."""
        with self._lock:
            self._counters.restarts += 1
        self._cancel_replay(rank)
        self._tracker.forget(rank)
        self._tracker.observe(rank, seq)
        if checked is None:
            return [note] if seq == 0 or not self.replay_endpoints else [note, self._history_later(rank, seq, topic)]
        job, ended = checked
        self._tracker.expect(rank, 0, seq - 1)
        job.last, job.wanted, job.ended = seq - 1, seq - job.first, ended
        job.answered = {s: answer for s, answer in job.answered.items() if job.first <= s < seq}
        self._jobs[rank] = job  # read on (or ended: delivered) by the poll loop, after this message
        if job.first > 0:
            self._queued[rank] = (0, job.first - 1, topic, job.first)
        return [note, NOTES["history_asked"].format(span="0" if seq == 1 else f"0-{seq - 1}")]

    def _history_later(self, rank: int, seq: int, topic: bytes) -> str:
        """Ask for seqs ``0..seq - 1``, sent before the rank's first message received (a late
        attach) or before a restarted publisher's first one, without waiting: what the replay
        brings is delivered when it ends, each ``replayed``, and a timeline puts it before
        ``seq``'s step. Returns the note for the message at ``seq``."""
        self._tracker.expect(rank, 0, seq - 1)
        self._replay_later(rank, 0, seq - 1, topic)
        return NOTES["history_asked"].format(span="0" if seq == 1 else f"0-{seq - 1}")

    @staticmethod
    def _split(frames: list[bytes], topic: bytes = b"") -> tuple[bytes, bytes | None, bytes, list[str]]:
        """(topic, seq frame or None, payload, notes) of a live message of any frame count.
        ``topic`` is the subscription: when it is not empty, the SUB socket let the message in
        because its first frame starts with it, so a 2-frame message is (topic, payload) even
        when its topic is 8 bytes long (ROCm ATOM sends ``[topic, payload]``, no seq)."""
        notes: list[str] = []
        if len(frames) >= 3:
            if len(frames) > 3:
                notes.append(NOTES["extra_frames"].format(frames=len(frames), extra=len(frames) - 3))
            return frames[0], frames[1], frames[2], notes
        if len(frames) == 2:
            if len(frames[0]) == SEQ_BYTES and not (topic and frames[0].startswith(topic)):
                return b"", frames[0], frames[1], notes
            return frames[0], None, frames[1], notes
        return b"", None, frames[0] if frames else b"", notes

    def _seq_of(self, rank: int, seq_frame: bytes | None, notes: list[str]) -> int:
        """The message's seq; one without a (well-formed) seq frame takes the rank's next."""
        if seq_frame is not None and len(seq_frame) == SEQ_BYTES:
            return int.from_bytes(seq_frame, "big")
        with self._lock:
            last = self._counters.last_seq[rank]
            self._counters.unnumbered += 1
        seq = 0 if last is None else last + 1
        if seq_frame is None:
            notes.append(NOTES["unnumbered"].format(seq=seq))
        else:
            notes.append(NOTES["short_seq"].format(size=len(seq_frame), seq=seq))
        return seq

    def _deliver(self, message: Message, note: str | None, late: bool = False) -> None:
        """Decode ``message``, queue it (waiting while the queue holds
        ``MAX_WATCH_PENDING_BYTES``), count it and tell the hook. A subscriber stopping
        delivers nothing more: what is counted, queued and recorded stays one set. A ``late``
        message (a replay's answer after the live ones) leaves the rank's last seq as it is."""
        batch, error = None, None
        try:
            batch = decode_payload(message.payload, seq=message.seq, topic=message.topic.decode("utf-8", "replace"))
        except DecodeError as problem:
            error = str(problem)
        except Exception as problem:  # noqa: BLE001 - a decoder bug must not end the watch
            error = f"decoder failed ({type(problem).__name__}): {problem}"
        received = Received(message=message, batch=batch, error=error, note=note)
        if not self._enqueue(received):
            return
        if not late:
            self._last_payload[message.rank] = message.payload
        with self._lock:
            c = self._counters
            c.messages += 1
            c.bytes += len(message.payload)
            c.rank_messages[message.rank] += 1
            if not late:
                c.last_seq[message.rank] = message.seq
            if error is not None:
                c.undecodable += 1
        if self._on_received is not None:
            try:
                self._on_received(received)
            except Exception as problem:  # noqa: BLE001 - the caller's hook (a recording) must not end the watch
                with self._lock:
                    self._counters.hook_errors += 1
                    if self._counters.hook_error is None:
                        self._counters.hook_error = f"{type(problem).__name__}: {problem}"

    def _enqueue(self, received: Received) -> bool:
        """Queue ``received`` once the queue has room for it in bytes (one message always
        fits an empty queue); False when the subscriber stopped meanwhile. A full queue means
        nobody polls: waiting here lets ZeroMQ's high-water mark hold the rest, then the
        server's (a gap, reported and replayed), never a silent loss."""
        cost = message_cost(received)
        with self._room:
            while (self._pending_bytes and self._pending_bytes + cost > limits.MAX_WATCH_PENDING_BYTES
                   and not self._stopping.is_set()):
                self._room.wait(POLL_MS / 1000)
            if self._stopping.is_set():
                return False
            self._pending_bytes += cost
        while not self._stopping.is_set():
            try:
                self._queue.put(received, timeout=POLL_MS / 1000)
                return True
            except queue.Full:
                continue
        with self._room:
            self._pending_bytes -= cost
        return False

    # -- replay ---------------------------------------------------------------------------

    def _fill_gap(self, rank: int, first: int, last: int, topic: bytes,
                  answered: dict[int, tuple[bytes | None, bytes]] | None = None) -> list[str]:
        """Delivers what ``answered`` holds of ``first..last`` (a replay already read whole, or
        nothing: no replay endpoint, or it did not answer) in seq order, each ``replayed``, and
        returns the notes for the message after the gap (nothing when all were filled)."""
        span = f"{first}" if first == last else f"{first}-{last}"
        answered = {seq: answer for seq, answer in (answered or {}).items() if first <= seq <= last}
        for seq in sorted(answered):
            replayed_topic, payload = answered[seq]
            self._tracker.filled(rank, seq)
            with self._lock:
                self._counters.replayed += 1
            replayed_topic = topic if replayed_topic is None else replayed_topic
            message = Message(topic=replayed_topic, seq=seq, payload=payload, rank=rank, replayed=True)
            self._deliver(message, NOTES["replayed"])
        missing = (last - first + 1) - len(answered)
        with self._lock:
            self._counters.gaps += 1
            self._counters.missing += missing
        if missing == 0:
            return []
        if not answered:
            return [NOTES["gap"].format(span=span)]
        return [NOTES["gap_partly"].format(span=span, missing=_spans(first, last, answered))]

    # -- replays read while live messages go on ----------------------------------------------

    def _replay_later(self, rank: int, first: int, last: int, topic: bytes) -> str:
        """Ask for gap ``first..last`` without waiting for the answer: the thread's poll loop
        reads it (:meth:`_advance`) while live messages keep being delivered, and delivers what
        it brings afterwards, in seq order, each noted ``replayed`` (a timeline puts them back
        in their place). A rank has one replay under way; gaps met meanwhile are merged into the
        next one. Returns the note for the message that revealed the gap."""
        span = f"{first}" if first == last else f"{first}-{last}"
        queued = self._queued[rank]
        if self._jobs[rank] is None:
            self._start_replay(rank, first, last, topic, last - first + 1)
        elif queued is None:
            self._queued[rank] = (first, last, topic, last - first + 1)
        else:
            self._queued[rank] = (min(first, queued[0]), max(last, queued[1]), topic, queued[3] + last - first + 1)
        return NOTES["gap_asked"].format(span=span)

    def _start_replay(self, rank: int, first: int, last: int, topic: bytes, wanted: int) -> None:
        job = _ReplayJob(rank, first, last, topic, wanted)
        self._jobs[rank] = job
        self._ask_next_envelope(job)

    def _ask_next_envelope(self, job: _ReplayJob) -> bool:
        """Send ``job``'s request in the next envelope to try (the one that answered before,
        or each of ``ENVELOPES`` in turn); False when none is left."""
        known = self._envelope[job.rank]
        tried = [envelope for envelope, _ in job.asked]
        left = [e for e in (ENVELOPES if known is None else (known,)) if e not in tried]
        if not left:
            return False
        envelope = left[0]
        reused = self._dealers[job.rank] if envelope == known else None
        self._dealers[job.rank] = None
        dealer = reused if reused is not None else self._new_dealer(job.rank)
        start = job.first.to_bytes(SEQ_BYTES, "big")
        dealer.send_multipart([b"", start] if envelope == "delimited" else [start])
        self._poller.register(dealer, _zmq().POLLIN)
        job.asked.append((envelope, dealer))
        job.asked_at = time.monotonic()
        with self._lock:
            self._counters.replays_asked += 1
        return True

    def _poll_ms(self) -> int:
        """How long the poll loop may wait: ``POLL_MS``, or less when a replay's deadline is nearer."""
        now = time.monotonic()
        due = [POLL_MS / 1000]
        for job in self._jobs:
            if job is not None:
                due.append((job.asked_at + self._silence_s(job) if job.answering is None
                            else min(job.deadline, job.idle_until)) - now)
        return max(0, int(min(due) * 1000) + 1)

    def _silence_s(self, job: _ReplayJob) -> float:
        """How long ``job``'s last request may go unanswered: ``replay_wait``, or
        ``REPLAY_TOTAL_S`` when the rank's endpoint answered in this envelope before (there is
        no other to try, and a slow server answers this request after the last one's answer,
        while live messages go on)."""
        return REPLAY_TOTAL_S if self._envelope[job.rank] is not None else self.replay_wait

    def _advance(self, job: _ReplayJob, ready: dict) -> None:
        """Move ``job`` on: take the first DEALER that answered, or try the next envelope when
        ``replay_wait`` passed in silence; read what its DEALER holds; end it at the end marker,
        its deadlines or ``MAX_WATCH_REPLAY_MESSAGES`` frames."""
        zmq = _zmq()
        if job.ended:  # a reconnect's check that read its whole answer: delivered after its message
            self._end_replay(job, answered=True, ended=True)
            return
        now = time.monotonic()
        if job.answering is None:
            answering = next((dealer for _, dealer in job.asked if dealer in ready), None)
            if answering is None:
                if now >= job.asked_at + self._silence_s(job) and not self._ask_next_envelope(job):
                    self._end_replay(job, answered=False, ended=False)
                return
            job.answering = answering
            job.deadline, job.idle_until = now + REPLAY_TOTAL_S, now + REPLAY_IDLE_S
            for _, other in job.asked:
                if other is not answering:
                    self._poller.unregister(other)
                    other.close(linger=0)
            job.asked = [(e, d) for e, d in job.asked if d is answering]
        dealer = job.answering
        for _ in range(BURST):  # then the live sockets again: a big answer does not hold them
            if job.frames >= MAX_WATCH_REPLAY_MESSAGES:
                break
            try:
                frames = dealer.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            read = _read_replay_frame(job, frames)
            if read is END_OF_REPLAY:
                self._end_replay(job, answered=True, ended=True)
                return
            if read is None:
                continue
            seq, payload = read
            if not (job.first <= seq <= job.last and self._tracker.is_missing(job.rank, seq)):
                continue  # past the gap (the live socket brings those) or received already
            if seq in job.answered:
                with self._lock:
                    self._counters.duplicates += 1
                continue
            job.answered[seq] = (_replay_topic(frames), payload)
            if len(job.answered) >= job.wanted:  # every seq asked for came: the rest is past the gap
                break
        now = time.monotonic()
        if (job.frames >= MAX_WATCH_REPLAY_MESSAGES or now >= job.deadline or now >= job.idle_until
                or len(job.answered) >= job.wanted):
            self._end_replay(job, answered=True, ended=False)

    def _end_replay(self, job: _ReplayJob, answered: bool, ended: bool) -> None:
        """Close or keep ``job``'s DEALER (kept only after the end marker: a half answer may
        still be arriving), count it, deliver what it brought (seq order, each ``replayed``;
        the last one also says what is still missing), and start the rank's next replay."""
        rank = job.rank
        self._jobs[rank] = None
        for envelope, dealer in job.asked:
            self._poller.unregister(dealer)
            if ended and dealer is job.answering:
                self._dealers[rank] = dealer
                self._envelope[rank] = envelope
            else:
                dealer.close(linger=0)
        if answered and not ended:
            self._envelope[rank] = next(e for e, d in job.asked if d is job.answering)
        self._deliver_replayed(job)
        with self._lock:  # counted once delivered (and its notice told): a reader of the count sees them
            self._counters.replays_answered += int(answered)
        queued, self._queued[rank] = self._queued[rank], None
        if queued is not None and not self._stopping.is_set():
            self._start_replay(rank, *queued)

    def _deliver_replayed(self, job: _ReplayJob) -> None:
        span = f"{job.first}" if job.first == job.last else f"{job.first}-{job.last}"
        seqs = sorted(job.answered)
        for seq in seqs:
            self._tracker.filled(job.rank, seq)
        # What is still missing, from the tracker: a merged replay's span holds seqs received live
        # too, and a history asked in two parts is one missing range.
        still = [Gap(job.rank, max(gap.first, job.first), min(gap.last, job.last))
                 for gap in self._tracker.missing(job.rank) if gap.first <= job.last and gap.last >= job.first]
        missing = sum(gap.count for gap in still)
        with self._lock:
            self._counters.replayed += len(seqs)
            self._counters.gaps += 1
            self._counters.missing += missing
        runs = ", ".join(f"{gap.first}" if gap.count == 1 else f"{gap.first}-{gap.last}" for gap in still)
        if missing and not seqs:  # no message to carry the words: a notice says them (the UI shows it)
            self.tell(NOTES["gap"].format(span=span) + (f" on rank {job.rank}" if job.rank else ""))
        for index, seq in enumerate(seqs):
            topic, payload = job.answered[seq]
            note = NOTES["replayed"]
            if index == len(seqs) - 1 and missing:
                note += "; " + NOTES["gap_partly"].format(span=span, missing=runs)
            self._deliver(Message(topic=job.topic if topic is None else topic, seq=seq, payload=payload,
                                  rank=job.rank, replayed=True), note, late=True)

    def _cancel_replay(self, rank: int) -> None:
        """Drop ``rank``'s replay under way and the one queued (a restart: their seqs are
        another publisher's); what they would have filled stays missing."""
        job, queued = self._jobs[rank], self._queued[rank]
        self._jobs[rank] = self._queued[rank] = None
        if job is None:
            return
        for _, dealer in job.asked:
            self._poller.unregister(dealer)
            dealer.close(linger=0)
        with self._lock:
            self._counters.gaps += 1 + (queued is not None)
            self._counters.missing += job.wanted + (0 if queued is None else queued[3])

    def _check_replay(self, rank: int, previous: int, last: int,
                      topic: bytes) -> tuple[_ReplayJob, bool] | None:
        """Ask for ``previous..last`` and wait only until the answer decides what a reconnect
        was: (the replay under way, saw its end marker) once the frame at ``previous`` came, a
        later one did (vLLM's and SGLang's buffers answer oldest first: the endpoint no longer
        has ``previous``), or the answer ended; None when nothing answered (each envelope waits
        ``replay_wait``). The rank's live messages wait that long, at most ``replay_wait`` per
        envelope and then ``REPLAY_IDLE_S``, not the whole answer (``REPLAY_TOTAL_S``)."""
        zmq = _zmq()
        job = _ReplayJob(rank, previous, last, topic, last - previous)
        waiting = zmq.Poller()
        while job.answering is None:
            if self._stopping.is_set() or not self._ask_next_envelope(job):
                self._close_check(job, ended=False, answered=False)
                return None
            waiting.register(job.asked[-1][1], zmq.POLLIN)
            ready = dict(waiting.poll(int(self.replay_wait * 1000)))
            job.answering = next((dealer for _, dealer in job.asked if dealer in ready), None)
        now = time.monotonic()
        job.deadline, job.idle_until = now + REPLAY_TOTAL_S, now + REPLAY_IDLE_S
        for _, other in job.asked:
            if other is not job.answering:
                self._poller.unregister(other)
                other.close(linger=0)
        job.asked = [(e, d) for e, d in job.asked if d is job.answering]
        while not self._stopping.is_set():
            wait = min(job.deadline, job.idle_until) - time.monotonic()
            if wait <= 0 or not job.answering.poll(int(wait * 1000) + 1):
                return job, False
            frames = job.answering.recv_multipart()
            read = _read_replay_frame(job, frames)
            if read is END_OF_REPLAY:
                return job, True
            if read is None:
                continue
            seq, payload = read
            if previous <= seq <= last and seq not in job.answered:
                job.answered[seq] = (_replay_topic(frames), payload)
            if seq >= previous:
                return job, False
        return job, False

    def _close_check(self, job: _ReplayJob, ended: bool, answered: bool = True) -> None:
        """Let go of a reconnect's check that is not read on: its DEALER kept for the next
        replay after an end marker (closed otherwise: a half answer may still be arriving)."""
        for envelope, dealer in job.asked:
            self._poller.unregister(dealer)
            if ended and dealer is job.answering:
                self._dealers[job.rank], self._envelope[job.rank] = dealer, envelope
            else:
                dealer.close(linger=0)
        if answered and not ended:
            self._envelope[job.rank] = next(e for e, d in job.asked if d is job.answering)
        with self._lock:
            self._counters.replays_answered += int(answered)

    def _new_dealer(self, rank: int):
        zmq = _zmq()
        dealer = self._context.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.setsockopt(zmq.IPV6, 1)
        dealer.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_BYTES)
        dealer.connect(self.replay_endpoints[rank])
        return dealer


@dataclass
class _ReplayJob:
    """One replay under way, read a frame at a time by the thread's poll loop while live
    messages go on: which seqs of which rank, the requests sent (envelope, DEALER) and when the
    last went out, the DEALER that answered, the deadlines, and the answers so far."""

    rank: int
    first: int
    last: int
    topic: bytes
    wanted: int  # the seqs missing in first..last (a merged replay's span holds live ones too)
    asked: list = field(default_factory=list)
    asked_at: float = 0.0
    answering: object = None
    deadline: float = 0.0  # REPLAY_TOTAL_S after the first answer
    idle_until: float = 0.0  # REPLAY_IDLE_S after the last frame
    frames: int = 0
    answered: dict = field(default_factory=dict)
    ended: bool = False  # its end marker came already (a reconnect's check read it whole)


def message_cost(received: Received) -> int:
    """What one received message costs in memory, as the queue counts it: its frames, its
    decoded batch (``DECODED_BYTES_PER_PAYLOAD_BYTE`` per payload byte) and the objects around
    them (``MESSAGE_OVERHEAD_BYTES``)."""
    message = received.message
    return (len(message.topic) + len(message.payload) * (1 + DECODED_BYTES_PER_PAYLOAD_BYTE)
            + MESSAGE_OVERHEAD_BYTES)


def _read_replay_frame(job: _ReplayJob, frames: list[bytes]):
    """Count one frame of ``job``'s replay answer (it keeps the answer from going idle) and read
    it: ``END_OF_REPLAY`` at the answer's end, None for a frame to pass over (fewer than two
    parts, a seq that is not 8 bytes), else ``(seq, payload)``."""
    job.frames += 1
    job.idle_until = time.monotonic() + REPLAY_IDLE_S
    if len(frames) < 2:
        return None
    seq_frame, payload = frames[-2], frames[-1]
    if seq_frame == END_OF_REPLAY:
        return END_OF_REPLAY
    if len(seq_frame) != SEQ_BYTES:
        return None
    return int.from_bytes(seq_frame, "big"), payload


def _replay_topic(frames: list[bytes]) -> bytes | None:
    """The topic of a replay answer, when it carries one: ``(b"", topic, seq, payload)``
    does; ``(b"", seq, payload)`` (older vLLM) and ``(seq, payload)`` do not (``None``: the
    live message's topic is used)."""
    if len(frames) >= 4:
        return frames[-3]
    if len(frames) == 3 and frames[0] != b"":
        return frames[0]
    return None


def _spans(first: int, last: int, present) -> str:
    """The seqs of ``first..last`` not in ``present``, as runs: ``"12-13, 15"``. Costs the
    number of seqs present, not the gap's width (a garbage seq frame can open a gap of 2^63)."""
    runs: list[str] = []
    start = first
    for seq in sorted(s for s in present if first <= s <= last) + [last + 1]:
        if seq > start:
            runs.append(f"{start}" if start == seq - 1 else f"{start}-{seq - 1}")
        start = seq + 1
    return ", ".join(runs)
