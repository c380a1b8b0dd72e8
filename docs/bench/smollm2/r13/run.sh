# r13 (2026-12-01): the smollm2 draft in fp16 against fp32, same rounds, fresh generators, held-out chat
# prompts, greedy. Run alone on the machine.
cd /work/main
.venv/bin/python benchmarks/bench_policy_ab.py --pair smollm2 --num-prompts 4 --optimism 1 --gammas 2 --draft-dtypes float32,float16 --repeats 3 --out docs/bench/smollm2/r13/ab_fp16_heldout_greedy.json > docs/bench/smollm2/r13/ab_fp16_heldout_greedy.out 2>&1
