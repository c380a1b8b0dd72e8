# Round r30 (issue 49): the same gamma="auto" as r29 (src/ unchanged since 088b487), measured with
# bench_auto_cells.py rotating its systems' order prompt by prompt (r29's fixed order put the seeded run right after
# the loop every time), on a set written before anything ran on it (unseen_code19.json): the stdlib cells, 8 prompts,
# 64 new tokens, 3 rounds. Misses of less than 0.03 rerun once (*_b).
cd "$(dirname "$0")/../../../../benchmarks"
O=${O:-../docs/bench/auto/r30}
cell() {  # pair backend T set suffix
  ../.venv/bin/python bench_auto_cells.py --pair $1 --backend $2 --temperature $3 --prompts prompts/$4 --num-prompts 8 --repeats 3 --out $O/$1_$2_t$3$5.json > $O/$1_$2_t$3$5.out 2>&1
}
for backend in llamacpp transformers; do for T in 0 1; do cell stdlib $backend $T unseen_code19.json ""; done; done
date > $O/done.txt
