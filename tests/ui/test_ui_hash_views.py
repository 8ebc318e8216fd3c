# SPDX-License-Identifier: Apache-2.0
"""The hash design's views (kvviz/ui/widgets/block_view.py, free_queue_view.py): the cached
blocks by chain with unreachable blocks marked, and the free queue head to tail, mounted in a
small test app on frames of a hash cache built with kvcore; and `kvviz compare` routing a hash
side to them."""

from __future__ import annotations

from contextlib import asynccontextmanager

import pytest
from textual.app import App, ComposeResult

import kvcore
from kvcore import Snapshot
from kvcore.hashblock import HashBlockPagedAttentionCache
from kvviz.backends.kvcore_backend import KvcoreBackend
from kvviz.core.demos import load_demo
from kvviz.compare.engine import SideSpec, run_compare
from kvviz.core.hash_view import EvictedBlock, NotAHashSnapshot, QueueEntry, block_lines, free_queue_title
from kvviz.core.scenario import CacheConfig, parse_command, parse_scenario_file
from kvviz.core.session import Session
from kvviz.core.view import PAGE, FrameView
from kvviz.compare.app import make_diff_app
from kvviz.ui.themes import set_up_appearance, variable_defaults
from kvviz.ui.widgets.block_view import UNREACHABLE, BlockView
from kvviz.ui.widgets.free_queue_view import FreeQueueView
from kvviz.ui.widgets.heap_view import HeapView
from kvviz.ui.widgets.page_grid import PageGrid
from kvviz.ui.widgets.trie_view import TrieView
from tests.ui_fixtures import SMALL

SIZE = (100, 40)
COMPARE_SIZE = (160, 45)

# Tokens of the blocks, two per page.
P, Q, R, S = (1, 2), (3, 4), (5, 6), (15, 16)

OPS = ("acquire z 9 9",  # takes Q's page from the head: Q leaves, R and S stay cached, unreachable
       "acquire a 11 12", "acquire b 11 12 13 14",  # both miss [11 12] and compute it
       "publish a", "publish b",  # b caches its [11 12] as well (vLLM keeps duplicates)
       "release a",
       "acquire c 11 12 13 14")  # matches a's copy of [11 12] (ref 0: it leaves the queue) and b's [13 14]


def _queue_with_q_at_the_head() -> Snapshot:
    """x cached the chain P Q R S and was released; y holds P [7 8]. Then the free queue is
    reordered so Q's page comes first: the ops never queue a parent ahead of its child (see
    test_overlapping_requests_leave_no_block_unreachable), a restored snapshot can."""
    c = kvcore.make_cache("hash", 12, 2)
    x = c.acquire_pages_for_tokens(P + Q + R + S, name="x")
    x.publish_pages_for_tokens()
    q_page = x.pages[1]
    x.release_pages()
    c.acquire_pages_for_tokens(P + (7, 8), name="y").publish_pages_for_tokens()
    d = c.snapshot().to_dict()
    d["free"] = [q_page] + [p for p in d["free"] if p != q_page]
    return HashBlockPagedAttentionCache.restore(Snapshot.from_dict(d)).snapshot()


def hash_session() -> Session:
    """A hash cache's session from that state through :data:`OPS`, on kvcore."""
    start = _queue_with_q_at_the_head()

    def factory(config, snapshot):
        return KvcoreBackend.from_snapshot(snapshot if snapshot is not None else start)

    session = Session(CacheConfig("hash", 12, 2), title="an unreachable chain", backend_factory=factory)
    for text in OPS:
        session.apply(parse_command(text, session.live_names(), session.vocab))
    return session


@pytest.fixture(scope="module")
def session():
    return hash_session()


class HashViewsApp(App[None]):
    """The two hash views, one above the other, showing one frame."""

    CSS = "BlockView { height: 1fr; } FreeQueueView { height: 1fr; }"

    def __init__(self, view: FrameView):
        super().__init__()
        set_up_appearance(self, None, animations=False)
        self.frame_view = view

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return variable_defaults(self.current_theme)

    def compose(self) -> ComposeResult:
        yield BlockView()
        yield FreeQueueView()

    def on_mount(self) -> None:
        self.query_one(BlockView).show(self.frame_view)
        self.query_one(FreeQueueView).show(self.frame_view)


@asynccontextmanager
async def views_on(frame):
    """The block view and the free-queue view, mounted on ``frame``."""
    app = HashViewsApp(FrameView(frame))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        yield app.query_one(BlockView), app.query_one(FreeQueueView)


def texts(view) -> list[str]:
    return [view.row_text(i) for i in range(len(view.rows))]


def block_rows(view: BlockView) -> dict[int, str]:
    """Block id -> the text of its row."""
    return {row.data.block.id: view.row_text(i) for i, row in enumerate(view.rows)
            if getattr(row.data, "block", None) is not None and not isinstance(row.data, EvictedBlock)}


# -- computed from the snapshot alone, without kvviz ---------------------------------------

def parent_not_cached(snap) -> set[int]:
    keys = {b.key for b in snap.blocks}
    return {b.id for b in snap.blocks if b.parent is not None and b.parent not in keys}


def unreachable(snap) -> set[int]:
    """Blocks some key of whose chain, up to a first block, is not cached."""
    by_key = {}
    for b in snap.blocks:
        by_key.setdefault(b.key, b)
    out = set()
    for b in snap.blocks:
        link = b
        while link is not None and link.parent is not None:
            link = by_key.get(link.parent)
        if link is None:
            out.add(b.id)
    return out


# -- the block view ------------------------------------------------------------------------

async def test_the_unreachable_marker_marks_exactly_the_blocks_whose_parent_key_is_not_cached(session):
    marked_somewhere = False
    for index in range(len(session)):
        snap = session.frame(index).snapshot
        async with views_on(session.frame(index)) as (view, _):
            rows = block_rows(view)
            assert sorted(rows) == sorted(b.id for b in snap.blocks)  # every block, once
            marked = {block for block, text in rows.items() if UNREACHABLE in text}
            assert marked == parent_not_cached(snap), index
            assert {block for block, text in rows.items() if "unreachable" in text} == unreachable(snap), index
            marked_somewhere |= bool(marked)
            assert any(text.startswith(f"{UNREACHABLE} unreachable:") for text in texts(view))  # the legend
    assert marked_somewhere


async def test_an_unreachable_chain_sits_apart_with_its_child_below_it(session):
    frame = session.frame(1)  # acquire z took Q's page
    snap = frame.snapshot
    async with views_on(frame) as (view, _):
        lines = texts(view)
        r = next(b for b in snap.blocks if b.tokens == R)
        s = next(b for b in snap.blocks if b.tokens == S)
        r_row = next(i for i, t in enumerate(lines) if t.startswith(f"└─{UNREACHABLE} [5 6] p{r.page}"))
        assert lines[r_row - 1].startswith("unreachable chains")
        assert lines[r_row + 1].startswith(f"  └─○ [15 16] p{s.page} ref 0")
        assert lines[r_row + 1].endswith(" unreachable")
        # Q is listed once more: its page was taken from the head, for z.
        q_page = session.frame(0).snapshot.free[0]
        assert f"✗ [3 4] p{q_page} evicted: its page was taken by z" in lines


async def test_each_block_shows_its_page_ref_and_place_in_the_free_queue(session):
    frame = session.frame(len(session) - 1)
    snap = frame.snapshot
    order = list(snap.free)
    async with views_on(frame) as (view, _):
        rows = block_rows(view)
        for b in snap.blocks:
            ref = snap.pages[b.page].ref
            assert f" p{b.page} ref {ref}" in rows[b.id]
            queued = f" queue #{order.index(b.page)}" if b.page in order else None
            assert (queued is not None and queued in rows[b.id]) == (ref == 0)
            assert ("○ " in rows[b.id] or UNREACHABLE in rows[b.id]) == (ref == 0)


async def test_a_later_copy_of_a_key_says_which_page_lookups_find(session):
    frame = session.frame(5)  # publish b: b's [11 12] is a second copy
    snap = frame.snapshot
    first, second = sorted((b for b in snap.blocks if b.tokens == (11, 12)), key=lambda b: b.id)
    async with views_on(frame) as (view, _):
        rows = block_rows(view)
        assert f"duplicate of p{first.page}" in rows[second.id] and "duplicate" not in rows[first.id]
        assert rows[second.id].endswith(" new")


# -- the free-queue view ---------------------------------------------------------------------

def queued_pages(view: FreeQueueView) -> list[int]:
    """The pages the view lists, head first, folded runs unfolded."""
    out = []
    for row in view.rows:
        if isinstance(row.data, QueueEntry):
            out += range(row.data.page, row.data.page + row.data.count)
    return out


async def test_the_free_queue_view_lists_the_snapshots_queue_in_order(session):
    for index in range(len(session)):
        snap = session.frame(index).snapshot
        async with views_on(session.frame(index)) as (_, view):
            assert queued_pages(view) == list(snap.free), index
            entries = [(i, row.data) for i, row in enumerate(view.rows) if isinstance(row.data, QueueEntry)]
            for i, entry in entries:
                text = view.row_text(i)
                block = snap.block_for_page(entry.page)
                if block is None:
                    assert " empty" in text
                else:
                    assert f" caches [{' '.join(map(str, block.tokens))}]" in text
                    assert (UNREACHABLE in text) == (block.id in unreachable(snap))
                assert text.endswith("← next page taken") == (entry.position == 0)
                if index and entry.count == 1:  # joined in this step: queued now, not before
                    assert (" joined" in text) == (entry.page not in session.frame(index - 1).snapshot.free)


async def lines_at(session, index: int) -> list[str]:
    async with views_on(session.frame(index)) as (_, queue):
        return texts(queue)


async def test_pages_that_left_the_queue_are_listed_with_what_took_them(session):
    head = session.frame(0).snapshot.free[0]  # Q's page, taken for z
    assert f"left: taken by z: p{head}✗ (✗ its block evicted)" in await lines_at(session, 1)
    last = len(session) - 1
    before = session.frame(last - 1).snapshot
    queued_copy = next(b.page for b in before.blocks if b.tokens == (11, 12) and before.pages[b.page].ref == 0)
    assert f"left: matched again by c: p{queued_copy}" in await lines_at(session, last)


def test_the_free_queue_title_counts_queued_pages_and_those_still_caching_a_block(session):
    for index in range(len(session)):
        snap = session.frame(index).snapshot
        cached = sum(1 for p in snap.free if snap.pages[p].state == "cached")
        pages = len(snap.free)
        assert free_queue_title(snap) == f"Free queue · {pages} page{'s' if pages != 1 else ''} · {cached} cached"


# -- other kinds are not theirs --------------------------------------------------------------

async def test_a_trie_snapshot_is_refused_by_both_views():
    trie = Session.from_scenario(parse_scenario_file(SMALL))
    frame = trie.frame(3)
    with pytest.raises(NotAHashSnapshot):
        block_lines(frame.snapshot)
    with pytest.raises(NotAHashSnapshot):
        free_queue_title(frame.snapshot)
    async with views_on(frame) as (blocks, queue):
        assert texts(blocks) == ["trie cache: no hash blocks (this view shows a hash cache's blocks)"]
        assert texts(queue) == ["trie cache: no free queue (this view shows a hash cache's)"]


@pytest.fixture(scope="module")
def trie_and_hash():
    return run_compare(load_demo("dedup"), SideSpec("trie", "lru"), SideSpec("hash"))


async def test_compare_gives_a_hash_side_the_block_and_free_queue_views(trie_and_hash):
    app = make_diff_app(trie_and_hash, animations=False)
    async with app.run_test(size=COMPARE_SIZE) as pilot:
        await pilot.pause()
        left, right = app.query_one("#left-side"), app.query_one("#right-side")
        assert [type(w) for w in left.query("TrieView, HeapView, BlockView, FreeQueueView")] == [TrieView, HeapView]
        assert [type(w) for w in right.query("TrieView, HeapView, BlockView, FreeQueueView")] == [BlockView,
                                                                                                   FreeQueueView]
        snap = trie_and_hash.right.session.frame(app.step).snapshot
        assert app.widget("right", "queue").border_title == free_queue_title(snap)
        assert app.widget("right", "blocks").view.frame is trie_and_hash.right.session.frame(app.step)


async def test_a_block_selected_on_a_hash_side_selects_its_page_in_that_column(trie_and_hash):
    last = len(trie_and_hash) - 1
    app = make_diff_app(trie_and_hash, last, animations=False)
    async with app.run_test(size=COMPARE_SIZE) as pilot:
        await pilot.pause()
        blocks = app.widget("right", "blocks")
        block = trie_and_hash.right.session.frame(last).snapshot.blocks[-1]
        blocks.post_message(BlockView.BlockSelected(blocks, block.id, block.page))
        await pilot.pause()
        assert (app.selection["right"].kind, app.selection["right"].id) == (PAGE, block.page)
        assert app.selection["left"] is None
        assert block.page in app.widget("right", "pool").view.highlight.pages
        assert blocks.is_linked(block.page) and app.widget("right", "queue").is_linked(block.page)


def test_overlapping_requests_leave_no_block_unreachable():
    """Why the session above restores a reordered queue: two requests computing the same
    prefix both cache it (vLLM keeps duplicates), so the child's parent key outlives the
    first copy's page. A kvcore change that makes this leave an unreachable block should
    say so here, and the fixture can then use ops alone."""
    c = kvcore.make_cache("hash", 6, 2)
    a = c.acquire_pages_for_tokens(P)
    b = c.acquire_pages_for_tokens(P + Q)
    a.publish_pages_for_tokens()
    b.publish_pages_for_tokens()
    a.release_pages()
    b.release_pages()
    for n in range(6):  # take every page, one at a time, from the head
        c.acquire_pages_for_tokens((100 + 2 * n, 101 + 2 * n))
        assert all(block.reachable for block in c.snapshot().blocks)
        assert not parent_not_cached(c.snapshot())


def test_snapshot_of_compare_with_a_hash_side(snap_compare):
    run = run_compare(parse_scenario_file(SMALL), SideSpec("trie", "lru"), SideSpec("hash"))
    assert snap_compare(make_diff_app(run, 6, animations=False), terminal_size=COMPARE_SIZE)
