#!/usr/bin/env bash
# Round r3 (session 10: the lean llama.cpp session, the greedy rule without verify()'s argument checks, the
# draft's prompt fed at its first proposal, plain streaks run as one hand-over, probes up to 256 steps apart):
# bash docs/bench/llamacpp/r3/run.sh   (from the repository root; about 30 minutes on 2 cores)
# benchmarks/prompts/unseen_code2.json was written before this session's changes and never tuned on.
set -euo pipefail
R=docs/bench/llamacpp/r3
X=".venv/bin/exactspec bench --backend llamacpp --threads 2 --repeats 3"
U1=benchmarks/prompts/unseen_code.json
U2=benchmarks/prompts/unseen_code2.json
$X --num-prompts 6 --gammas 2,4 --out $R/stdlib-heldout-greedy
$X --num-prompts 6 --gammas 2,4 --prompts $U1 --out $R/stdlib-unseen-greedy
$X --num-prompts 6 --gammas 2,4 --prompts $U2 --out $R/stdlib-unseen2-greedy
$X --num-prompts 6 --gammas 4 --temperature 1 --tree none --prompts $U2 --out $R/stdlib-unseen2-t1
.venv/bin/python benchmarks/bench_never_loses.py --backend llamacpp --num-prompts 6 --out $R/never-loses-unseen
.venv/bin/python benchmarks/bench_never_loses.py --backend llamacpp --num-prompts 6 --prompts $U2 --out $R/never-loses-unseen2
.venv/bin/python benchmarks/bench_backends.py --pair stdlib --prompts 6 --unseen $U2 --out $R/backends-stdlib-greedy.json
.venv/bin/python benchmarks/bench_backends.py --pair smollm2 --prompts 4 --unseen benchmarks/prompts/unseen_chat3.json --out $R/backends-smollm2-greedy.json
