# SPDX-License-Identifier: Apache-2.0
"""The course: what kvviz asks a learner, and how it keeps score.

:mod:`.quiz` (questions about a step, by kind, and their feedback), :mod:`.exercise` (the
moves of ``kvviz practice``: the learner does each step), :mod:`.generate` (fresh scenarios
for a lesson), :mod:`.course` (the lessons, rounds and the progress file); the exercise
screen (:mod:`.exercise_screen`, :mod:`.move_panel`) and the commands ``practice`` and
``progress``. The stepping app's quiz mode lives with the app (:mod:`kvviz.explore`).
"""
