#!/usr/bin/env bash
# Round r1 of the llama.cpp backend (issue 32), from the repository root: bash docs/bench/llamacpp/r1/run.sh
# Every exactspec system here runs on llama.cpp (the stdlib pair as f16 GGUF files; smollm2's Q4_1 file as it
# ships, its draft in torch), beside our target-alone loop on llama.cpp and llama.cpp's own binaries.
set -euo pipefail
R=docs/bench/llamacpp/r1
X=".venv/bin/exactspec bench --backend llamacpp --threads 2 --repeats 3"
$X --num-prompts 6 --gammas 2,4 --out $R/stdlib-heldout-greedy
$X --num-prompts 6 --gammas 2,4 --prompts benchmarks/prompts/unseen_code.json --out $R/stdlib-unseen-greedy
$X --num-prompts 6 --gammas 2,4 --temperature 1 --tree none --out $R/stdlib-heldout-t1
$X --num-prompts 6 --gammas 2,4 --temperature 1 --prompts benchmarks/prompts/unseen_code.json --out $R/stdlib-unseen-t1
.venv/bin/python benchmarks/bench_backends.py --pair stdlib --prompts 6 --out $R/backends-stdlib-greedy.json
.venv/bin/python benchmarks/bench_backends.py --pair stdlib --prompts 6 --temperature 1 --out $R/backends-stdlib-t1.json
.venv/bin/python benchmarks/bench_never_loses.py --backend llamacpp --num-prompts 6 --out $R/never-loses-greedy
.venv/bin/python benchmarks/bench_backends.py --pair smollm2 --prompts 4 --out $R/backends-smollm2-greedy.json
$X --pair smollm2 --num-prompts 4 --gammas 2 --repeats 2 --out $R/smollm2-heldout-greedy
