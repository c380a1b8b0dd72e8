#!/usr/bin/env bash
# Round r5 (docs/engines.md): plan --engine fitted on TWO servers at each of γ = 2 and 3, checked on γ = 4 and 6
# started afterwards, on a set written for it (unseen_engines4.json). About an hour; nothing else running.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
P=benchmarks/prompts/engines/unseen_engines4.json
R=docs/bench/engines/r5
# (vllm_t0_2x2 ran first, alone, before this script: its fitted servers shared one log per γ)
.venv/bin/python benchmarks/engines/plan_check.py --engine vllm --prompts $P --out $R/vllm_t0_2x2 --fit 2,2,3,3
.venv/bin/python benchmarks/engines/plan_check.py --engine llamacpp --prompts $P --out $R/llamacpp_t0_2x2 --fit 2,2,3,3
.venv/bin/python benchmarks/engines/plan_check.py --engine llamacpp --prompts $P --out $R/llamacpp_t1_2x2 --fit 2,2,3,3 --temperature 1
.venv/bin/python benchmarks/engines/plan_check.py --engine vllm --prompts $P --out $R/vllm_t0_c4_2x2 --fit 2,2,3,3 --concurrency 4
# then, fitted on γ = 2 and 4 instead (two servers each), checked at 3 and 6:
.venv/bin/python benchmarks/engines/plan_check.py --engine llamacpp --prompts $P --out $R/llamacpp_t1_2x4 --fit 2,2,4,4 --check 3,6 --temperature 1
.venv/bin/python benchmarks/engines/plan_check.py --engine vllm --prompts $P --out $R/vllm_t0_2x4 --fit 2,2,4,4 --check 3,6
