# smollm2 r26 (2026-12-03): the third distillation round's draft (b: self-instruct answers, shipped when it wins)
# against the second round's (a: training/work-smollm2/shipped_r2 = `git show 71f11c0:src/exactspec/smollm2_pair/draft.safetensors`
# and draft.json), alpha on the same answers, then one interleaved end-to-end run per prompt set. Nothing else ran.
# b was the export of `distill_smollm2.py --stage train --train-minutes 25 --lr 3e-4 --init training/work-smollm2/shipped_r2/draft.safetensors --tag _r3 --chat-weight 1`
# (after --stage gen --gen-minutes 9 and --stage gen-self --gen-minutes 25); it lost and was not committed.
cd /work/main
R=docs/bench/smollm2/r26
PY=.venv/bin/python
$PY benchmarks/smollm2_layer_lens.py --no-layers --draft r2=training/work-smollm2/shipped_r2 --num-prompts 8 --out $R/alpha_ab.json > $R/alpha_ab.out 2>&1
AB="$PY benchmarks/bench_draft_ab.py --a training/work-smollm2/shipped_r2 --b src/exactspec/smollm2_pair --num-prompts 6 --gammas 2,auto --repeats 3"
$AB --out $R/ab_heldout_greedy.json > $R/ab_heldout_greedy.out 2>&1
$AB --prompts benchmarks/prompts/unseen_chat.json --out $R/ab_unseen_greedy.json > $R/ab_unseen_greedy.out 2>&1
# cut for time from here on (not run):
$AB --prompts benchmarks/prompts/unseen_chat2.json --out $R/ab_unseen2_greedy.json > $R/ab_unseen2_greedy.out 2>&1
$AB --prompts benchmarks/prompts/unseen_chat3.json --out $R/ab_unseen3_greedy.json > $R/ab_unseen3_greedy.out 2>&1
$AB --temperature 0.7 --top-p 0.9 --out $R/ab_heldout_t07.json > $R/ab_heldout_t07.out 2>&1
$AB --prompts benchmarks/prompts/unseen_chat.json --temperature 0.7 --top-p 0.9 --out $R/ab_unseen_t07.json > $R/ab_unseen_t07.out 2>&1
date > $R/done.txt
