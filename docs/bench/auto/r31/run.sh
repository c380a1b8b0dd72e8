# Round r31 (issue 49): gamma="auto" as in r29/r30 (the policy unchanged), with the bench's rotated order and cost
# profiles measured afresh on a quiet machine (the suite no longer leaves its own behind), on sets written before
# anything ran on them (unseen_code20.json, unseen_chat8.json): 8 prompts, 64 new tokens, 3 rounds.
cd "$(dirname "$0")/../../../../benchmarks"
O=${O:-../docs/bench/auto/r31}
cell() {  # pair backend T set suffix
  ../.venv/bin/python bench_auto_cells.py --pair $1 --backend $2 --temperature $3 --prompts prompts/$4 --num-prompts 8 --repeats 3 --out $O/$1_$2_t$3$5.json > $O/$1_$2_t$3$5.out 2>&1
}
for backend in llamacpp transformers; do for T in 0 1; do cell stdlib $backend $T unseen_code20.json ""; done; done
for T in 0 1; do cell smollm2 llamacpp $T unseen_chat8.json ""; done
date > $O/done.txt
