# r10: a calibration pass before every timed repeat (bench.py); the full round (the first two runs were made first, as a check)
cd /work/main
B="PYTHONPATH=src .venv/bin/python -m exactspec bench --max-new-tokens 64 --gammas 1,2,3,4,6,8 --repeats 3"
eval "$B --num-prompts 6 --tree auto --out docs/bench/auto/r10/heldout_greedy" > docs/bench/auto/r10/heldout_greedy.out 2>&1
eval "$B --prompts benchmarks/prompts/unseen_code.json --num-prompts 8 --temperature 1 --tree none --out docs/bench/auto/r10/unseen_t1" > docs/bench/auto/r10/unseen_t1.out 2>&1
# the rest of the round, run after the two above
eval "$B --prompts benchmarks/prompts/unseen_code.json --num-prompts 8 --tree auto --out docs/bench/auto/r10/unseen_greedy" > docs/bench/auto/r10/unseen_greedy.out 2>&1
eval "$B --num-prompts 6 --temperature 1 --tree auto --out docs/bench/auto/r10/heldout_t1" > docs/bench/auto/r10/heldout_t1.out 2>&1
PYTHONPATH=src .venv/bin/python benchmarks/bench_never_loses.py --out docs/bench/auto/r10/never_loses_t0 > docs/bench/auto/r10/nl_t0.out 2>&1
PYTHONPATH=src .venv/bin/python benchmarks/bench_never_loses.py --temperature 1 --out docs/bench/auto/r10/never_loses_t1 > docs/bench/auto/r10/nl_t1.out 2>&1
eval "$B --num-prompts 8 --batch-size 4 --gammas 2,4 --tree none --out docs/bench/auto/r10/batch4_greedy" > docs/bench/auto/r10/batch4.out 2>&1
