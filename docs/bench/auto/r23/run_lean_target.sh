# r23 (2026-12-03): the target's lean forward against transformers' forward for the target, interleaved (5 repeats).
# Run from /work/main, each command alone, nothing else on the machine.
cd /work/main
R=docs/bench/auto/r23
PY=.venv/bin/python
$PY benchmarks/bench_lean_draft.py --part target --gammas 2,4,auto --out $R/lean_target_heldout.json
$PY benchmarks/bench_lean_draft.py --part target --gammas 2,4,auto --prompts benchmarks/prompts/unseen_code.json --num-prompts 8 --out $R/lean_target_unseen.json
