#!/usr/bin/env bash
# Round r6 (docs/engines.md): vLLM-CPU after its speculative requests' rest besides decoding became a line in γ
# (the first draft runs in the prompt's step): plan --engine vllm fitted on two servers at each of γ = 2 and 3,
# checked on γ = 4 and 6 started afterwards, at batch 1 and at concurrency 4, on a set written for it before any
# run (unseen_engines5.json). About 20 minutes; nothing else running.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
P=benchmarks/prompts/engines/unseen_engines5.json
R=docs/bench/engines/r6
.venv/bin/python benchmarks/engines/plan_check.py --engine vllm --prompts $P --out $R/vllm_t0_c4_2x2 --fit 2,2,3,3 --concurrency 4
# then llama.cpp's server, greedy and T = 1, the same protocol and set (its rest is unchanged: a check of the run)
.venv/bin/python benchmarks/engines/plan_check.py --engine llamacpp --prompts $P --out $R/llamacpp_t0_2x2 --fit 2,2,3,3
.venv/bin/python benchmarks/engines/plan_check.py --engine llamacpp --prompts $P --out $R/llamacpp_t1_2x2 --fit 2,2,3,3 --temperature 1
