# SPDX-License-Identifier: Apache-2.0
"""The scenario language: ops, tokens, header, narration, expects, errors, formatting, fuzzing."""

from __future__ import annotations

import dataclasses
import textwrap
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvviz.core.scenario import parse as parse_module
from kvviz.core.scenario import (
    COMMAND_KEYWORDS,
    EXPECT_FORMS,
    MAX_TOKENS_PER_OP,
    OP_FORMS,
    OP_OPTIONS,
    POLICIES,
    SCENARIO_EXAMPLE,
    SCENARIO_HELP,
    CacheConfig,
    Expect,
    Op,
    Paragraph,
    Scenario,
    ScenarioError,
    Step,
    format_cache,
    format_expect,
    format_op,
    format_scenario,
    format_tokens,
    parse_command,
    parse_scenario,
    parse_scenario_bytes,
    parse_scenario_file,
)
from kvviz.core.vocab import BUILTIN_WORDS, Vocabulary, word_id


def only_op(text: str) -> Op:
    """The single op of a one-op scenario."""
    (step,) = parse_scenario(text).steps
    return step.op


def error_of(text: str, path: str | None = None) -> ScenarioError:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(text, path)
    return caught.value


def where(error: ScenarioError) -> tuple[int, int]:
    return error.line, error.column


# -- ops ------------------------------------------------------------------------------------


def test_acquire_holds_its_tokens_and_extra_slots():
    op = only_op("acquire r1 1 2 3 extra=2")
    assert op == Op("acquire", "r1", (1, 2, 3), extra=2)
    assert (op.line, op.text) == (1, "acquire r1 1..3 extra=2")


def test_acquire_without_tokens_holds_zero_tokens():
    assert only_op("acquire r1").tokens == ()


def test_publish_without_tokens_has_no_token_list():
    op = parse_scenario("acquire r1 1..4\npublish r1").steps[1].op
    assert (op.kind, op.name, op.tokens) == ("publish", "r1", None)


def test_publish_with_empty_quotes_publishes_zero_tokens():
    op = parse_scenario('acquire r1 1..4\npublish r1 ""').steps[1].op
    assert op.tokens == ()
    assert op.text == 'publish r1 ""'


def test_publish_with_tokens_lists_them():
    op = parse_scenario("acquire r1 1..4 extra=4\npublish r1 1..6").steps[1].op
    assert op.tokens == (1, 2, 3, 4, 5, 6)


def test_extend_takes_the_whole_new_token_list():
    op = parse_scenario("acquire r1 1..4\nextend r1 1..6 extra=3").steps[1].op
    assert op == Op("extend", "r1", (1, 2, 3, 4, 5, 6), extra=3, append=False)


@pytest.mark.parametrize("line", ["extend r1 + 5 6", "extend r1 +5 6", "EXTEND r1   +  5,6"])
def test_extend_with_plus_appends_tokens(line):
    op = parse_scenario(f"acquire r1 1..4\n{line}").steps[1].op
    assert op == Op("extend", "r1", (5, 6), append=True)
    assert op.text == "extend r1 + 5 6"


def test_extend_with_plus_and_nothing_after_adds_only_slots():
    op = parse_scenario("acquire r1 1..4\nextend r1 + extra=4").steps[1].op
    assert op == Op("extend", "r1", (), extra=4, append=True)


def test_release_names_the_allocation_only():
    op = parse_scenario("acquire r1\nrelease r1").steps[1].op
    assert op == Op("release", "r1", None)


def test_keywords_are_case_insensitive_and_spacing_is_free():
    op = only_op("   ACQUIRE    r1\t1 ,2,,3   Extra = 2   ")
    assert op == Op("acquire", "r1", (1, 2, 3), extra=2)
    assert op.text == "acquire r1 1..3 extra=2"


@pytest.mark.parametrize("spelling", ["extra=2", "extra =2", "extra= 2", "extra = 2"])
def test_extra_may_have_spaces_around_the_equals_sign(spelling):
    assert only_op(f"acquire r1 1 {spelling} 3").extra == 2


def test_allocation_names_may_hold_dots_dashes_and_underscores():
    assert only_op("acquire _req-1.a 1").name == "_req-1.a"


def test_allocation_names_are_case_sensitive():
    scenario = parse_scenario("acquire r1\nacquire R1")
    assert [step.op.name for step in scenario.steps] == ["r1", "R1"]


# -- tokens ---------------------------------------------------------------------------------


def test_ranges_are_inclusive():
    assert only_op("acquire r1 1..8").tokens == tuple(range(1, 9))


def test_a_range_of_one_token_is_allowed():
    assert only_op("acquire r1 5..5 7").tokens == (5, 7)


def test_ranges_integers_and_words_mix_in_order():
    op = only_op('acquire r1 0 "hello world" 3..4')
    assert op.tokens == (0, word_id("hello"), word_id("world"), 3, 4)


def test_quoted_words_get_stable_vocabulary_ids():
    op = only_op('acquire r1 "You are a helpful assistant"')
    assert op.tokens == (1000, 1001, 1002, 1003, 1004)


def test_quoted_words_may_hold_hash_and_commas():
    op = only_op('acquire r1 "issue #5, again" 7  # a comment')
    assert op.tokens == (word_id("issue"), word_id("#5,"), word_id("again"), 7)


def test_scenario_vocabulary_remembers_the_spelling_of_its_words():
    scenario = parse_scenario('acquire r1 "Paris is nice"')
    assert scenario.vocab.label(word_id("paris")) == "Paris"
    assert scenario.steps[0].op.text == 'acquire r1 "Paris is nice"'


# -- vocabulary -----------------------------------------------------------------------------


def test_builtin_words_are_unique_and_number_about_150():
    assert len(set(BUILTIN_WORDS)) == len(BUILTIN_WORDS) >= 150
    assert {"you", "are", "a", "helpful", "assistant", "the", "user", "system"} <= set(BUILTIN_WORDS)


def test_builtin_words_have_ids_from_1000_in_list_order():
    assert [word_id(word) for word in BUILTIN_WORDS] == list(range(1000, 1000 + len(BUILTIN_WORDS)))


def test_unknown_words_hash_with_crc32_into_their_own_range():
    expected = 100_000 + zlib.crc32(b"kvcache") % 900_000
    assert word_id("KVCache") == word_id("kvcache") == expected


def test_vocabulary_keeps_the_first_spelling_seen():
    vocab = Vocabulary()
    assert vocab.ids("Hello HELLO hello") == (word_id("hello"),) * 3
    assert vocab.word(word_id("hello")) == "Hello"


def test_vocabulary_labels_unknown_tokens_with_their_number():
    vocab = Vocabulary()
    assert (vocab.word(5), vocab.label(5)) == (None, "5")
    assert vocab.spelling(1004) is None  # built in, but never written by this script


def test_vocabulary_labels_built_in_ids_as_numbers_unless_the_script_wrote_the_word():
    vocab = Vocabulary()
    assert vocab.label(1004) == "1004"
    vocab.ids("a helpful assistant")
    assert vocab.label(1004) == "assistant"


def test_vocabulary_labels_a_token_list_up_to_a_limit():
    vocab = Vocabulary()
    vocab.ids("you are")
    assert vocab.label_tokens([1000, 1001, 7]) == "you are 7"
    assert vocab.label_tokens([1000, 1001, 7, 8], limit=2) == "you are … +2 more"


def test_vocabulary_hashes_words_with_lone_surrogates():
    assert 100_000 <= Vocabulary().id("bad\udcff") < 1_000_000


# -- comments and narration -----------------------------------------------------------------


def test_comments_and_blank_lines_are_ignored():
    scenario = parse_scenario("# intro\n\n   # indented\nacquire r1 1 # trailing\n\n")
    assert [step.op for step in scenario.steps] == [Op("acquire", "r1", (1,))]


def test_narration_attaches_to_the_next_op():
    scenario = parse_scenario("acquire r1 1\n> r2 now\n> shares pages.\nacquire r2 1\n")
    assert [step.narration for step in scenario.steps] == ["", "r2 now shares pages."]


def test_a_bare_narration_marker_starts_a_new_paragraph():
    scenario = parse_scenario(">one\n>  two  \n>\n> three\nacquire r1")
    assert scenario.steps[0].narration == "one two\nthree"


def test_narration_keeps_hash_characters_as_text():
    assert parse_scenario("> page #5 goes\nacquire r1").steps[0].narration == "page #5 goes"


def test_narration_may_sit_between_an_op_and_its_expects():
    scenario = parse_scenario("acquire r1 1\n> next\nexpect free 7\nrelease r1")
    assert scenario.steps[0].expects[0].kind == "free"
    assert scenario.steps[1].narration == "next"


def test_narration_without_a_following_op_is_an_error():
    error = error_of("acquire r1\n\n> dangling\n> words\n")
    assert where(error) == (3, 1)
    assert "narration with no op after it" in error.message


# -- header ---------------------------------------------------------------------------------


def test_a_scenario_without_header_gets_the_default_cache():
    scenario = parse_scenario("acquire r1")
    assert (scenario.title, scenario.description) == ("", "")
    assert scenario.config == CacheConfig("trie", 8, 4, "lru")


def test_header_sets_title_description_and_cache():
    scenario = parse_scenario(
        "Title:  LRU eviction  \ndescription: First line\n  DESCRIPTION : second line\n"
        "cache base pages=16 tokens_per_page=2 policy=LRU\nacquire r1\n"
    )
    assert scenario.title == "LRU eviction"
    assert scenario.description == "First line second line"
    assert scenario.config == CacheConfig("base", 16, 2, "lru")


def test_title_keeps_hash_characters_as_text():
    assert parse_scenario("title: bug #12").title == "bug #12"


@pytest.mark.parametrize("alias", ["tokens_per_page", "page_size", "tpp", "TPP"])
def test_tokens_per_page_has_aliases(alias):
    assert parse_scenario(f"cache trie {alias}=16").config.tokens_per_page == 16


def test_cache_line_defaults_what_it_does_not_say():
    assert parse_scenario("cache pages=3 # small").config == CacheConfig("trie", 3, 4)


def test_cache_line_accepts_spaces_around_equals_and_a_colon():
    assert parse_scenario("cache: base pages = 2 tpp= 8").config == CacheConfig("base", 2, 8)


def test_header_lines_may_follow_narration_before_the_first_op():
    scenario = parse_scenario("> hello\ntitle: t\nacquire r1")
    assert (scenario.title, scenario.steps[0].narration) == ("t", "hello")


@pytest.mark.parametrize(
    ("line", "column", "message"),
    [
        ("cache trie pages=0", 18, "pages 0 is too small (at least 1)"),
        ("cache trie pages=1000001", 18, "pages '1000001' is too large (at most 1,000,000)"),
        ("cache trie tokens_per_page=65537", 28, "tokens_per_page '65537' is too large (at most 65,536)"),
        ("cache trie tpp=x", 16, "bad tokens_per_page 'x'"),
        ("cache trie pages=", 18, "missing pages"),
        ("cache radix", 7, "unknown cache kind 'radix'"),
        ("cache trie base", 12, "cache kind given twice"),
        ("cache trie pagez=4", 12, "unknown cache option 'pagez'; did you mean 'pages'?"),
        ("cache trie pages=4 pages=5", 20, "pages given twice"),
        ("cache trie tpp=4 page_size=4", 18, "tokens_per_page given twice"),
        ("cache trie policy=arc", 19, "unknown policy 'arc'"),
    ],
)
def test_bad_cache_lines_are_errors_at_the_offending_item(line, column, message):
    error = error_of(f"title: t\n{line}\n")
    assert (error.line, error.column, error.message) == (2, column, message)


def test_a_second_cache_line_is_an_error():
    error = error_of("cache trie\n  cache base")
    assert (where(error), error.message) == ((2, 3), "second cache line (the first is on line 1)")


def test_a_second_title_is_an_error():
    assert where(error_of("title: a\ntitle: b")) == (2, 1)


@pytest.mark.parametrize("header", ["title: late", "description: late", "cache base"])
def test_header_lines_after_the_first_op_are_errors(header):
    error = error_of(f"acquire r1\n  {header}")
    assert where(error) == (2, 3)
    assert "after the first op" in error.message
    assert "before the first op on line 1" in error.expected


# -- expects --------------------------------------------------------------------------------

EXPECT_CASES = [
    ("expect ok", Expect("ok")),
    ("expect fail", Expect("fail")),
    ("expect fail alloc", Expect("fail", detail="alloc")),
    ("expect fail invalid", Expect("fail", detail="invalid")),
    ("expect free 3", Expect("free", values=(3,))),
    ("expect cached 2", Expect("cached", values=(2,))),
    ("expect evictable 1", Expect("evictable", values=(1,))),
    ("expect owned 4", Expect("owned", values=(4,))),
    ("expect candidates 2", Expect("candidates", values=(2,))),
    ("expect victim 3", Expect("victim", values=(3,))),
    ("expect hit r1 8", Expect("hit", "r1", (8,))),
    ("expect pages r1 0 1 5", Expect("pages", "r1", (0, 1, 5))),
    ("expect pages r1", Expect("pages", "r1", ())),
    ("expect published r1 2", Expect("published", "r1", (2,))),
    ("expect evicted 5 3", Expect("evicted", values=(5, 3))),
    ("expect evictions 2", Expect("evictions", values=(2,))),
    ("expect ref 5 2", Expect("ref", values=(5, 2))),
    ("expect live r1 r2", Expect("live", names=("r1", "r2"))),
    ("expect live", Expect("live")),
    ("expect violations 0", Expect("violations", values=(0,))),
    ("expect queue 3 1 0", Expect("queue", values=(3, 1, 0))),
    ("expect queue", Expect("queue")),
    ("expect unreachable 0", Expect("unreachable", values=(0,))),
]


@pytest.mark.parametrize(("line", "expect"), EXPECT_CASES, ids=[case[0] for case in EXPECT_CASES])
def test_every_expect_form_parses_to_its_structure_and_back(line, expect):
    (parsed,) = parse_scenario(f"acquire r1 1..4\n{line}").steps[0].expects
    assert parsed == expect
    assert (parsed.line, parsed.text) == (2, line)
    assert format_expect(expect) == line


def test_every_expect_kind_has_a_test_case():
    assert {expect.kind for _, expect in EXPECT_CASES} == set(EXPECT_FORMS)


def test_expect_lists_of_pages_accept_ranges_and_commas():
    (expect,) = parse_scenario("acquire r1 1..12\nexpect pages r1 0..2, 7").steps[0].expects
    assert expect.values == (0, 1, 2, 7)


def test_expect_keywords_and_failure_kinds_are_case_insensitive():
    (expect,) = parse_scenario("acquire r1\nEXPECT Fail CacheAllocationFailure").steps[0].expects
    assert expect == Expect("fail", detail="alloc")


def test_expects_attach_to_the_op_above_them():
    scenario = parse_scenario("acquire r1 1\nexpect ok\n# note\n\nexpect free 7\nrelease r1\nexpect free 8")
    assert [[e.kind for e in step.expects] for step in scenario.steps] == [["ok", "free"], ["free"]]


@pytest.mark.parametrize(
    ("line", "column", "message"),
    [
        ("expect", 7, "missing what to expect"),
        ("expect frees 3", 8, "unknown expect 'frees'; did you mean 'free'?"),
        ("expect free", 12, "missing count"),
        ("expect free x", 13, "bad count 'x'"),
        ("expect free 3 4", 15, "unexpected '4'"),
        ("expect hit 3", 12, "bad allocation name '3'"),
        ("expect pages r1 1..x", 17, "bad page '1..x'"),
        ("expect pages r1 3..1", 17, "descending range '3..1'"),
        ("expect evicted", 15, "missing page"),
        ("expect ref 5", 13, "missing count"),
        ("expect fail later", 13, "unknown failure kind 'later'"),
        ("expect live r1 2", 16, "bad allocation name '2'"),
    ],
)
def test_bad_expect_lines_are_errors_at_the_offending_item(line, column, message):
    error = error_of(f"acquire r1\n{line}  # comment")
    assert (error.line, error.column, error.message) == (2, column, message)


def test_an_expect_before_any_op_is_an_error():
    error = error_of("title: t\n  expect free 8\nacquire r1")
    assert (where(error), error.message) == ((2, 3), "expect before the first op")


@pytest.mark.parametrize(
    ("first", "second"),
    [("expect ok", "expect fail"), ("expect fail alloc", "expect ok"), ("expect fail alloc", "expect fail invalid")],
)
def test_contradictory_outcomes_for_one_step_are_an_error(first, second):
    error = error_of(f"acquire r1\n{first}\n{second}")
    assert error.line == 3
    assert f"contradicts '{first}' on line 2" in error.message


def test_a_general_fail_agrees_with_a_specific_one():
    scenario = parse_scenario("acquire r1\nexpect fail\nexpect fail alloc")
    assert len(scenario.steps[0].expects) == 2


# -- live allocation names ------------------------------------------------------------------


def test_acquiring_a_live_name_again_is_an_error_at_the_name():
    error = error_of("acquire r1 1\npublish r1\nacquire  r1 2")
    assert where(error) == (3, 10)
    assert error.message == "allocation 'r1' is already live (acquired on line 1)"
    assert error.expected == "a new name, or release r1 first"


def test_using_an_unknown_name_lists_the_live_ones():
    error = error_of("acquire r1\nacquire r2\npublish r9")
    assert where(error) == (3, 9)
    assert error.message == "unknown allocation 'r9': live allocations are r1, r2"


def test_using_a_name_when_nothing_is_live_says_so():
    error = error_of("extend r1 + 5")
    assert error.message == "unknown allocation 'r1': there are no live allocations"


def test_using_a_released_name_says_where_it_was_released():
    error = error_of("acquire r1\nrelease r1\nrelease r1")
    assert where(error) == (3, 9)
    assert error.message == "allocation 'r1' was released on line 2: there are no live allocations"


def test_a_released_name_may_be_acquired_again():
    scenario = parse_scenario("acquire r1\nrelease r1\nacquire r1 5")
    assert scenario.steps[2].op.tokens == (5,)


@pytest.mark.parametrize("failure", ["expect fail", "expect fail alloc", "expect fail invalid"])
def test_an_acquire_expected_to_fail_leaves_its_name_free_for_a_retry(failure):
    scenario = parse_scenario(f"acquire r1 1..40\n{failure}\nacquire r1 1..4\nrelease r1")
    assert len(scenario.steps) == 3


def test_an_acquire_expected_to_fail_cannot_be_used_afterwards():
    error = error_of("acquire r1 1..40\nexpect fail alloc\npublish r1")
    assert error.message == "unknown allocation 'r1': there are no live allocations"


def test_a_release_expected_to_fail_leaves_the_name_live():
    scenario = parse_scenario("acquire r1\nrelease r1\nexpect fail invalid\npublish r1")
    assert scenario.steps[2].op.kind == "publish"


def test_a_successful_acquire_keeps_its_name_live():
    error = error_of("acquire r1\nexpect ok\nacquire r1")
    assert error.line == 3


# -- token and line errors ------------------------------------------------------------------


def test_bad_token_error_names_file_line_column_and_what_was_expected():
    text = "title: t\n\n\n\n\nacquire r0\nacquire r1 1 1..x\n"
    error = error_of(text, "demo.kvs")
    assert str(error) == (
        "demo.kvs:7:14: bad token '1..x' (expected: an integer, a range like 1..8, or \"quoted words\")"
    )
    assert (error.path, error.line, error.column) == ("demo.kvs", 7, 14)


def test_errors_without_a_path_name_the_input():
    assert str(error_of("bogus")).startswith("<input>:1:1: unknown op 'bogus'")


@pytest.mark.parametrize(
    ("line", "column", "message"),
    [
        ("acquire r1 8..1", 12, "descending range '8..1'"),
        ("acquire r1 -1", 12, "bad token '-1'"),
        ("acquire r1 1.5", 12, "bad token '1.5'"),
        ("acquire r1 1 x", 14, "bad token 'x'"),
        ('acquire r1 "open words', 12, "unterminated quoted words"),
        ("acquire r1 ab\"cd\"", 12, "bad token 'ab'"),
        ("acquire r1 1 + 2", 14, "bad token '+'"),
        ("acquire 1..4", 9, "bad allocation name '1..4'"),
        ('acquire "r1"', 9, "bad allocation name '\"r1\"'"),
        ("acquire", 8, "missing allocation name"),
        ("acquire r1 extra=x", 18, "bad extra 'x'"),
        ("acquire r1 extra=", 18, "missing extra"),
        ("acquire r1 extra=1 extra=2", 20, "extra given twice"),
        ("acquire r1 speed=2", 12, "unknown option 'speed'"),
        ("acquire r1 =2", 12, "'=' without an option name"),
        (
            "acquire r1 1 99999999999999999999", 14,
            "token '99999999999999999999' is too large (at most 9,223,372,036,854,775,807)",
        ),
        ("aquire r1 1", 1, "unknown op 'aquire'; did you mean 'acquire'?"),
        ('"acquire" r1', 1, "unknown op '\"acquire\"'"),
        ("  , ,", 3, "unexpected ', ,'"),
    ],
)
def test_bad_op_lines_are_errors_at_the_offending_item(line, column, message):
    error = error_of(f"{line}\n")
    assert (error.line, error.column, error.message) == (1, column, message)


def test_numbers_with_thousands_of_leading_zeros_are_read_without_overflow():
    assert only_op("acquire r1 " + "0" * 10_000 + "5").tokens == (5,)


def test_the_end_of_a_long_range_is_located_precisely():
    error = error_of("acquire r1 1..99999999999999999999")
    assert error.column == 15


def test_release_takes_nothing_after_the_name():
    error = error_of("acquire r1\nrelease r1 5")
    assert (where(error), error.message) == ((2, 12), "unexpected '5'")


def test_publish_takes_no_extra_slots():
    error = error_of("acquire r1\npublish r1 extra=2")
    assert (where(error), error.message) == ((2, 12), "unknown option 'extra'")


def test_a_huge_range_is_refused_before_it_is_built():
    error = error_of("acquire r1 0..999999999999")
    assert where(error) == (1, 12)
    assert error.message == "too many tokens: '0..999999999999' brings this line to 1,000,000,000,000"


def test_an_op_may_hold_exactly_the_token_limit():
    assert len(only_op(f"acquire r1 1..{MAX_TOKENS_PER_OP}").tokens) == MAX_TOKENS_PER_OP


def test_tokens_of_one_op_add_up_towards_the_limit():
    error = error_of(f"acquire r1 1..{MAX_TOKENS_PER_OP} 7")
    assert error.column == 23
    assert "1,000,001" in error.message


def test_the_whole_scenario_has_a_token_budget_too(monkeypatch):
    monkeypatch.setattr(parse_module, "MAX_TOKENS_PER_SCENARIO", 10)
    error = error_of("acquire r1 1..6\nrelease r1\n  acquire r1 1..5")
    assert (where(error), error.message) == ((3, 3), "the scenario spells more than 10 tokens")


def test_a_nul_character_is_an_error_where_it_is():
    error = error_of("acquire r1\nacquire r2 1\x002")
    assert (where(error), error.message) == ((2, 13), "NUL character (is this a binary file?)")


def test_line_numbers_follow_any_newline_convention():
    assert error_of("acquire r1\r\nacquire r2\rbogus\n").line == 3


def test_a_byte_order_mark_is_not_part_of_the_first_line():
    assert parse_scenario("\ufeffacquire r1").steps[0].op.name == "r1"


# -- bytes and files ------------------------------------------------------------------------


def test_bytes_that_are_not_utf8_are_an_error_at_their_place():
    with pytest.raises(ScenarioError) as caught:
        parse_scenario_bytes("acquire r1\nacquire é \xff".encode("utf-8").replace(b"\xc3\xbf", b"\xff"), "x.kvs")
    assert (caught.value.line, caught.value.column) == (2, 11)
    assert "not UTF-8" in caught.value.message


def test_utf8_bytes_with_a_bom_parse():
    scenario = parse_scenario_bytes(b"\xef\xbb\xbfacquire r1 1")
    assert scenario.steps[0].op.tokens == (1,)


def test_a_scenario_file_is_read_and_named_in_errors(tmp_path):
    path = tmp_path / "demo.kvs"
    path.write_text("title: demo\nacquire r1 1..4\n")
    scenario = parse_scenario_file(path)
    assert (scenario.title, scenario.path, scenario.source) == ("demo", str(path), "title: demo\nacquire r1 1..4\n")
    path.write_text("acquire r1 1..x\n")
    with pytest.raises(ScenarioError) as caught:
        parse_scenario_file(path)
    assert str(caught.value).startswith(f"{path}:1:12: bad token")


def test_a_binary_file_is_an_error(tmp_path):
    path = tmp_path / "blob.kvs"
    path.write_bytes(b"acquire r1\n\x00\x01\x02")
    with pytest.raises(ScenarioError) as caught:
        parse_scenario_file(path)
    assert (caught.value.line, caught.value.column) == (2, 1)


def test_a_file_over_5_mb_is_refused(tmp_path):
    path = tmp_path / "big.kvs"
    path.write_bytes(b"#" * 5_000_001)
    with pytest.raises(ScenarioError) as caught:
        parse_scenario_file(path)
    assert "too large" in caught.value.message


def test_a_missing_file_is_a_scenario_error(tmp_path):
    with pytest.raises(ScenarioError) as caught:
        parse_scenario_file(tmp_path / "nope.kvs")
    assert "cannot read the file" in caught.value.message


# -- command bar ----------------------------------------------------------------------------


def test_a_command_parses_to_an_op_with_canonical_text():
    op = parse_command("  Acquire r3 1..4 extra = 1  ")
    assert op == Op("acquire", "r3", (1, 2, 3, 4), extra=1)
    assert (op.line, op.text) == (1, "acquire r3 1..4 extra=1")


def test_a_command_error_points_at_its_column():
    with pytest.raises(ScenarioError) as caught:
        parse_command("  acquire r3 1 q")
    assert str(caught.value).startswith("<input>:1:16: bad token 'q'")


def test_a_command_checks_names_against_the_live_allocations():
    assert parse_command("release r2", live_names=["r1", "r2"]).name == "r2"
    with pytest.raises(ScenarioError) as caught:
        parse_command("release r9", live_names=["r1", "r2"])
    assert caught.value.message == "unknown allocation 'r9': live allocations are r1, r2"
    with pytest.raises(ScenarioError) as caught:
        parse_command("acquire r1", live_names=["r1"])
    assert (caught.value.column, caught.value.message) == (9, "allocation 'r1' is already live")


def test_a_command_without_live_names_skips_the_check():
    assert parse_command("publish r7", live_names=None).name == "r7"


def test_a_command_puts_its_words_in_the_given_vocabulary():
    vocab = Vocabulary()
    parse_command('acquire r1 "Bonjour"', vocab=vocab)
    assert vocab.label(word_id("bonjour")) == "Bonjour"


@pytest.mark.parametrize(
    ("text", "column", "message"),
    [
        ("", 1, "empty command"),
        ("# only a comment", 1, "empty command"),
        # the bar takes expect lines too (see below); a misspelt one is still refused.
        ("expects free 3", 1, "unknown op 'expects'; did you mean 'expect'?"),
        ("[trie] acquire r1", 1, "a scope tag before an op"),
        ("relase r1", 1, "unknown op 'relase'; did you mean 'release'?"),
        ("acquire r1\nacquire r2", 11, "'\\n' in a command"),
    ],
)
def test_a_command_must_be_exactly_one_op(text, column, message):
    with pytest.raises(ScenarioError) as caught:
        parse_command(text)
    assert (caught.value.line, caught.value.column, caught.value.message) == (1, column, message)


# -- formatting and round trips -------------------------------------------------------------


def test_format_writes_consecutive_runs_as_ranges():
    assert format_tokens([0, 1, 2, 3, 7, 9, 10, 12, 11]) == "0..3 7 9 10 12 11"


def test_format_op_is_canonical():
    assert format_op(Op("acquire", "r1", tuple(range(1, 9)), extra=2)) == "acquire r1 1..8 extra=2"
    assert format_op(Op("extend", "r1", (9,), append=True)) == "extend r1 + 9"
    assert format_op(Op("publish", "r1", None)) == "publish r1"
    assert format_op(Op("publish", "r1", ())) == 'publish r1 ""'
    assert format_op(Op("release", "r1", None)) == "release r1"


def test_format_writes_spelled_words_in_quotes_and_other_tokens_as_ints():
    vocab = Vocabulary()
    tokens = vocab.ids("You are") + (1002, 5, 6, 7) + vocab.ids("Paris")
    # 1002 is the built-in "a", but this script wrote it as a number: it stays a number.
    assert format_tokens(tokens, vocab) == '"You are" 1002 5..7 "Paris"'


def test_format_writes_unquotable_spellings_as_ints():
    vocab = Vocabulary()
    (token,) = vocab.ids('say"')
    assert format_tokens([token], vocab) == str(token)


def test_op_equality_ignores_line_and_text():
    assert Op("release", "r1", None, line=3, text="release r1") == Op("release", "r1", None)


def test_values_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Op("release", "r1", None).name = "r2"


def test_the_example_scenario_round_trips_through_format():
    scenario = parse_scenario(SCENARIO_EXAMPLE, "example.kvs")
    text = format_scenario(scenario)
    again = parse_scenario(text)
    assert again == dataclasses.replace(scenario, path=None, source=text)
    assert format_scenario(again) == text


def test_format_scenario_keeps_words_narration_paragraphs_and_wrapped_prose():
    source = (
        "title: t\ndescription: " + "word " * 40 + "\ncache base pages=3 tpp=2\n"
        '> one\n>\n> two\nacquire r1 "Hello there" 1..3 extra=1\nexpect fail alloc\n'
    )
    scenario = parse_scenario(source)
    text = format_scenario(scenario)
    assert '> one\n>\n> two\nacquire r1 "Hello there" 1..3 extra=1\nexpect fail alloc\n' in text
    assert max(len(line) for line in text.splitlines()) <= 88
    assert parse_scenario(text) == dataclasses.replace(scenario, source=text)


NAMES = st.sampled_from(["r1", "r2", "req_3", "a.b-c"])
TOKEN_LISTS = st.lists(st.integers(0, 2**63 - 1) | st.integers(0, 40), max_size=30).map(tuple)


@st.composite
def ops(draw):
    kind = draw(st.sampled_from(list(OP_FORMS)))
    tokens = None if kind == "release" else draw(TOKEN_LISTS)
    if kind == "publish" and draw(st.booleans()):
        tokens = None
    extra = draw(st.integers(0, 1_000_000)) if kind in ("acquire", "extend") else 0
    append = kind == "extend" and draw(st.booleans())
    return Op(kind, draw(NAMES), tokens, extra, append)


@given(ops())
def test_format_op_parses_back_to_an_equal_op(op):
    assert parse_command(format_op(op), live_names=None) == op


@given(st.lists(st.text(st.characters(blacklist_categories=("Cs",)), max_size=8), max_size=6))
def test_quoted_words_round_trip_through_format(words):
    vocab = Vocabulary()
    tokens = vocab.ids(" ".join(words))
    text = format_op(Op("acquire", "r1", tokens), vocab)
    assert parse_command(text, live_names=None).tokens == tokens


@st.composite
def scenarios(draw):
    """Valid scenarios: live names tracked so every op is legal."""
    live: list[str] = []
    steps = []
    for _ in range(draw(st.integers(0, 12))):
        op = draw(ops())
        if op.kind == "acquire" and op.name in live or op.kind != "acquire" and op.name not in live:
            continue
        fails = draw(st.booleans()) and op.kind == "acquire"
        if op.kind == "acquire" and not fails:
            live.append(op.name)
        elif op.kind == "release":
            live.remove(op.name)
        expects = (Expect("fail", detail="alloc"),) if fails else (Expect("live", names=tuple(live)),)
        narration = draw(st.sampled_from(["", "one", "one two\nthree"]))
        steps.append(Step(op, narration, expects))
    kind = draw(st.sampled_from(["trie", "base"]))
    config = CacheConfig(kind, draw(st.integers(1, 1_000_000)), draw(st.integers(1, 65536)))
    title = draw(st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), max_size=20)).strip()
    return Scenario(title, draw(st.sampled_from(["", "A cache story.", "x " * 60 + "end"])), config, tuple(steps))


@given(scenarios())
def test_format_scenario_parses_back_to_an_equal_scenario(scenario):
    text = format_scenario(scenario)
    assert parse_scenario(text) == dataclasses.replace(scenario, source=text)


# -- help -----------------------------------------------------------------------------------


def test_help_documents_every_op_and_expect_form():
    for kind in OP_FORMS:
        assert f"  {kind} NAME" in SCENARIO_HELP
    for form in EXPECT_FORMS.values():
        assert form.usage in SCENARIO_HELP


def test_the_example_in_the_help_parses_and_uses_every_op():
    assert textwrap.indent(SCENARIO_EXAMPLE, "  ") in SCENARIO_HELP
    scenario = parse_scenario(SCENARIO_EXAMPLE)
    assert {step.op.kind for step in scenario.steps} == set(OP_FORMS)
    assert all(step.narration for step in scenario.steps[:-1])


# -- fuzzing: any input parses or raises ScenarioError, nothing else -------------------------


def parses_or_scenario_error(parse, value) -> None:
    try:
        parse(value)
    except ScenarioError as error:
        assert error.line >= 1 and error.column >= 1
        assert str(error).count("(expected: ") == 1


@given(st.text())
def test_any_text_parses_or_raises_a_scenario_error(text):
    parses_or_scenario_error(parse_scenario, text)


@given(st.binary())
def test_any_bytes_parse_or_raise_a_scenario_error(data):
    parses_or_scenario_error(parse_scenario_bytes, data)


@given(st.text())
def test_any_command_parses_or_raises_a_scenario_error(text):
    parses_or_scenario_error(lambda value: parse_command(value, live_names=["r1"]), text)


FRAGMENTS = st.sampled_from([
    "acquire", "publish", "extend", "release", "expect", "cache", "title:", "description:", ">", "#",
    "r1", "r2", "1", "0..3", "3..1", "99999999999999999999", '"', '"you are"', "+", "=", "extra", "extra=2",
    "pages=4", "tpp=0", "trie", "base", "ok", "fail", "alloc", "free", "hit", "pages", "ref", "live", ",",
    "evicted", "\t", "\x00", "é", "", "0" * 5000 + "1", "1.." + "9" * 30,
])


@given(st.lists(st.lists(FRAGMENTS, max_size=6).map(" ".join), max_size=12).map("\n".join))
def test_near_miss_scripts_parse_or_raise_a_scenario_error(text):
    parses_or_scenario_error(parse_scenario, text)


# -- one budget for every list ----------------------------------------------------


def test_expect_page_lists_count_towards_the_scenario_budget(monkeypatch):
    monkeypatch.setattr(parse_module, "MAX_TOKENS_PER_SCENARIO", 10)
    error = error_of("acquire a 1..4\nexpect pages a 0..3\n  expect pages a 0 1 2")
    assert where(error) == (3, 3)
    assert error.message == "the scenario spells more than 10 tokens (pages listed in expect lines count too)"


def test_one_expect_line_may_not_list_more_than_the_line_limit():
    error = error_of(f"acquire a 1..4\nexpect evicted 0..{MAX_TOKENS_PER_OP}")
    assert where(error) == (2, 16)
    assert error.message == f"too many pages: '0..{MAX_TOKENS_PER_OP}' brings this line to {MAX_TOKENS_PER_OP + 1:,}"


def test_an_expect_may_list_exactly_the_line_limit():
    (step,) = parse_scenario(f"acquire a 1..4\nexpect pages a 1..{MAX_TOKENS_PER_OP}").steps
    assert len(step.expects[0].values) == MAX_TOKENS_PER_OP


def test_a_scenario_of_huge_expect_lists_is_refused_without_building_them():
    import tracemalloc

    text = "acquire a 1..4\n" + "expect pages a 0..999999\n" * 60  # took 47 s and 4.1 GB
    tracemalloc.start()
    try:
        error = error_of(text, "big.kvs")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 5_000_000  # ten million page numbers would be ~400 MB
    assert str(error).startswith("big.kvs:11:1: the scenario spells more than 10,000,000 tokens")
    # Said once, for line 11 (4 + 10 x 1,000,000 values); the 50 lines after it are counted.
    assert error.report() == f"{error}\n… and 50 more errors"


def test_a_dry_run_finds_exactly_the_errors_a_building_run_finds():
    text = "acquire a 1..5\nexpect pages a 0..2 x\nrelease b\nacquire a 1\nexpect evicted\n"
    reports = []
    for build in (False, True):
        with pytest.raises(ScenarioError) as caught:
            parse_module._read_lines(None, text.split("\n"), text, build=build)
        reports.append(caught.value.report())
    assert reports[0] == reports[1]
    assert reports[0].count("\n") == 3


@given(st.lists(FRAGMENTS_AND_RANGES := st.sampled_from(
    ["acquire a", "acquire b", "release a", "expect pages a", "expect evicted", "expect ok", "expect fail", "1..3",
     "x", "0", "[trie]", ">", "publish a", "extend a +", "extra=2"]), max_size=8).map(" ".join).flatmap(
    lambda first: st.lists(FRAGMENTS_AND_RANGES, max_size=8).map(lambda rest: first + "\n" + " ".join(rest))))
def test_dry_and_building_runs_agree_on_any_script(text):
    outcomes = []
    for build in (False, True):
        try:
            parse_module._read_lines(None, text.split("\n"), text, build=build)
            outcomes.append(None)
        except ScenarioError as error:
            outcomes.append(error.report())
    assert outcomes[0] == outcomes[1]


def test_format_writes_expect_page_lists_as_ranges():
    expect = Expect("pages", "a", tuple(range(1_000_000)))
    assert format_expect(expect) == "expect pages a 0..999999"
    assert format_expect(Expect("evicted", values=(5, 3, 7, 8, 9))) == "expect evicted 5 3 7..9"


def test_a_scenario_with_a_million_page_expect_formats_small():
    scenario = parse_scenario("acquire a 1..4\nexpect pages a 0..999999\n")
    text = format_scenario(scenario)
    assert len(text) < 100
    assert parse_scenario(text) == dataclasses.replace(scenario, source=text)


# -- every error of a file --------------------------------------------------------


def test_a_file_reports_every_error_with_its_line_and_column():
    error = error_of("acquire r1 1..x\nbogus\nacquire r2\nexpect frees 1\nrelease r9\n", "s.kvs")
    assert [(e.line, e.column) for e in error.errors] == [(1, 12), (2, 1), (4, 8), (5, 9)]
    assert (error.line, error.column) == (1, 12)  # the error itself is the first
    assert str(error) == "s.kvs:1:12: bad token '1..x' (expected: an integer, a range like 1..8, or \"quoted words\")"
    lines = error.report().split("\n")
    assert len(lines) == 4 and all(line.startswith("s.kvs:") for line in lines)
    assert lines[1].startswith("s.kvs:2:1: unknown op 'bogus'")


def test_a_single_error_reports_one_line():
    error = error_of("acquire r1 x")
    assert error.errors == (error,) and error.more == 0
    assert error.report() == str(error)


def test_errors_past_the_limit_are_counted_not_listed():
    error = error_of("acquire r1\n" + "bogus\n" * 25)
    assert len(error.errors) == 20
    assert error.more == 5
    assert error.report().split("\n")[-1] == "… and 5 more errors"


def test_a_bad_acquire_still_makes_its_name_live_so_its_uses_are_not_errors():
    error = error_of("acquire r1 1..x\npublish r1\nrelease r1")
    assert [e.line for e in error.errors] == [1]


def test_expects_after_a_bad_op_report_only_their_own_mistakes():
    error = error_of("acquire r1 q\nexpect free 3\nexpect free x")
    assert [(e.line, e.message) for e in error.errors] == [(1, "bad token 'q'"), (3, "bad count 'x'")]


def test_dangling_narration_is_reported_with_the_other_errors():
    error = error_of("bogus\n> dangling")
    assert [(e.line, e.column) for e in error.errors] == [(1, 1), (2, 1)]


# -- scoped to a cache kind -----------------------------------------------


def test_an_expect_may_be_scoped_to_a_cache_kind():
    (step,) = parse_scenario("acquire r1 1..4\n  [trie] expect hit r1 0").steps
    (expect,) = step.expects
    assert expect == Expect("hit", "r1", (0,), kinds=("trie",))
    assert expect.text == "[trie] expect hit r1 0"
    assert expect.applies_to("trie") and not expect.applies_to("base")
    assert Expect("ok").applies_to("base")


def test_scope_tags_take_commas_and_case_and_are_written_in_kind_order():
    (expect,) = parse_scenario("acquire r1 1..4\n[ BASE, trie ] expect free 7").steps[0].expects
    assert expect.kinds == ("trie", "base")
    assert expect.text == "[trie base] expect free 7"


def test_narration_may_be_scoped_and_keeps_script_order():
    text = "> a\n[trie] > b\n[trie] > c  # kept\n[base] > d\n> e\nacquire r1 1"
    (step,) = parse_scenario(text).steps
    assert step.paragraphs == (Paragraph("a"), Paragraph("b c  # kept", ("trie",)), Paragraph("d", ("base",)),
                               Paragraph("e"))
    assert step.narration == "a\ne"  # what every kind shows
    assert step.narration_for("trie") == "a\nb c  # kept\ne"
    assert step.narration_for("base") == "a\nd\ne"


def test_a_scoped_bare_marker_starts_a_new_paragraph_of_that_scope():
    (step,) = parse_scenario("[trie] > one\n[trie] >\n[trie] > two\nacquire r1").steps
    assert step.paragraphs == (Paragraph("one", ("trie",)), Paragraph("two", ("trie",)))


def test_unscoped_narration_needs_no_paragraphs():
    (step,) = parse_scenario("> [0 1] is a block table, not a tag\nacquire r1").steps
    assert (step.narration, step.paragraphs) == ("[0 1] is a block table, not a tag", ())
    assert step.narration_for("base") == step.narration
    assert step == Step(Op("acquire", "r1", ()), "[0 1] is a block table, not a tag")


def test_a_step_refuses_narration_that_disagrees_with_its_paragraphs():
    with pytest.raises(ValueError):
        Step(Op("release", "r1", None), "x", paragraphs=(Paragraph("y", ("trie",)),))


def test_expects_for_a_kind_keeps_unscoped_and_matching_lines():
    (step,) = parse_scenario("acquire r1 1..4\nexpect free 7\n[base] expect owned 1\n[trie] expect hit r1 0").steps
    assert [x.kind for x in step.expects_for("base")] == ["free", "owned"]
    assert [x.kind for x in step.expects_for("trie")] == ["free", "hit"]


def test_a_fail_scoped_to_one_kind_keeps_the_name_live_for_the_other():
    scenario = parse_scenario("acquire r3 1..40\n[base] expect fail alloc\n[trie] expect ok\nrelease r3")
    assert [step.op.kind for step in scenario.steps] == ["acquire", "release"]
    assert error_of("acquire r3 1..40\n[trie base] expect fail\nrelease r3").message.startswith(
        "unknown allocation 'r3'")


def test_outcomes_for_different_kinds_do_not_contradict_but_for_one_kind_do():
    parse_scenario("acquire r1\n[trie] expect ok\n[base] expect fail")
    error = error_of("acquire r1\n[trie] expect ok\nexpect fail")
    assert error.message == "'expect fail' contradicts '[trie] expect ok' on line 2"


@pytest.mark.parametrize(
    ("line", "column", "message"),
    [
        ("[tire] expect ok", 2, "unknown cache kind 'tire'; did you mean 'trie'?"),
        ("[trie expect ok", 1, "unterminated scope tag (no ']')"),
        ("[] expect ok", 1, "empty scope tag"),
        ("[trie trie] expect ok", 7, "cache kind 'trie' given twice"),
        ("[trie] release r1", 8, "a scope tag before something other than expect or narration"),
        ("[trie] title: x", 8, "a scope tag before something other than expect or narration"),
        ("[base]", 7, "a scope tag before something other than expect or narration"),
        ("[trie] expect frees 1", 15, "unknown expect 'frees'; did you mean 'free'?"),
    ],
)
def test_bad_scope_tags_are_errors_at_the_offending_item(line, column, message):
    error = error_of(f"acquire r1\n{line}")
    assert (error.line, error.column, error.message) == (2, column, message)


def test_the_help_documents_scope_tags():
    assert "[trie] expect hit r2 8" in SCENARIO_HELP
    assert "[base] > " in SCENARIO_HELP


# -- the command bar takes expect lines --------------------------------------------


def test_a_command_may_be_an_expect_line_to_check_at_once():
    expect = parse_command("  expect pages r1 0..2 7", live_names=["r1"])
    assert expect == Expect("pages", "r1", (0, 1, 2, 7))
    assert (expect.line, expect.text) == (1, "expect pages r1 0..2 7")
    assert parse_command("[base] expect fail alloc") == Expect("fail", detail="alloc", kinds=("base",))


def test_an_expect_typed_in_the_command_bar_evaluates_against_the_frame_shown():
    from kvviz.core.expect import evaluate
    from kvviz.core.session import Session

    session = Session.from_scenario(parse_scenario("acquire r1 1..8"))
    frame = session.frame(1)
    assert evaluate(parse_command("expect free 6"), frame).ok
    assert evaluate(parse_command("expect free 5"), frame).message == "expected free 5, got free 6"


def test_a_command_expect_error_points_at_its_column():
    with pytest.raises(ScenarioError) as caught:
        parse_command("expect free x")
    assert (caught.value.column, caught.value.message) == (13, "bad count 'x'")


def test_completion_data_knows_extra_and_expect():
    assert OP_OPTIONS["acquire"] == ("extra=", "priority=") and OP_OPTIONS["extend"] == ("extra=",)
    assert "publish" not in OP_OPTIONS
    assert COMMAND_KEYWORDS == (*OP_FORMS, "expect")


# -- round trips with every expect kind, ranges and scopes (hypothesis) ------------------------

KINDS_SCOPES = st.sampled_from([None, ("trie",), ("base",), ("trie", "base")])
NUMBERS = st.integers(0, 2**63 - 1) | st.integers(0, 40)
PAGE_LISTS = st.lists(
    st.tuples(st.integers(0, 10**6), st.integers(1, 300)).map(lambda run: tuple(range(run[0], run[0] + run[1])))
    | NUMBERS.map(lambda number: (number,)),
    max_size=4,
).map(lambda runs: tuple(value for run in runs for value in run))


@st.composite
def expects(draw, scoped=True):
    """Any expect of a kind that makes no claim about the outcome (ok/fail are drawn apart)."""
    kind = draw(st.sampled_from(sorted(set(EXPECT_FORMS) - {"ok", "fail"})))
    kinds = draw(KINDS_SCOPES) if scoped else None
    slots = EXPECT_FORMS[kind].slots
    name = draw(NAMES) if "name" in slots else None
    values: tuple[int, ...] = ()
    for slot in slots:
        if slot in ("count", "page"):
            values += (draw(NUMBERS),)
        elif slot == "pages":
            values += draw(PAGE_LISTS)
        elif slot == "pages+":
            values += draw(PAGE_LISTS.filter(bool))
    names = tuple(draw(st.lists(NAMES, max_size=3))) if "names" in slots else ()
    return Expect(kind, name, values, names=names, kinds=kinds)


@given(expects())
def test_format_expect_parses_back_to_an_equal_expect(expect):
    text = format_expect(expect)
    assert parse_command(text) == expect
    assert len(text) < 200  # ranges stay ranges


PROSE = st.sampled_from(["one", "one two", "x " * 50 + "end", "page #3 [0 1]", "> quoted"])


@st.composite
def scoped_scenarios(draw):
    """Valid scenarios with every expect kind and narration scoped to cache kinds."""
    base = draw(scenarios())
    steps = []
    for step in base.steps:
        paragraphs = tuple(Paragraph(draw(PROSE), draw(KINDS_SCOPES)) for _ in range(draw(st.integers(0, 3))))
        # The drawn scenario's unscoped 'expect fail' stays as it is: it is what frees a failed
        # acquire's name (a scoped one would not), and the live names were drawn assuming so.
        more = tuple(draw(st.lists(expects(), max_size=3)))
        steps.append(Step(step.op, expects=step.expects + more, paragraphs=paragraphs))
    return dataclasses.replace(base, steps=tuple(steps))


@settings(max_examples=50)  # each example is a whole scenario: 50 keep the file's run short
@given(scoped_scenarios())
def test_format_scenario_round_trips_scoped_lines_and_every_expect_kind(scenario):
    text = format_scenario(scenario)
    assert parse_scenario(text) == dataclasses.replace(scenario, source=text)


def test_the_package_keeps_every_name_the_old_module_exported():
    import kvviz.core.scenario as package

    old_all = [
        "CACHE_KINDS", "EXPECT_FORMS", "MAX_SOURCE_BYTES", "MAX_TOKENS_PER_OP", "MAX_TOKENS_PER_SCENARIO",
        "OP_FORMS", "SCENARIO_EXAMPLE", "SCENARIO_HELP", "CacheConfig", "Expect", "Op", "Scenario",
        "ScenarioError", "Step", "format_expect", "format_op", "format_scenario", "format_tokens",
        "parse_command", "parse_scenario", "parse_scenario_bytes", "parse_scenario_file",
        "MAX_PAGES", "DEFAULT_CACHE_CONFIG", "POLICIES", "format_cache",  # imported by name elsewhere
    ]
    assert set(old_all) <= set(package.__all__)
    assert all(hasattr(package, name) for name in package.__all__)


def test_names_listed_in_expect_live_count_towards_the_budget(monkeypatch):
    monkeypatch.setattr(parse_module, "MAX_TOKENS_PER_SCENARIO", 5)
    error = error_of("acquire a 1 2\nexpect live a b c d")
    assert (where(error), error.message) == ((2, 1), "the scenario spells more than 5 tokens (names listed in expect "
                                                     "lines count too)")


# -- eviction policies -------------------------------------------------------------


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_parses_and_formats_back(policy):
    config = parse_scenario(f"cache trie pages=4 tpp=2 policy={policy.upper()}\nacquire r1").config
    assert config == CacheConfig("trie", 4, 2, policy)
    assert parse_scenario(format_cache(config) + "\nacquire r1").config == config


def test_the_header_offers_every_policy_in_its_error():
    message = str(error_of("cache trie policy=arc\n"))
    assert all(p in message for p in POLICIES)


# Seven one-page leaves [1]..[7] created in that order in a full pool of 7 pages, touched so
# that the policies disagree (hits counted by each later acquire that matches the page):
#   [1] created first, hit once, 4th touch     -> fifo's victim (smallest seq)
#   [2] hit twice, the earliest touches of all -> lru's victim (and priority's: no op sets one)
#   [3] hit once, 3rd touch                    -> slru's: earliest among hits < 2 ([2] is protected)
#   [4] hit once, 5th touch
#   [5] never hit, created after every touch   -> lfu's: fewest hits, earlier than [7]
#   [6] hit once, the last touch               -> mru's victim
#   [7] never hit, created last                -> filo's victim (largest seq)
# Then x needs one page: the victim is evicted.
SEVEN = "\n".join(
    [f"acquire n{k} {k}\npublish n{k}\nrelease n{k}" for k in (1, 2, 3, 4)]
    + [f"acquire h{i} {k}\nrelease h{i}" for i, k in enumerate((2, 2, 3, 1, 4))]
    + [f"acquire n{k} {k}\npublish n{k}\nrelease n{k}" for k in (5, 6, 7)]
    + ["acquire h9 6\nrelease h9", "acquire x 99"]
)
SCENARIO_VICTIM = {"fifo": 1, "lru": 2, "priority": 2, "slru": 3, "lfu": 5, "mru": 6, "filo": 7}


@pytest.mark.parametrize("policy", POLICIES)
def test_a_scenario_header_policy_picks_the_victim(policy):
    from kvviz.core.session import Session

    session = Session.from_scenario(parse_scenario(f"cache trie pages=7 tpp=1 policy={policy}\n{SEVEN}"))
    before, after = session.frame(-2).snapshot, session.frame(-1).snapshot
    assert after.policy == policy and before.free_count == 0
    gone = {n.tokens for n in before.nodes} - {n.tokens for n in after.nodes}
    assert gone == {(SCENARIO_VICTIM[policy],)}
