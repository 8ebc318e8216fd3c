# SPDX-License-Identifier: Apache-2.0
"""The docs site builds with no warning, its reference pages are what the code gives now (the
commands, options, JSON formats, help topics, keys and limits are generated, never copied), and
what the code and the docs cite is in the repository."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvcore.invariants import NAMES
from kvviz.cli import cli

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def generator():
    """docs/gen_reference.py, imported from its path (docs/ is no package)."""
    spec = importlib.util.spec_from_file_location("gen_reference", DOCS / "gen_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_generated_reference_page_is_stale():
    assert generator().stale() == [], "run: python docs/gen_reference.py"


def test_a_changed_help_text_makes_its_page_stale(monkeypatch):
    from kvviz.report import timeline_json

    gen = generator()
    monkeypatch.setattr(timeline_json, "JSON_HELP", timeline_json.JSON_HELP + "a field added\n")
    assert gen.stale() == ["json.md"]


def _options(*command: str) -> list[str]:
    """The options `kvviz COMMAND --help` lists, as written there (`--capacity-tokens`, `-o`)."""
    result = CliRunner().invoke(cli, [*command, "--help"], prog_name="kvviz", terminal_width=200)
    assert result.exit_code == 0, result.output
    section = result.output.split("Options:", 1)[1]
    return sorted({word for line in section.splitlines() if line.startswith("  -")
                   for word in re.findall(r"(?<![\w-])--?[\w][\w-]*", line.split("  ")[1])})


def test_the_cli_page_lists_every_command_and_option_kvviz_help_does():
    page = (DOCS / "reference" / "cli.md").read_text(encoding="utf-8")
    listing = CliRunner().invoke(cli, ["--help"], prog_name="kvviz").output.split("Commands:", 1)[1]
    commands = [line.split()[0] for line in listing.splitlines() if line.startswith("  ") and line.split()]
    assert len(commands) >= 15
    sections = dict(re.findall(r"^## kvviz (\S+)\n(.*?)(?=^## |\Z)", page, flags=re.M | re.S))
    assert sorted(sections) == sorted(commands)
    for command in commands:
        options = _options(command)
        assert "--help" in options
        missing = [o for o in options if f"`{o}" not in sections[command] and f" {o}" not in sections[command]]
        assert missing == [], command


def test_the_invariants_page_states_every_invariant_kvcore_checks():
    page = (DOCS / "invariants.md").read_text(encoding="utf-8")
    assert len(NAMES) == 11 and "Eleven rules" in page
    for number, name in NAMES.items():
        assert f"| {number} |" in page and name in page, number


def _anchors(page: Path) -> set[str]:
    """The ids a page's headings get: `{#id}` where given, else the slug mkdocs makes."""
    ids = set()
    for heading in re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), flags=re.M):
        given = re.search(r"\{#([\w-]+)\}\s*$", heading)
        ids.add(given.group(1) if given else re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", heading.lower())).strip("-"))
    return ids


def test_every_docs_path_the_code_cites_exists_with_its_anchor():
    cited = set()
    for source in [*ROOT.joinpath("kvviz").rglob("*.py"), *ROOT.joinpath("kvcore").rglob("*.py")]:
        cited |= set(re.findall(r"docs/([\w/.-]+\.md)(?:#([\w-]+))?", source.read_text(encoding="utf-8")))
    assert ("bugs.md", "b9") in cited and ("invariants.md", "") in cited
    for page, anchor in sorted(cited):
        assert (DOCS / page).is_file(), page
        if anchor:
            assert anchor in _anchors(DOCS / page), f"docs/{page}#{anchor}"


def test_nothing_shipped_or_documented_names_the_shared_folder_beside_the_checkout():
    out = subprocess.run(["grep", "-rn", "--exclude-dir=__pycache__", r"\.\./shared", "kvviz", "README.md", "docs"],
                         cwd=ROOT, capture_output=True, text=True)
    assert out.stdout == "" and out.returncode == 1, out.stdout


def test_the_site_builds_with_no_warning(tmp_path):
    """`mkdocs build --strict`: a broken link, a missing anchor, a page left out of the nav or a
    kvcore docstring mkdocstrings cannot render fails it. Skipped only without the docs extra."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    pytest.importorskip("mkdocstrings_handlers.python")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")  # Material's end-of-life banner, not a warning of ours
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").is_file()
    assert "kvcore.TriePagedAttentionCache.acquire_pages_for_tokens" in \
        (tmp_path / "site" / "reference" / "kvcore" / "index.html").read_text(encoding="utf-8")


def test_every_limit_says_what_it_bounds_so_its_generated_row_does():
    from kvviz.core import limits

    documented = generator()._documented_names(ROOT / "kvviz" / "core" / "limits.py", r"MAX_[A-Z_]+")
    names = [n for n in vars(limits) if re.fullmatch(r"MAX_[A-Z_]+", n)]
    assert sorted(name for _, name, _ in documented) == sorted(names)
    assert [name for _, name, doc in documented if not doc] == []
    page = (DOCS / "reference" / "limits.md").read_text(encoding="utf-8")
    assert all(f"| `{name}` |" in page for name in names)


def test_a_command_invoked_on_its_own_first_leaves_the_cli_page_as_the_command_line_makes_it():
    # click caches a command's help option the first time it is asked for: invoked alone (as
    # some tests do) it is --help only, where `kvviz diff -h` works. The page must not care.
    from kvviz.compare.diff_command import diff

    assert CliRunner().invoke(diff, ["--help"]).exit_code == 0
    assert "cli.md" not in generator().stale()
