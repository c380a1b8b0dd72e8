# smollm2 r23 (2026-12-03): the target's lean forward (transformers' ops, bit-equal logits, without its per-call
# overhead) on SmolLM2-135M-Instruct. Run from /work/main, each command alone, nothing else on the machine.
cd /work/main
R=docs/bench/smollm2/r23
PY=.venv/bin/python
$PY benchmarks/bench_lean_draft.py --part target --pair smollm2 --num-prompts 4 --repeats 3 --gammas 2,auto --out $R/lean_target_heldout.json > $R/lean_target_heldout.out 2>&1
B="$PY -m exactspec bench --pair smollm2 --num-prompts 4 --max-new-tokens 64 --repeats 3 --gammas 2,4 --tree none"
$B --out $R/heldout_greedy > $R/heldout_greedy.out 2>&1
$B --prompts benchmarks/prompts/unseen_chat.json --out $R/unseen_greedy > $R/unseen_greedy.out 2>&1
$B --temperature 0.7 --top-p 0.9 --out $R/heldout_t07 > $R/heldout_t07.out 2>&1
date > $R/done.txt
# added after the first four (same session, same code): the unseen set at T = 0.7
$B --prompts benchmarks/prompts/unseen_chat.json --temperature 0.7 --top-p 0.9 --out $R/unseen_t07 > $R/unseen_t07.out 2>&1
$B --prompts benchmarks/prompts/unseen_chat2.json --out $R/unseen2_greedy > $R/unseen2_greedy.out 2>&1
