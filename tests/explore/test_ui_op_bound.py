# SPDX-License-Identifier: Apache-2.0
"""A scenario whose one op takes or gives back more pages than the UI shows in bounded time is
refused before any op runs, in one line (exit 2); the same file prints, checks and writes JSON
under their own bounds. The edge itself opens."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from kvviz.cli import cli
from kvviz.commands import BadInput, refuse_ui_too_big
from kvviz.core.limits import MAX_UI_OP_PAGES
from kvviz.core import session as session_module
from kvviz.core.scenario import parse_scenario


def big_last(pages: int, tokens_per_page: int = 1) -> str:
    """A small story, then one acquire of ``pages`` pages as its last op."""
    return (f"cache trie pages={pages + 64} tokens_per_page={tokens_per_page}\nacquire a 1..32\npublish a\n"
            f"release a\nacquire big 100..{100 + pages * tokens_per_page - 1}\n")


def test_an_op_of_one_page_more_than_the_bound_is_refused_before_any_op_runs(tmp_path, monkeypatch):
    path = tmp_path / "big-last.kvs"
    path.write_text(big_last(MAX_UI_OP_PAGES + 1))

    def no_run(*_args, **_kwargs):
        raise AssertionError("an op ran before the bound was checked")

    monkeypatch.setattr(session_module.Session, "from_scenario", no_run)
    result = CliRunner().invoke(cli, ["run", str(path)])
    assert result.exit_code == 2 and len(result.output.splitlines()) == 1
    assert f"one op may take or give back {MAX_UI_OP_PAGES + 1:,} pages" in result.output
    assert "--print, --json or kvviz check" in result.output


@pytest.mark.parametrize("tokens_per_page", [1, 16])
def test_an_op_at_the_bound_opens(tokens_per_page):
    refuse_ui_too_big(parse_scenario(big_last(MAX_UI_OP_PAGES, tokens_per_page)))
    with pytest.raises(BadInput):
        refuse_ui_too_big(parse_scenario(big_last(MAX_UI_OP_PAGES + 1, tokens_per_page)))


def test_the_bound_counts_an_extended_allocation_and_never_more_than_the_pool():
    grown = parse_scenario(f"cache trie pages=20000 tokens_per_page=1\nacquire a 1..6000\nextend a + 6001..12000\n")
    with pytest.raises(BadInput, match="12,000 pages"):
        refuse_ui_too_big(grown)
    small_pool = parse_scenario("cache trie pages=100 tokens_per_page=1\nacquire a 1..50000\n")
    refuse_ui_too_big(small_pool)  # it fails to fit: at most the pool's 100 pages change
