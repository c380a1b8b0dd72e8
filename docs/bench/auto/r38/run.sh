# Round r38 (issue 49): r37's gamma="auto" whose fresh run drafts where a length loses at most PRICE_MARGIN at the
# pair's rates less PRIOR_SPREAD (where it had to pay there, seeded runs at T = 1 on transformers stayed plain, r37),
# on sets written before anything ran on them (unseen_code27.json;
# SmolLM2: unseen_chat14.json): 8 prompts, 64 new tokens, 3 rounds, the bench's rotated order, on the AVX2 EPYC of
# sessions 27-31. The cost profiles are measured afresh at the round's start (the cache cleared) and kept beside
# the records.
# SMOLLM2=1: the two SmolLM2 x llama.cpp cells; SMOLLM2_TF=1: the SmolLM2 x transformers cells (~20 minutes each; TS="1": T = 1 only).
# RERUN=1 CELLS="pair:backend:T:set ...": reruns (`_b`) of seeded misses under 0.03.
cd "$(dirname "$0")/../../../../benchmarks"
O=${O:-../docs/bench/auto/r38}
cell() {  # pair backend T set suffix
  ../.venv/bin/python bench_auto_cells.py --pair $1 --backend $2 --temperature $3 --prompts prompts/$4 --num-prompts 8 --repeats 3 --out $O/$1_$2_t$3$5.json > $O/$1_$2_t$3$5.out 2>&1
}
if [ "${RERUN:-}" = 1 ]; then
  for c in ${CELLS:?CELLS=\"pair:backend:T:set ...\"}; do IFS=: read -r p b t s <<< "$c"; cell $p $b $t $s _b; done
  exit 0
elif [ "${SMOLLM2:-}" = 1 ]; then
  for T in 0 1; do cell smollm2 llamacpp $T unseen_chat14.json ""; done
elif [ "${SMOLLM2_TF:-}" = 1 ]; then
  for T in ${TS:-0 1}; do cell smollm2 transformers $T unseen_chat14.json ""; done
else
  ../.venv/bin/exactspec cache --clear costs > /dev/null
  for backend in llamacpp transformers; do for T in 0 1; do cell stdlib $backend $T unseen_code27.json ""; done; done
fi
mkdir -p $O/costs && cp "${EXACTSPEC_CACHE:-$HOME/.cache/exactspec}"/costs/*.json $O/costs/
date > $O/done${SMOLLM2:+_smollm2}${SMOLLM2_TF:+_smollm2_tf}.txt
