#!/usr/bin/env bash
# Round r9, step b (session 15): after the change to optimistic probes in seeded runs (probe_pays) and the
# loop-priced profile's median plain run, on unseen_code12.json, written before that change was tried.
# Step a (docs/bench/llamacpp/r9/run.sh, unseen_code11) measured the code before it.
# bash docs/bench/llamacpp/r9b/run.sh   (from the repository root; about 15 minutes on 2 cores)
# With OLD=<a checkout of 1468911> the seeded bench runs there first, for the before/after (its stored profiles
# are removed first, so that both codes price from a profile measured now).
set -euo pipefail
R=docs/bench/llamacpp/r9b
U12=benchmarks/prompts/unseen_code12.json
S="benchmarks/bench_seeded_auto.py --backend llamacpp --threads 2 --repeats 3 --num-prompts 6 --prompts $U12"
N=".venv/bin/python benchmarks/bench_never_loses.py --backend llamacpp --num-prompts 6 --prompts $U12"
B=".venv/bin/exactspec bench --backend llamacpp --threads 2 --repeats 3 --num-prompts 6 --gammas 4 --prompts $U12"
if [ -n "${OLD:-}" ]; then
  .venv/bin/python -c "import pathlib, sys
sys.path.insert(0, '$OLD/src')
from exactspec import load_pair
from exactspec.speed.profiles import profile_key
from exactspec.backends.cachedir import cache_root
t, d, _ = load_pair('stdlib', backend='llamacpp', threads=2)
for p in (cache_root() / 'costs').glob(profile_key(t, d, 1) + '.loop-*.json'):
    print('removed', p); p.unlink()"
  PYTHONPATH=$OLD/src .venv/bin/python $OLD/$S --temperature 1 --out $R/old-seeded-unseen12-t1.json
  PYTHONPATH=$OLD/src .venv/bin/python $OLD/$S --out $R/old-seeded-unseen12-greedy.json
fi
.venv/bin/python $S --temperature 1 --out $R/seeded-unseen12-t1.json
.venv/bin/python $S --out $R/seeded-unseen12-greedy.json
$N --temperature 1 --out $R/never-loses-unseen12-t1
$N --out $R/never-loses-unseen12-greedy
$B --temperature 1 --out $R/stdlib-unseen12-t1
$B --out $R/stdlib-unseen12-greedy
