# SPDX-License-Identifier: Apache-2.0
"""Generated narration of each step, and the why-queries: why was a page evicted, why did an
allocation match only k pages."""

import pytest

from kvviz.core.narrate import narrate
from kvviz.core.scenario import parse_scenario
from kvviz.core.session import Session
from kvviz.core.why import why_evicted, why_short_match

# Step 9 matches a's first page, then evicts a's second page (the oldest leaf) and x's second
# page, which makes x's first page a leaf. h stays referenced throughout.
EVICTIONS = """\
cache trie pages=6 tokens_per_page=4
acquire a 1..8
publish a
release a
acquire x 30..37
publish x
release x
acquire h 50..53
publish h
acquire b 1..4 9..20
acquire r 60..67
"""


def session_of(text: str) -> Session:
    return Session.from_scenario(parse_scenario(text))


def one_line(text: str) -> str:
    return " ".join(text.split())


# -- narration --------------------------------------------------------------------------------


def test_an_acquire_that_matches_and_evicts_says_how_much_matched_and_what_was_evicted_when_last_used():
    text = session_of(EVICTIONS).frame(9).explanation
    assert text.startswith("acquire b: matched 1 of 4 full pages (4 of 16 tokens)")
    assert "evicted page 1 [5 6 7 8], last used at tick 2, the oldest unreferenced leaf" in text
    assert "evicted page 3 [34 35 36 37], last used at tick 5, the next oldest" in text
    assert "its parent node 3 became a leaf and a candidate" in text
    assert "took page 5 from the free list" in text


def test_a_publish_of_a_block_someone_published_first_says_it_was_deduplicated():
    session = session_of("acquire a 1..4\nacquire b 1..4 5\npublish a\npublish b\n")
    text = session.frame(4).explanation
    assert "block 0 was already cached by another allocation (node 1)" in text
    assert "adopted page 0 and returned its own copy, page 1" in text
    assert session.frame(4).snapshot.stats.dedups == 1


def test_a_publish_says_which_blocks_it_cached_on_which_pages():
    text = session_of("acquire a 1..9\npublish a\n").frame(2).explanation
    assert text == "publish a: cached [1 2 3 4] as node 1 on page 0; cached [5 6 7 8] as node 2 on page 1."


def test_a_second_publish_says_there_is_nothing_new_and_that_it_refreshed_the_path():
    text = session_of("acquire a 1..8\npublish a\npublish a\n").frame(3).explanation
    assert "nothing new to share" in text
    assert "refreshed 2 nodes already on its path" in text


def test_a_release_says_which_refs_it_dropped_what_became_evictable_and_what_went_back_to_the_pool():
    text = session_of(EVICTIONS).frame(3).explanation
    assert text == ("release a: dropped its reference on 2 nodes; node 2 (page 1) is now unreferenced and "
                    "childless: an eviction candidate with key (2, 2).")
    tail = session_of("acquire a 1..6\npublish a\nrelease a\n").frame(3).explanation
    assert "returned unpublished page 1 to the free list" in tail


def test_a_failed_op_says_why_and_that_nothing_changed():
    session = session_of(EVICTIONS)
    text = session.frame(10).explanation
    assert text.startswith("acquire r failed (CacheAllocationFailure): cannot acquire 8 tokens")
    assert text.endswith("Nothing changed.")
    assert session.frame(10).snapshot == session.frame(9).snapshot


def test_an_extend_within_its_pages_says_they_had_room():
    text = session_of("acquire a 1..5 extra=3\nextend a + 6 7\n").frame(2).explanation
    assert text == "extend a: its pages already had room."


def test_the_base_cache_narrates_that_nothing_is_shared():
    session = session_of("cache base pages=4 tokens_per_page=4\nacquire a 1..4\npublish a\n")
    assert "no sharing in the base cache" in session.frame(1).explanation
    assert "the base cache shares nothing" in session.frame(2).explanation


def test_narration_shows_words_where_the_script_spelled_words():
    text = session_of('acquire a "you are a helpful assistant" 1..3\npublish a\n').frame(2).explanation
    assert "cached [you are a helpful] as node 1 on page 0" in text
    assert "cached [assistant 1 2 3] as node 2 on page 1" in text


def test_narrate_without_events_or_labeler_describes_the_start():
    session = session_of("acquire a 1\n")
    assert narrate("", None, None, (), None, session.frame(0).snapshot, None) == (
        "Start: a trie cache of 8 pages, 4 tokens per page; 8 pages free.")


# -- why was page P evicted? ------------------------------------------------------------------


def test_why_evicted_lists_the_candidates_oldest_first_with_the_victim_first():
    answer = why_evicted(session_of(EVICTIONS), 10, 1)
    assert answer.title == "Why was page 1 evicted? (step 9)"
    assert answer.step == 9 and answer.pages == (1,) and answer.nodes == (2,)
    lines = [line.strip() for line in answer.lines]
    start = lines.index("Candidates at that moment (childless, ref 0), oldest first:")
    assert lines[start + 1:start + 3] == [
        "node 2 page 1 [5 6 7 8] key (2, 2)  <- evicted",
        "node 4 page 3 [34 35 36 37] key (5, 4)",
    ]


def test_why_evicted_names_the_protected_pages_and_who_holds_them():
    lines = [line.strip() for line in why_evicted(session_of(EVICTIONS), 10, 1).lines]
    protected = lines[lines.index("Protected (referenced, so never evicted):") + 1:]
    assert "page 4 (node 5, ref 1: h)" in protected
    assert "page 0 (node 1: just matched by b)" in protected
    assert "Unreferenced but interior (evictable only after their children): node 3 page 2" in lines


def test_why_evicted_says_how_the_step_needed_pages_and_the_victims_key():
    text = why_evicted(session_of(EVICTIONS), 10, 1).text()
    assert "Step 9: `acquire b 1..4 9..20` needed pages; the free list had 1" in text
    assert "Page 1 held node 2 [5 6 7 8] with key (2, 2) (last used at tick 2" in text


def test_why_evicted_for_a_second_eviction_of_a_step_shows_the_candidates_when_it_was_chosen():
    # Node 3 became a candidate only because its child (the victim, node 4) was evicted, and
    # node 2 had already gone earlier in the step: neither was a candidate at that moment.
    answer = why_evicted(session_of(EVICTIONS), 10, 3)
    lines = [line.strip() for line in answer.lines]
    start = lines.index("Candidates at that moment (childless, ref 0), oldest first:")
    assert lines[start + 1] == "node 4 page 3 [34 35 36 37] key (5, 4)  <- evicted"
    assert not any(line.startswith(("node 3 ", "node 2 ")) for line in lines)
    assert "Unreferenced but interior (evictable only after their children): node 3 page 2" in lines


def test_why_evicted_for_a_page_never_evicted_says_so_and_its_state():
    answer = why_evicted(session_of(EVICTIONS), 10, 4)
    assert answer.title == "Page 4 has not been evicted up to step 10."
    assert answer.lines[0].startswith("It is cached at step 10: node 5 holds [50 51 52 53] with key (8, 5)")
    assert answer.step is None


def test_why_evicted_before_the_eviction_happened_says_it_has_not_been_evicted_yet():
    answer = why_evicted(session_of(EVICTIONS), 8, 1)
    assert answer.title == "Page 1 has not been evicted up to step 8."
    assert answer.lines[0].startswith("It is cached at step 8:")


# -- a page that was not evicted: where it is and what protects it ----------------------------


def test_a_live_referenced_page_names_its_key_and_who_protects_it():
    lines = why_evicted(session_of(EVICTIONS), 10, 4).lines
    assert lines == (
        "It is cached at step 10: node 5 holds [50 51 52 53] with key (8, 5) (last used at tick 8; seq 5, its "
        "creation order, breaks ties).",
        "It is protected: ref 1, on the published path of h. A referenced node is never evicted; it becomes "
        "evictable when h is released.",
    )


def test_a_live_candidate_page_gives_its_rank_in_the_heap_and_the_next_victim():
    # After step 6 the candidates are node 2 (page 1, key (2, 2)) and node 4 (page 3, key (5, 4)).
    session = session_of(EVICTIONS)
    first, second = why_evicted(session, 6, 1).lines[1], why_evicted(session, 6, 3).lines[1]
    assert first == ("It is evictable and the next victim: the oldest key of the 2 eviction candidates in the "
                     "heap. The next acquire that needs more than the 2 free pages takes its page first.")
    assert second == ("It is evictable: eviction candidate 2 of 2 in the heap, oldest key first; 1 candidate with "
                      "older keys go before it (the next victim is node 2 (page 1) key (2, 2)).")


def test_a_live_interior_page_names_its_children_and_the_referenced_nodes_below_it():
    session = session_of("acquire a 1..8\npublish a\nrelease a\nacquire b 1..8\npublish b\n")
    lines = why_evicted(session, 3, 0).lines  # a released: node 1 (page 0) has child node 2, ref 0
    assert lines[1] == ("It is evictable but not a candidate yet: ref 0, but it has 1 child node (node 2 (page 1)). "
                        "Only leaves are evicted: it goes only after everything below it.")
    assert len(lines) == 2
    assert "It is protected: ref 1, on the published path of b." in why_evicted(session, 5, 0).lines[1]


def test_a_free_or_owned_page_says_where_it_is():
    session = session_of("cache trie pages=4 tokens_per_page=2\nacquire a 1 2 3\n")
    assert why_evicted(session, 1, 3).lines == (  # pages 2 and 3 are free, in that order
        "It is free at step 1: no node or allocation holds it. It is number 2 of 2 in the free list; acquires "
        "take free pages from the front.",)
    assert why_evicted(session, 1, 1).lines[0].startswith("It is owned at step 1: block 1 of a, not published yet.")
    assert why_evicted(session, 1, 9).title == "Page 9 does not exist."


def test_why_evicted_lists_the_unpublished_tails_of_live_allocations_as_protected():
    session = session_of("cache trie pages=3 tokens_per_page=2\nacquire a 1 2\npublish a\nrelease a\n"
                         "acquire t 9 9 9\nacquire u 5 6\n")
    lines = [line.strip() for line in why_evicted(session, 5, 0).lines]
    assert "page 1 (unpublished tail of t)" in lines
    assert "page 2 (unpublished tail of t)" in lines


# -- why did A match only k pages? -------------------------------------------------------------


def test_why_short_match_for_a_block_never_seen_after_its_prefix():
    answer = why_short_match(session_of(EVICTIONS), 10, "b")
    assert answer.title == "Why did b match 1 of 4 full pages? (step 9)"
    assert answer.lines[0] == ("`acquire b 1..4 9..20` matched 4 of 16 tokens: block 1 [9 10 11 12] is not a child "
                               "of node 1.")
    assert answer.lines[1] == ("Block 1 [9 10 11 12] was never seen after this prefix: no earlier request "
                               "published it under node 1.")


def test_why_short_match_for_a_block_that_was_cached_and_evicted_names_the_step():
    session = session_of("cache trie pages=6 tokens_per_page=4\nacquire a 1..4\npublish a\nrelease a\n"
                         "acquire f 10..33\nrelease f\nacquire b 1..8\n")
    answer = why_short_match(session, 6, "b")
    assert answer.title == "Why did b match 0 of 2 full pages? (step 6)"
    text = answer.text()
    assert "Block 0 [1 2 3 4] was cached as node 1 under the root at step 2 (`publish a`)" in text
    assert "It was evicted at step 4 (`acquire f 10..33`)" in text
    assert answer.nodes == (1,)


def test_why_short_match_for_the_same_tokens_under_another_parent_explains_shared_prefixes():
    session = session_of("acquire a 1..8\npublish a\nacquire b 5..8 9..12\n")
    answer = why_short_match(session, 3, "b")
    assert answer.title == "Why did b match 0 of 2 full pages? (step 3)"
    text = one_line(answer.text())
    assert "Block 0 [5 6 7 8] is cached, but after a different prefix (node 2, under node 1)" in text
    assert "(a shorter shared prefix)" in text
    assert answer.nodes == (2,)


def test_why_short_match_for_a_partial_last_page_says_partial_pages_are_never_shared():
    session = session_of("acquire a 1..4\npublish a\nacquire b 1..6\n")
    answer = why_short_match(session, 3, "b")
    assert answer.title == "Why did b match 1 of 1 full page? (step 3)"
    assert answer.lines == ("`acquire b 1..6` matched 4 of 6 tokens: the full page matched; the last 2 tokens fill "
                            "a partial page, never shared.",)  # said once (it was said twice)


def test_why_short_match_for_a_failed_acquire_says_it_changed_nothing():
    answer = why_short_match(session_of(EVICTIONS), 10, "r")
    assert answer.title == "The acquire of r at step 10 failed: it matched nothing and changed nothing."
    assert answer.lines[0].startswith("cannot acquire 8 tokens")


@pytest.mark.parametrize("name,frame", [("nobody", 10), ("b", 8)])
def test_why_short_match_without_an_acquire_up_to_the_frame_says_so(name, frame):
    answer = why_short_match(session_of(EVICTIONS), frame, name)
    assert answer.title == f"No acquire of {name!r} up to step {frame}."
    assert answer.lines == ()


def test_why_short_match_on_the_base_cache_says_it_never_shares():
    session = session_of("cache base pages=4 tokens_per_page=4\nacquire a 1..4\npublish a\nacquire b 1..4\n")
    assert "The base cache never shares pages" in why_short_match(session, 3, "b").text()


def test_why_short_match_answers_for_the_latest_acquire_of_a_reused_name():
    session = session_of("acquire a 1..4\npublish a\nrelease a\nacquire a 1..8\n")
    answer = why_short_match(session, 4, "a")
    assert answer.title == "Why did a match 1 of 2 full pages? (step 4)"
    assert why_short_match(session, 3, "a").title == "Why did a match 0 of 1 full page? (step 1)"


# -- one numbering, the right number, the scenario's units ------------------------------------


def test_narration_counts_one_page_and_one_token_in_the_singular():
    session = session_of("cache trie pages=1 tokens_per_page=1\nacquire a 1\n")
    assert session.frame(0).explanation == "Start: a trie cache of 1 page, 1 token per page; 1 page free."
    assert session.frame(1).explanation.startswith("acquire a: matched 0 of 1 full page (0 of 1 token)")


def test_a_converted_trace_narrates_its_match_in_blocks_of_the_traces_size():
    from kvviz.core.narrate import Units

    session = session_of("cache trie pages=40 tokens_per_page=1\nacquire q1 0..13\npublish q1\nrelease q1\n"
                         "acquire q2 0 14..27\n")
    frame, before = session.frame(4), session.frame(3).snapshot
    text = narrate(frame.op.text, "acquire", "q2", frame.events, before, frame.snapshot, None, units=Units(512))
    assert text.startswith("acquire q2: matched 1 of 15 blocks (of 512 tokens)")
    answer = why_short_match(session, 4, "q2", units=Units(512))
    assert answer.title == "Why did q2 match 1 of 15 blocks? (step 4)"
    assert answer.lines[0] == ("`acquire q2 0 14..27` matched 1 of 15 blocks (of 512 tokens): block 1 [14] is not a "
                               "child of node 1.")


def test_the_event_log_names_nodes_by_id_with_their_pages_and_logical_blocks_as_blocks():
    from kvcore import events as ev

    from kvviz.core.narrate import describe_event

    session = session_of(EVICTIONS)
    frame = session.frame(9)
    matched = next(e for e in frame.events if isinstance(e, ev.Matched))
    assert describe_event(matched, session.label_tokens, frame.op.tokens, 4) == (
        "matched node 1 (page 0): 4 of 16 tokens (block 1 [9 10 11 12] is not a child of node 1)")
    touched = next(e for e in frame.events if isinstance(e, ev.Touched))
    assert describe_event(touched) == f"touched node 1: last_access = {touched.tick}"
    evicted = frame.evictions[0]
    assert describe_event(evicted) == "evicted node 2 (page 1) [5 6 7 8] key (2, 2)"


def test_the_event_log_shows_words_where_the_script_spelled_words():
    from kvcore import events as ev

    from kvviz.core.narrate import describe_event

    session = session_of('acquire a "you are a helpful assistant" 1..3\npublish a\nrelease a\n'
                         'acquire b "you are a helpful" 7 8 9 10\n')
    frame = session.frame(4)
    matched = next(e for e in frame.events if isinstance(e, ev.Matched))
    assert describe_event(matched, session.label_tokens, frame.op.tokens, 4).endswith(
        "(block 1 [7 8 9 10] is not a child of node 1)")
    created = session.frame(2).events
    assert any(describe_event(e, session.label_tokens) == "new node 1 (page 0) under the root: [you are a helpful]"
               for e in created)


@pytest.mark.parametrize("tokens, matched, expected", [
    ((1, 2, 3, 4, 5), 1, "the full page matched; the last token fills a partial page, never shared"),
    ((1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 2,
     "all 2 full pages matched; the last 2 tokens fill a partial page, never shared"),
    ((1, 2, 3, 4), 1, "the full page matched"),
    ((1, 2, 3), 0, "3 tokens fill no full page; a partial page is never shared"),
    ((1,), 0, "1 token fills no full page; a partial page is never shared"),
    ((1, 2, 3, 4, 5, 6, 7, 8), 0, "block 0 [1 2 3 4] is not a child of the root"),
])
def test_match_stop_says_where_a_match_ended_in_blocks_and_in_the_right_number(tokens, matched, expected):
    from kvviz.core.narrate import match_stop

    assert match_stop(tokens, matched, 4) == expected


def test_a_step_that_evicts_many_pages_tells_three_and_sums_up_the_rest():
    # Ten one-page requests published and released, then one that needs all ten pages.
    script = "cache trie pages=10 tokens_per_page=1\n" + "".join(
        f"acquire r{i} {i}\npublish r{i}\nrelease r{i}\n" for i in range(10)) + "acquire big 100..109\n"
    session = session_of(script)
    text = session.frame(len(session) - 1).explanation
    assert text.count("last used at tick") == 3
    assert text.endswith("then 7 more pages, each the next oldest candidate (pages 3, 4, 5, 6, 7, 8, 9); "
                         "10 pages evicted in all.")


def test_a_free_page_of_a_huge_pool_is_placed_without_walking_the_free_list(monkeypatch):
    from types import SimpleNamespace

    from kvcore.snapshot import FreePages

    from kvcore import PagePool, TriePagedAttentionCache

    from kvviz.core.why import page_status

    cache = TriePagedAttentionCache(PagePool(10**12), 1)
    cache.acquire_pages_for_tokens([1, 2, 3]).release_pages()
    snapshot = cache.snapshot()  # pages 3.. were never used and come first; 0, 1, 2 were returned
    def walk(self, page, *args):
        raise AssertionError("walked a free list of 10^12 pages")

    monkeypatch.setattr(FreePages, "index", walk)  # Sequence.index would iterate for hours
    frame = SimpleNamespace(snapshot=snapshot)
    session = SimpleNamespace(frame=lambda index: frame, label_tokens=lambda tokens: " ".join(map(str, tokens)))
    last = page_status(session, 2, 10**12 - 1).lines[0]
    assert "It is number 999,999,999,997 of 1,000,000,000,000 in the free list" in last
    assert "number 1,000,000,000,000 of 1,000,000,000,000" in page_status(session, 2, 2).lines[0]
