#!/usr/bin/env bash
# Round r10 (session 16): the engine's Python per step on llama.cpp, leaner (a session's dense call through
# Context.decode_rows, a rollback of dense slots in Python, a step's emitted tokens cut, written and counted from
# Python lists: exactspec.engine.steps.emit), and the target-alone baseline's greedy token taken as the plain step
# takes it. unseen_code13.json was written before anything of the session was changed or measured; the changes
# were tried on the held-out prompts only.
# bash docs/bench/llamacpp/r10/run.sh   (from the repository root; about 5 minutes on 2 cores)
# code-ab-unseen13.json is from a rerun of its line after code_ab.py stopped renaming the GGUF cache's stamp file
# in the old copy (the first run's old and new codes rebuilt the cached files under each other).
# With OLD=<a checkout of f62eb79> (the code before) it first times both codes in one process
# (benchmarks/llamacpp/code_ab.py, interleaved prompt by prompt).
set -euo pipefail
R=docs/bench/llamacpp/r10; U=unseen13
P=benchmarks/prompts/unseen_code13.json
B=".venv/bin/exactspec bench --backend llamacpp --threads 2 --repeats 3 --num-prompts 6 --gammas 4 --prompts $P"
N=".venv/bin/python benchmarks/bench_never_loses.py --backend llamacpp --num-prompts 6 --prompts $P"
S=".venv/bin/python benchmarks/bench_seeded_auto.py --backend llamacpp --threads 2 --repeats 3 --num-prompts 6 --prompts $P"
mkdir -p $R
if [ -n "${OLD:-}" ]; then
  .venv/bin/python benchmarks/llamacpp/code_ab.py --old "$OLD" --prompts $P --repeats 4 --out $R/code-ab-$U.json
fi
$B --out $R/stdlib-$U-greedy
$B --temperature 1 --out $R/stdlib-$U-t1
$N --out $R/never-loses-$U-greedy
$N --temperature 1 --out $R/never-loses-$U-t1
$S --out $R/seeded-$U-greedy.json
$S --temperature 1 --out $R/seeded-$U-t1.json
