# SPDX-License-Identifier: Apache-2.0
"""`kvviz run --json` (kvviz.timeline/3): every step line's ``state_digest`` is kept up to
date from the step's changes, by the writer and by the reader, and is always kvcore's full
computation, ``Snapshot.state_digest()`` (the oracle), on every design and policy.

The reader rejects a changed line, naming the step; a kvviz.timeline/2 output is still read.
And the count: what a step hashes and executes is the same on a 1,000-page and a 100,000-page
pool at the same ops (work counted, never timed).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import sys
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcore import POLICIES, Snapshot
from kvcore.snapshot import PageTable
from kvviz.core.scenario import parse_scenario
from kvviz.core.session import Session
from kvviz.report.state_changes import StateWriter
from kvviz.report.timeline_json import TimelineWriter, read_states


@st.composite
def scenarios(draw) -> str:
    """A scenario on a small pool: requests sharing prompts, published, extended, released;
    the pool fills, so acquires evict (or fail)."""
    kind = draw(st.sampled_from(["trie", "trie", "base", "hash"]), label="kind")
    policy = draw(st.sampled_from(POLICIES), label="policy") if kind == "trie" else None
    pages = draw(st.integers(3, 24), label="pages")
    tpp = draw(st.integers(1, 3), label="tokens_per_page")
    lines = [f"cache {kind} pages={pages} tokens_per_page={tpp}" + (f" policy={policy}" if policy else "")]
    prompts = [[p * 100 + i for i in range(draw(st.integers(1, 7), label="prompt"))] for p in range(3)]
    live: list[str] = []
    fresh = 10_000
    for r in range(draw(st.integers(1, 14), label="requests")):
        own = draw(st.integers(0, 5), label="own tokens")
        tokens = draw(st.sampled_from(prompts), label="prompt") + list(range(fresh, fresh + own))
        fresh += own
        priority = draw(st.integers(0, 3), label="priority")
        lines.append(f"acquire r{r} {' '.join(map(str, tokens))}" + (f" priority={priority}" if priority else ""))
        live.append(f"r{r}")
        if draw(st.booleans(), label="publish"):
            lines.append(f"publish r{r}")
        if draw(st.booleans(), label="extend"):
            lines.append(f"extend r{r} + {fresh} {fresh + 1}")
            fresh += 2
        while live and draw(st.booleans(), label="release"):
            lines.append(f"release {live.pop(draw(st.integers(0, len(live) - 1), label='which'))}")
    return "\n".join(lines) + "\n"


def run_lines(text: str) -> tuple[list[str], list[Snapshot]]:
    """The step lines of ``text`` as `kvviz run --json` streams them (each written as the
    session applies its op, the cache's account of what changed fresh), and each step's
    snapshot."""
    scenario = parse_scenario(text)
    lines: list[str] = []
    snaps: list[Snapshot] = []
    writers: list[TimelineWriter] = []

    def write(frame) -> None:
        lines.extend(writers[0].lines(frame))
        snaps.append(frame.snapshot)

    def start(session) -> None:
        writers.append(TimelineWriter(session, last=len(scenario.steps)))
        write(session.frame(0))

    Session.from_scenario(scenario, on_start=start, on_frame=write)
    return lines, snaps


# -- the oracle ----------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(text=scenarios())
def test_every_steps_state_digest_is_the_full_computation_and_the_reader_rebuilds_it(text):
    lines, snaps = run_lines(text)
    objects = [json.loads(line) for line in lines]
    for obj, snap in zip(objects, snaps):
        assert obj["state_digest"] == snap.state_digest(), obj["step"]
    assert objects[0]["digest"] == snaps[0].digest() and objects[-1]["digest"] == snaps[-1].digest()
    assert all(obj["digest"] is None for obj in objects[1:-1])
    rebuilt = list(read_states(lines, snapshots=False))  # verifies every state_digest on its own account
    assert [state for _, state in rebuilt] == [snap.to_dict() for snap in snaps]


@settings(max_examples=30, deadline=None)
@given(text=scenarios())
def test_the_writer_keeps_the_digest_without_the_caches_account_too(text):
    # Copies made with dataclasses.replace carry no account of what changed: rows compared.
    _, snaps = run_lines(text)
    writer = StateWriter()
    for snap in snaps:
        bare = dataclasses.replace(snap)
        assert writer.write(bare).state_digest == snap.state_digest()


def broken(snap: Snapshot, **fields) -> Snapshot:
    return dataclasses.replace(snap, **fields)


def test_states_a_broken_cache_could_report_keep_the_oracles_digest_step_by_step():
    # A page listed twice in the free list (the digest reads it by position then), a heap
    # slot changed, a table out of id order: the writer follows or starts anew, never wrong.
    _, snaps = run_lines("cache trie pages=8 tokens_per_page=2\nacquire a 1 2 3 4\npublish a\nrelease a\n"
                         "acquire b 5 6\nacquire c 1 2 7 8\n")
    last = snaps[-1]
    free = tuple(last.free)
    states = [
        snaps[-2], last,
        broken(last, free=free + (free[0],)),  # a page twice
        broken(last, free=free + (free[0], free[1])),
        broken(last, free=free[1:] + (free[0],)),  # healthy again
        broken(last, heap=last.heap[::-1] + (99,)),
        broken(last, nodes=last.nodes[::-1]),  # out of id order: written whole
        last,
    ]
    writer = StateWriter()
    lines = []
    for i, snap in enumerate(states):
        written = writer.write(snap)
        assert written.state_digest == snap.state_digest(), i
        lines.append(json.dumps({"type": "step", "step": i, "snapshot": json.loads(written.snapshot or "null"),
                                 "changes": json.loads(written.changes or "null"),
                                 "state_digest": written.state_digest, "digest": written.digest}))
    assert [s for _, s in read_states(lines, snapshots=False)] == [s.to_dict() for s in states]


@pytest.mark.parametrize("kind", ["trie", "hash"])
def test_a_pool_above_65536_pages_keeps_the_oracles_digest(kind):
    # The lazy lists (FreePages, QueuedPages, PageTable) are read by what they store.
    text = (f"cache {kind} pages=66000 tokens_per_page=2\nacquire a 1 2 3 4 5\npublish a\nacquire b 1 2 3 4 9\n"
            "release a\npublish b\nrelease b\nacquire c 7 7 7\n")
    lines, snaps = run_lines(text)
    assert isinstance(snaps[-1].pages, PageTable) and not isinstance(snaps[-1].free, tuple)
    # The oracle costs the pool: held at two steps. A wrong step's error stays in the sum
    # (the accumulator only adds and takes out), so the last step sees every earlier one's.
    for step in (1, len(snaps) - 1):
        assert json.loads(lines[step])["state_digest"] == snaps[step].state_digest(), step
    assert len(list(read_states(lines, snapshots=False))) == len(snaps)


# -- the reader rejects a changed line ------------------------------------------------------------


TEXT = ("cache trie pages=10 tokens_per_page=2\nacquire a 1 2 3 4 5\npublish a\nacquire b 1 2 3 4 6 6\n"
        "publish b\nrelease a\nacquire c 8 8 8 8 8 8 8\nrelease b\nacquire d 1 2 9 9\n")


def tampered(step: int, change) -> list[dict]:
    lines, _ = run_lines(TEXT)
    objects = [json.loads(line) for line in lines]
    change(objects[step])
    return objects


def first_page_row(changes):
    changes["pages"][0][4] += 1


def a_free_edit(changes):
    changes["free"].append([0, 0, [0]])


def a_heap_edit(changes):
    start, delete, items = changes["heap"][0]
    changes["heap"][0] = [start, delete, [n + 1 for n in items]]


def a_row(changes):
    changes["allocations"][0]["hit_tokens"] += 2


TAMPERS = {
    "a page row": (1, lambda o: first_page_row(o["changes"])),
    "a free-list edit": (2, lambda o: a_free_edit(o["changes"])),
    "a heap edit": (7, lambda o: a_heap_edit(o["changes"])),
    "an allocation row": (3, lambda o: a_row(o["changes"])),
    "the clock": (4, lambda o: o["changes"].__setitem__("clock", o["changes"]["clock"] + 5)),
    "the state_digest itself": (5, lambda o: o.__setitem__("state_digest", "0" * 64)),
    "the last line's digest": (8, lambda o: o.__setitem__("digest", "0" * 64)),
    "the first state's row": (0, lambda o: o["snapshot"]["pages"][9].__setitem__(1, "owned")),
}


@pytest.mark.parametrize("tamper", TAMPERS, ids=list(TAMPERS))
def test_the_reader_rejects_a_changed_line_in_one_line_naming_the_step(tamper):
    step, change = TAMPERS[tamper]
    objects = tampered(step, change)
    assert objects[7]["changes"]["heap"], "the heap tamper needs a step whose heap moved"
    with pytest.raises(ValueError) as error:
        list(read_states(objects, snapshots=False))
    message = str(error.value)
    assert message.startswith(f"step {step}: ") and "\n" not in message


def test_a_timeline_2_output_is_still_read_and_checked_by_its_digest_on_every_line():
    lines, snaps = run_lines(TEXT)
    old = []
    for line, snap in zip(lines, snaps):  # as kvviz.timeline/2 wrote it: a digest on every line
        obj = json.loads(line)
        del obj["state_digest"]
        obj["digest"] = snap.digest()
        old.append(obj)
    assert [s for _, s in read_states(old)] == snaps
    changed = copy.deepcopy(old)
    changed[3]["changes"]["clock"] += 1
    with pytest.raises(ValueError, match=r"^step 3: the rebuilt state's digest"):
        list(read_states(changed))


# -- the count: a step's work is what it changed, not the pool ----------------------------------------


def requests(pages: int) -> str:
    """Sixty requests sharing a prompt, half released: the same ops on any pool this size or more."""
    lines = [f"cache trie pages={pages} tokens_per_page=1"]
    for r in range(60):
        lines += [f"acquire r{r} 1 2 3 {1000 + r} {2000 + r} {3000 + r}", f"publish r{r}"]
        if r % 2:
            lines.append(f"release r{r}")
    return "\n".join(lines) + "\n"


@functools.lru_cache(maxsize=2)
def requests_snapshots(pages: int) -> tuple[Snapshot, ...]:
    """The snapshots of :func:`requests` on ``pages`` pages, made once for the three work tests
    (snapshots are frozen: each test runs its own writer and reader over them)."""
    return tuple(run_lines(requests(pages))[1])


def step_work(pages: int, *, trace: str | None) -> list[tuple[int, int, int]]:
    """For each step after the first, of the writer writing its line and the reader applying
    it: (elements hashed, bytes the writer hashed, and with ``trace`` the Python lines run
    (``"lines"``) or the peak bytes allocated (``"memory"``), else 0)."""
    from kvviz.report.state_changes import StateReader

    snaps = requests_snapshots(pages)
    writer, reader = StateWriter(), StateReader()
    reader.whole(json.loads(writer.write(snaps[0]).snapshot))
    work = []
    counted = 0

    def count(frame, event, arg):
        nonlocal counted
        counted += event == "line"
        return count

    for i, snap in enumerate(snaps[1:], 1):
        hashed, hashed_bytes = writer.digest_work.hashed, writer.digest_work.hashed_bytes
        read_hashed = reader.digest_work.hashed
        counted = 0
        if trace == "lines":
            sys.settrace(count)
        elif trace == "memory":
            tracemalloc.start()
        try:
            written = writer.write(snap)
            reader.apply(json.loads(written.changes))
        finally:
            sys.settrace(None)
            if trace == "memory":
                counted = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
        assert reader.state_digest == written.state_digest
        step = (writer.digest_work.hashed - hashed + reader.digest_work.hashed - read_hashed,
                writer.digest_work.hashed_bytes - hashed_bytes, counted)
        assert step[0] < 1000, f"step {i} hashed {step[0]:,} elements on {pages:,} pages: the pool, not its changes"
        work.append(step)
    return work


def test_a_steps_hashing_is_the_same_on_a_1k_and_a_100k_page_pool():
    small, huge = step_work(1_000, trace=None), step_work(100_000, trace=None)
    assert len(small) == len(huge) > 100
    for i, ((h1, b1, _), (h2, b2, _)) in enumerate(zip(small, huge), 1):
        assert h1 == h2, i  # the same elements changed: as many hashed
        assert b2 <= b1 + 12 * h1, i  # page numbers of a bigger pool may be longer, never more


def test_a_steps_python_work_is_the_same_on_a_1k_and_a_100k_page_pool():
    # Lines run, not time: a loop over the pool in Python shows here however fast the machine.
    small, huge = step_work(1_000, trace="lines"), step_work(100_000, trace="lines")
    lines_small, lines_huge = sum(w[2] for w in small), sum(w[2] for w in huge)
    assert lines_huge <= 1.25 * lines_small, (lines_small, lines_huge)


def test_a_steps_memory_is_the_same_on_a_1k_and_a_100k_page_pool():
    # Peak bytes allocated: a copy of a 100,000-page list (800 KB) shows here, even in C.
    small, huge = step_work(1_000, trace="memory"), step_work(100_000, trace="memory")
    peak_small, peak_huge = max(w[2] for w in small), max(w[2] for w in huge)
    assert peak_huge <= 2 * peak_small + 64_000, (peak_small, peak_huge)


# -- the list followers, on any lists -------------------------------------------------------------


def list_digest(name: str, items: list) -> str:
    from kvcore.state_digest import StateDigest, free_elements, placed_element

    digest = StateDigest()
    for element in (free_elements(items) if name == "free" else
                    (placed_element("heap", i, str(v)) for i, v in enumerate(items))):
        digest.add(element)
    return digest.hexdigest()


@st.composite
def list_pairs(draw) -> tuple[list[int], list[int]]:
    """Two lists: unrelated, or the second made from the first as queues and heaps change
    (items taken from the front and given at the back, inserted, removed, swapped)."""
    old = draw(st.lists(st.integers(0, 30), max_size=16), label="old")
    if draw(st.booleans(), label="unrelated"):
        return old, draw(st.lists(st.integers(0, 30), max_size=16), label="new")
    new = old[draw(st.integers(0, len(old)), label="taken from the front"):]
    new += draw(st.lists(st.integers(0, 30), max_size=4), label="given at the back")
    for _ in range(draw(st.integers(0, 3), label="edits")):
        where = draw(st.integers(0, 10**6), label="where")
        what = draw(st.sampled_from(["insert", "remove", "swap"]), label="what")
        if what == "insert":
            new.insert(where % (len(new) + 1), draw(st.integers(0, 30), label="item"))
        elif new and what == "remove":
            del new[where % len(new)]
        elif new:
            i, j = where % len(new), (where // 7) % len(new)
            new[i], new[j] = new[j], new[i]
    return old, new


@settings(max_examples=500, deadline=None)
@given(lists=list_pairs(), name=st.sampled_from(["free", "heap"]))
def test_following_any_list_edit_gives_the_digest_of_the_new_list(lists, name):
    old, new = lists
    # Any lists: pages listed twice (read by position), items moved, inserted, removed
    # anywhere, the length changed mid-list (heap positions after it shift).
    from kvcore.state_digest import StateDigest, free_elements, placed_element
    from kvviz.report.state_changes import _PageCounts, follow_free_list, follow_heap, list_edits

    digest = StateDigest()
    for element in (free_elements(old) if name == "free" else
                    (placed_element("heap", i, str(v)) for i, v in enumerate(old))):
        digest.add(element)
    edits = list_edits(old, new)
    if name == "free":
        follow_free_list(digest, _PageCounts(old), old, new, edits)
    else:
        follow_heap(digest, old, new, edits)
    assert digest.hexdigest() == list_digest(name, new)


@settings(max_examples=200, deadline=None)
@given(size=st.integers(0, 40), moves=st.lists(st.tuples(st.booleans(), st.integers(0, 10**6)), max_size=6))
def test_following_a_distinct_free_list_step_by_step_hashes_only_around_the_edits(size, moves):
    from kvcore.state_digest import StateDigest, free_elements
    from kvviz.report.state_changes import _PageCounts, follow_free_list, list_edits

    free = list(range(size))
    digest = StateDigest()
    for element in free_elements(free):
        digest.add(element)
    counts = _PageCounts(free)
    fresh = 1000
    for insert, pick in moves:
        new = list(free)
        if insert:
            new.insert(pick % (len(new) + 1), fresh)
            fresh += 1
        elif new:
            del new[pick % len(new)]
        edits = list_edits(free, new)
        before = digest.hashed
        counts = follow_free_list(digest, counts, free, new, edits)
        assert digest.hashed - before <= 3 * 2 * len(edits) + 2  # a few pairs around each edit
        assert digest.hexdigest() == list_digest("free", new)
        free = new
