# r14, third part: batch 4 again after the replay caps a row's last steps itself (predict_batch, the commit
# after run2.sh's). Run from a worktree of that commit, after run2.sh finished, nothing else on the machine.
cd /work/wt
export PYTHONPATH=/work/wt/src
R=/work/main/docs/bench/auto/r14
X=/work/main/.venv/bin/exactspec
B4="$X bench --max-new-tokens 64 --repeats 3 --num-prompts 8 --batch-size 4 --gammas 2,4 --tree none"
$B4 --out $R/batch4_greedy_3 > $R/batch4_3.out 2>&1
$B4 --prompts benchmarks/prompts/unseen_code.json --out $R/batch4_unseen_3 > $R/batch4_unseen_3.out 2>&1
date > $R/done3.txt
