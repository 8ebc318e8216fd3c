# SPDX-License-Identifier: Apache-2.0
"""The stepping app and the commands that open it.

``demo``, ``run``, ``check``, ``export``, ``open`` and ``quiz`` (:mod:`.commands`,
:mod:`.quiz_command`); the app (:mod:`.app`, one factory ``make_app``) and its timeline screen
(:mod:`.timeline_screen`: position, selection, play, sub-steps, quiz mode) with its parts
(:mod:`.playing`, :mod:`.substep_panes`, :mod:`.command_bar`, :mod:`.quiz_mode`,
:mod:`.question_panel`); :mod:`.launch` opens a session in it, :mod:`.screenshot` draws it
headless as SVG. The quiz mode asks :mod:`kvviz.teach.quiz`'s questions.
"""
