# Round r32 (issue 49): gamma="auto" after it stopped reading a prompt whose evidence could not make its first
# step draft (AdaptivePolicy.prompt_could_draft), all eight cells, on sets written before anything ran on them
# (unseen_code21.json, unseen_chat9.json): 8 prompts, 64 new tokens, 3 rounds, the bench's rotated order.
cd "$(dirname "$0")/../../../../benchmarks"
O=${O:-../docs/bench/auto/r32}
cell() {  # pair backend T set suffix
  ../.venv/bin/python bench_auto_cells.py --pair $1 --backend $2 --temperature $3 --prompts prompts/$4 --num-prompts 8 --repeats 3 --out $O/$1_$2_t$3$5.json > $O/$1_$2_t$3$5.out 2>&1
}
for backend in llamacpp transformers; do for T in 0 1; do cell stdlib $backend $T unseen_code21.json ""; done; done
for backend in llamacpp transformers; do for T in 0 1; do cell smollm2 $backend $T unseen_chat9.json ""; done; done
date > $O/done.txt
