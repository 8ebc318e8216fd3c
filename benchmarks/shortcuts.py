# SPDX-License-Identifier: Apache-2.0
"""How far a shortcut gets: cheap heuristics that compute nothing, scored on every practice
move and quiz question of the demos and of seeded random scenarios on every design.

    python benchmarks/shortcuts.py [--seeds N] [--check]

A heuristic answers without reading a page count or a key: a fixed position (the first, the
middle or the last choice), the smallest, second smallest, second largest or largest number
offered (a choice that shows a number), "no swap: the sift stops" (moves and the quiz's next
swap), "0 blocks match", the node showing the block's tokens, the
middle-length prefix of the free list, the smallest key among the choices (the smallest listed
key, for the quiz). Each is scored per move (question) kind against chance (the mean of
1 / choices). The table is Markdown; a heuristic more than 15 points above chance on at least
20 samples is marked ``!`` and ``--check`` then exits 1.

The default, 100 random scenarios per level and design (each played with two seeds), gives
every kind but the rarest 200 samples or more, so one standard deviation of a rate near the
line is at most 3.5 points there (the ``sd`` column: at chance + 15): 20 to 60 samples, as 6
scenarios gave, left it at 6 to 7 points and a verdict that flipped with the seed. It runs in
about 30 s of CPU on one core.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvviz.teach.practice_command import _session  # noqa: E402
from kvviz.explore.quiz_command import UNLISTED  # noqa: E402
from kvviz.core.demos import LESSONS  # noqa: E402
from kvviz.teach.exercise import build_exercise  # noqa: E402
from kvviz.teach.quiz import questions  # noqa: E402
from kvviz.teach.quiz.substep_kinds import NO_SWAP  # noqa: E402

MARGIN = 15.0
MIN_SAMPLES = 20
SEEDS = 100
FULL_SAMPLES = 200  # n at which one standard deviation near the line is at most 3.5 points
DESIGNS = ("trie", "base", "hash")
LEVELS = ("easy", "medium", "hard")


def sessions(seeds: int, designs=DESIGNS, demos: bool = True):
    """Every lesson demo on its own design and on each other design (``demos``), and ``seeds``
    random scenarios per level and design of ``designs``."""
    for lesson in LESSONS if demos else ():
        own = _session(lesson, False, 0, None, None, None)
        yield f"{lesson}", own
        for design in DESIGNS:
            if design == own.config.kind:
                continue  # the same session again: a sample counted twice
            try:
                yield f"{lesson}/{design}", _session(lesson, False, 0, None, None, design)
            except Exception:  # a demo a design cannot run (said by the CLI): not a sample
                continue
    for design in designs:
        for level in LEVELS:
            for seed in range(seeds):
                yield f"random/{design}/{level}/{seed}", _session(None, True, seed, level, None, design)


def _pos(choices, where):
    return choices[{"first": 0, "middle": len(choices) // 2, "last": -1}[where]]


def move_heuristics(move):
    """Each heuristic's choice for ``move`` (None: it does not apply)."""
    cs = move.choices
    out = {w: _pos(cs, w) for w in ("first", "middle", "last")}
    if move.kind == "swap":
        out["no swap"] = next((c for c in cs if c.value == ()), None)
    if move.kind == "stop":
        out["0 blocks"] = next((c for c in cs if c.value == (0,)), None)
    if move.kind == "dedup":
        label = re.search(r"\[[^\]]*\]", move.prompt)
        out["token-matching node"] = next((c for c in cs if c.value[0] == "adopt" and label
                                           and label.group(0) in c.text), None)
    if move.kind in ("take", "drop"):
        free = tuple(move.info("free", ()) or move.state.free)
        prefixes = sorted((c for c in cs if c.value == free[:len(c.value)]), key=lambda c: len(c.value))
        out["middle-length prefix"] = prefixes[len(prefixes) // 2] if prefixes else None
        out["nothing"] = next((c for c in cs if c.value == ()), None)
    if move.kind == "victim":
        nodes = [(move.state.node_key(move.state.node(c.value[0])), c) for c in cs
                 if c.value and move.state.node(c.value[0]) is not None]
        out["smallest key offered"] = min(nodes, key=lambda t: t[0])[1] if nodes else None
    return out


def question_heuristics(q):
    cs = q.choices
    out = {w: _pos(cs, w) for w in ("first", "middle", "last")}
    # "no swap: the sift stops" shows no node number: a heuristic of its own, as in the moves
    numbers = [c for c in cs if isinstance(c.value, int) and c.text != NO_SWAP]
    if q.kind == "next_swap":
        out["no swap"] = next((c for c in cs if c.text == NO_SWAP), None)
    if numbers:
        out["smallest number"] = min(numbers, key=lambda c: c.value)
        out["largest number"] = max(numbers, key=lambda c: c.value)
        ranked = sorted(numbers, key=lambda c: c.value)
        out["second smallest number"] = ranked[1] if len(ranked) > 2 else None
        out["second largest number"] = ranked[-2] if len(ranked) > 2 else None
    snap = q.view.snap0 if q.view is not None else None
    if snap is not None and snap.heap and q.kind not in UNLISTED:  # the plain quiz lists the candidates' keys
        smallest = min((snap.node(n) for n in snap.heap), key=snap.node_key)
        out["smallest listed key"] = next((c for c in cs if c.value in (smallest.page, (smallest.page,))), None)
    nodes = [n for n in snap.nodes if n.id] if snap is not None and snap.kind == "trie" else []
    if nodes:  # the trie's text shows every node's key
        smallest = min(nodes, key=snap.node_key)
        out["smallest key in the trie"] = next((c for c in cs if c.value in (smallest.page, (smallest.page,))),
                                               None)
    return out


def tally(seeds: int, families=("move", "quiz"), designs=DESIGNS, demos: bool = True):
    """``{(family, kind): {heuristic: [right, asked]}}`` and chance per (family, kind), over
    :func:`sessions` (``seeds``, ``designs``, ``demos``), each played with two seeds; only the
    ``families`` asked ("move": practice moves, "quiz": quiz questions)."""
    scores = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    chance = defaultdict(lambda: [0.0, 0])
    for name, session in sessions(seeds, designs, demos):
        for seed in range(2):
            for move in build_exercise(session, seed=seed, max_moves=200).moves if "move" in families else ():
                key = ("move", move.kind)
                chance[key][0] += 1 / len(move.choices)
                chance[key][1] += 1
                for h, choice in move_heuristics(move).items():
                    cell = scores[key][h]
                    cell[1] += 1
                    cell[0] += bool(choice is not None and choice.right)
            for q in questions(session, seed=seed) if "quiz" in families else ():
                key = ("quiz", q.kind)
                chance[key][0] += 1 / len(q.choices)
                chance[key][1] += 1
                for h, choice in question_heuristics(q).items():
                    cell = scores[key][h]
                    cell[1] += 1
                    cell[0] += bool(choice is not None and choice.mistake is None)
    return scores, chance


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=SEEDS, help="random scenarios per level and design")
    parser.add_argument("--check", action="store_true", help="exit 1 when a shortcut beats chance + 15 points")
    args = parser.parse_args(argv)
    random.seed(0)
    scores, chance = tally(args.seeds)
    print("| family | kind | n | chance | sd | heuristic: right % (points over chance) |")
    print("|---|---|---:|---:|---:|---|")
    bad, few = 0, []
    for key in sorted(scores):
        total, n = chance[key]
        base = 100 * total / n
        line = min(1.0, total / n + MARGIN / 100)
        sd = 100 * (line * (1 - line) / n) ** 0.5
        if n < FULL_SAMPLES:
            few.append(f"{key[1]} {n}")
        cells = []
        for h, (right, asked) in sorted(scores[key].items()):
            pct = 100 * right / asked
            flag = pct > base + MARGIN and asked >= MIN_SAMPLES
            bad += flag
            cells.append(f"{h} {pct:.0f}% ({pct - base:+.0f}){' !' if flag else ''}")
        print(f"| {key[0]} | {key[1]} | {n} | {base:.0f}% | {sd:.1f} | {'; '.join(cells)} |")
    print(f"\n{bad} shortcut{'s' if bad != 1 else ''} beat chance by more than {MARGIN:.0f} points "
          f"(on {MIN_SAMPLES}+ samples; {args.seeds} scenarios per level and design).")
    if few:
        print(f"Fewer than {FULL_SAMPLES} samples: {', '.join(few)}.")
    return 1 if bad and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
