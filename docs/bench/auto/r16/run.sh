# r16 (2026-12-02): after 424f4c0 (plain steps priced apart from speculative ones; prompt lookup re-priced
# between runs). Run from a worktree of that commit (PYTHONPATH points at its src), each command alone,
# nothing else on the machine.
cd /work/wt
export PYTHONPATH=/work/wt/src
R=/work/main/docs/bench/auto/r16
X=/work/main/.venv/bin/exactspec
PY=/work/main/.venv/bin/python
B="$X bench --max-new-tokens 64 --gammas 1,2,3,4,6,8 --repeats 3"
$B --num-prompts 6 --temperature 1 --tree auto --out $R/heldout_t1 > $R/heldout_t1.out 2>&1
$B --prompts benchmarks/prompts/unseen_code.json --num-prompts 8 --temperature 1 --tree auto --out $R/unseen_t1 > $R/unseen_t1.out 2>&1
$PY benchmarks/bench_never_loses.py --out $R/never_loses_t0 > $R/nl_t0.out 2>&1
$PY benchmarks/bench_never_loses.py --temperature 1 --out $R/never_loses_t1 > $R/nl_t1.out 2>&1
$PY benchmarks/bench_plain_pricing_ab.py --prompts benchmarks/prompts/unseen_code.json --num-prompts 8 --temperature 1 --useless --out $R/ab_pricing_unseen_t1.json > $R/ab_pricing_unseen_t1.out 2>&1
$B --num-prompts 6 --tree auto --out $R/heldout_greedy > $R/heldout_greedy.out 2>&1
$B --prompts benchmarks/prompts/unseen_code.json --num-prompts 8 --tree auto --out $R/unseen_greedy > $R/unseen_greedy.out 2>&1
date > $R/done.txt
# ab_pricing_heldout_t1.json was run before, from /work/main at the same code (the commit was made right after):
# $PY benchmarks/bench_plain_pricing_ab.py --temperature 1 --useless --repeats 5 --out $R/ab_pricing_heldout_t1.json
