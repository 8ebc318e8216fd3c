# SPDX-License-Identifier: Apache-2.0
"""Command palette entries (ctrl+p): open a demo, export, save the script, switch theme,
jump to a step ("12" or "step 12"), jump to the first violation, toggle views."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

# At most 18 digits: a longer number is no step of any timeline, and int() of thousands of
# digits raises (Python's 4,300-digit limit).
_STEP = re.compile(r"^\s*(?:go ?to |jump |step )?\s*(\d{1,18})\s*$", re.IGNORECASE)


class KvvizCommands(Provider):
    """The kvviz commands of the palette (see the module doc)."""

    def _commands(self) -> list[tuple[str, Callable[[], object], str]]:
        app = self.app
        commands: list[tuple[str, Callable[[], object], str]] = [
            ("Export this step (bundle, Markdown, SVG)", app.action_export, "write kvviz-<title>-step<N>.json/.md/.svg"),
            ("Save script as .kvs", app.action_save_script, "the session's ops so far as a scenario file"),
            ("Jump to step…", app.action_jump, "type a step number"),
            ("Jump to first violation", app.action_first_violation, "the first step whose invariants fail"),
            ("Next interesting step", app.action_next_interesting, "eviction, failure or violation"),
            ("Previous interesting step", app.action_previous_interesting, "eviction, failure or violation"),
            ("Toggle why panel", app.action_toggle_why, "why was this page evicted / why this short match"),
            ("Toggle quiz mode", app.action_toggle_quiz,
             "predict each interesting step before it is revealed; score, hints, skips"),
            ("Toggle compact page grid", app.action_toggle_compact, "one character per page"),
            ("Step into the op", app.action_step_into, "its sub-steps one by one, with kvcore's state after each"),
            ("Step out to the whole step", app.action_step_out, "the state after the op, with its change marks"),
            ("Toggle pseudo-code pane", app.action_toggle_code, "the algorithm's lines, the sub-step's lit"),
            ("Toggle buggy code beside ours", app.action_toggle_buggy, "bug-museum demos: the differing line marked"),
            ("Help: keys and legend", app.action_help, "every key and colour"),
        ]
        for theme in ("kvviz-dark", "kvviz-light"):
            commands.append((f"Theme: {theme}", partial(setattr, app, "theme", theme), "kvviz's own colours"))
        for name in app.demo_names():
            commands.append((f"Demo: {name}", partial(app.open_demo, name), "open this narrated demo"))
        return commands

    async def discover(self) -> Hits:
        for name, callback, help_text in self._commands():
            yield DiscoveryHit(name, callback, help=help_text)

    async def search(self, query: str) -> Hits:
        step = _STEP.match(query)
        if step is not None:
            target = int(step.group(1))
            yield Hit(1.0, f"Jump to step {target}", partial(self.app.go_to, target),
                      help=f"the timeline has steps 0..{len(self.app.session) - 1}")
            return  # a number means a step: fuzzy matches of names would only get in the way
        matcher = self.matcher(query)
        for name, callback, help_text in self._commands():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), callback, help=help_text)
