# r15 (2026-12-02): after 94e31a3 (a step's first draft call timed over its whole iteration; plain decoding
# priced by our loop's timed call of the repeat; the loop's prefill keeps the last logits only). Run from a
# worktree of that commit (PYTHONPATH points at its src), each command alone, nothing else on the machine.
cd /work/wt
export PYTHONPATH=/work/wt/src
R=/work/main/docs/bench/auto/r15
X=/work/main/.venv/bin/exactspec
B4="$X bench --max-new-tokens 64 --repeats 3 --num-prompts 8 --batch-size 4 --gammas 2,4 --tree none"
B="$X bench --max-new-tokens 64 --gammas 1,2,3,4,6,8 --repeats 3"
$B4 --out $R/batch4_greedy > $R/batch4_greedy.out 2>&1
$B4 --prompts benchmarks/prompts/unseen_code.json --out $R/batch4_unseen > $R/batch4_unseen.out 2>&1
$B --prompts benchmarks/prompts/unseen_code.json --num-prompts 8 --temperature 1 --tree auto --out $R/unseen_t1 > $R/unseen_t1.out 2>&1
date > $R/done.txt
