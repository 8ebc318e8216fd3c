# SPDX-License-Identifier: Apache-2.0
"""A command that needs an optional extra says so in one wording, whichever extra it is: the
same sentence, the same install command (the README's), after the usual ``kvviz: error:``."""

from __future__ import annotations

import re

from kvviz.watch.wire import WATCH_EXTRA_MISSING
from kvviz.backends.registry import INSTALL_SHORTFIN
from kvviz.serve.command import SERVE_EXTRA_MISSING

SENTENCE = re.compile(r'kvviz (\w+) needs the (\w+) extra: install it with: pip install -e "\.\[(\w+)\]"')


def test_the_watch_and_serve_extras_are_worded_alike():
    for line, extra in ((WATCH_EXTRA_MISSING, "watch"), (SERVE_EXTRA_MISSING, "serve")):
        match = SENTENCE.fullmatch(line)
        assert match is not None and set(match.groups()) == {extra}, line


def test_the_shortfin_extra_is_installed_with_the_same_command():
    assert INSTALL_SHORTFIN == 'pip install -e ".[shortfin]"'
