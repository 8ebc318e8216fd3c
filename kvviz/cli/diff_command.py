# SPDX-License-Identifier: Apache-2.0
"""``kvviz diff``: one scenario on kvcore and on shortfin, and the first step where they differ."""

from __future__ import annotations

import json
import sys

import click

from ..backends.registry import BackendError
from .common import launch_diff_ui, load_file_or_demo, refused_scenario


@click.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (both states at the divergence "
                                                      "included as snapshots).")
@click.option("--ui", is_flag=True, help="Show both runs side by side in the app, at the first divergence.")
def diff(file: str, as_json: bool, ui: bool) -> None:
    """Run a scenario on kvcore and on shortfin and report the first step where they differ.

    Compares what a user of the cache can observe after every step: success or failure,
    the number of free pages, the cached blocks and each allocation's block table (page
    numbers may differ; which pages alias which, and which block holds them, may not).
    Exit 0 when they agree at every step, 1 at a divergence, 2 for bad input.
    """
    from ..model.compare import DiffError, format_report, report_dict, run_diff

    scenario = load_file_or_demo(file)
    try:
        run = run_diff(scenario)
    except (DiffError, BackendError) as exc:  # the scenario's cache line asks for what a diff cannot run
        raise refused_scenario(scenario, exc) from None
    if ui:
        launch_diff_ui(run)
    elif as_json:
        click.echo(json.dumps(report_dict(run), indent=2, sort_keys=True))
    else:
        click.echo(format_report(run), nl=False)
    sys.exit(1 if run.divergence else 0)
