# SPDX-License-Identifier: Apache-2.0
"""The optional extras (``watch``, ``serve``, ``shortfin``) and the one sentence that says how
to install one, so every command that needs an extra words it the same way (the README's
install commands: an editable install of the clone)."""

from __future__ import annotations


def install_command(extra: str) -> str:
    """The command that installs ``extra``: ``pip install -e ".[watch]"``."""
    return f'pip install -e ".[{extra}]"'


def needs_extra(what: str, extra: str) -> str:
    """``what`` (a command, a backend) needs ``extra``, and how to install it: one sentence."""
    return f"{what} needs the {extra} extra: install it with: {install_command(extra)}"


__all__ = ["install_command", "needs_extra"]
