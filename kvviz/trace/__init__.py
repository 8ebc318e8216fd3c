# SPDX-License-Identifier: Apache-2.0
"""Real workloads: read Mooncake request traces and replay them through kvcore caches.

``mooncake`` reads and validates the JSONL traces, ``replay`` measures hit rates, evictions
and held pages at a given capacity (or a sweep of capacities), ``to_kvs`` turns a slice
into a scenario file and ``plot`` draws hit rate against capacity in plain text. The
``kvviz trace`` command (Rich output) is :mod:`kvviz.trace.command`. This package is
pure: it imports neither ``rich`` nor ``textual``, the UI nor the CLI.
"""

from kvviz.core.mooncake import (
    DEFAULT_BLOCK_TOKENS,
    PrefixReuse,
    Trace,
    TraceFormatError,
    TraceLineError,
    TraceRequest,
    TraceTooLarge,
    prefix_reuse,
    read_trace,
)
from kvviz.trace.replay import ReplayConfig, ReplayResult, replay, sweep, sweep_capacities

__all__ = [
    "DEFAULT_BLOCK_TOKENS",
    "PrefixReuse",
    "ReplayConfig",
    "ReplayResult",
    "Trace",
    "TraceFormatError",
    "TraceLineError",
    "TraceRequest",
    "TraceTooLarge",
    "prefix_reuse",
    "read_trace",
    "replay",
    "sweep",
    "sweep_capacities",
]
