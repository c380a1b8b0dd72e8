#!/usr/bin/env bash
# Round r4 (session 11: token trees on llama.cpp, each branch a sequence id; nothing was tuned for them):
# bash docs/bench/llamacpp/r4/run.sh   (from the repository root; about 12 minutes on 2 cores)
# Trees beside chains on the same backend, × our target-alone loop on llama.cpp, greedy and T = 1.
set -euo pipefail
R=docs/bench/llamacpp/r4
X=".venv/bin/exactspec bench --backend llamacpp --threads 2 --repeats 3 --no-peers --num-prompts 6 --gammas 4"
T="auto;8;3,2,1,1"
$X --tree "$T" --out $R/stdlib-heldout-greedy
$X --tree "$T" --prompts benchmarks/prompts/unseen_code.json --out $R/stdlib-unseen-greedy
$X --tree "$T" --prompts benchmarks/prompts/unseen_code2.json --out $R/stdlib-unseen2-greedy
$X --tree "$T" --temperature 1 --prompts benchmarks/prompts/unseen_code2.json --out $R/stdlib-unseen2-t1
.venv/bin/exactspec bench --backend llamacpp --threads 2 --repeats 2 --no-peers --pair smollm2 --num-prompts 4 \
  --gammas 4 --tree "auto;8" --prompts benchmarks/prompts/unseen_chat3.json --out $R/smollm2-unseen-chat3-greedy
