# r14, second part (2026-12-02), from a worktree of the commit that replays whole recorded steps in the batch
# prediction (predict_batch). batch4_greedy/ and batch4_unseen/ (run.sh) measured the same engine but were
# predicted with its first version (rows drawn independently); heldout_greedy/ (run.sh) is unaffected (batch
# 1). Each command alone, one after another, nothing else on the machine.
cd /work/wt
export PYTHONPATH=/work/wt/src
R=/work/main/docs/bench/auto/r14
X=/work/main/.venv/bin/exactspec
B4="$X bench --max-new-tokens 64 --repeats 3 --num-prompts 8 --batch-size 4 --gammas 2,4 --tree none"
B="$X bench --max-new-tokens 64 --gammas 1,2,3,4,6,8 --repeats 3"
$B4 --out $R/batch4_greedy_2 > $R/batch4_2.out 2>&1
$B4 --prompts benchmarks/prompts/unseen_code.json --out $R/batch4_unseen_2 > $R/batch4_unseen_2.out 2>&1
$B --prompts benchmarks/prompts/unseen_code.json --num-prompts 8 --tree auto --out $R/unseen_greedy > $R/unseen_greedy.out 2>&1
/work/main/.venv/bin/python benchmarks/bench_never_loses.py --out $R/never_loses_t0 > $R/nl_t0.out 2>&1
$B --prompts benchmarks/prompts/unseen_code.json --num-prompts 8 --temperature 1 --tree auto --out $R/unseen_t1 > $R/unseen_t1.out 2>&1
$B --num-prompts 6 --temperature 1 --tree auto --out $R/heldout_t1 > $R/heldout_t1.out 2>&1
/work/main/.venv/bin/python benchmarks/bench_never_loses.py --temperature 1 --out $R/never_loses_t1 > $R/nl_t1.out 2>&1
date > $R/done.txt
