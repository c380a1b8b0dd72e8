# Round r29 (issue 49): every stdlib cell and the smollm2 llama.cpp cells after gamma="auto" took a margin over
# plain steps (exactspec.engine.policy.MARGIN) and a probe due at a run's last token waited for the next step that
# can draft, on sets written for it before that code ran on them (unseen_code18.json, unseen_chat7.json).
# 8 prompts, 64 new tokens, 3 rounds interleaved; about 50 minutes in all.
cd "$(dirname "$0")/../../../../benchmarks"
O=${O:-../docs/bench/auto/r29}
for backend in llamacpp transformers; do
  for T in 0 1; do
    ../.venv/bin/python bench_auto_cells.py --pair stdlib --backend $backend --temperature $T --prompts prompts/unseen_code18.json --num-prompts 8 --repeats 3 --out $O/stdlib_${backend}_t$T.json > $O/stdlib_${backend}_t$T.out 2>&1
  done
done
for T in 0 1; do
  ../.venv/bin/python bench_auto_cells.py --pair smollm2 --backend llamacpp --temperature $T --prompts prompts/unseen_chat7.json --num-prompts 8 --repeats 3 --out $O/smollm2_llamacpp_t$T.json > $O/smollm2_llamacpp_t$T.out 2>&1
done
date > $O/done.txt
