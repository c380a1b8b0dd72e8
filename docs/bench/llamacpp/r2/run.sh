#!/usr/bin/env bash
# Round r2 (after gamma="auto" keeps the measured price of a plain step): bash docs/bench/llamacpp/r2/run.sh
set -euo pipefail
R=docs/bench/llamacpp/r2
X=".venv/bin/exactspec bench --backend llamacpp --threads 2 --repeats 3"
$X --num-prompts 6 --gammas 2,4 --out $R/stdlib-heldout-greedy
$X --num-prompts 6 --gammas 2,4 --prompts benchmarks/prompts/unseen_code.json --out $R/stdlib-unseen-greedy
.venv/bin/python benchmarks/bench_never_loses.py --backend llamacpp --num-prompts 6 --out $R/never-loses-greedy
.venv/bin/python benchmarks/bench_backends.py --pair stdlib --prompts 6 --out $R/backends-stdlib-greedy.json
