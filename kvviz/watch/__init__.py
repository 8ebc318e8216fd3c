# SPDX-License-Identifier: Apache-2.0
"""``kvviz watch``: the KV-event stream of vLLM, SGLang and their kin.

Pure: :mod:`.wire` decodes one payload (msgspec, imported on first use), :mod:`.recording`
reads and writes the recordings' JSON lines, :mod:`.stream` keeps each rank's ``seq``
bookkeeping (gaps, restarts), :mod:`.forest` rebuilds the cache as a forest of blocks,
:mod:`.timeline` keeps the steps, :mod:`.events` narrates them, :mod:`.against` replays a
stream on kvcore (:mod:`.radix` on a model of SGLang's radix cache), :mod:`.explain` says why
a prompt would miss, :mod:`.hot` which prefixes are built upon, :mod:`.to_kvs` turns a stream
into a scenario, :mod:`.json_output`, :mod:`.bundle` and :mod:`.markdown` report it. Only
:mod:`.subscriber` touches ZeroMQ. The app (:mod:`.app`, :mod:`.view`, :mod:`.widgets`) and
the command (:mod:`.command`).
"""
