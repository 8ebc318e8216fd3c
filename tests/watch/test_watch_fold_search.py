# SPDX-License-Identifier: Apache-2.0
"""The watch UI on the shared vLLM recording at 120x36: chains folded into one row each (enter
unfolds), search by hash prefix, token ids or text (n / N walk the hits), and the insight pane
(--explain's verdict, what the batch matched, the hot prefixes)."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import pytest

pytest.importorskip("msgspec", reason="the watch extra is not installed")

from kvviz.watch.recording import read_recording  # noqa: E402
from kvviz.watch.wire import key_label  # noqa: E402
from kvviz.watch.timeline import WatchTimeline  # noqa: E402
from kvviz.watch.explain import explain  # noqa: E402
from kvviz.watch.to_kvs import scaled_prompt  # noqa: E402
from kvviz.watch.widgets.forest_view import FoldedRun, fold_runs, forest_lines  # noqa: E402
from kvviz.watch.app import make_watch_app  # noqa: E402

pytestmark = pytest.mark.usefixtures("colours_on_in_a_scratch_directory")  # as in tests/ui: snapshots in colour, exports in tmp

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
VLLM = DATA / "kv-events" / "vllm-0.33.0-conversation-400.jsonl"
TRACE = DATA / "mooncake" / "conversation_trace.jsonl"
SIZE = (120, 36)


@lru_cache(maxsize=1)
def messages():
    return read_recording(VLLM)


def timeline() -> WatchTimeline:
    return WatchTimeline.from_messages(messages(), source=str(VLLM))


def prompt_of(i: int) -> tuple[int, ...]:
    with open(TRACE, encoding="utf-8") as lines:
        request = json.loads(next(line for n, line in enumerate(lines) if n == i))
    return scaled_prompt(request["hash_ids"], request["input_length"], 16)


def folded_rows(app) -> list[tuple[int, FoldedRun]]:
    return [(i, row.data) for i, row in enumerate(app.forest.rows) if isinstance(row.data, FoldedRun)]


def test_a_straight_chain_folds_and_a_branch_point_ends_it():
    frame = timeline().frame(120)
    lines = forest_lines(frame.state, frame.effect)
    parts = fold_runs(lines)
    runs = [part for part in parts if isinstance(part, FoldedRun)]
    assert sum(len(run.lines) for run in runs) + sum(1 for p in parts if not isinstance(p, FoldedRun)) == len(lines)
    for run in runs:
        for above, below in zip(run.lines, run.lines[1:]):
            assert below.block.parent == above.block.key
            # a run's block has exactly one child drawn: a branch point ends the run
            assert sum(1 for line in lines if line.block.parent == above.block.key) == 1


async def test_at_step_120_the_requests_chain_of_169_blocks_is_one_row_with_its_marks():
    app = make_watch_app(timeline(), step=120)
    async with app.run_test(size=SIZE):
        # Batch 120 is request 119: it stored a chain of 169 blocks and removed 169 older ones.
        stored = [(i, run) for i, run in folded_rows(app) if run.stored == 169]
        assert len(stored) == 1 and len(stored[0][1].lines) == 169
        text = app.forest.row_text(stored[0][0])
        assert "×169 blocks, tokens 16..2719" in text and "+169 stored" in text
        assert len(text) <= app.forest.scrollable_content_region.width
        removed = sum(run.removed for _, run in folded_rows(app))
        assert removed == 169 and all(f"✗{run.removed} removed" in app.forest.row_text(i)
                                      for i, run in folded_rows(app) if run.removed)
        assert len(app.forest.rows) < 300  # 2,998 cached blocks, one row each before folding


async def test_enter_unfolds_the_chain_under_the_cursor_and_folds_it_again():
    app = make_watch_app(timeline(), step=120)
    async with app.run_test(size=SIZE) as pilot:
        index, run = next((i, r) for i, r in folded_rows(app) if r.stored == 169)
        item = app.forest.rows[index].item
        app.forest.move_cursor(item, post=False)
        before = len(app.forest.rows)
        await pilot.press("enter")
        await pilot.pause()
        assert len(app.forest.rows) == before + 168
        assert not any(r is run or r.lines == run.lines for _, r in folded_rows(app))
        await pilot.press("enter")
        await pilot.pause()
        assert len(app.forest.rows) == before


async def test_search_finds_a_block_by_hash_prefix_and_n_walks_the_hits_unfolding_them():
    app = make_watch_app(timeline(), step=120)
    async with app.run_test(size=SIZE) as pilot:
        run = next(r for _, r in folded_rows(app) if r.stored == 169)
        hidden = run.lines[100].block  # folded away
        assert app.search(key_label(hidden.key, 0)[:10]) == 1
        await pilot.pause()
        assert app.forest.cursor == (hidden.key, hidden.medium)
        assert app.forest.rows[app.forest._item_row[app.forest.cursor]].data.block is hidden
        # token ids: the block's tokens 3..6 are found in it and nowhere else
        assert app.search(" ".join(map(str, hidden.tokens[3:7]))) == 1
        root = app.forest.lines[0].block
        found = app.search(str(root.tokens[0]))  # a single id: every block holding it
        assert found >= 1
        first = app.forest.cursor
        await pilot.press("n")
        await pilot.press("N")
        assert app.forest.cursor == first


async def test_slash_asks_what_to_find():
    from kvviz.ui.screens.prompt_screen import PromptScreen

    app = make_watch_app(timeline(), step=120)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("slash")
        await pilot.pause()
        assert isinstance(app.screen, PromptScreen)


async def test_the_insight_pane_explains_the_prompt_at_the_step_shown_and_the_batch_it_shows():
    prompt = prompt_of(119)
    app = make_watch_app(timeline(), step=119, prompt=prompt)
    async with app.run_test(size=SIZE) as pilot:
        text = str(app.query_one("#insight").render())
        expected = explain(app.timeline, prompt, 119)
        assert text.startswith(expected.lines()[0])
        app.go_to(120)
        await pilot.pause()
        text = str(app.query_one("#insight").render())
        assert text.startswith("hit (proven by the stream) at step 120")
        assert "this batch's request matched 1 cached block (16 tokens) and stored 169" in text
        from kvviz.watch.hot import hot_prefixes

        assert "hot prefixes (batches 1..400)" in text and hot_prefixes(messages())[0].line() in text


async def test_the_forest_shows_each_blocks_text_beside_its_tokens(tmp_path):
    pytest.importorskip("tokenizers", reason="the watch extra is not installed")
    from tests.watch.tiny_tokenizer import write_recording, write_tokenizer

    from kvviz.core.tokenizer_file import load_tokenizer

    tokenizer_file, recording = tmp_path / "tokenizer.json", tmp_path / "r.jsonl"
    write_tokenizer(tokenizer_file)
    write_recording(recording)
    timeline = WatchTimeline.from_messages(read_recording(recording))
    app = make_watch_app(timeline, tokenizer=load_tokenizer(str(tokenizer_file)))
    async with app.run_test(size=(120, 36)):
        text = "\n".join(app.forest.row_text(i) for i in range(len(app.forest.rows)))
        assert "'the cat sat on'" in text and "'the mat a red'" in text
        assert app.search("mat a") == 1


async def test_following_a_live_stream_does_not_explain_or_rank_again_on_every_batch(monkeypatch):
    from tests.watch.watch_fixtures import QuietSubscriber, received

    import kvviz.watch.explain as explaining
    import kvviz.watch.hot as hot

    calls = {"explain": 0, "hot": 0}
    real_explain, real_hot = explaining.explain, hot.hot_prefixes

    def counted_explain(*args, **kwargs):
        calls["explain"] += 1
        return real_explain(*args, **kwargs)

    def counted_hot(*args, **kwargs):
        calls["hot"] += 1
        return real_hot(*args, **kwargs)

    monkeypatch.setattr(explaining, "explain", counted_explain)
    monkeypatch.setattr(hot, "hot_prefixes", counted_hot)
    app = make_watch_app(WatchTimeline("tcp://127.0.0.1:5557"), subscriber=QuietSubscriber(), prompt=prompt_of(5))
    async with app.run_test(size=SIZE) as pilot:
        for message in messages()[:100]:
            app.receive([received(message)])
            await pilot.pause()
        assert app.step == 100 and app.following
        assert calls["explain"] <= 3 and calls["hot"] <= 3  # at the start, then after 64 more batches
        text = str(app.query_one("#insight").render())
        assert "at step 64" in text or "at step 65" in text  # the verdict shown names its step
        app.action_previous_step()  # paused: the step shown is explained exactly
        await pilot.pause()
        assert "at step 99" in str(app.query_one("#insight").render())
