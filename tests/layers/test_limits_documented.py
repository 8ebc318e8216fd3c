# SPDX-License-Identifier: Apache-2.0
"""Every limit in kvviz/limits.py is listed in the README's Limits section, with its value."""

from __future__ import annotations

import re
from pathlib import Path

from kvviz import limits

ROOT = Path(__file__).resolve().parents[2]


def limits_section() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index("## Limits")
    return readme[start:readme.index("\n## ", start + 1)]


def test_every_limit_is_in_the_readme_table():
    section = limits_section()
    names = [n for n in vars(limits) if re.fullmatch(r"MAX_[A-Z_]+", n)]
    assert len(names) >= 10
    missing = [n for n in names if f"`{n}`" not in section]
    assert missing == []


def test_the_readme_states_each_limits_value():
    section = limits_section()
    for name in (n for n in vars(limits) if re.fullmatch(r"MAX_[A-Z_]+", n)):
        row = next(line for line in section.splitlines() if f"`{name}`" in line)
        value = getattr(limits, name)
        spellings = {f"{value:,}", f"{value}"}
        if value == 2**63 - 1:
            spellings.add("2^63 − 1")
        if value >= 1024 * 1024 and value % (1024 * 1024) == 0:
            spellings.add(f"{value // (1024 * 1024)} MiB")
        exponent = len(str(value)) - 1
        if value == 10**exponent:
            spellings.add(f"10^{exponent}")
        assert any(s in row for s in spellings), (name, value, row)
