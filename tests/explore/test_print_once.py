# SPDX-License-Identifier: Apache-2.0
"""`kvviz run --print` reads as a listing, not a form: the legends once at the top, each
expect as it was written, a failed `expect victim` on an empty heap in words."""

from __future__ import annotations

from click.testing import CliRunner

from kvviz.cli import cli
from kvviz.report.text import BLOCK_TABLE_LEGEND, PAGE_LEGEND


def printed(*args: str) -> str:
    result = CliRunner().invoke(cli, ["run", *args, "--print"], prog_name="kvviz")
    assert result.exit_code in (0, 1), result.output
    return result.stdout


def test_the_page_legend_prints_once_for_a_whole_timeline():
    text = printed("lru")
    assert text.count(PAGE_LEGEND[:30]) == 1
    assert text.count(BLOCK_TABLE_LEGEND[:30]) == 1
    assert text.index(PAGE_LEGEND[:30]) < text.index("step 0/")


def test_one_step_printed_alone_keeps_its_legend():
    assert printed("lru", "--step", "3").count(PAGE_LEGEND[:30]) == 1


def test_a_scoped_expect_prints_as_written_not_expect_expect():
    text = printed("base-vs-trie")
    assert "[trie base] expect hit r1 0: ok" in text
    assert "expect [" not in text


def test_a_failed_expect_victim_on_an_empty_heap_says_there_is_no_victim(tmp_path):
    script = tmp_path / "victim.kvs"
    script.write_text("cache trie pages=4 tokens_per_page=2\nacquire a 1..4\nexpect victim 0\n")
    text = printed(str(script))
    assert "expected victim 0, got no victim (nothing is evictable)" in text
    assert "None" not in text
