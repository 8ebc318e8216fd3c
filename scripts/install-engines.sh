#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Install vLLM 0.33.0 and SGLang 0.5.23 (their KV caches, on the CPU) into a venv for kvviz's
# `--backend vllm|sglang`, in bounded time (~4.5 min and 3.5 GB here; ~40 s again on a built venv):
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
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
constraints="$here/engines/constraints.txt"
start=$SECONDS
"${pip[@]}" -c "$constraints" torch==2.13.0
"${pip[@]}" --no-deps vllm==0.33.0 sglang==0.5.23 xgrammar==0.2.8
"${pip[@]}" -c "$constraints" -r "$here/engines/requirements.txt"
"${pip[@]}" -c "$constraints" -e "$repo[test]"
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
if "$venv/bin/python" -m pip show -q torchvision >/dev/null 2>&1; then
    echo "install-engines: a real torchvision was installed; it does not load beside the CPU torch" >&2
    exit 1
fi
rm -rf "$site/torchvision" && cp -r "$here/engines/stand-in/torchvision" "$site/torchvision"
"$venv/bin/python" -c 'import kvviz.backends.vllm_backend, sglang.srt.mem_cache.radix_cache' 
echo "install-engines: vLLM 0.33.0 and SGLang 0.5.23 in $venv ($((SECONDS - start)) s, $(du -sh "$venv" | cut -f1))"
