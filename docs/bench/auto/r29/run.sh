# Round r29 (issue 49): gamma="auto" after a probe due at a run's last token waits for the next step that can draft
# (commit b99a464; the code that shipped has the same src/), on sets written before that code ran on them
# (unseen_code18.json for stdlib, unseen_chat7.json for smollm2): 8 prompts, 64 new tokens, 3 rounds interleaved.
# The stdlib records at the top were run with PYTHONPATH=<a worktree of b99a464>/src, in the same hour as margin/,
# which holds the same cells on the margin tried next (commit d762db8, reverted: docs/adaptive.md, r29).
# Misses of less than 0.03 rerun once (*_b). About 30 minutes in all.
cd "$(dirname "$0")/../../../../benchmarks"
O=${O:-../docs/bench/auto/r29}
cell() {  # pair backend T set suffix
  ../.venv/bin/python bench_auto_cells.py --pair $1 --backend $2 --temperature $3 --prompts prompts/$4 --num-prompts 8 --repeats 3 --out $O/$1_$2_t$3$5.json > $O/$1_$2_t$3$5.out 2>&1
}
for backend in llamacpp transformers; do for T in 0 1; do cell stdlib $backend $T unseen_code18.json ""; done; done
for T in 0 1; do cell smollm2 llamacpp $T unseen_chat7.json ""; done
# reruns: stdlib llama.cpp greedy (seeded 0.951), stdlib transformers T = 1 (0.941 / 0.953; 0.948 of the best);
# stdlib transformers greedy (seeded 0.918 of the best, a miss of 0.032: rerun to see the noise, not to replace it)
cell stdlib llamacpp 0 unseen_code18.json _b
cell stdlib transformers 1 unseen_code18.json _b
cell stdlib transformers 0 unseen_code18.json _b
date > $O/done_b.txt
# then smollm2 llama.cpp greedy (seeded 0.966):
cell smollm2 llamacpp 0 unseen_chat7.json _b
# and the SmolLM2 x transformers cells (not run since r26):
for T in 0 1; do cell smollm2 transformers $T unseen_chat7.json ""; done
# then smollm2 transformers greedy (the generator 0.953):
cell smollm2 transformers 0 unseen_chat7.json _b
