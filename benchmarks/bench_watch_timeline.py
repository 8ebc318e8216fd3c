# SPDX-License-Identifier: Apache-2.0
"""The watch's timeline (kvviz.watch.timeline.WatchTimeline): adding batches, reaching any frame
cold, and memory, on the shared vLLM recording and on a long synthetic stream.

Run:  python benchmarks/bench_watch_timeline.py                  (vLLM recording + 100,000 batches)
      python benchmarks/bench_watch_timeline.py --batches 20000  (a shorter synthetic stream)
      python benchmarks/bench_watch_timeline.py --keyframe-every 64 256

Synthetic stream (deterministic): batch i stores a chain of 2 blocks under the previous
batch's last block (a new root every 50 batches) and, from batch 100 on, removes the 2
blocks batch i - 100 stored, so 200 blocks stay cached and each batch changes 4.

Figures per keyframe interval K:

* **add**: seconds to add every message (decode + seq check + forest apply + counters), and
  batches per second;
* **frame, cold**: 50 random steps, each asked for after a step in another keyframe interval
  (so nothing rebuilt is reused), with the heap settled as the CLI settles it before the UI:
  median and max milliseconds. This is bounded by K batches' replay, whatever the position;
* **memory**: tracemalloc's peak during a second, traced build (the messages, their decoded
  batches, the keyframes and the why-index).
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time
import tracemalloc
from pathlib import Path

import msgspec

from kvviz.watch.recording import Message, read_recording
from kvviz.watch.timeline import WatchTimeline

VLLM = Path(__file__).resolve().parents[1] / "kvviz" / "samples" / "kv-events" / "vllm-0.33.0-conversation-400.jsonl.gz"  # the shipped sample


def synthetic(batches: int) -> list[Message]:
    """The synthetic stream of the module's docstring."""
    out = []
    for i in range(batches):
        events = [{"type": "BlockStored", "block_hashes": [i * 4 + 1, i * 4 + 2],
                   "parent_block_hash": None if i % 50 == 0 else (i - 1) * 4 + 2,
                   "token_ids": [i, i + 1, i + 2, i + 3], "block_size": 2, "lora_id": None, "medium": "GPU"}]
        if i >= 100:
            events.append({"type": "BlockRemoved", "block_hashes": [(i - 100) * 4 + 1, (i - 100) * 4 + 2],
                           "medium": "GPU"})
        out.append(Message(topic=b"kv", seq=i, payload=msgspec.msgpack.encode([float(i), events, 0])))
    return out


def build(name: str, messages: list[Message], keyframe_every: int) -> tuple[WatchTimeline, float]:
    started = time.perf_counter()
    timeline = WatchTimeline(name, keyframe_every)
    for message in messages:
        timeline.add(message)
    return timeline, time.perf_counter() - started


def measure(name: str, messages: list[Message], keyframe_every: int) -> None:
    timeline, add_s = build(name, messages, keyframe_every)
    # As the CLI does before the UI starts (cli/common.py settle_heap): otherwise a full
    # collection walking the 100,000 batches' objects lands in some frame's time (0.9-3.6 s).
    gc.collect()
    gc.freeze()
    rng = random.Random(1)
    last = timeline.last_step
    costs = []
    for _ in range(50):
        i = rng.randrange(1, last)
        # first a step in another interval, so that step i is rebuilt from its keyframe
        timeline.frame((i + keyframe_every * 2) % last or 1)
        started = time.perf_counter()
        timeline.frame(i)
        costs.append((time.perf_counter() - started) * 1000)
    del timeline
    gc.unfreeze()
    tracemalloc.start()  # a second build, traced (tracemalloc slows it several times over)
    build(name, messages, keyframe_every)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"{name:<28} K={keyframe_every:<4} {last:>7,} batches: add {add_s:6.2f} s ({last / add_s:7,.0f} batches/s), "
          f"frame cold median {statistics.median(costs):6.1f} ms max {max(costs):6.1f} ms, "
          f"peak memory {peak / 2**20:6.1f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=100_000)
    parser.add_argument("--keyframe-every", type=int, nargs="+", default=[64, 256])
    args = parser.parse_args()
    recorded = read_recording(VLLM)
    stream = synthetic(args.batches)
    for k in args.keyframe_every:
        measure("vllm-0.33.0-conversation-400", recorded, k)
        measure(f"synthetic-{args.batches}", stream, k)


if __name__ == "__main__":
    main()
