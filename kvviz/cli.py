# SPDX-License-Identifier: Apache-2.0
"""The whole ``kvviz`` command line: every command is added here, explicitly.

Commands live in this package and nowhere else; they share one error type
(:class:`~kvviz.commands.BadInput`: one line, then a scenario's other located problems if it
has several; exit code 2) and one way to start the UI
(:func:`~kvviz.commands.launch_ui`). The group itself makes two promises for every command:
a usage error is one line, and a reader that closes the pipe early is not a failure.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager

import click

from kvviz.commands import BadInput
from kvviz.compare.compare_command import compare
from kvviz.compare.diff_command import diff
from kvviz.compare.fuzz_command import fuzz
from kvviz.compare.shrink_command import shrink
from kvviz.explore.commands import check, demo, export, open_, run
from kvviz.explore.quiz_command import quiz
from kvviz.help import help_
from kvviz.report.bundle_kinds import register_bundle_kind
from kvviz.serve.command import serve
from kvviz.teach.practice_command import practice
from kvviz.teach.progress_command import progress
from kvviz.trace.command import trace
from kvviz.watch.command import WATCH_BUNDLE, watch


INTERRUPTED = 130
"""The exit code after Ctrl-C: 128 + SIGINT's 2."""


@contextmanager
def _command_line_promises():
    """What the group promises for every command, around parsing and running it.

    A usage error is one line: click's four (usage, "Try ...", blank, "Error: ...") become
    one ``kvviz: error:`` line, exit 2. ``kvviz`` alone still prints the help.

    Ctrl-C exits 130 (128 + SIGINT, as shells report it) with one line, never click's
    "Aborted!" and exit 1, which means "a check failed" here.

    A closed stdout exits 0 quietly: in ``kvviz demo lru --print | head -1`` head has what it
    wants and closes the pipe. That is not a failed check (exit 1 in the docs), so exit 0
    without a word, as Unix tools do. Click turns EPIPE into exit 1 inside ``cli.main``,
    before ``main()`` could see it: hence here, around everything click runs.
    """
    try:
        try:
            yield
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as exc:
            message = " ".join(exc.format_message().split())  # one line, whatever click wrapped
            if not message.rstrip(")'\"").endswith((".", "?", "!")):  # "(Did you mean ...?)" is one
                message += "."  # a sentence before the next one ("... kvviz replays. Try ...")
            command = exc.ctx.command_path if exc.ctx is not None else "kvviz"
            raise BadInput(f"{message} Try `{command} -h`.") from None
        finally:
            sys.stdout.flush()  # meet a closed pipe here, not in the interpreter's exit
    except BrokenPipeError:
        _quiet_stdout()
        raise click.exceptions.Exit(0) from None
    except KeyboardInterrupt:
        click.echo("kvviz: interrupted (Ctrl-C)", err=True)
        raise click.exceptions.Exit(INTERRUPTED) from None


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush of what is still buffered
    does not fail on the closed pipe again (the recipe of Python's ``signal`` docs)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # not a real file (an in-process test runner)
        pass


class KvvizGroup(click.Group):
    """The ``kvviz`` group: one-line usage errors and quiet closed pipes, for every command."""

    def make_context(self, info_name, args, parent=None, **extra) -> click.Context:
        """Parse the group's own options (``--help``, ``--version``) under the promises."""
        with _command_line_promises():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context):
        """Parse and run the command under the promises."""
        with _command_line_promises():
            return super().invoke(ctx)


@click.group(cls=KvvizGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="kvviz")
def cli() -> None:
    """kvviz: see inside the KV cache of an LLM server, step by step."""


for _command in (demo, run, check, export, open_, help_, diff, compare, trace, quiz, watch, practice, serve,
                 progress):
    cli.add_command(_command)
for _command in (shrink, fuzz):  # a failure cut to a minimal report; random scenarios until one fails
    cli.add_command(_command)


# `kvviz open` reads a watch bundle too; explore does not import watch, the group wires it in.
register_bundle_kind(WATCH_BUNDLE)


def main() -> None:
    """Console entry point."""
    cli(prog_name="kvviz")


__all__ = ["cli", "main"]
