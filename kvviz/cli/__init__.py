"""The whole ``kvviz`` command line: every command is added here, explicitly.

Commands live in this package and nowhere else; they share one error type
(:class:`~kvviz.cli.common.BadInput`: one line, exit code 2) and one way to start the UI
(:func:`~kvviz.cli.common.launch_ui`).
"""

from __future__ import annotations

import click

from .scenario_commands import check, demo, export, help_, open_, run
from .diff_command import diff
from .trace_command import trace


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="kvviz")
def cli() -> None:
    """kvviz: see inside the KV cache of an LLM server, step by step."""


for _command in (demo, run, check, export, open_, help_, diff, trace):
    cli.add_command(_command)


def main() -> None:
    """Console entry point."""
    cli(prog_name="kvviz")


__all__ = ["cli", "main"]
