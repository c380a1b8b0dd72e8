# r13 (2026-12-01): the full issue-9 round with the defaults (fp16 demo draft, optimism 1) and the bench's
# calibration calls made just before each timed call (one prediction per repeat). Each command runs alone,
# one after another, nothing else on the machine.
cd /work/main
R=docs/bench/auto/r13
B=".venv/bin/exactspec bench --max-new-tokens 64 --gammas 1,2,3,4,6,8 --repeats 3"
$B --num-prompts 6 --tree auto --out $R/heldout_greedy > $R/heldout_greedy.out 2>&1
$B --prompts benchmarks/prompts/unseen_code.json --num-prompts 8 --tree auto --out $R/unseen_greedy > $R/unseen_greedy.out 2>&1
$B --num-prompts 6 --temperature 1 --tree auto --out $R/heldout_t1 > $R/heldout_t1.out 2>&1
$B --prompts benchmarks/prompts/unseen_code.json --num-prompts 8 --temperature 1 --tree auto --out $R/unseen_t1 > $R/unseen_t1.out 2>&1
.venv/bin/exactspec bench --max-new-tokens 64 --repeats 3 --num-prompts 8 --batch-size 4 --gammas 2,4 --tree none --out $R/batch4_greedy > $R/batch4.out 2>&1
.venv/bin/python benchmarks/bench_never_loses.py --out $R/never_loses_t0 > $R/nl_t0.out 2>&1
.venv/bin/python benchmarks/bench_never_loses.py --temperature 1 --out $R/never_loses_t1 > $R/nl_t1.out 2>&1
date > $R/done.txt
# The two greedy runs again, last: the first pass of them ran before the batch-1 width fix of the
# calibration (943fcbc), and the unseen one shared the machine with a test run.
$B --num-prompts 6 --tree auto --out $R/heldout_greedy > $R/heldout_greedy.out 2>&1
$B --prompts benchmarks/prompts/unseen_code.json --num-prompts 8 --tree auto --out $R/unseen_greedy > $R/unseen_greedy.out 2>&1
# batch 4 a second time (after 8aa97d2), to tell noise from the prompt-lookup bias
.venv/bin/exactspec bench --max-new-tokens 64 --repeats 3 --num-prompts 8 --batch-size 4 --gammas 2,4 --tree none --out $R/batch4_greedy_2 > $R/batch4_2.out 2>&1
