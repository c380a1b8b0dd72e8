# Round r33 (issue 49): the landed gamma="auto" (as r32) on the AVX2 EPYC of session 27, the four stdlib cells, on a
# set written before anything ran on it (unseen_code22.json): 8 prompts, 64 new tokens, 3 rounds, the bench's rotated
# order. The cost profiles are measured afresh at the round's start (the cache cleared) and kept beside the records.
# SMOLLM2=1: the four SmolLM2 cells on unseen_chat10.json (written with unseen_code22), after the stdlib ones.
# RERUN=1: the reruns (`_b`), with the profiles the cells measured.
cd "$(dirname "$0")/../../../../benchmarks"
O=${O:-../docs/bench/auto/r33}
cell() {  # pair backend T set suffix
  ../.venv/bin/python bench_auto_cells.py --pair $1 --backend $2 --temperature $3 --prompts prompts/$4 --num-prompts 8 --repeats 3 --out $O/$1_$2_t$3$5.json > $O/$1_$2_t$3$5.out 2>&1
}
if [ "${RERUN:-}" = 1 ]; then  # the seeded misses of less than 0.03, once each, as the issue allows (`_b`)
  cell stdlib llamacpp 1 unseen_code22.json _b
  cell smollm2 llamacpp 0 unseen_chat10.json _b
  cell smollm2 llamacpp 1 unseen_chat10.json _b
  exit 0
elif [ "${SMOLLM2:-}" = 1 ]; then  # the four SmolLM2 cells, after the stdlib ones (their profiles measured at first use)
  for backend in llamacpp transformers; do for T in 0 1; do cell smollm2 $backend $T unseen_chat10.json ""; done; done
else
  ../.venv/bin/exactspec cache --clear costs > /dev/null
  for backend in llamacpp transformers; do for T in 0 1; do cell stdlib $backend $T unseen_code22.json ""; done; done
fi
mkdir -p $O/costs && cp "${EXACTSPEC_CACHE:-$HOME/.cache/exactspec}"/costs/*.json $O/costs/
date > $O/done${SMOLLM2:+_smollm2}.txt
