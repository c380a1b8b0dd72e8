# Round r34 (issue 49): gamma="auto" starting from the pair's acceptance counted beside its prices (the profile's
# `acceptance`, exactspec.engine.loopcosts.loop_acceptance) instead of the prompt's evidence, its first probe at
# FRESH_GAP = 64, on the AVX2 EPYC of sessions 27-28, on sets written before anything ran on them (unseen_code23.json,
# unseen_chat11.json): 8 prompts, 64 new tokens, 3 rounds, the bench's rotated order. The cost profiles are measured
# afresh at the round's start (the cache cleared) and kept beside the records.
# SMOLLM2=1: the four SmolLM2 cells, after the stdlib ones (not run in r34: r35 ran the SmolLM2 x llama.cpp ones).
# RERUN=1: the reruns (`_b`) of seeded misses under 0.03. LANDED=1: the code before r34 on the same set (`landed_*`).
cd "$(dirname "$0")/../../../../benchmarks"
O=${O:-../docs/bench/auto/r34}
cell() {  # pair backend T set suffix
  ../.venv/bin/python bench_auto_cells.py --pair $1 --backend $2 --temperature $3 --prompts prompts/$4 --num-prompts 8 --repeats 3 --out $O/$1_$2_t$3$5.json > $O/$1_$2_t$3$5.out 2>&1
}
if [ "${LANDED:-}" = 1 ]; then  # the code before r34 (1b329a8: the prompt's evidence) on the same set, gamma = 4 the only
  # fixed length, its profiles measured in its own run (`landed_*`), from a worktree of that commit at $W
  ROOT=$(cd .. && pwd); OA=$(cd "$O" && pwd); W=${W:-/tmp/exactspec-1b329a8}
  [ -d "$W" ] || git worktree add -f "$W" 1b329a8 > /dev/null
  for backend in llamacpp transformers; do for T in 0 1; do
    (cd "$W/benchmarks" && PYTHONPATH="$W/src" "$ROOT/.venv/bin/python" bench_auto_cells.py --pair stdlib --backend $backend \
      --temperature $T --prompts "$ROOT/benchmarks/prompts/unseen_code23.json" --num-prompts 8 --repeats 3 --gammas 4 \
      --out "$OA/landed_stdlib_${backend}_t$T.json" > "$OA/landed_stdlib_${backend}_t$T.out" 2>&1)
  done; done
  exit 0
elif [ "${RERUN:-}" = 1 ]; then
  for c in ${CELLS:?CELLS=\"pair:backend:T:set ...\"}; do IFS=: read -r p b t s <<< "$c"; cell $p $b $t $s _b; done
  exit 0
elif [ "${SMOLLM2:-}" = 1 ]; then
  for backend in llamacpp transformers; do for T in 0 1; do cell smollm2 $backend $T unseen_chat11.json ""; done; done
else
  ../.venv/bin/exactspec cache --clear costs > /dev/null
  for backend in llamacpp transformers; do for T in 0 1; do cell stdlib $backend $T unseen_code23.json ""; done; done
fi
mkdir -p $O/costs && cp "${EXACTSPEC_CACHE:-$HOME/.cache/exactspec}"/costs/*.json $O/costs/
date > $O/done${SMOLLM2:+_smollm2}.txt
