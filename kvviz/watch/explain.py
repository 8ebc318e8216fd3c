# SPDX-License-Identifier: Apache-2.0
"""Why would this prompt miss? ``kvviz watch ... --explain REQUEST [--at STEP]``.

At the state after step ``at`` of a watched stream, :func:`explain` matches a prompt's full blocks
against the forest **by content** (the parent chain and the block's token ids, as an engine's
block hash would; no engine's hash is ever recomputed) and names the cause of the first block that
does not match:

- ``hit``: every full block matched (the partial tail is never cached);
- ``below-block``: the prompt has no full block;
- ``first-seen``: no block with this content was ever stored under this prefix before the step;
- ``evicted``: it was stored and then removed (or cleared) before the step;
- ``diverged``: another cached chain shares the prefix up to this block and differs inside it;
- ``extra-keys``: the same tokens are cached under another LoRA (or other extra keys);
- ``other-medium``: the block is cached only on another tier (CPU, disk);
- ``unknown``: the evidence is incomplete (a gap in seq, a restart, an undecodable message, a late
  attach, or events without token ids); ``suggested`` then says what the stream alone suggests.

A verdict is ``proven`` when the stream settles it, from its first batch to the step; otherwise it
is a suggestion. The history of a block is read by content from the messages up to the step
(:func:`~kvviz.watch.to_kvs.decode_messages`), what is cached from the timeline's frame.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kvviz.watch.wire import key_label, medium_label
from kvviz.core.limits import MAX_TOKENS_PER_OP
from kvviz.watch.to_kvs import BlockContents, block_size_counts, decode_messages, usual_block_size
from kvviz.core.words import count

__all__ = ["CAUSES", "EXPLAIN_SCHEMA", "Explanation", "PromptError", "explain", "read_prompt"]

EXPLAIN_SCHEMA = "kvviz.watch-explain/1"
"""The ``schema`` of :meth:`Explanation.to_dict`; bumped when a field changes meaning."""

CAUSES = ("hit", "below-block", "first-seen", "evicted", "diverged", "extra-keys", "other-medium", "unknown")
"""Every cause :func:`explain` may name."""

PRIMARY_MEDIA = frozenset({None, "GPU", "gpu"})
"""The tier a request's prefix is looked up on: a block cached only elsewhere is ``other-medium``."""

CONTEXT_TOKENS = 4
"""Tokens shown each side of the first differing token of a ``diverged`` block."""

MAX_PROMPT_TOKENS = MAX_TOKENS_PER_OP
"""The most token ids a prompt may have (the scenario language's most per op)."""

Decoder = Callable[[Sequence[int]], str]


class PromptError(ValueError):
    """A prompt that cannot be read: one line, naming the file (and line:col) and what was expected."""


@dataclass(frozen=True)
class Explanation:
    """What :func:`explain` found (see the module doc; ``kvviz help watch`` documents
    :meth:`to_dict`)."""

    cause: str
    proven: bool
    step: int
    seq: int | None
    block_size: int | None
    prompt_tokens: int
    full_blocks: int
    matched_blocks: int
    block: int | None
    evidence: str
    diverged_at_token: int | None = None
    removed_at_step: int | None = None
    removed_at_seq: int | None = None
    stored_at_step: int | None = None
    stored_at_seq: int | None = None
    medium: str | None = None
    keys: dict | None = None
    """``extra-keys``: ``{"request": ..., "cached": [...]}`` (the LoRA ids)."""
    suggested: str | None = None
    """``unknown``: the cause the stream alone suggests."""
    incomplete: tuple[str, ...] = ()
    """Why the evidence is incomplete, one phrase each (empty when complete)."""
    context: dict | None = None
    """``diverged``: ``{"prompt": [...], "cached": [...]}`` tokens around the difference (and
    ``prompt_text``/``cached_text`` with a tokenizer)."""
    text: str | None = None
    """The first unmatched block's text (with a tokenizer)."""
    blocks: tuple[dict, ...] = field(default=())
    """The matched blocks: key label, medium, first token's position (at most the first 1,000)."""

    @property
    def hit_tokens(self) -> int:
        """Tokens of the matched blocks."""
        return self.matched_blocks * (self.block_size or 0)

    def to_dict(self) -> dict:
        """JSON-able, for ``--explain --json``."""
        return {
            "type": "explain", "schema": EXPLAIN_SCHEMA, "cause": self.cause, "proven": self.proven,
            "suggested": self.suggested, "step": self.step, "seq": self.seq, "block_size": self.block_size,
            "prompt_tokens": self.prompt_tokens, "full_blocks": self.full_blocks,
            "matched_blocks": self.matched_blocks, "hit_tokens": self.hit_tokens, "block": self.block,
            "diverged_at_token": self.diverged_at_token, "removed_at_step": self.removed_at_step,
            "removed_at_seq": self.removed_at_seq, "stored_at_step": self.stored_at_step,
            "stored_at_seq": self.stored_at_seq, "medium": self.medium, "keys": self.keys,
            "incomplete": list(self.incomplete), "context": self.context, "text": self.text,
            "evidence": self.evidence,
        }

    def lines(self) -> list[str]:
        """For ``--explain --print`` and the UI: the verdict, then the evidence."""
        how = "proven by the stream" if self.proven else "suggested, not proven"
        head = f"{self.cause} ({how}) at step {self.step}"
        if self.seq is not None:
            head += f" (seq {self.seq})"
        out = [head, self.evidence]
        if self.full_blocks:
            out.append(f"matched {count(self.matched_blocks, 'block')} of {self.full_blocks:,} "
                       f"({count(self.hit_tokens, 'hit token')} of {count(self.prompt_tokens, 'prompt token')})")
        if self.context is not None:
            out.append(f"prompt: …{_shown(self.context, 'prompt')}…")
            out.append(f"cached: …{_shown(self.context, 'cached')}…")
        if self.text is not None:
            out.append(f"block {self.block} text: {json.dumps(self.text, ensure_ascii=False)}")
        return out


def _shown(context: dict, side: str) -> str:
    tokens = " ".join(map(str, context[side]))
    text = context.get(f"{side}_text")
    return tokens if text is None else f"{tokens} {json.dumps(text, ensure_ascii=False)}"


# -- reading a prompt --------------------------------------------------------------------------


def read_prompt(text: str, source: str, tokenize: Callable[[str], list[int]] | None = None) -> tuple[int, ...]:
    """The prompt in ``text`` (from ``source``, for messages): with ``tokenize``, the text itself;
    otherwise a JSON array of ints or whitespace-separated ints. Raises :class:`PromptError`."""
    if tokenize is not None:
        tokens = tuple(tokenize(text))
    else:
        stripped = text.lstrip()
        tokens = _json_tokens(text, source) if stripped.startswith("[") else _plain_tokens(text, source)
    if len(tokens) > MAX_PROMPT_TOKENS:
        raise PromptError(f"{source}: {len(tokens):,} tokens is more than a prompt may have ({MAX_PROMPT_TOKENS:,})")
    return tokens


def _where(text: str, offset: int) -> str:
    line = text.count("\n", 0, offset) + 1
    col = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return f"{line}:{col}"


def _json_tokens(text: str, source: str) -> tuple[int, ...]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PromptError(f"{source}:{exc.lineno}:{exc.colno}: {exc.msg} (expected a JSON array of token ids)") from None
    if not isinstance(value, list):
        raise PromptError(f"{source}:1:1: expected a JSON array of token ids")
    for index, item in enumerate(value):
        if type(item) is not int or item < 0:
            raise PromptError(f"{source}: item {index} is {json.dumps(item)[:40]}, expected a token id "
                              "(an integer, 0 or more)")
    return tuple(value)


def _plain_tokens(text: str, source: str) -> tuple[int, ...]:
    tokens = []
    offset = 0
    for word in text.split():
        offset = text.index(word, offset)
        if not word.isascii() or not word.isdigit():
            raise PromptError(f"{source}:{_where(text, offset)}: {word[:20]!r} is not a token id (expected "
                              "whitespace-separated integers, a JSON array, or text with --tokenizer)")
        tokens.append(int(word))
        offset += len(word)
    return tuple(tokens)


# -- the evidence ------------------------------------------------------------------------------


@dataclass
class _History:
    """What the stream said up to the step, in content terms."""

    contents: BlockContents
    batches: list
    block_size: int | None
    incomplete: list[str]
    late: list[str]  # incompleteness that only hides what came before kvviz listened
    no_tokens: bool


def _history(timeline, at: int) -> _History:
    messages = timeline.messages_until(at)
    contents = BlockContents()
    batches = decode_messages(messages, contents)
    sizes = block_size_counts(batches)
    incomplete: list[str] = []
    for step in range(1, at + 1):
        for note in timeline.notes(step):
            if note.startswith(("gap", "restart")):
                incomplete.append(f"{note.split(':')[0]} at step {step}")
    incomplete += [f"undecodable message at step {b.index + 1}" for b in batches if b.error is not None]
    late = []
    first_seq: dict[int, int] = {}
    for message in messages:
        first_seq.setdefault(message.rank, message.seq)
    late += [f"late attach: the first seq{'' if rank == 0 else f' of rank {rank}'} is {seq}, not 0"
             for rank, seq in sorted(first_seq.items()) if seq > 0]
    orphans = sum(1 for b in batches for chain in b.stored_chains if chain and not contents.rooted(chain[-1]))
    if orphans:
        late.append(f"{count(orphans, 'chain')} stored under a parent never seen (orphans)")
    unknown = sum(b.unknown_removed for b in batches)
    if unknown:
        late.append(f"{count(unknown, 'removal')} of blocks never seen stored")
    no_tokens = any(not contents.tokens(c) for b in batches for chain in b.stored_chains for c in chain)
    return _History(contents, batches, usual_block_size(sizes) if sizes else None, incomplete, late, no_tokens)


def _cached_child(state, parent_key, tokens: tuple, lora):
    """The blocks stored under ``parent_key`` (under the root: those with no parent), and the
    one that holds ``tokens`` for ``lora`` on a primary medium, as an engine's lookup would
    match it (None: not cached there)."""
    candidates = state.children(parent_key)
    if parent_key is None:
        candidates = tuple(b for b in candidates if b.parent is None)
    match = next((b for b in candidates if b.tokens == tokens and b.medium in PRIMARY_MEDIA and b.lora == lora), None)
    return candidates, match


def _explain_folded(folded: int, state, prompt: tuple, lora, base: dict) -> Explanation:
    """The verdict when steps 1..``folded`` are gone (a live watch bounded in bytes): the state
    after the step still proves a hit, but a miss's cause needs the history, so it is unknown."""
    roots = [b for b in state.children(None) if b.parent is None]
    size = len(roots[0].tokens) if roots else None
    gone = (f"steps 1-{folded:,} were folded to bound the watch's memory: their history is gone "
            "(record with --record FILE and explain on --replay-file FILE)")
    if size is None or not size:
        return Explanation("unknown", False, block_size=None, full_blocks=0, matched_blocks=0, block=None, **base,
                           incomplete=(gone,), evidence=f"nothing is cached at step {base['step']} and {gone}")
    full = len(prompt) // size
    if full == 0:
        return Explanation("below-block", True, block_size=size, full_blocks=0, matched_blocks=0, block=None, **base,
                           evidence=f"the prompt's {count(len(prompt), 'token')} are fewer than one block of "
                                    f"{size}: only full blocks are cached, so it can never hit")
    parent_key = None
    for index in range(full):
        tokens = prompt[index * size:(index + 1) * size]
        _candidates, match = _cached_child(state, parent_key, tokens, lora)
        if match is None:
            return Explanation("unknown", False, block_size=size, full_blocks=full, matched_blocks=index,
                               block=index, **base, incomplete=(gone,),
                               evidence=f"block {index} is not cached at step {base['step']}; why not is "
                                        f"not known: {gone}")
        parent_key = match.key
    return Explanation("hit", True, block_size=size, full_blocks=full, matched_blocks=full, block=None, **base,
                       evidence=f"all {count(full, 'full block')} are cached at step {base['step']} "
                                "(the state alone proves a hit)")


def _content_events(history: _History, content: int | None) -> list[tuple[int, str]]:
    """``(step, "stored" | "removed" | "cleared")`` of ``content``, in stream order."""
    out: list[tuple[int, str]] = []
    if content is None:
        return out
    for batch in history.batches:
        step = batch.index + 1
        if batch.cleared:
            out.append((step, "cleared"))
        out += [(step, kind) for kind, c in batch.events if c == content]
    return out


def _last_life(events: list[tuple[int, str]]) -> tuple[int | None, int | None]:
    """The step of the last store of a block and the step its last copy left after it (None: never
    stored; a removal None: still cached by the stream's count)."""
    live = 0
    stored_at = removed_at = None
    for step, kind in events:
        if kind == "stored":
            if live == 0:
                stored_at, removed_at = step, None
            live += 1
        elif kind == "removed" and live > 0:
            live -= 1
            if live == 0:
                removed_at = step
        elif kind == "cleared" and live > 0:
            live, removed_at = 0, step
    return stored_at, removed_at


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


# -- the verdict -------------------------------------------------------------------------------


def explain(timeline, prompt: Sequence[int], at: int | None = None, *, lora: int | str | None = None,
            decode: Decoder | None = None) -> Explanation:
    """Why ``prompt`` (token ids) would hit or miss at the state after step ``at`` (default: the
    newest) of ``timeline`` (a :class:`~kvviz.watch.timeline.WatchTimeline`), for a request with
    LoRA ``lora``; ``decode`` turns token ids into text for the evidence. IndexError for a step
    outside the timeline. O(messages up to the step + prompt)."""
    at = timeline.last_step if at is None else at
    frame = timeline.frame(at)
    seq = None if frame.message is None else frame.message.seq
    prompt = tuple(prompt)
    if timeline.first_step:  # a live watch folded its early steps to bound its memory
        return _explain_folded(timeline.first_step, frame.state, prompt, lora,
                               {"step": at, "seq": seq, "prompt_tokens": len(prompt)})
    history = _history(timeline, at)
    size = history.block_size
    base = {"step": at, "seq": seq, "block_size": size, "prompt_tokens": len(prompt)}
    if size is None:
        return Explanation("unknown", False, full_blocks=0, matched_blocks=0, block=None, **base,
                           incomplete=("no block stored yet: the block size is unknown",),
                           evidence=f"no block was stored up to step {at}: the block size is unknown, so "
                                    "nothing can be matched")
    full = len(prompt) // size
    base["full_blocks"] = full
    if full == 0:
        return Explanation("below-block", True, matched_blocks=0, block=None, **base,
                           evidence=f"the prompt's {count(len(prompt), 'token')} are fewer than one block of "
                                    f"{size}: only full blocks are cached, so it can never hit")
    state = frame.state
    parent_key = None
    parent_content: int | None = None
    matched: list[dict] = []
    for index in range(full):
        tokens = prompt[index * size:(index + 1) * size]
        candidates, match = _cached_child(state, parent_key, tokens, lora)
        if match is None:
            found = _miss(history, candidates, prompt, index, tokens, parent_content, lora, decode, base, matched)
            return _judged(found, history)
        if len(matched) < 1_000:
            matched.append({"key": key_label(match.key), "medium": match.medium, "start": index * size})
        parent_key = match.key
        known = index == 0 or parent_content is not None  # a parent never stored rooted has no content
        parent_content = history.contents.find(parent_content, tokens) if known else None
    tail = len(prompt) - full * size
    tail_words = (f"; the partial tail of {count(tail, 'token')} is never cached" if tail else "")
    found = Explanation("hit", True, matched_blocks=full, block=None, blocks=tuple(matched), **base,
                        evidence=f"every full block is cached: {count(full, 'block')}, "
                                 f"{count(full * size, 'token')}{tail_words}")
    return _judged(found, history)


def _miss(history: _History, candidates, prompt, index: int, tokens, parent_content, lora, decode,
          base: dict, matched: list[dict]) -> Explanation:
    """The verdict for block ``index``, the first that did not match."""
    size = base["block_size"]
    common = {"matched_blocks": index, "block": index, "blocks": tuple(matched),
              "text": None if decode is None else decode(tokens), **base}
    where = f"block {index} (tokens {index * size}..{(index + 1) * size - 1})"
    same = [b for b in candidates if b.tokens == tokens]
    keyed = [b for b in same if b.medium in PRIMARY_MEDIA]
    if keyed:
        cached = sorted({str(b.lora) for b in keyed})
        return Explanation("extra-keys", False, keys={"request": lora, "cached": [b.lora for b in keyed]}, **common,
                           evidence=f"{where} is cached with the same tokens under LoRA {', '.join(cached)}; the "
                                    f"request's is {'none' if lora is None else lora} (its other extra keys, a "
                                    "salt or multimodal hashes, the stream does not carry)")
    if same:
        media = sorted({medium_label(b.medium) for b in same})
        return Explanation("other-medium", True, medium=same[0].medium, **common,
                           evidence=f"{where} is cached only on {', '.join(media)}, not on the GPU: a hit there "
                                    "needs a load back first")
    known_parent = index == 0 or parent_content is not None
    content = history.contents.find(parent_content, tuple(tokens)) if known_parent else None
    stored_at, removed_at = _last_life(_content_events(history, content))
    if stored_at is not None and removed_at is not None:
        seqs = {b.index + 1: b.seq for b in history.batches}
        return Explanation("evicted", True, stored_at_step=stored_at, stored_at_seq=seqs.get(stored_at),
                           removed_at_step=removed_at, removed_at_seq=seqs.get(removed_at), **common,
                           evidence=f"{where} was stored at step {stored_at} (seq {seqs.get(stored_at)}) and "
                                    f"removed at step {removed_at} (seq {seqs.get(removed_at)})")
    siblings = [b for b in candidates if b.medium in PRIMARY_MEDIA]
    if siblings:
        best = max(siblings, key=lambda b: _common_prefix(b.tokens, tokens))
        offset = _common_prefix(best.tokens, tokens)
        if offset > 0:  # a difference at the block's first token is a block boundary: first-seen
            at_token = index * size + offset
            context = _context(prompt, index * size, best.tokens, offset, decode)
            return Explanation("diverged", True, diverged_at_token=at_token, context=context, **common,
                               evidence=f"{where} differs from the cached block {key_label(best.key)} under the same "
                                        f"prefix at token {at_token} ({offset} into the block): prompt "
                                        f"{prompt[at_token]}, cached {best.tokens[offset] if offset < len(best.tokens) else 'nothing'}")
    under = "at the root" if index == 0 else "under this prefix"
    others = (f"; {count(len(siblings), 'other cached block')} continue{'s' if len(siblings) == 1 else ''} it, "
              "each different from its first token" if siblings and index > 0 else "")
    return Explanation("first-seen", True, **common,
                       evidence=f"{where}: no block with these tokens was ever stored {under} up to step "
                                f"{base['step']}{others}")


def _context(prompt, start: int, cached: Sequence[int], offset: int, decode: Decoder | None) -> dict:
    lo, hi = max(0, offset - CONTEXT_TOKENS), offset + CONTEXT_TOKENS + 1
    ours = list(prompt[start + lo:start + hi])
    theirs = list(cached[lo:hi])
    context: dict = {"prompt": ours, "cached": theirs}
    if decode is not None:
        context["prompt_text"], context["cached_text"] = decode(ours), decode(theirs)
    return context


def _judged(found: Explanation, history: _History) -> Explanation:
    """``found`` as :func:`explain` gives it: ``unknown`` when the evidence it rests on is incomplete."""
    reasons = list(history.incomplete)
    if found.cause in ("first-seen", "diverged"):
        reasons += history.late  # a block stored before kvviz listened may still be cached
    if history.no_tokens and found.cause != "hit":
        reasons.append("some stored blocks carry no token ids: they cannot be matched by content")
    if not reasons:
        return found
    fields = found.to_dict()
    return Explanation(
        "unknown", False, step=found.step, seq=found.seq, block_size=found.block_size,
        prompt_tokens=found.prompt_tokens, full_blocks=found.full_blocks, matched_blocks=found.matched_blocks,
        block=found.block, suggested=found.cause, incomplete=tuple(reasons), blocks=found.blocks,
        diverged_at_token=fields["diverged_at_token"], removed_at_step=found.removed_at_step,
        removed_at_seq=found.removed_at_seq, stored_at_step=found.stored_at_step,
        stored_at_seq=found.stored_at_seq, medium=found.medium, keys=found.keys, context=found.context,
        text=found.text,
        evidence=f"the evidence is incomplete ({'; '.join(reasons)}): the stream alone suggests "
                 f"{found.cause} ({found.evidence})")
