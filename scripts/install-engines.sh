#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Install vLLM 0.33.0 and SGLang 0.5.23 (their KV caches, on the CPU) into a venv for kvviz's
# `--backend vllm|sglang`, in bounded time (here: 97 s the first time, 92 s from the filled
# wheelhouse, 3.5 GB):
#
#   bash scripts/install-engines.sh VENV        # VENV is made if missing; kvviz is installed there too
#
# A plain `pip install vllm sglang` resolves a multi-GB CUDA torch and their whole serving
# stacks. Instead: the CPU torch wheel pinned by a constraint, the engines with --no-deps, then
# only the packages their cache modules import (found by importing them here). xgrammar goes in
# --no-deps (its deps pull a second torch); torchvision's PyPI build does not load beside the CPU
# torch, so a stand-in (scripts/engines/stand-in) answers the vision imports SGLang makes at
# import time. Wheels are cached in pip's cache, so a second run downloads nothing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
venv="${1:?usage: bash scripts/install-engines.sh VENV}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
# Every wheel is kept in a wheelhouse (pip's own cache does not keep these downloads here), so a
# second run on the machine downloads nothing: KVVIZ_ENGINE_WHEELS, or ~/.cache/kvviz/engine-wheels.
wheels="${KVVIZ_ENGINE_WHEELS:-${XDG_CACHE_HOME:-$HOME/.cache}/kvviz/engine-wheels}"
mkdir -p "$wheels"
constraints="$here/engines/constraints.txt"
engines=(vllm==0.33.0 sglang==0.5.23 xgrammar==0.2.8)
start=$SECONDS
get=("$venv/bin/python" -m pip download -q --disable-pip-version-check --only-binary=:all: -d "$wheels")
"${get[@]}" --no-deps "${engines[@]}"
"${get[@]}" -c "$constraints" torch==2.13.0 -r "$here/engines/requirements.txt"
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check --no-index --find-links "$wheels")
"${pip[@]}" -c "$constraints" torch==2.13.0
"${pip[@]}" --no-deps "${engines[@]}"
"${pip[@]}" -c "$constraints" -r "$here/engines/requirements.txt"
"$venv/bin/python" -m pip install -q --disable-pip-version-check -c "$constraints" -e "$repo[test]"
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
if "$venv/bin/python" -m pip show -q torchvision >/dev/null 2>&1; then
    echo "install-engines: a real torchvision was installed; it does not load beside the CPU torch" >&2
    exit 1
fi
rm -rf "$site/torchvision" && cp -r "$here/engines/stand-in/torchvision" "$site/torchvision"
"$venv/bin/python" -c 'import kvviz.backends.vllm_backend, sglang.srt.mem_cache.radix_cache' 
echo "install-engines: vLLM 0.33.0 and SGLang 0.5.23 in $venv ($((SECONDS - start)) s, $(du -sh "$venv" | cut -f1))"
