"""The narrated demos shipped with kvviz (`kvviz demo NAME`).

In a wheel they live in ``kvviz/demos/``; in a source checkout (editable install) in the
top-level ``demos/`` folder.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

from .model.scenario import Scenario, parse_scenario_file

_HERE = Path(__file__).resolve().parent


def demo_dir() -> Path:
    """The folder holding the demo ``.kvs`` files."""
    packaged = _HERE / "demos"
    if packaged.is_dir():
        return packaged
    return _HERE.parent / "demos"


def _natural(name: str) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def demo_names() -> list[str]:
    """Names of all demos: lessons first, then the bug museum, in natural order (b2 before b10)."""
    return sorted((p.stem for p in demo_dir().glob("*.kvs")), key=lambda n: (n.startswith("bug-"), _natural(n)))


def demo_path(name: str) -> Path:
    """The file of demo ``name``; KeyError with close suggestions if there is none."""
    path = demo_dir() / f"{name}.kvs"
    if not path.is_file():
        close = difflib.get_close_matches(name, demo_names(), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise KeyError(f"no demo named {name!r}{hint} (`kvviz demo --list` lists them)")
    return path


def load_demo(name: str) -> Scenario:
    """The parsed scenario of demo ``name``."""
    return parse_scenario_file(demo_path(name))
