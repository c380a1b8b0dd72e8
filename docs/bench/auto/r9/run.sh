set -u
cd /work/main
B="PYTHONPATH=src .venv/bin/python -m exactspec bench --max-new-tokens 64 --gammas 1,2,3,4,6,8 --repeats 3"
run() { echo "== $1 $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg)" >> docs/bench/auto/r9/log.txt; shift; eval "$@" > docs/bench/auto/r9/$NAME.out 2>&1; echo "   done $(date +%T) load $(cut -d' ' -f1-3 /proc/loadavg) rc=$?" >> docs/bench/auto/r9/log.txt; }
NAME=heldout_greedy run heldout_greedy "$B --num-prompts 6 --tree auto --out docs/bench/auto/r9/heldout_greedy"
NAME=unseen_greedy run unseen_greedy "$B --prompts benchmarks/prompts/unseen_code.json --num-prompts 8 --tree auto --out docs/bench/auto/r9/unseen_greedy"
NAME=heldout_t1 run heldout_t1 "$B --num-prompts 6 --temperature 1 --tree auto --out docs/bench/auto/r9/heldout_t1"
NAME=unseen_t1 run unseen_t1 "$B --prompts benchmarks/prompts/unseen_code.json --num-prompts 8 --temperature 1 --tree none --out docs/bench/auto/r9/unseen_t1"
NAME=nl_t0 run never_loses_t0 "PYTHONPATH=src .venv/bin/python benchmarks/bench_never_loses.py --out docs/bench/auto/r9/never_loses_t0"
NAME=nl_t1 run never_loses_t1 "PYTHONPATH=src .venv/bin/python benchmarks/bench_never_loses.py --temperature 1 --out docs/bench/auto/r9/never_loses_t1"
NAME=batch4 run batch4 "$B --num-prompts 8 --batch-size 4 --gammas 2,4 --tree none --out docs/bench/auto/r9/batch4_greedy"
NAME=lean run lean_ab "PYTHONPATH=src .venv/bin/python benchmarks/bench_lean_draft.py --repeats 7 --out docs/bench/auto/r9/lean_ab.json"
NAME=smollm2 run smollm2_heldout_greedy "PYTHONPATH=src .venv/bin/python -m exactspec bench --pair smollm2 --num-prompts 4 --max-new-tokens 64 --repeats 3 --gammas 2,4 --tree none --out docs/bench/auto/r9/smollm2_heldout_greedy"
echo ALLDONE >> docs/bench/auto/r9/log.txt
