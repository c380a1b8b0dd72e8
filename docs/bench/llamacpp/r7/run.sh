#!/usr/bin/env bash
# Round r7 (session 13): gamma="auto" on llama.cpp after this session's changes, in two steps.
# a-*: after commit "gamma=auto, seeded runs: start from the prompt's evidence ..." (prompt prior, loop-priced
#      stored profile, optimistic probes of the length they hope pays); unseen_code6.json was written before any
#      of it was tuned (tuned on held-out and unseen_code5 with scratch scripts, not kept). These runs showed
#      unseeded gamma="auto" drafting at a loss at T = 1 (the bench draws from a generator: unseeded runs).
# b-*: after commit "gamma=auto, unseeded: a generator whose runs all drafted prices a plain step ..."; measured
#      on unseen_code7.json, written before that fix was measured, and on held-out (bash run.sh b, at that commit).
# c-*: commit 7b19f13 (unseeded runs priced from the stored loop-priced profile, a run that drafted a little
#      re-priced pooled with earlier drafting runs); unseen_code8.json written before it was measured. (Later:
#      bb79706 trims ~15 us a step off the T = 1 plain step, same values; not rerun.)
#      Also benchmarks/bench_seeded_auto.py: seeded gamma="auto" x our loop (what the bench, whose runs draw from
#      a generator, does not show).
# bash docs/bench/llamacpp/r7/run.sh   (from the repository root; about 15 minutes on 2 cores; the a-* lines
# reproduce only at the commit named above)
set -euo pipefail
R=docs/bench/llamacpp/r7
U6=benchmarks/prompts/unseen_code6.json
U7=benchmarks/prompts/unseen_code7.json
B=".venv/bin/exactspec bench --backend llamacpp --threads 2 --repeats 3 --num-prompts 6 --gammas 4"
if [ "${1:-c}" = a ]; then
  $B --prompts $U6 --out $R/a-stdlib-unseen6-greedy
  $B --prompts $U6 --temperature 1 --out $R/a-stdlib-unseen6-t1
  $B --temperature 1 --out $R/a-stdlib-heldout-t1
  exit
fi
if [ "${1:-c}" = b ]; then
$B --prompts $U7 --out $R/b-stdlib-unseen7-greedy
$B --prompts $U7 --temperature 1 --out $R/b-stdlib-unseen7-t1
$B --out $R/b-stdlib-heldout-greedy
$B --temperature 1 --out $R/b-stdlib-heldout-t1
exit
fi
U8=benchmarks/prompts/unseen_code8.json
S=".venv/bin/python benchmarks/bench_seeded_auto.py --backend llamacpp --threads 2 --repeats 3 --num-prompts 6"
$B --prompts $U8 --out $R/c-stdlib-unseen8-greedy
$B --prompts $U8 --temperature 1 --out $R/c-stdlib-unseen8-t1
$B --out $R/c-stdlib-heldout-greedy
$B --temperature 1 --out $R/c-stdlib-heldout-t1
$S --prompts $U8 --out $R/c-seeded-unseen8-greedy.json
$S --prompts $U8 --temperature 1 --out $R/c-seeded-unseen8-t1.json
$S --out $R/c-seeded-heldout-greedy.json
$S --temperature 1 --out $R/c-seeded-heldout-t1.json
N=".venv/bin/python benchmarks/bench_never_loses.py --backend llamacpp --num-prompts 6 --prompts $U8"
$N --out $R/c-never-loses-unseen8-greedy
$N --temperature 1 --out $R/c-never-loses-unseen8-t1
