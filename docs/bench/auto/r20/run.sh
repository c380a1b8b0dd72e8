# r20 (2026-12-02): batch 4 after 85ebd5d (per-length overhead timed on whole-batch steps only).
# Run from /work/main, each command alone, nothing else on the machine.
cd /work/main
R=docs/bench/auto/r20
X=.venv/bin/exactspec
B4="$X bench --max-new-tokens 64 --repeats 3 --num-prompts 8 --batch-size 4 --gammas 2,4 --tree none"
$B4 --prompts benchmarks/prompts/unseen_code.json --out $R/batch4_unseen > $R/batch4_unseen.out 2>&1
$B4 --out $R/batch4_greedy > $R/batch4_greedy.out 2>&1
date > $R/done.txt
