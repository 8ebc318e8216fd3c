# SPDX-License-Identifier: Apache-2.0
"""The KV-event stream of vLLM, SGLang and their kin, read by kvviz (``kvviz watch``).

Pure, like the rest of :mod:`kvviz.backends`: :mod:`.wire` decodes one payload (msgspec,
imported on first use), :mod:`.recording` reads and writes the recordings' JSON lines,
:mod:`.stream` keeps each rank's ``seq`` bookkeeping (gaps, restarts) and :mod:`.forest`
rebuilds the cache as a forest of blocks. Only :mod:`.subscriber` touches ZeroMQ.
"""
