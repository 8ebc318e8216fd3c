# SPDX-License-Identifier: Apache-2.0
"""Real workloads: read Mooncake request traces and replay them through kvcore caches.

``mooncake`` reads and validates the JSONL traces, ``replay`` measures hit rates, evictions
and held pages at a given capacity (or a sweep of capacities), ``to_kvs`` turns a slice
into a scenario file, and ``command`` is the ``kvviz trace`` CLI command (Rich output).
This package's pure modules import neither ``rich`` nor ``textual``; only ``command`` uses
``rich``, and it is not imported here.
"""

from .mooncake import (
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
from .replay import ReplayConfig, ReplayResult, replay, sweep, sweep_capacities

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
