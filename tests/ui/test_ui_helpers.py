# SPDX-License-Identifier: Apache-2.0
"""Small pure pieces of the UI: themes, markup escaping, export names, the purity line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from textual.content import Content
from textual.theme import BUILTIN_THEMES

from kvviz.explore.app import slug
from kvviz.ui.themes import KV_VARIABLES, THEMES, variable_defaults
from kvviz.core.view import literal

ROOT = Path(__file__).resolve().parents[2]


def test_every_theme_gets_every_kvviz_variable_as_a_solid_colour():
    for theme in [*BUILTIN_THEMES.values(), *THEMES]:
        values = {**variable_defaults(theme), **theme.variables}
        for name in KV_VARIABLES:
            value = values.get(name, "")
            # a hex colour, or a terminal palette colour in the ANSI themes; never "auto" or alpha
            assert value.startswith(("#", "ansi_")) and " " not in value, f"{theme.name}: {name} = {value!r}"


def test_the_kvviz_themes_set_the_change_colours_themselves():
    for theme in THEMES:
        assert {"kv-new", "kv-touched", "kv-evicted"} <= set(theme.variables)


def test_literal_text_survives_markup_whatever_brackets_it_holds():
    for text in ("[1 2 3 4]", "a lone [", "[b]not bold[/b]", r"back\slash [x]", "] / ["):
        assert Content.from_markup(literal(text)).plain == text


def test_export_names_are_short_slugs_cut_at_a_word():
    assert slug("LRU eviction: who is evicted when the pool is full, and why") == "lru-eviction-who-is-evicted-when"
    assert slug("") == "session" and slug("!!!") == "session"


def test_the_selection_rules_import_no_textual():
    code = "import sys, kvviz.core.view; print('textual' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
