# SPDX-License-Identifier: Apache-2.0
"""``kvviz diff``: one scenario on kvcore and on shortfin, and the first step where they differ:
``kvviz compare`` with the backend on the right (one run, one report, one JSON schema)."""

from __future__ import annotations

import json
import sys

import click

from kvviz.backends.registry import BACKENDS, DIFF_BACKEND, REFERENCE_BACKEND, BackendError
from kvviz.commands import load_file_or_demo, refused_scenario
from kvviz.compare.compare_command import launch_diff_ui


@click.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (kvviz.compare/2, as kvviz compare "
                                                      "--json: both states at the divergence included as snapshots).")
@click.option("--ui", is_flag=True, help="Show both runs side by side in the app, at the first divergence.")
@click.option("--backend", type=click.Choice([b for b in BACKENDS if b != REFERENCE_BACKEND]), default=DIFF_BACKEND,
              show_default=True, help="The real cache on the right: shortfin's trie or SGLang's RadixCache (against "
                                      "kvcore's trie), or vLLM's prefix cache (against kvcore's hash design; the "
                                      "script's header kind is replaced by hash, its tokens_per_page and pages "
                                      "kept).")
def diff(file: str, as_json: bool, ui: bool, backend: str) -> None:
    """Run a scenario on kvcore and on a real cache and report the first step where they differ.

    `kvviz diff FILE` is `kvviz compare FILE --right trie --right-backend shortfin --print`, the
    same report (and with --json the same JSON); `--backend vllm` puts vLLM 0.33.0 there,
    `--backend sglang` SGLang 0.5.23. Each engine's known behaviours (SGLang's
    whole-leaf eviction SG1, its split-refresh LRU bug SG2, a refused lookup touching LRU SG3)
    are named where they decide a divergence. The engines need their own venv with a CPU
    torch (~2 min, ~3.5 GB), from a checkout: `bash scripts/install-engines.sh VENV`, then
    run VENV/bin/kvviz.

    Compares what a user of the cache can observe after every step: success or failure,
    the number of free pages, the cached blocks and each allocation's block table (page
    numbers may differ; which pages alias which, and which block holds them, may not).
    Exit 0 when they agree at every step, 1 at a divergence, 2 for bad input.
    """
    from kvviz.compare.engine import DiffError, compare_dict, format_compare, run_diff

    scenario = load_file_or_demo(file)
    try:
        run = run_diff(scenario, backend)
    except (DiffError, BackendError) as exc:  # the scenario's cache line asks for what a diff cannot run
        raise refused_scenario(scenario, exc) from None
    if ui:
        launch_diff_ui(run)
    elif as_json:
        click.echo(json.dumps(compare_dict(run), indent=2, sort_keys=True))
    else:
        click.echo(format_compare(run), nl=False)
    sys.exit(1 if run.divergence else 0)
