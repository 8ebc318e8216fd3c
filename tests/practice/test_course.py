# SPDX-License-Identifier: Apache-2.0
"""The course with mastery: stages and thresholds, unlocking, spaced review of missed kinds,
the progress file's path (XDG) and its strict reading."""

from __future__ import annotations

import pytest

from kvviz.demos import LESSONS
from kvviz.model.course import (CONCEPTS, MIN_MOVES, REVIEW_INTERVALS, STAGES, Progress, ProgressError,
                                lesson_status, next_round, parse_progress, progress_path, progress_text, record)
from kvviz.model.exercise import MOVE_KINDS


def _pass(progress: Progress) -> Progress:
    return record(progress, next_round(progress), 10, 10, {})


def test_every_lesson_of_the_course_has_a_concept_of_known_move_kinds():
    assert set(CONCEPTS) == set(LESSONS)
    for concept in CONCEPTS.values():
        assert concept.kinds and set(concept.kinds) <= set(MOVE_KINDS)


def test_the_first_round_is_the_first_lessons_demo_and_the_rest_are_locked():
    status = lesson_status(Progress())
    assert [s.unlocked for s in status] == [True] + [False] * (len(LESSONS) - 1)
    first = next_round(Progress())
    assert (first.lesson, first.stage, first.demo, first.random) == (LESSONS[0], "demo", LESSONS[0], False)


def test_passing_every_stage_masters_the_lesson_and_unlocks_the_next_at_rising_levels():
    progress = Progress()
    levels = []
    for _ in STAGES:
        levels.append(next_round(progress).level)
        progress = _pass(progress)
    assert levels == [None, "easy", "medium"]
    status = lesson_status(progress)
    assert status[0].mastered and status[1].unlocked and not status[1].mastered
    assert next_round(progress).lesson == LESSONS[1]


def test_a_round_below_the_threshold_or_too_short_passes_nothing():
    progress = Progress()
    round_ = next_round(progress)
    assert next_round(record(progress, round_, 10, 7, {"take": 3})).stage == "demo"
    low = record(progress, round_, 10, 7, {})
    assert lesson_status(low)[0].passed == ()
    short = record(progress, round_, MIN_MOVES - 1, MIN_MOVES - 1, {})
    assert lesson_status(short)[0].passed == ()
    exactly = record(progress, round_, 10, 8, {})
    assert lesson_status(exactly)[0].passed == ("demo",)


def test_a_missed_kind_is_asked_again_with_fresh_seeds_at_growing_intervals():
    progress = record(Progress(), next_round(Progress()), 10, 9, {"take": 1})
    assert progress.reviews == {"take": (0, 1 + REVIEW_INTERVALS[0])}
    dues, seeds = [], set()
    for _ in range(40):
        round_ = next_round(progress)
        if round_.review == "take":
            dues.append(len(progress.rounds))
            seeds.add(round_.seed)
            assert round_.kinds == ("take",) and round_.random
        progress = record(progress, round_, 10, 10, {})
        if "take" not in progress.reviews:
            break
    assert "take" not in progress.reviews  # retired after the last interval
    gaps = [b - a for a, b in zip(dues, dues[1:])]
    assert gaps == [i + 1 for i in REVIEW_INTERVALS[1:]]  # the review round itself, then the interval
    assert len(seeds) == len(dues)


def test_a_miss_in_a_review_starts_its_interval_over():
    progress = record(Progress(), next_round(Progress()), 10, 9, {"swap": 1})
    progress = record(progress, next_round(progress), 10, 10, {})
    review = next_round(progress)
    assert review.review == "swap"
    progress = record(progress, review, 10, 10, {})
    assert progress.reviews["swap"][0] == 1
    progress = record(progress, next_round(progress), 10, 10, {})
    progress = record(progress, next_round(progress), 10, 10, {})
    again = next_round(progress)
    assert again.review == "swap"
    assert record(progress, again, 10, 9, {"swap": 1}).reviews["swap"][0] == 0


def test_the_next_round_is_a_function_of_the_progress_file_alone():
    progress = Progress()
    for misses in ({}, {"take": 2}, {}, {"stop": 1}, {}):
        progress = record(progress, next_round(progress), 10, 10 - sum(misses.values()), misses)
    again = parse_progress(progress_text(progress))
    assert again == progress
    assert next_round(again) == next_round(progress)


def test_the_progress_file_lives_under_the_xdg_data_home_or_the_users_local_share():
    assert str(progress_path({"XDG_DATA_HOME": "/x/data"}, "/home/u")) == "/x/data/kvviz/progress.json"
    assert str(progress_path({}, "/home/u")) == "/home/u/.local/share/kvviz/progress.json"
    assert str(progress_path({"XDG_DATA_HOME": "relative"}, "/home/u")) == "/home/u/.local/share/kvviz/progress.json"


@pytest.mark.parametrize("text,problem", [
    ("", "not JSON"),
    ("{", "not JSON"),
    ('{"schema": "other"}', "not a kvviz progress file"),
    ('{"schema": "kvviz.progress/1", "rounds": {}, "reviews": {}}', "must be a list"),
    ('{"schema": "kvviz.progress/1", "rounds": [{"lesson": "lru", "stage": "demo", "seed": 0, "moves": 2, '
     '"right": 3}], "reviews": {}}', "3 right of 2"),
    ('{"schema": "kvviz.progress/1", "rounds": [{"lesson": "lru", "stage": "demo", "seed": -1, "moves": 2, '
     '"right": 1}], "reviews": {}}', "seed"),
    ('{"schema": "kvviz.progress/1", "rounds": [], "reviews": {"teleport": {"step": 0, "due": 1}}}', "no move kind"),
    ('{"schema": "kvviz.progress/1", "rounds": [], "reviews": {"take": {"step": 9, "due": 1}}}', "past the last"),
])
def test_a_file_that_is_not_a_progress_file_is_refused_in_one_line(text, problem):
    with pytest.raises(ProgressError, match=problem) as info:
        parse_progress(text)
    assert "\n" not in str(info.value)
