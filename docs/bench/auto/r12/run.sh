# r12 (2026-12-01): gamma="auto" with optimism under uncertainty; a slow 2-core EPYC session (HF generate ~40
# tokens/s on the demo pair against ~146 in r10; verifying 2 tokens cost 1.4-1.5x verifying 1). Each command
# was run alone, one after another.
cd /work/main
R=docs/bench/auto/r12
B=".venv/bin/python benchmarks/bench_policy_ab.py"
# optimism 0 (the policy before this round) vs 1, a fresh generator per call, fixed gammas beside them
$B --repeats 3 --out $R/ab_heldout_greedy.json
$B --repeats 3 --prompts benchmarks/prompts/unseen_code.json --num-prompts 8 --out $R/ab_unseen_greedy.json
$B --repeats 3 --temperature 1 --out $R/ab_heldout_t1.json
$B --repeats 3 --prompts benchmarks/prompts/unseen_code.json --num-prompts 8 --temperature 1 --out $R/ab_unseen_t1.json
$B --repeats 5 --gammas "" --prompts benchmarks/prompts/unseen_code.json --num-prompts 8 --out $R/ab5_unseen_greedy.json
$B --repeats 5 --gammas "" --temperature 1 --out $R/ab5_heldout_t1.json
# the bench (one generator per system across the run), and a draft that cannot help
.venv/bin/exactspec bench --max-new-tokens 64 --gammas 2,3,4 --repeats 3 --num-prompts 6 --tree none --systems token --out $R/heldout_greedy > $R/heldout_greedy.out 2>&1
.venv/bin/python benchmarks/bench_never_loses.py --out $R/never_loses_t0 > $R/nl_t0.out 2>&1
# the shipped draft in fp16 (its shipped precision) against fp32, same rounds
$B --repeats 3 --gammas 4 --optimism 1 --draft-dtypes float32,float16 --out $R/ab_fp16_heldout_greedy.json
$B --repeats 3 --gammas 4 --optimism 1 --draft-dtypes float32,float16 --prompts benchmarks/prompts/unseen_code.json --num-prompts 8 --temperature 1 --out $R/ab_fp16_unseen_t1.json
.venv/bin/exactspec bench --prompts benchmarks/prompts/unseen_code.json --num-prompts 8 --max-new-tokens 64 --gammas 2,3,4 --repeats 3 --tree none --systems token --out $R/unseen_greedy_fp16 > $R/unseen_greedy_fp16.out 2>&1  # with the fp16 draft now the default
.venv/bin/exactspec bench --draft-dtype float16 --max-new-tokens 64 --gammas 2,3,4 --repeats 3 --num-prompts 6 --tree none --systems token --out $R/heldout_greedy_fp16 > $R/heldout_greedy_fp16.out 2>&1
# the fp16 A/Bs on the other two prompt sets
$B --repeats 3 --gammas 4 --optimism 1 --draft-dtypes float32,float16 --prompts benchmarks/prompts/unseen_code.json --num-prompts 8 --out $R/ab_fp16_unseen_greedy.json
$B --repeats 3 --gammas 4 --optimism 1 --draft-dtypes float32,float16 --temperature 1 --out $R/ab_fp16_heldout_t1.json
