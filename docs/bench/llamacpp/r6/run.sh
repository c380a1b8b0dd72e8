#!/usr/bin/env bash
# Round r6 (session 12): how much speculation can buy on this CPU at all. No engine change since r5; a fifth
# unseen set (benchmarks/prompts/unseen_code5.json) written before anything of this session was measured.
# bash docs/bench/llamacpp/r6/run.sh   (from the repository root; about 20 minutes on 2 cores)
set -euo pipefail
R=docs/bench/llamacpp/r6
U5=benchmarks/prompts/unseen_code5.json
C=".venv/bin/python benchmarks/llamacpp/ceiling.py --target-types f16,f32,q8_0 --peers"
$C --out $R/ceiling-heldout.json
$C --prompts $U5 --out $R/ceiling-unseen5.json
.venv/bin/exactspec bench --backend llamacpp --threads 2 --repeats 3 --num-prompts 6 --gammas 4 --prompts $U5 --out $R/stdlib-unseen5-greedy
.venv/bin/exactspec bench --backend llamacpp --threads 2 --repeats 3 --num-prompts 6 --gammas 4 --temperature 1 --prompts $U5 --out $R/stdlib-unseen5-t1
.venv/bin/python benchmarks/llamacpp/draft_type_ab.py --types f16,q8_0,q4_0 --gammas 4,auto --out $R/draft-types-heldout.json
