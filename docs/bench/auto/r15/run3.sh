# r15, third part: does the first-call timing (94e31a3) change what gamma="auto" achieves? Unseen T = 1,
# gamma=auto beside gamma=4, 5 repeats, once from a worktree of 7ba3b40 (before) and once of c30a5b9 (after),
# one after the other (ratios within each run), then the rest of the batch-1 record from c30a5b9.
R=/work/main/docs/bench/auto/r15
X=/work/main/.venv/bin/exactspec
AB="$X bench --prompts benchmarks/prompts/unseen_code.json --num-prompts 8 --max-new-tokens 64 --temperature 1 --gammas 4 --tree none --repeats 5 --systems loop,token"
cd /work/wt_old && PYTHONPATH=/work/wt_old/src $AB --out $R/ab_t1_before > $R/ab_t1_before.out 2>&1
cd /work/wt && PYTHONPATH=/work/wt/src $AB --out $R/ab_t1_after > $R/ab_t1_after.out 2>&1
cd /work/wt
export PYTHONPATH=/work/wt/src
B="$X bench --max-new-tokens 64 --gammas 1,2,3,4,6,8 --repeats 3"
$B --num-prompts 6 --tree auto --out $R/heldout_greedy > $R/heldout_greedy.out 2>&1
$B --prompts benchmarks/prompts/unseen_code.json --num-prompts 8 --tree auto --out $R/unseen_greedy > $R/unseen_greedy.out 2>&1
$B --num-prompts 6 --temperature 1 --tree auto --out $R/heldout_t1 > $R/heldout_t1.out 2>&1
/work/main/.venv/bin/python benchmarks/bench_never_loses.py --out $R/never_loses_t0 > $R/nl_t0.out 2>&1
/work/main/.venv/bin/python benchmarks/bench_never_loses.py --temperature 1 --out $R/never_loses_t1 > $R/nl_t1.out 2>&1
date > $R/done3.txt
