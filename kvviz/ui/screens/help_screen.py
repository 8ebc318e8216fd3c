# SPDX-License-Identifier: Apache-2.0
"""The help screen (?): every key, and the legend of colours and marks."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

from kvviz.core.view import literal

KEYS: tuple[tuple[str, str], ...] = (
    ("→ / l, ← / h", "step forward / back"),
    ("home / end", "first / last step"),
    ("g", "go to step N"),
    ("space", "play / pause"),
    ("+ / -", "play faster / slower"),
    ("] / [", "next / previous interesting step (eviction, failure, violation)"),
    ("i", "step into the op: → ← by sub-step (past its last: into the next op)"),
    ("o / escape", "step out of the op, back to the whole step"),
    ("] [ in an op", "notable sub-steps: take, pop, evict, candidate, create, dedup, fail"),
    ("space in an op", "play the sub-steps"),
    ("x", "pseudo-code pane on / off (on inside an op): the running line lit"),
    ("b", "bug-museum demos: their buggy code beside ours, differing lines ≠"),
    ("v", "first step with an invariant violation (none: says so)"),
    ("tab / shift+tab", "move between views (trie, pool, allocations, heap, command bar)"),
    ("↑ ↓ (j k)", "move the cursor in a view: selects it in every view"),
    (", .", "page grid: previous / next page"),
    ("escape", "step out of the op, else clear the selection (command bar: leave it)"),
    ("w", "why panel: why was this page evicted / why this short match"),
    ("enter / c", "trie: fold a subtree / compress chains of single-child nodes"),
    ("z", "page grid: compact layout (one character per page), from any view"),
    (":", "command bar: an op or expect line; → completes, ↑ ↓ history"),
    ("e", "export this step: bundle .json, .md and .svg"),
    ("ctrl+s", "save the script as a .kvs file"),
    ("p", "quiz mode on / off: predict each interesting step, then see it"),
    ("0 1 2 3 4 5 6 7 8 9", "quiz: answer with that choice"),
    ("a", "quiz: type an answer (a number, pages `3 5`, `none`), enter"),
    ("s / t", "quiz: skip the question / show a hint"),
    ("ctrl+p", "command palette: demos, export, theme, jump"),
    ("?", "this help"),
    ("q", "quit"),
)
"""Every key of the app, as the help screen lists them (a test checks it against the bindings)."""

LEGEND = """\
[b]Pages and nodes[/b]
  [$kv-free]·[/] free   [$kv-owned]▪ @r1[/] owned: the unpublished tail of allocation r1
  [$kv-cached]■ ● ref2[/] referenced: cached (held by a trie node) with ref > 0: never evicted
  [$kv-evictable]□ ○ ref0[/] evictable: cached with ref 0 (only leaves are evicted, oldest first)
  cached N counts both, as expect cached does
  [$kv-cached]◐[/] a compressed chain (c), part referenced, part evictable; p0-4,6 = pages 0..4 and 6

[b]What the step changed[/b] (the colours of the SGLang paper's RadixAttention figure)
  [on $kv-new] + [/] [$kv-new]new[/]: pages taken, nodes created
  [on $kv-touched] • [/] [$kv-touched]touched[/]: nodes whose last access moved to now
  [on $kv-evicted] ✗ [/] [$kv-evicted]evicted[/]: shown for the step that evicted them, then gone
  - freed   ↑ ↓ (+1) (-1) ref count changes
  LRU heap: [$kv-new]joined[/] the heap, [$kv-touched]moved[/] in it, [$kv-evicted]left[/] it (evicted or referenced again)

[b]Inside an op[/b] (i)
  [on $primary-muted] focus [/] what the sub-step moves: the node walked, the two heap slots swapped (⇅), the page taken
  [on $primary-muted]▶ code[/] the pseudo-code line(s) it runs   [b $warning]≠[/] where a bug-museum demo's buggy code differs
  the marks say what this sub-step changed; invariants are checked on whole steps only

[b]Also[/b]
  [on $kv-selected] selected [/] the selection and everything linked to it (its page, node, holders)
  [b $kv-violation]⚠ ![/] an invariant violation names this item
  [$kv-muted]block table 0:3 1:7*[/] logical page 0 is physical page 3; * shared with another allocation
  timeline  ─ step  [$kv-evicted]▾[/] eviction ([$kv-evicted]▁…█[/] share of steps evicting, long timelines)  [$error]✗[/] failed op
            [$error]?[/] failed expect  [$kv-violation]![/] violation"""


def help_markup() -> str:
    """The help text as Textual markup."""
    return keys_and_legend(KEYS, LEGEND)


def keys_and_legend(keys: tuple[tuple[str, str], ...], legend: str) -> str:
    """A help text as Textual markup: the keys in an aligned column, then the legend."""
    width = max(len(key) for key, _ in keys)
    lines = "\n".join(f"  [b $accent]{literal(f'{key:<{width}}')}[/]  {literal(what)}" for key, what in keys)
    return f"[b]Keys[/b]\n{lines}\n\n{legend}"


class HelpScreen(ModalScreen[None]):
    """Keys and legend; any of escape, ? or q closes it. A subclass names its own box
    title and text (the watch's help)."""

    BINDINGS = [Binding("escape,question_mark,q", "close", "Close")]

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 96; max-width: 100%; height: auto; max-height: 100%;
        border: round $accent; background: $surface; padding: 0 1;
    }
    """

    BOX_TITLE = "kvviz help"

    def markup(self) -> str:
        """The text shown, as Textual markup."""
        return help_markup()

    def compose(self) -> ComposeResult:
        with VerticalScroll() as box:
            box.border_title = self.BOX_TITLE
            box.border_subtitle = "escape closes"
            yield Static(Content.from_markup(self.markup()))

    def action_close(self) -> None:
        """Close the help."""
        self.dismiss(None)
