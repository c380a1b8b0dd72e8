#!/usr/bin/env bash
# Round r8 (session 14): after this session's changes to the T = 1 draw and the plain step (sample_from_probs'
# NumPy path for a few rows; a plain streak's bookkeeping once after its forwards; a plain first step in the
# prefill; llama.cpp contexts cleared without zeroing). unseen_code9.json was written before any of it was
# changed or measured; the changes were measured while made on held-out and unseen_code8 with scratch scripts.
# bash docs/bench/llamacpp/r8/run.sh   (from the repository root; about 20 minutes on 2 cores)
set -euo pipefail
R=docs/bench/llamacpp/r8
if [ "${1:-a}" = b ]; then
  U10=benchmarks/prompts/unseen_code10.json
  N=".venv/bin/python benchmarks/bench_never_loses.py --backend llamacpp --num-prompts 6"
  B=".venv/bin/exactspec bench --backend llamacpp --threads 2 --repeats 3 --num-prompts 6 --gammas 4"
  S=".venv/bin/python benchmarks/bench_seeded_auto.py --backend llamacpp --threads 2 --repeats 3 --num-prompts 6"
  $N --prompts $U10 --temperature 1 --out $R/b-never-loses-unseen10-t1
  $N --prompts $U10 --out $R/b-never-loses-unseen10-greedy
  $B --prompts $U10 --temperature 1 --out $R/b-stdlib-unseen10-t1
  $B --prompts $U10 --out $R/b-stdlib-unseen10-greedy
  $S --prompts $U10 --temperature 1 --out $R/b-seeded-unseen10-t1.json
  exit
fi
U9=benchmarks/prompts/unseen_code9.json
N=".venv/bin/python benchmarks/bench_never_loses.py --backend llamacpp --num-prompts 6"
B=".venv/bin/exactspec bench --backend llamacpp --threads 2 --repeats 3 --num-prompts 6 --gammas 4"
S=".venv/bin/python benchmarks/bench_seeded_auto.py --backend llamacpp --threads 2 --repeats 3 --num-prompts 6"
$N --prompts $U9 --temperature 1 --out $R/never-loses-unseen9-t1
$N --prompts $U9 --out $R/never-loses-unseen9-greedy
$N --temperature 1 --prompts benchmarks/prompts/unseen_code8.json --out $R/never-loses-unseen8-t1
$B --prompts $U9 --temperature 1 --out $R/stdlib-unseen9-t1
$B --prompts $U9 --out $R/stdlib-unseen9-greedy
$B --temperature 1 --out $R/stdlib-heldout-t1
$B --out $R/stdlib-heldout-greedy
$S --prompts $U9 --temperature 1 --out $R/seeded-unseen9-t1.json
$S --prompts $U9 --out $R/seeded-unseen9-greedy.json
# Second step (after commit "plain streaks: up to 64 steps a hand-over, but at most 0.1 s"): unseen_code10.json,
# written before that change was tried. bash docs/bench/llamacpp/r8/run.sh b
