# r14 (2026-12-02): after 5f8f445 and the prompt-lookup trim after it (batch > 1: rows draft every position the batch drafts; prompt lookup verifies the width its finds pay for; batch predictions
# replay each row from its own verdicts; calls priced at their widths). Run from a worktree of that commit
# (PYTHONPATH points at its src), each command alone, one after another, nothing else on the machine.
cd /work/wt
export PYTHONPATH=/work/wt/src
R=/work/main/docs/bench/auto/r14
X=/work/main/.venv/bin/exactspec
B4="$X bench --max-new-tokens 64 --repeats 3 --num-prompts 8 --batch-size 4 --gammas 2,4 --tree none"
B="$X bench --max-new-tokens 64 --gammas 1,2,3,4,6,8 --repeats 3"
$B4 --out $R/batch4_greedy > $R/batch4.out 2>&1
$B4 --prompts benchmarks/prompts/unseen_code.json --out $R/batch4_unseen > $R/batch4_unseen.out 2>&1
$B --num-prompts 6 --tree auto --out $R/heldout_greedy > $R/heldout_greedy.out 2>&1
$B --prompts benchmarks/prompts/unseen_code.json --num-prompts 8 --tree auto --out $R/unseen_greedy > $R/unseen_greedy.out 2>&1
$B4 --out $R/batch4_greedy_2 > $R/batch4_2.out 2>&1
/work/main/.venv/bin/python benchmarks/bench_never_loses.py --out $R/never_loses_t0 > $R/nl_t0.out 2>&1
$B --prompts benchmarks/prompts/unseen_code.json --num-prompts 8 --temperature 1 --tree auto --out $R/unseen_t1 > $R/unseen_t1.out 2>&1
$B --num-prompts 6 --temperature 1 --tree auto --out $R/heldout_t1 > $R/heldout_t1.out 2>&1
date > $R/done.txt
# (Stopped after heldout_greedy: the batch prediction's first version drew each row's draft length on its own
# and under-predicted gamma=auto by 14-16%; the remaining commands ran from run2.sh after the fix, with the
# batch-4 runs repeated there.)
