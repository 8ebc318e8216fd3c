"""CLI pieces for backends: ``kvviz diff`` and the ``--backend`` option of ``run`` and ``check``.

Registered by :mod:`kvviz.cli`. Imports from the CLI module happen inside functions, so this
module can be imported first (tests do) without a cycle.
"""

from __future__ import annotations

import json
import sys

import click

from .registry import BACKENDS, BackendError


def backend_option(f):
    """``--backend kvcore|shortfin``: which cache runs the scenario (default kvcore)."""
    return click.option(
        "--backend", type=click.Choice(BACKENDS), default="kvcore", show_default=True,
        help='The cache to run: kvcore (ours) or shortfin (shortfin 3.9.0\'s TriePagedAttentionCache; '
             'needs pip install -e ".[shortfin]").')(f)


def backend_factory(backend: str, kind: str | None):
    """The session's backend factory for ``--backend`` (and ``--trie``/``--base``); bad input exits 2."""
    from ..cli import BadInput
    from .registry import make_backend_factory

    if backend != "kvcore" and kind == "base":
        raise BadInput(f"--base runs kvcore's base cache; the {backend} backend is a trie cache (drop --base)")
    try:
        return make_backend_factory(backend)
    except BackendError as exc:
        raise BadInput(str(exc)) from None


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
    from pathlib import Path

    from ..cli import BadInput, _load
    from ..diffrun import DiffError, format_report, report_dict, run_diff

    scenario = _load(file, demo=not Path(file).exists() and not file.endswith(".kvs"))
    try:
        run = run_diff(scenario)
    except (DiffError, BackendError) as exc:
        raise BadInput(str(exc)) from None
    if ui:
        try:
            from ..diff_app import run_diff_app
        except ImportError:
            click.echo("kvviz: the side-by-side view is not part of this build; printing the report", err=True)
        else:
            run_diff_app(run)
            sys.exit(1 if run.divergence else 0)
    if as_json:
        click.echo(json.dumps(report_dict(run), indent=2, sort_keys=True))
    else:
        click.echo(format_report(run), nl=False)
    sys.exit(1 if run.divergence else 0)
