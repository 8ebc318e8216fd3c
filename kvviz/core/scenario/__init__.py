# SPDX-License-Identifier: Apache-2.0
"""The scenario language: ``.kvs`` files, the UI's command bar and the scripts in exports.

A scenario is a header (title, description, cache config) and a list of steps; each step is
one op on a named allocation, the narration shown with it and the ``expect`` lines that
check the state after it. Four modules, one idea each: :mod:`.values` (the frozen values),
:mod:`.parse` (text to values, every problem a located :class:`ScenarioError`),
:mod:`.format` (values to canonical text that parses back equal) and :mod:`.help`
(:data:`SCENARIO_HELP`, the language for users). Each expect kind is one entry of
:data:`kvviz.core.expect.EXPECT_KINDS`, re-exported here as :data:`EXPECT_FORMS`.
"""

from __future__ import annotations

from kvviz.core.limits import (MAX_EXTRA, MAX_NUMBER, MAX_PAGES, MAX_SCENARIO_ERRORS, MAX_SOURCE_BYTES, MAX_TOKENS_PER_OP,
                       MAX_TOKENS_PER_PAGE, MAX_TOKENS_PER_SCENARIO)
from kvviz.core.expect import EXPECT_KINDS as EXPECT_FORMS
from kvviz.core.scenario.format import format_cache, format_expect, format_ints, format_op, format_scenario, format_tokens, kinds_tag
from kvviz.core.scenario.help import SCENARIO_EXAMPLE, SCENARIO_HELP
from kvviz.core.scenario.parse import parse_command, parse_scenario, parse_scenario_bytes, parse_scenario_file
from kvviz.core.scenario.values import (CACHE_KINDS, COMMAND_KEYWORDS, DEFAULT_CACHE_CONFIG, OP_FORMS, OP_OPTIONS, POLICIES,
                     CacheConfig, Expect, Op, Paragraph, Scenario, ScenarioError, Step, applies)

__all__ = [
    "CACHE_KINDS", "COMMAND_KEYWORDS", "DEFAULT_CACHE_CONFIG", "EXPECT_FORMS", "MAX_EXTRA", "MAX_NUMBER",
    "MAX_PAGES", "MAX_SCENARIO_ERRORS", "MAX_SOURCE_BYTES", "MAX_TOKENS_PER_OP", "MAX_TOKENS_PER_PAGE",
    "MAX_TOKENS_PER_SCENARIO", "OP_FORMS", "OP_OPTIONS", "POLICIES", "SCENARIO_EXAMPLE", "SCENARIO_HELP",
    "CacheConfig", "Expect", "Op", "Paragraph", "Scenario", "ScenarioError", "Step", "applies", "format_cache",
    "format_expect", "format_ints", "format_op", "format_scenario", "format_tokens", "kinds_tag", "parse_command",
    "parse_scenario", "parse_scenario_bytes", "parse_scenario_file",
]
