# Round r2 of plan --engine against the live engines (issue 48; docs/engines.md). About 12-20 minutes per line.
cd "$(dirname "$0")/../../../.."
P=benchmarks/prompts/engines/unseen_engines2.json
O=docs/bench/engines/r2
for T in 0 1; do
  .venv/bin/python benchmarks/engines/plan_check.py --engine llamacpp --temperature $T --prompts $P --out $O/llamacpp_t$T > $O/llamacpp_t$T.out 2>&1
done
.venv/bin/python benchmarks/engines/plan_check.py --engine vllm --prompts $P --out $O/vllm_t0 > $O/vllm_t0.out 2>&1
.venv/bin/python benchmarks/engines/plan_check.py --engine vllm --concurrency 4 --prompts $P --out $O/vllm_t0_c4 > $O/vllm_t0_c4.out 2>&1
.venv/bin/python benchmarks/engines/plan_check.py --engine vllm --fit 2,3,4 --check 6,8 --prompts $P --out $O/vllm_t0_fit234 > $O/vllm_t0_fit234.out 2>&1
# llamacpp_t0/t1 and vllm_t0 ran with the forward probes (since dropped): their check.md is
# `plan_check.py --rescore` with the line; check-forward-probes.md what the probes predicted.
