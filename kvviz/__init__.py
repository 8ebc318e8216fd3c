# SPDX-License-Identifier: Apache-2.0
"""kvviz: learn and inspect the KV cache of an LLM server, step by step."""

__version__ = "0.1.0"
