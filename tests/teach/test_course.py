# SPDX-License-Identifier: Apache-2.0
"""The course with mastery: stages and thresholds, unlocking, spaced review of missed kinds,
the progress file's path (XDG) and its strict reading."""

from __future__ import annotations

import pytest

from kvviz.core.demos import LESSONS
from kvviz.teach.course import (COURSE, CONCEPTS, MIN_MOVES, REVIEW_INTERVALS, STAGES, Progress, ProgressError,
                                lesson_status, next_round, parse_progress, progress_path, progress_text, record)
from kvviz.teach.exercise import MOVE_KINDS


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


def test_passing_every_stage_masters_the_lesson_and_meets_lru_by_the_fourth_round():
    progress = Progress()
    played = []
    for _ in range(6):
        round_ = next_round(progress)
        played.append((round_.lesson, round_.stage, round_.level))
        progress = _pass(progress)
    assert played == [(COURSE[0], "demo", None), (COURSE[1], "demo", None), (COURSE[0], "easy", "easy"),
                      ("lru", "demo", None), (COURSE[1], "easy", "easy"), (COURSE[3], "demo", None)]
    assert COURSE[:3] == ("prefix-sharing", "refcount", "lru") and sorted(COURSE) == sorted(LESSONS)
    status = lesson_status(progress)
    assert status[0].passed == ("demo", "easy") and status[4].unlocked and not status[5].unlocked


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


def _review_of(kind: str) -> Progress:
    """A progress whose next round is the first review of ``kind``."""
    progress = record(Progress(), next_round(Progress()), 10, 9, {kind: 1})
    progress = record(progress, next_round(progress), 10, 10, {})
    assert next_round(progress).review == kind
    return progress


def test_a_review_that_passes_with_a_miss_still_grows_its_interval():
    progress = _review_of("swap")
    progress = record(progress, next_round(progress), 8, 7, {"swap": 1})  # 7 of 8: passed
    assert progress.reviews["swap"] == (1, len(progress.rounds) + REVIEW_INTERVALS[1])


def test_a_review_that_fails_is_due_again_after_the_first_interval():
    progress = _review_of("swap")
    progress = record(progress, next_round(progress), 10, 6, {"swap": 4})
    assert progress.reviews["swap"] == (0, len(progress.rounds) + REVIEW_INTERVALS[0])


def test_a_kind_missed_in_every_round_still_gets_its_review():
    progress = record(Progress(), next_round(Progress()), 10, 9, {"take": 1})
    reviewed = False
    for _ in range(4):
        round_ = next_round(progress)
        reviewed = reviewed or round_.review == "take"
        progress = record(progress, round_, 10, 9, {"take": 1} if round_.review is None else {})
    assert reviewed


def test_reviews_never_come_twice_in_a_row_while_new_material_waits():
    progress = record(Progress(), next_round(Progress()), 10, 7, {"stop": 1, "take": 1, "swap": 1})
    kinds = []
    for _ in range(8):
        round_ = next_round(progress)
        kinds.append(round_.review)
        progress = record(progress, round_, 10, 10, {})
    assert all(a is None or b is None for a, b in zip(kinds, kinds[1:]))
    assert {"stop", "take", "swap"} <= set(kinds)


def test_a_failed_round_comes_back_with_a_fresh_seed():
    first = next_round(Progress())
    again = next_round(record(Progress(), first, 10, 5, {"stop": 5}))
    assert (again.lesson, again.stage) == (first.lesson, first.stage) and again.seed != first.seed


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
