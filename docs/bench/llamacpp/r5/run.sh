#!/usr/bin/env bash
# Round r5 (session 11: prompt lookup's gamma=auto reads the n-gram match; an n-gram index per row):
# bash docs/bench/llamacpp/r5/run.sh   (from the repository root; about 10 minutes on 2 cores)
# benchmarks/prompts/unseen_code4.json was written before the change and measured only after it was settled.
set -euo pipefail
R=docs/bench/llamacpp/r5
L=".venv/bin/exactspec bench --backend llamacpp --threads 2 --no-peers --repeats 3 --num-prompts 6 --gammas 4 --tree none --systems loop,lookup"
T=".venv/bin/exactspec bench --backend transformers --threads 2 --repeats 3 --num-prompts 6 --gammas 4 --tree none --systems loop,lookup"
$L --out $R/llamacpp-heldout
$L --prompts benchmarks/prompts/unseen_code2.json --out $R/llamacpp-unseen2
$L --prompts benchmarks/prompts/unseen_code4.json --out $R/llamacpp-unseen4
$T --out $R/transformers-heldout
$T --prompts benchmarks/prompts/unseen_code4.json --out $R/transformers-unseen4
