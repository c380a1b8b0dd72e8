# r15, second part: batch 4 again after c30a5b9 (batch predictions price each prompt batch's own steps;
# measured ÷ predicted paired per repeat). Run from a worktree of that commit after run.sh, nothing else on
# the machine.
cd /work/wt
export PYTHONPATH=/work/wt/src
R=/work/main/docs/bench/auto/r15
X=/work/main/.venv/bin/exactspec
B4="$X bench --max-new-tokens 64 --repeats 3 --num-prompts 8 --batch-size 4 --gammas 2,4 --tree none"
$B4 --out $R/batch4_greedy_2 > $R/batch4_greedy_2.out 2>&1
$B4 --prompts benchmarks/prompts/unseen_code.json --out $R/batch4_unseen_2 > $R/batch4_unseen_2.out 2>&1
date > $R/done2.txt
