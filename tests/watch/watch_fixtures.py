# SPDX-License-Identifier: Apache-2.0
"""KV-event messages for the watch UI tests: payloads encoded here with msgspec, the way a
vLLM publisher sends them (``[ts, events, rank]``, events as maps), so the tests run the
real decoder and the real timeline."""

from __future__ import annotations

import msgspec

from kvviz.watch.recording import Message
from kvviz.watch.subscriber import Received
from kvviz.watch.wire import decode_payload
from kvviz.watch.timeline import WatchTimeline

BLOCK = 4
"""Tokens per block in these streams."""


def stored(hashes, parent=None, first_token=0, medium="GPU", lora=None) -> dict:
    """A ``BlockStored`` of a chain of ``hashes``, tokens counting up from ``first_token``."""
    tokens = list(range(first_token, first_token + BLOCK * len(hashes)))
    return {"type": "BlockStored", "block_hashes": list(hashes), "parent_block_hash": parent,
            "token_ids": tokens, "block_size": BLOCK, "lora_id": lora, "medium": medium}


def removed(hashes, medium="GPU") -> dict:
    """A ``BlockRemoved`` of ``hashes``."""
    return {"type": "BlockRemoved", "block_hashes": list(hashes), "medium": medium}


def message(seq: int, *events: dict, ts: float | None = None, rank: int = 0) -> Message:
    """One message of topic ``kv``; its ``ts`` half a second per seq unless given."""
    payload = msgspec.msgpack.encode([100.0 + seq / 2 if ts is None else ts, list(events), rank])
    return Message(b"kv", seq, payload)


def garbage(seq: int) -> Message:
    """A message whose payload is not msgpack of a batch."""
    return Message(b"kv", seq, b"\xc1 not msgpack")


def received(msg: Message, note: str | None = None) -> Received:
    """``msg`` as the subscriber delivers it: decoded already."""
    return Received(msg, decode_payload(msg.payload, seq=msg.seq, topic="kv"), None, note)


# Keys like vLLM's: the low 64 bits of a sha256, unsigned (some above 2**63).
ROOT_A, A2, A3 = 0xF00D_5EED_0000_0001, 0x2A7C_19E0_44D3_B2A2, 0x3C11_D0A8_7F62_E9A3
B2, ORPHAN_PARENT, ORPHAN = 0x9B2E_6A41_C7F0_33B2, 0xDEAD_BEEF_0BAD_F00D, 0x0E5A_77C2_19D4_8B0E


def story() -> list[Message]:
    """Six batches: a chain of two at the root; one more block under it; a branch; a block
    on CPU; the branch removed; an orphan (its parent was never seen)."""
    return [
        message(0, stored([ROOT_A, A2])),
        message(1, stored([A3], parent=A2, first_token=8)),
        message(2, stored([B2], parent=ROOT_A, first_token=100)),
        message(3, stored([A2], parent=ROOT_A, first_token=4, medium="cpu")),
        message(4, removed([B2])),
        message(5, stored([ORPHAN], parent=ORPHAN_PARENT, first_token=500)),
    ]


def story_timeline(count: int | None = None) -> WatchTimeline:
    """A timeline of the story's first ``count`` batches (all by default)."""
    timeline = WatchTimeline("tcp://127.0.0.1:5557")
    for msg in story()[:count]:
        timeline.add(msg)
    return timeline


class QuietSubscriber:
    """A subscriber that has nothing to deliver: the app is live (not a replay), and its
    timer's polls change nothing, so the tests feed the app themselves."""

    def __init__(self) -> None:
        self.polls = 0

    def poll(self, max_items: int = 1000) -> list:
        self.polls += 1
        return []


class QueuedSubscriber(QuietSubscriber):
    """A subscriber that delivers what a test queued, in order, up to ``max_items`` a poll."""

    def __init__(self, items) -> None:
        super().__init__()
        self.items = list(items)

    def poll(self, max_items: int = 1000) -> list:
        self.polls += 1
        taken, self.items = self.items[:max_items], self.items[max_items:]
        return taken

    @property
    def pending(self) -> int:
        """What is still queued (the real subscriber's ``pending``)."""
        return len(self.items)
