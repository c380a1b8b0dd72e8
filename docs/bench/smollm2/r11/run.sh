# r11: the second distillation round's draft (b, shipped now) against the first round's (a, shipped before;
# `git show 947f633:src/exactspec/smollm2_pair/draft.safetensors`), one interleaved run per prompt set,
# then the full bench on the new draft (held-out greedy). Nothing else ran on the machine.
cd /work/main
R=docs/bench/smollm2/r11
AB="PYTHONPATH=src .venv/bin/python benchmarks/bench_draft_ab.py --a training/work-smollm2/shipped_r1 --b src/exactspec/smollm2_pair --num-prompts 6 --gammas 2,auto --repeats 3"
eval "$AB --out $R/ab_heldout_greedy.json" > $R/ab_heldout_greedy.out 2>&1
eval "$AB --prompts benchmarks/prompts/unseen_chat.json --out $R/ab_unseen_greedy.json" > $R/ab_unseen_greedy.out 2>&1
eval "$AB --prompts benchmarks/prompts/unseen_chat2.json --out $R/ab_unseen2_greedy.json" > $R/ab_unseen2_greedy.out 2>&1
eval "$AB --temperature 0.7 --top-p 0.9 --out $R/ab_heldout_t07.json" > $R/ab_heldout_t07.out 2>&1
B="PYTHONPATH=src .venv/bin/python -m exactspec bench --pair smollm2 --num-prompts 4 --max-new-tokens 64 --repeats 3 --gammas 2,4 --tree none"
eval "$B --out $R/heldout_greedy" > $R/heldout_greedy.out 2>&1
date > $R/done.txt
