# SPDX-License-Identifier: Apache-2.0
"""``kvviz compare``: one scenario on two cache configurations, side by side.

``--left``/``--right`` name each side as ``KIND[:POLICY]`` (``trie:lru``, ``trie:lfu``,
``base``, ``hash``) and ``--left-backend``/``--right-backend`` the cache that runs it. The UI is
``kvviz diff --ui``'s side-by-side app with running counters per side; ``--print`` and
``--json`` are headless, one report and one JSON schema with ``kvviz diff``. Exit 0 when both
sides agree at every step, 1 at a divergence, 2 for bad input, as ``kvviz diff``.
"""

from __future__ import annotations

import json
import sys

import click

from kvviz.backends.registry import BACKENDS, BackendError
from kvviz.commands import BadInput, check_step, load_file_or_demo
from kvviz import commands


def _backend_option(side: str):
    return click.option(f"--{side}-backend", type=click.Choice(BACKENDS), default="kvcore", show_default=True,
                        help=f"The cache that runs the {side} side (shortfin: its trie, lru only).")


def _side(option: str, text: str, header, backend: str):
    """The side ``option`` names; a bad spec is one line naming the option."""
    from kvviz.compare.engine import DiffError, parse_side

    try:
        return parse_side(text, header, backend)
    except DiffError as exc:
        raise BadInput(f"{option}: {exc}") from None


@click.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--left", "left_spec", metavar="KIND[:POLICY]", default=None,
              help="The left side: trie[:POLICY], base or hash. Default: the scenario's own `cache` line.")
@click.option("--right", "right_spec", metavar="KIND[:POLICY]", required=True,
              help="The right side, as --left (e.g. trie:lfu). A trie without a policy takes the script's.")
@_backend_option("left")
@_backend_option("right")
@click.option("--print", "print_only", is_flag=True,
              help="Print the first divergence and a table of every step with both sides' counters.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the report as one JSON object, a record per step per side (kvviz.compare/2).")
@click.option("--step", type=int, default=None, help="Open the UI at this step (default: the first divergence).")
def compare(file: str, left_spec: str | None, right_spec: str, left_backend: str, right_backend: str,
            print_only: bool, as_json: bool, step: int | None) -> None:
    """Run a scenario (or a demo) on two cache configurations and show them side by side.

    Stepping moves both sides; the first step where they differ (success or failure, free
    pages, cached blocks, block tables) is marked, and each side counts hit tokens, pages
    computed and reused, evictions and failed ops. The script's narration and expects apply
    on the side that runs its own `cache` line; the output says which side checked them.
    Exit 0 when the sides agree at every step, 1 at a divergence, 2 for bad input.
    """
    from kvviz.compare.engine import compare_dict, format_compare, run_compare

    if print_only and as_json:
        raise BadInput("--print and --json exclude each other: give one of them")
    scenario = load_file_or_demo(file)
    header = scenario.config
    try:
        left = _side("--left", left_spec if left_spec is not None else header.kind, header, left_backend)
        right = _side("--right", right_spec, header, right_backend)
        run = run_compare(scenario, left, right)
    except BackendError as exc:
        raise BadInput(str(exc)) from None
    check_step(run.left.session, step)
    if step is not None and (as_json or print_only):
        raise BadInput("--step opens the UI at a step: it does not go with --print or --json")
    if as_json:
        click.echo(json.dumps(compare_dict(run), indent=2, sort_keys=True))
    elif print_only:
        click.echo(format_compare(run), nl=False)
    else:
        launch_diff_ui(run, step)  # at the first divergence unless --step
    sys.exit(1 if run.divergence else 0)


def launch_diff_ui(run, step: int | None = None) -> None:
    """Open a two-sided run (``kvviz diff``, ``kvviz compare``) side by side in the terminal UI,
    at ``step`` (default: the first divergence)."""
    from kvviz.compare.app import make_diff_app

    commands.run_app(make_diff_app(run, step))
