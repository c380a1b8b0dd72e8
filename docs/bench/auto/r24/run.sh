# r24 (2026-12-03): a second round with the target's lean forward, to see r23's figures hold (same commands, same code).
# Run from /work/main, each command alone, nothing else on the machine.
cd /work/main
R=docs/bench/auto/r24
X=.venv/bin/exactspec
PY=.venv/bin/python
B="$X bench --max-new-tokens 64 --gammas 1,2,3,4,6,8 --repeats 3"
B4="$X bench --max-new-tokens 64 --repeats 3 --num-prompts 8 --batch-size 4 --gammas 2,4 --tree none"
$B --num-prompts 6 --temperature 1 --tree auto --out $R/heldout_t1 > $R/heldout_t1.out 2>&1
$B --prompts benchmarks/prompts/unseen_code.json --num-prompts 8 --temperature 1 --tree auto --out $R/unseen_t1 > $R/unseen_t1.out 2>&1
$B --num-prompts 6 --tree auto --out $R/heldout_greedy > $R/heldout_greedy.out 2>&1
$B --prompts benchmarks/prompts/unseen_code.json --num-prompts 8 --tree auto --out $R/unseen_greedy > $R/unseen_greedy.out 2>&1
$B4 --prompts benchmarks/prompts/unseen_code.json --out $R/batch4_unseen > $R/batch4_unseen.out 2>&1
$B4 --out $R/batch4_greedy > $R/batch4_greedy.out 2>&1
$PY benchmarks/bench_never_loses.py --out $R/never_loses_t0 > $R/nl_t0.out 2>&1
$PY benchmarks/bench_never_loses.py --temperature 1 --out $R/never_loses_t1 > $R/nl_t1.out 2>&1
date > $R/done.txt
