# SPDX-License-Identifier: Apache-2.0
"""``kvviz watch``: the KV-event stream of a vLLM or SGLang server (or a recording of one).

    kvviz watch tcp://HOST:PORT [--topic T] [--ranks N] [--replay-endpoint tcp://...] [--record FILE]
    kvviz watch --replay-file FILE
      --print / --json [--every N]        headless: a summary (and a line per N batches)
      --count N / --max-seconds S         live headless: stop after N messages or S seconds
      --export-step N -o OUT.json|OUT.md  a watch bundle (``kvviz open`` verifies it) or a report
      --to-kvs OUT.kvs [--tokens-per-page N] [--pages N]   the recording as a scenario for kvcore
      --against SCENARIO.kvs              kvcore's run of the scenario aligned with the stream
      --against-trace TRACE.jsonl [--first N]   the same, the scenario made from the Mooncake
                                          requests that made the recording (the recordings' recipe)
      --explain REQUEST [--at STEP] [--tokenizer PATH]   why that prompt would hit or miss

Exports live here rather than in ``kvviz export``: that command's input is a scenario, and a
watch's is a stream, which only this command reads (live or recorded).

Exit codes: 0 when all is well (a gap or an undecodable message is reported, not a failure),
1 when ``--against`` finds the stream and kvcore disagreeing, a live headless watch received
no message (its last line says what to check), or ``--record`` stopped early (a full disk: its
last line says after how many messages), 2 for bad input, including a
missing ``watch`` extra (msgspec, pyzmq): one line that says how to install it.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from pathlib import Path

import click

from kvviz.core import limits
from kvviz.core.designs import HASH, TRIE
from kvviz.watch.wire import WATCH_EXTRA_MISSING  # no msgspec needed: it decodes lazily
from kvviz.printable import printable
from kvviz.commands import (
    BadInput,
    no_such_file_hint,
    plural,
    read_source_file,
    refuse_special_file,
    require_terminal,
    sample_or_path,
)
from kvviz import commands
from kvviz.report.bundle_kinds import BundleKind

EXTRA_LINE = WATCH_EXTRA_MISSING
"""The one line ``kvviz watch`` prints when msgspec or pyzmq is missing."""

POLL_IDLE_S = 0.02
"""How long live headless mode waits when the subscriber had nothing: bounds its CPU use
while idle and its lag behind the stream."""

MAX_RANKS = limits.MAX_WATCH_RANKS


def require_watch_extra(live: bool) -> None:
    """Bad input unless msgspec (and, to subscribe, pyzmq) can be imported."""
    try:
        import msgspec  # noqa: F401

        if live:
            import zmq  # noqa: F401
    except ImportError:
        raise BadInput(EXTRA_LINE) from None  # worded as every missing extra is


@click.command()
@click.argument("endpoint", required=False)
@click.option("--topic", default="", show_default=True,
              help="Subscribe to this topic prefix (vLLM's default topic is `kv`; SGLang's is empty).")
@click.option("--ranks", type=click.IntRange(1, MAX_RANKS), default=1, show_default=True,
              help="Data-parallel ranks: one SUB socket each, at port + rank.")
@click.option("--replay-endpoint", default=None,
              help="The server's replay endpoint (tcp://HOST:PORT): gaps in seq, a late attach's history "
                   "and a restarted server's first batches are asked for there.")
@click.option("--record", "record", type=click.Path(dir_okay=False), default=None,
              help="Write every message as received to this new file (the recordings' JSONL format, replayed "
                   "messages marked so --replay-file puts them back in place; an existing one is refused, never "
                   "overwritten).")
@click.option("--replay-file", type=click.Path(dir_okay=False), default=None,
              help="Watch a recording (JSONL: {topic, seq, payload}, plain or gzip) instead of a live server, "
                   "or a shipped sample by name: vllm-conversation, sglang-conversation (`kvviz help samples`).")
@click.option("--print", "print_only", is_flag=True, help="No UI: print a summary when the watch ends.")
@click.option("--json", "as_json", is_flag=True,
              help="No UI: JSON lines, a summary at the end (fields: `kvviz help watch`).")
@click.option("--every", type=click.IntRange(1), default=None,
              help="With --print or --json: a line every N messages as they arrive.")
@click.option("--count", type=click.IntRange(1), default=None,
              help="Live, headless: stop after N messages.")
@click.option("--max-seconds", type=click.FloatRange(0, min_open=True), default=None,
              help="Live, headless: stop after S seconds.")
@click.option("--step", type=click.IntRange(0), default=None,
              help="With --replay-file: open the UI at this step (default: the last).")
@click.option("--export-step", type=click.IntRange(0), default=None,
              help="With --replay-file and -o: export this step (default: the last).")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="With --replay-file: export a step; .json is a watch bundle `kvviz open` replays and "
                   "verifies (a digest per step; writing or opening takes about twice `--print` of the "
                   f"recording, linear in the steps, at most {limits.MAX_WATCH_BUNDLE_STEPS:,}), .md a Markdown "
                   "report with the "
                   "block forest.")
@click.option("--to-kvs", "to_kvs", type=click.Path(dir_okay=False), default=None,
              help="With --replay-file: write the recording as a .kvs scenario (stored chains become "
                   "acquires and publishes) for kvcore; - writes it to stdout.")
@click.option("--against", "against_file", type=click.Path(dir_okay=False), default=None,
              help="With --replay-file: run this scenario on kvcore and align it with the stream, "
                   "batch by batch, by block content. Exit 1 when they differ.")
@click.option("--against-trace", "against_trace", type=click.Path(dir_okay=False), default=None,
              help="With --replay-file: as --against, with the scenario of the Mooncake trace's requests that "
                   "made the recording, as the samples' README (kvviz/samples/kv-events/) made vLLM's: request i "
                   "is batch i, hash id h the tokens h*16..h*16+15, prompts scaled by 16/512, "
                   "acquire-publish-release each, vLLM's 3,000 blocks (2,999 pages: one is its null block), the "
                   "last token recomputed. A trace file or a sample's name: --against-trace conversation")
@click.option("--design", "design", type=click.Choice([TRIE, HASH]), default=None,
              help="With --against-trace: compare with SGLang's radix cache of pages (trie: LRU leaves, "
                   "--pages x --tokens-per-page tokens, default 3,000 x 16 = 48,000) or vLLM's hash blocks (hash). "
                   "Default: chosen from the stream (signed block hashes: SGLang's publisher), and said.")
@click.option("--first", "first_requests", type=click.IntRange(1), default=None,
              help="With --against-trace: the trace's first N requests (default: one per message recorded).")
@click.option("--tokens-per-page", type=click.IntRange(1, limits.MAX_TOKENS_PER_PAGE), default=None,
              help="With --to-kvs: the scenario's page size (default: the recording's block size; when it mixes "
                   "sizes, the size most chains have). With --against-trace: tokens per block and per hash id "
                   "(default 16).")
@click.option("--pages", type=click.IntRange(1, limits.MAX_PAGES), default=None,
              help="With --to-kvs: the scenario's pages (default: enough that kvcore never evicts a stored block). "
                   "With --against-trace: kvcore's pages, the server's blocks less vLLM's null block (default 2,999).")
@click.option("--explain", "explain_request", default=None, metavar="REQUEST",
              help="Why would this prompt hit or miss? REQUEST is a file (or - for stdin) holding its token ids, "
                   "a JSON array or whitespace-separated ints, or with --tokenizer its text. Its full blocks are "
                   "matched by content at the state after --at STEP and the first miss is named: hit, below-block, "
                   "first-seen, evicted, diverged, extra-keys, other-medium or unknown (fields: `kvviz help watch`). "
                   "Headless with --print/--json (live: at the end), else beside the forest in the UI.")
@click.option("--at", "explain_at", type=click.IntRange(0), default=None,
              help="With --explain and --replay-file: the step whose state is asked (default: the last).")
@click.option("--tokenizer", "tokenizer_path", type=click.Path(dir_okay=False), default=None,
              help="A tokenizer.json (read with the tokenizers package, never downloaded): --explain REQUEST is "
                   "text, and token ids are shown as text beside them.")
def watch(endpoint: str | None, topic: str, ranks: int, replay_endpoint: str | None, record: str | None,
          replay_file: str | None, print_only: bool, as_json: bool, every: int | None, count: int | None,
          max_seconds: float | None, step: int | None, export_step: int | None, output: str | None,
          to_kvs: str | None, against_file: str | None, against_trace: str | None, first_requests: int | None,
          tokens_per_page: int | None, pages: int | None, explain_request: str | None, explain_at: int | None,
          tokenizer_path: str | None, design: str | None) -> None:
    """Watch the KV-event stream of a vLLM/SGLang server, or a recording of one.

    ENDPOINT is the server's publisher, tcp://HOST:PORT (vLLM: --kv-events-config
    '{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:5557"}').
    One timeline step per message received; the view rebuilds the server's cache as a forest
    of blocks. The stream has no reference counts, eviction order or owners: views that need
    them say so.

    \b
    Judge a server against kvcore on the requests that made a recording, e.g. the shipped vLLM
    one (samples by name: `kvviz help samples`):
      kvviz watch --replay-file vllm-conversation --against-trace conversation
    (exit 0: they agree event for event; 1: the first divergence is printed).

    
    Why would request 120 of that trace miss before it ran (its token ids in r120.json)?
      kvviz watch --replay-file vllm-conversation --explain r120.json --at 120 --json

    What a live watch holds in memory, and its bounds: kvviz help watch.
    """
    live = endpoint is not None
    replay_file = sample_or_path(replay_file, "recording")  # a sample's name: its installed file
    against_trace = sample_or_path(against_trace, "trace")
    _check_flags(endpoint, replay_file, locals())
    require_watch_extra(live)
    headless = print_only or as_json
    tokenizer = _tokenizer(tokenizer_path)
    prompt = None if explain_request is None else _prompt(explain_request, tokenizer)
    asked = None if prompt is None else _Asked(prompt, explain_at, tokenizer)
    if live:
        if not headless:
            require_terminal()  # before any socket: the refusal is the only line
        _watch_live(endpoint, topic, ranks, replay_endpoint, record, headless, as_json, every, count, max_seconds,
                    asked)
        return
    messages = _read_recording(replay_file)
    if asked is not None and headless:
        _explain_recording(messages, replay_file, asked, as_json)
        return
    if to_kvs is not None:
        _write_scenario(messages, replay_file, to_kvs, tokens_per_page, pages)
    if against_file is not None:
        _against(messages, _scenario_file(against_file), against_file, as_json)
        return
    if against_trace is not None:
        _against_trace(messages, against_trace, first_requests or len(messages), tokens_per_page, pages, design,
                       as_json)
        return
    if output is not None:
        _export(messages, replay_file, export_step, output, tokenizer)
        return
    if to_kvs is not None and not headless:
        return
    if not headless:
        require_terminal()
    timeline = _timeline(replay_file)
    if headless:
        _replay_headless(timeline, messages, as_json, every)
        return
    timeline.add_all(messages)
    if step is not None and step > timeline.last_step:
        raise BadInput(f"step {step} does not exist: the recording has steps 0..{timeline.last_step}")
    launch_watch_ui(timeline, step=step, asked=asked, tokenizer=tokenizer)


def _check_flags(endpoint: str | None, replay_file: str | None, given: dict) -> None:
    """Bad input for flags that cannot go together, before any work (or import)."""
    if (endpoint is None) == (replay_file is None):
        raise BadInput("give an ENDPOINT (tcp://HOST:PORT) or --replay-file FILE, not both"
                       if endpoint is not None else
                       "give an ENDPOINT to subscribe to (tcp://HOST:PORT) or --replay-file FILE to replay a recording")
    if given["print_only"] and given["as_json"]:
        raise BadInput("--print and --json exclude each other: give one of them")
    headless = given["print_only"] or given["as_json"]
    if given["every"] is not None and not headless:
        raise BadInput("--every needs --print or --json (the UI shows every step)")
    live_only = [f"--{name.replace('_', '-')}" for name in ("record", "replay_endpoint", "count", "max_seconds")
                 if given[name] is not None]
    live_only += ["--topic"] if given["topic"] else []
    live_only += ["--ranks"] if given["ranks"] != 1 else []
    if replay_file is not None and live_only:
        raise BadInput(f"{', '.join(live_only)} subscribe(s) to a live server: drop it with --replay-file")
    file_only = [flag for flag, name in (("--to-kvs", "to_kvs"), ("--against", "against_file"),
                                         ("--against-trace", "against_trace"), ("-o", "output"),
                                         ("--export-step", "export_step"), ("--step", "step"))
                 if given[name] is not None]
    if endpoint is not None and file_only:
        raise BadInput(f"{', '.join(file_only)} work(s) on a recording: record with --record FILE, then "
                       f"`kvviz watch --replay-file FILE {file_only[0]} ...`")
    if (given["count"] is not None or given["max_seconds"] is not None) and not headless:
        raise BadInput("--count and --max-seconds end a headless watch: add --print or --json (the UI ends with q)")
    if given["export_step"] is not None and given["output"] is None:
        raise BadInput("--export-step needs -o OUT.json (a watch bundle) or -o OUT.md (a report)")
    if given["output"] is not None and given["against_file"] is not None:
        raise BadInput("-o and --against exclude each other: export a step, or align with a scenario")
    if given["step"] is not None and (headless or given["output"] is not None):
        raise BadInput("--step opens the UI at a step; to export one, use --export-step N -o OUT")
    if given["against_trace"] is not None and (given["against_file"] is not None or given["output"] is not None
                                               or given["to_kvs"] is not None):
        raise BadInput("--against-trace aligns the recording with the trace's requests: it does not combine with "
                       "--against, -o or --to-kvs")
    if given["design"] is not None and given["against_trace"] is None:
        raise BadInput("--design chooses the cache --against-trace TRACE compares with: add it")
    if given["first_requests"] is not None and given["against_trace"] is None:
        raise BadInput("--first N counts the requests of --against-trace TRACE: add it")
    if given["explain_request"] is not None:
        others = [flag for flag, name in (("--against", "against_file"), ("--against-trace", "against_trace"),
                                          ("-o", "output"), ("--to-kvs", "to_kvs"), ("--every", "every"))
                  if given[name] is not None]
        if others:
            raise BadInput(f"--explain asks about one prompt: it does not combine with {', '.join(others)}")
    if given["explain_at"] is not None and given["explain_request"] is None:
        raise BadInput("--at STEP is the step --explain REQUEST asks about: add --explain")
    if given["explain_at"] is not None and endpoint is not None:
        raise BadInput("--at STEP needs --replay-file (a live --explain asks at the last step received)")
    if given["explain_at"] is not None and given["step"] is not None:
        raise BadInput("--at and --step both choose the step: give one (the UI opens at --at)")
    sizing = [flag for flag, name in (("--tokens-per-page", "tokens_per_page"), ("--pages", "pages"))
              if given[name] is not None]
    if sizing and given["to_kvs"] is None and given["against_trace"] is None:
        raise BadInput(f"{' and '.join(sizing)} {'size' if len(sizing) > 1 else 'sizes'} the cache of --to-kvs OUT "
                       "or --against-trace TRACE "
                       "(a --against scenario's cache line sizes its own)")


# -- recordings ---------------------------------------------------------------------------------


def _read_recording(path: str):
    """The messages of the recording at ``path``; FILE:LINE:COL for a bad line (exit 2), one
    warning line on stderr for a last line cut off (ignored)."""
    from kvviz.watch.recording import RecordingError, read_recording

    refuse_special_file(path, "a .jsonl recording")
    if not Path(path).is_file():
        raise BadInput(f"{path}: no such file (expected a .jsonl recording of KV events, "
                       f"{no_such_file_hint('recording')})")
    try:
        return read_recording(path, on_warning=lambda line: click.echo(printable(line), err=True))
    except RecordingError as exc:
        raise BadInput(str(exc)) from None
    except OSError as exc:
        raise BadInput(f"{path}: cannot read ({exc.strerror or exc})") from None


def _timeline(source: str, live: bool = False):
    """The timeline a watch fills; a live one keeps its steps within MAX_LIVE_TIMELINE_BYTES (a
    recording is bounded already, by MAX_RECORDING_BYTES)."""
    from kvviz.watch.timeline import WatchTimeline

    return WatchTimeline(source, max_bytes=limits.MAX_LIVE_TIMELINE_BYTES if live else None)


def _replay_headless(timeline, messages, as_json: bool, every: int | None) -> None:
    """``--print``/``--json`` of a recording: progress lines as the messages are added, then
    the summary."""
    emit = _emitter(as_json)
    since = 0
    for message in messages:
        step = timeline.add(message)
        if every is not None and step % every == 0:
            emit(timeline.progress(step, since), "progress")
            since = step
    _finish(timeline, emit, every, since)


def _emitter(as_json: bool):
    from kvviz.watch.json_output import json_line, progress_line, summary_lines

    out = sys.stdout

    def emit(record: dict, kind: str) -> None:
        if as_json:
            out.write(json_line(record) + "\n")
        elif kind == "progress":
            out.write(progress_line(record) + "\n")
        else:
            out.write("\n".join(summary_lines(record)) + "\n")
        out.flush()  # a live watch's lines are read as they come

    return emit


def _finish(timeline, emit, every: int | None, since: int) -> None:
    from kvviz.watch.hot import hot_prefixes

    if every is not None and timeline.last_step > since:
        emit(timeline.progress(timeline.last_step, since), "progress")
    summary = timeline.summary()
    kept = timeline.kept_messages_until(timeline.last_step)  # all of them, unless a live watch folded some
    summary["hot_prefixes"] = [hot.to_dict() for hot in hot_prefixes(kept)]
    summary["hot_prefixes_from_step"] = timeline.first_step + 1
    emit(summary, "summary")


# -- live ---------------------------------------------------------------------------------------


def _subscriber(endpoint: str, topic: str, ranks: int, replay_endpoint: str | None, on_received=None):
    from kvviz.watch.subscriber import EndpointError, Subscriber

    try:
        return Subscriber(endpoint, topic=topic, ranks=ranks, replay_endpoint=replay_endpoint,
                          on_received=on_received)
    except (EndpointError, ValueError) as exc:
        raise BadInput(str(exc)) from None


def _start(subscriber) -> None:
    """Connect: a connect that fails (too many open files, a bad address) is one line, exit 2."""
    from kvviz.watch.subscriber import EndpointError

    try:
        subscriber.start()
    except (EndpointError, ValueError) as exc:
        raise BadInput(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - zmq.ZMQError or OSError from the library: still one line
        raise BadInput(f"cannot subscribe: {type(exc).__name__}: {exc}") from None


def _recorder(record: str | None, on_note):
    """A writer of every message received to ``record`` (None: no recording), telling
    ``on_note`` at once what goes wrong with the recording."""
    if record is None:
        return None
    from kvviz.watch.recording import RecordingError, RecordingWriter

    refuse_special_file(record, "a file to record into")
    try:
        return RecordingWriter(record, on_note=on_note)
    except RecordingError as exc:
        raise BadInput(str(exc)) from None
    except OSError as exc:
        raise BadInput(f"{record}: cannot record into it ({exc.strerror or exc})") from None


def _watch_live(endpoint: str, topic: str, ranks: int, replay_endpoint: str | None, record: str | None,
                headless: bool, as_json: bool, every: int | None, count: int | None,
                max_seconds: float | None, asked: "_Asked | None" = None) -> None:
    """Subscribe and follow: headless until --count/--max-seconds/Ctrl-C, or in the UI."""
    subscriber = None

    def on_note(line: str) -> None:
        """Headless, a line on stderr; in the UI, a notice it shows at its next poll."""
        if headless or subscriber is None:
            click.echo(f"kvviz: {line}", err=True)
        else:
            subscriber.tell(line)

    writer = _recorder(record, on_note)
    # The subscriber's thread writes the recording as each message arrives, so a watch that
    # ends (or crashes) has recorded everything received so far, whatever the UI polled. With
    # --count N it records the first N only: the N the summary counts (the queue's order is
    # the hook's order).
    on_received = None if writer is None else (
        lambda received: writer.write(received.message)
        if count is None or writer.messages + writer.refused + writer.lost < count else None)
    subscriber = _subscriber(endpoint, topic, ranks, replay_endpoint, on_received)
    timeline = _timeline(endpoint, live=True)
    try:
        _start(subscriber)
        if headless:
            _follow_headless(subscriber, timeline, as_json, every, count, max_seconds)
            if timeline.last_step == 0:  # nothing was watched: say what to check, exit 1
                from kvviz.watch.subscriber import nothing_arrived_line

                click.echo(f"kvviz: {nothing_arrived_line(subscriber.stats, subscriber.endpoints)}", err=True)
                sys.exit(1)
            if asked is not None:
                _print_explanation(timeline, asked, as_json)
        else:
            launch_watch_ui(timeline, subscriber=subscriber, asked=asked, tokenizer=asked and asked.tokenizer)
    finally:
        subscriber.stop()  # joins the thread: nothing writes the recording after this
        if writer is not None:
            writer.close()
    _recording_outcome(writer)


def _recording_outcome(writer) -> None:
    """One line on stderr when the recording is not every message received: messages too big
    for a recording (exit 0: the recording still reads back), or a recording that stopped
    early, e.g. on a full disk (exit 1)."""
    if writer is None:
        return
    if writer.refused:
        click.echo(f"kvviz: {writer.path}: {plural(writer.refused, 'message')} not recorded: longer than a "
                   "recording's line may be (MAX_RECORDING_LINE_BYTES); the rest reads back with --replay-file",
                   err=True)
    if writer.failure is not None:
        click.echo(f"kvviz: {writer.failure} ({plural(writer.lost, 'message')} received after it not recorded)",
                   err=True)
        sys.exit(1)


def _follow_headless(subscriber, timeline, as_json: bool, every: int | None, count: int | None,
                     max_seconds: float | None) -> None:
    """Add what the subscriber delivers to ``timeline`` until --count, --max-seconds or
    Ctrl-C; then stop it and add what it had already received (and recorded) but nobody had
    polled, so the summary counts what the recording holds."""
    emit = _emitter(as_json)
    since = 0
    backlog: deque = deque()  # polled, not yet added: a Ctrl-C between the two must not lose them

    def add_backlog() -> None:
        nonlocal since
        while backlog and (count is None or timeline.last_step < count):
            item = backlog[0]
            if timeline.is_late(item.message):  # a replay's answer after the live messages: in at once
                late = 1
                while (late < len(backlog) and backlog[late].message.rank == item.message.rank
                       and timeline.is_late(backlog[late].message)):
                    late += 1
                timeline.add_all([backlog[i] for i in range(late)])
                for _ in range(late):
                    backlog.popleft()
                if every is not None:  # the steps after the gap were derived again: a line for where it stands
                    emit(timeline.progress(timeline.last_step, min(since, timeline.last_step)), "progress")
                    since = timeline.last_step
                continue
            step = timeline.add(item.message, item.batch, item.error, item.note)
            backlog.popleft()
            if every is not None and step % every == 0:
                emit(timeline.progress(step, since), "progress")
                since = step

    deadline = None if max_seconds is None else time.monotonic() + max_seconds
    try:
        while count is None or timeline.last_step < count:
            if deadline is not None and time.monotonic() >= deadline:
                break
            wanted = 1000 if count is None else min(1000, count - timeline.last_step)
            backlog.extend(subscriber.poll(wanted))
            if not backlog:
                time.sleep(POLL_IDLE_S)
                continue
            add_backlog()
    except KeyboardInterrupt:  # Ctrl-C ends a watch that has no other end: still sum it up
        pass
    subscriber.stop()  # joins the thread: what it received is queued now, and nothing more comes
    while count is None or timeline.last_step < count:
        drained = subscriber.poll()
        if not drained and not backlog:
            break
        backlog.extend(drained)
        add_backlog()
    _finish(timeline, emit, every, since)


# -- --explain --------------------------------------------------------------------------------


class _Asked:
    """What ``--explain`` asks: the prompt's token ids, the step (None: the last) and the tokenizer."""

    def __init__(self, prompt: tuple[int, ...], at: int | None, tokenizer) -> None:
        self.prompt, self.at, self.tokenizer = prompt, at, tokenizer


def _tokenizer(path: str | None):
    """The ``--tokenizer`` file loaded, or None; bad input in one line."""
    if path is None:
        return None
    from kvviz.core.tokenizer_file import TokenizerError, load_tokenizer

    refuse_special_file(path, "a tokenizer.json")
    try:
        return load_tokenizer(path)
    except TokenizerError as exc:
        raise BadInput(str(exc)) from None


def _prompt(request: str, tokenizer) -> tuple[int, ...]:
    """The ``--explain`` prompt: from the file ``request`` (``-``: stdin), bounded before it is read."""
    from kvviz.watch.explain import PromptError, read_prompt

    if request == "-":
        data = sys.stdin.buffer.read(limits.MAX_SOURCE_BYTES + 1)
        source = "<stdin>"
    else:
        data = read_source_file(request, "prompt", "a prompt file (token ids, or text with --tokenizer)",
                                "a prompt: token ids, or text with --tokenizer")
        source = request
    if len(data) > limits.MAX_SOURCE_BYTES:
        raise BadInput(f"{source}: more than {limits.MAX_SOURCE_BYTES:,} bytes (MAX_SOURCE_BYTES)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"{source}: not UTF-8 text at byte {exc.start}") from None
    try:
        return read_prompt(text, source, None if tokenizer is None else tokenizer.encode)
    except PromptError as exc:
        raise BadInput(str(exc)) from None


def _explain_recording(messages, replay_file: str, asked: _Asked, as_json: bool) -> None:
    from kvviz.watch.timeline import WatchTimeline

    timeline = WatchTimeline.from_messages(messages, source=replay_file)
    if asked.at is not None and asked.at > timeline.last_step:
        raise BadInput(f"step {asked.at} does not exist: the recording has steps 0..{timeline.last_step}")
    _print_explanation(timeline, asked, as_json)


def _print_explanation(timeline, asked: _Asked, as_json: bool) -> None:
    from kvviz.watch.explain import explain
    from kvviz.watch.json_output import json_line

    decode = None if asked.tokenizer is None else asked.tokenizer.decode
    found = explain(timeline, asked.prompt, asked.at, decode=decode)
    if as_json:
        click.echo(json_line(found.to_dict()))
    else:
        for line in found.lines():
            click.echo(line)


# -- what a recording becomes -------------------------------------------------------------------


def _write_scenario(messages, replay_file: str, output: str, tokens_per_page: int | None,
                    pages: int | None) -> None:
    from kvviz.report.atomic import write_text_atomic

    from kvviz.watch.to_kvs import recording_to_scenario
    try:
        text = recording_to_scenario(messages, tokens_per_page=tokens_per_page, pages=pages, source=replay_file)
        if output == "-":  # stdout, never a file named "-"
            sys.stdout.write(text)
            output = "the scenario to stdout"
        else:
            write_text_atomic(output, text, inputs=[replay_file])
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    except OSError as exc:
        raise BadInput(f"{output}: cannot write the scenario ({exc.strerror or exc})") from None
    click.echo(f"wrote {output} ({plural(len(messages), 'message')} of {replay_file})", err=True)
    for line in text.splitlines():
        if line.startswith("# The recording stores chains of blocks of several sizes"):
            click.echo(line[2:] + " (--tokens-per-page N for another)", err=True)


def _scenario_file(scenario_file: str) -> str:
    """The text of the ``--against`` scenario: bounded, UTF-8, or bad input in one line."""
    try:
        return read_source_file(scenario_file, "scenario", "a .kvs scenario", "a .kvs scenario",
                                lambda path: path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise BadInput(f"{scenario_file}: not UTF-8 text at byte {exc.start} (expected a .kvs scenario)") from None


TRACE_BLOCK_TOKENS = 16
"""``--against-trace``'s default tokens per hash id (the recordings' recipe: 16)."""
TRACE_PAGES = 2_999
"""``--against-trace``'s default pages: the recording server's 3,000 blocks less vLLM's null block."""


def _against_trace(messages, trace_file: str, first: int, tokens_per_page: int | None, pages: int | None,
                   design: str | None, as_json: bool) -> None:
    """``--against-trace``: the recording beside the trace's requests on the design ``--design``
    names, or the one the stream suggests (and the report says which, and why)."""
    from kvviz.watch.radix import looks_like_sglang

    if design is None:
        sglang = looks_like_sglang(messages)
        design = TRIE if sglang else HASH
        reason = (f"chosen from the stream: {sglang}; --design hash for vLLM's" if sglang else
                  "chosen from the stream: no signed block hashes, so vLLM's publisher; --design trie for SGLang's")
    else:
        reason = f"--design {design}"
    if design == HASH:
        text, source = _trace_scenario(trace_file, first, tokens_per_page, pages)
        _against(messages, text, source, as_json, reason)
        return
    from kvviz.watch.radix import against_radix

    page = tokens_per_page or TRACE_BLOCK_TOKENS
    report = against_radix(messages, _trace_requests(trace_file, first), page_tokens=page,
                           capacity_tokens=(pages or TRACE_RADIX_PAGES) * page, source=trace_file,
                           design_reason=reason)
    _tell(report, as_json)


TRACE_RADIX_PAGES = 3_000
"""``--against-trace --design trie``'s default pages: the SGLang recording's 48,000 tokens of 16."""


def _trace_requests(trace_file: str, first: int):
    """The first ``first`` requests of the Mooncake trace ``trace_file``; bad input in one line."""
    from kvviz.core.mooncake import TraceFormatError, read_trace

    refuse_special_file(trace_file, "a Mooncake trace (.jsonl)")
    if not Path(trace_file).is_file():
        raise BadInput(f"{trace_file}: no such file (expected a Mooncake trace, .jsonl, {no_such_file_hint('trace')})")
    try:
        requests = read_trace(trace_file, first=first).requests
    except TraceFormatError as exc:  # TraceTooLarge is one too
        raise BadInput(str(exc)) from None
    except OSError as exc:
        raise BadInput(f"{trace_file}: cannot read ({exc.strerror or exc})") from None
    if not requests:
        raise BadInput(f"{trace_file}: no requests (expected a Mooncake trace, .jsonl)")
    return requests


def _trace_scenario(trace_file: str, first: int, tokens_per_page: int | None,
                    pages: int | None) -> tuple[str, str]:
    """The scenario of ``trace_file``'s first ``first`` requests as the recordings' recipe made
    them (:func:`kvviz.watch.to_kvs.requests_scenario`), and the name to report it by."""
    from kvviz.watch.to_kvs import requests_scenario

    requests = _trace_requests(trace_file, first)
    try:
        text = requests_scenario(requests, block_tokens=tokens_per_page or TRACE_BLOCK_TOKENS,
                                 gpu_blocks=(pages or TRACE_PAGES) + 1, source=trace_file)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    return text, trace_file


def _against(messages, text: str, source: str, as_json: bool, design_reason: str = "") -> None:
    import dataclasses

    from kvviz.watch.against import against
    from kvviz.core.scenario import ScenarioError

    try:
        report = against(messages, text, source=source)
        if design_reason:
            report = dataclasses.replace(report, design_reason=design_reason)
    except ScenarioError as exc:  # every located problem, as `kvviz run` lists them
        first, *others = exc.report().split("\n")
        raise BadInput(first, tuple(others)) from None
    except ValueError as exc:  # a scenario that is not for a hash cache: one line
        raise BadInput(str(exc)) from None
    _tell(report, as_json)


def _tell(report, as_json: bool) -> None:
    """An ``--against`` report, as JSON or lines; exit 1 when the two sides disagree."""
    if as_json:
        from kvviz.watch.json_output import json_line

        click.echo(json_line(report.to_dict()))
    else:
        for line in report.lines():
            click.echo(line)
    agrees = getattr(report, "agrees", None)
    if agrees is False:
        sys.exit(1)


def _export(messages, replay_file: str, step: int | None, output: str, tokenizer=None) -> None:
    """``-o OUT.json|OUT.md``: a watch bundle or a Markdown report of ``step`` (default last);
    with ``tokenizer``, the report shows each block's text."""
    from kvviz.watch.bundle import write_watch_export
    from kvviz.watch.timeline import WatchTimeline

    timeline = WatchTimeline.from_messages(messages, source=replay_file)
    step = timeline.last_step if step is None else step
    if step > timeline.last_step:
        raise BadInput(f"step {step} does not exist: the recording has steps 0..{timeline.last_step}")
    try:
        if tokenizer is not None and Path(output).suffix.lower() == ".md":
            from kvviz.report.atomic import write_text_atomic
            from kvviz.watch.markdown import watch_markdown

            write_text_atomic(output, watch_markdown(timeline, step, tokenizer.decode), inputs=[replay_file])
        else:
            write_watch_export(timeline, step, output, inputs=[replay_file])
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    except OSError as exc:
        raise BadInput(f"{output}: cannot write the export ({exc.strerror or exc})") from None
    click.echo(f"wrote {output} (step {step} of {timeline.last_step})")


# -- kvviz open of a watch bundle ---------------------------------------------------------------


def launch_watch_ui(timeline, *, subscriber=None, step: int | None = None, asked=None, tokenizer=None) -> None:
    """Open a watched KV-event stream (``kvviz watch``) in the terminal UI: a recording's
    ``timeline`` at ``step``, or a live one fed by ``subscriber`` (started by the caller);
    ``asked``: an ``--explain`` prompt (``.prompt``, ``.at``) to explain at the step shown;
    ``tokenizer``: token ids shown as text."""
    from kvviz.watch.app import make_watch_app

    if asked is not None and step is None:
        step = asked.at
    prompt = None if asked is None else asked.prompt
    commands.run_app(make_watch_app(timeline, subscriber=subscriber, step=step, prompt=prompt, tokenizer=tokenizer))


def open_watch_bundle(path: str, print_only: bool) -> None:
    """``kvviz open WATCH-BUNDLE``: replay the bundled messages, verify every digest, show
    the bundled step (the UI, or its summary with ``--print``). Exit 1 on a divergence."""
    require_watch_extra(live=False)
    from kvviz.watch.bundle import WatchBundleError, open_watch_bundle as replay_bundle
    from kvviz.watch.json_output import summary_lines

    try:
        opened = replay_bundle(path)
    except WatchBundleError as exc:
        raise BadInput(str(exc)) from None
    if not print_only:
        require_terminal()
    if opened.divergence:
        click.echo(f"kvviz: replay diverges from the bundle: {printable(opened.divergence)}", err=True)
    else:
        click.echo(f"replayed {plural(opened.step, 'message')}: every digest matches", err=True)
    if print_only:
        frame = opened.timeline.frame(opened.step)
        click.echo(printable(frame.narration))
        for line in summary_lines(opened.timeline.summary()):
            click.echo(line)
    else:
        launch_watch_ui(opened.timeline, step=opened.step)
    if opened.divergence:
        sys.exit(1)


def _is_watch_bundle(path: str) -> bool:
    from kvviz.watch.bundle import is_watch_bundle

    return is_watch_bundle(path)


WATCH_BUNDLE = BundleKind("watch", _is_watch_bundle, open_watch_bundle)
"""What ``kvviz open`` needs to know of a watch bundle (wired in by :mod:`kvviz.cli`)."""
