#!/usr/bin/env bash
# Round r9 (session 15): seeded gamma="auto" on llama.cpp.
# Step a (records here): after the prompt's evidence came to stand in for the probes it replaces, the prefill to
# take the whole prompt when the evidence is read, and stored profiles to be named by exactspec's code;
# unseen_code11.json was written before any of it was changed or measured (the changes were tried on held-out,
# unseen_code9 and unseen_code10 with scratch scripts).
# Step b (records in ../r9b/): after the change to optimistic probes in seeded runs (probe_pays) and the
# loop-priced profile's median plain run, on unseen_code12.json, written before that change was tried.
# bash docs/bench/llamacpp/r9/run.sh [b]   (from the repository root; about 6 minutes each on 2 cores)
# With OLD=<a checkout of 1468911> the seeded bench runs there first, for the before/after (its stored profiles
# are removed first, so that both codes price from a profile measured now).
# Step a's records kept: the four seeded runs and the greedy bench. A scratch diagnosis ran beside its
# never-loses runs and its T = 1 bench (2 cores shared): their records were removed, not reported.
set -euo pipefail
if [ "${1:-a}" = b ]; then R=docs/bench/llamacpp/r9b; U=unseen12; else R=docs/bench/llamacpp/r9; U=unseen11; fi
P=benchmarks/prompts/unseen_code${U#unseen}.json
S="benchmarks/bench_seeded_auto.py --backend llamacpp --threads 2 --repeats 3 --num-prompts 6 --prompts $P"
N=".venv/bin/python benchmarks/bench_never_loses.py --backend llamacpp --num-prompts 6 --prompts $P"
B=".venv/bin/exactspec bench --backend llamacpp --threads 2 --repeats 3 --num-prompts 6 --gammas 4 --prompts $P"
mkdir -p $R
if [ -n "${OLD:-}" ]; then
  .venv/bin/python -c "import sys
sys.path.insert(0, '$OLD/src')
from exactspec import load_pair
from exactspec.speed.profiles import profile_key
from exactspec.backends.cachedir import cache_root
t, d, _ = load_pair('stdlib', backend='llamacpp', threads=2)
for p in (cache_root() / 'costs').glob(profile_key(t, d, 1) + '.loop-*.json'):
    print('removed', p); p.unlink()"
  PYTHONPATH=$OLD/src .venv/bin/python $OLD/$S --temperature 1 --out $R/old-seeded-$U-t1.json
  PYTHONPATH=$OLD/src .venv/bin/python $OLD/$S --out $R/old-seeded-$U-greedy.json
fi
.venv/bin/python $S --temperature 1 --out $R/seeded-$U-t1.json
.venv/bin/python $S --out $R/seeded-$U-greedy.json
$N --temperature 1 --out $R/never-loses-$U-t1
$N --out $R/never-loses-$U-greedy
$B --temperature 1 --out $R/stdlib-$U-t1
$B --out $R/stdlib-$U-greedy
