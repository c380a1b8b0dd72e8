#!/usr/bin/env bash
# Round r9 (session 15): seeded gamma="auto" on llama.cpp after this session's changes (the prompt's evidence
# stands in for the probes it replaces; the prefill takes the whole prompt when the evidence is read; stored
# profiles named by exactspec's code). unseen_code11.json was written before any of it was changed or measured;
# the changes were tried on held-out, unseen_code9 and unseen_code10 with scratch scripts.
# bash docs/bench/llamacpp/r9/run.sh   (from the repository root; about 15 minutes on 2 cores)
# With OLD=<a checkout of 1468911> the seeded bench runs there first, for the before/after (its stored profiles
# are removed first, so that both codes price from a profile measured now).
# Records kept: the four seeded runs and the greedy bench. A scratch diagnosis ran beside the never-loses runs and
# the T = 1 bench (2 cores shared): their records were removed, not reported. Step b (r9b/run.sh) measured the
# next code on unseen_code12.
set -euo pipefail
R=docs/bench/llamacpp/r9
U11=benchmarks/prompts/unseen_code11.json
S="benchmarks/bench_seeded_auto.py --backend llamacpp --threads 2 --repeats 3 --num-prompts 6 --prompts $U11"
N=".venv/bin/python benchmarks/bench_never_loses.py --backend llamacpp --num-prompts 6 --prompts $U11"
B=".venv/bin/exactspec bench --backend llamacpp --threads 2 --repeats 3 --num-prompts 6 --gammas 4 --prompts $U11"
if [ -n "${OLD:-}" ]; then
  .venv/bin/python -c "import pathlib, sys
sys.path.insert(0, '$OLD/src')
from exactspec import load_pair
from exactspec.speed.profiles import profile_key
from exactspec.backends.cachedir import cache_root
t, d, _ = load_pair('stdlib', backend='llamacpp', threads=2)
for p in (cache_root() / 'costs').glob(profile_key(t, d, 1) + '.loop-*.json'):
    print('removed', p); p.unlink()"
  PYTHONPATH=$OLD/src .venv/bin/python $OLD/$S --temperature 1 --out $R/old-seeded-unseen11-t1.json
  PYTHONPATH=$OLD/src .venv/bin/python $OLD/$S --out $R/old-seeded-unseen11-greedy.json
fi
.venv/bin/python $S --temperature 1 --out $R/seeded-unseen11-t1.json
.venv/bin/python $S --out $R/seeded-unseen11-greedy.json
$N --temperature 1 --out $R/never-loses-unseen11-t1
$N --out $R/never-loses-unseen11-greedy
$B --temperature 1 --out $R/stdlib-unseen11-t1
$B --out $R/stdlib-unseen11-greedy
