# SPDX-License-Identifier: Apache-2.0
"""kvviz: learn and inspect the KV cache of an LLM server, step by step.

The map, for a newcomer: each folder is one family of commands, holding its pure code, its
Textual code and its click commands; what two families share lives below them, in the kernel.

    cli.py      the ``kvviz`` group: adds every family's commands, wires the families together
    help.py     ``kvviz help TOPIC``: pages built from the tables they document
    compare/    ``compare``, ``diff`` (compare with shortfin on the right), ``shrink``, ``fuzz``:
                two caches side by side, a failure cut to its minimal scenario, random runs
    trace/      ``trace``: real request traces replayed at a capacity, swept, plotted, cut to a scenario
    watch/      ``watch``: a live server's KV-event stream (wire codec, subscriber, recording,
                forest of blocks, timeline, ``--against``), its bundles, app and widgets
    serve/      ``serve``: the UI in a browser, one app process per tab
    explore/    the stepping app and what opens it: ``demo``, ``run``, ``check``, ``export``,
                ``open``, ``quiz`` (the app's quiz mode asks teach's questions)
    teach/      the course: quiz questions, exercises (``practice``), lessons and ``progress``
    commands.py the command-line kit every family's commands use: one error type, loading a
                scenario, printing a session, starting an app
    ui/         the Textual kit: line canvas, cache column and its panes, footer, palette,
                themes, prompt/help/branch screens, stepping, exporting, saving
    report/     a step as a bug report: bundle, Markdown, text, the JSON timeline
    core/       the kernel: the scenario language, sessions, designs, sub-steps, pseudo-code,
                expects, views, narration, why, words, limits, demos
    backends/   the caches a session drives: the Backend protocol and its types, kvcore, shortfin
    samples/    the real traces and KV-event recordings kvviz ships, by name
    printable.py, extras.py  one way to make a file's text safe for a terminal, one way to say
                how to install an extra (leaves: standard library only, for every layer)

Imports point down this list's layers and never up: cli > help > compare | trace | watch |
serve (independent of each other) > explore > teach > commands > ui > report > core >
backends > samples | printable | extras > kvcore (the library, standard library only). ``lint-imports`` holds the tree to
it (the contracts are in pyproject.toml).
"""

__version__ = "0.1.0"
