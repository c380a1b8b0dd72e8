# r19 (2026-12-02): after a4e0f8a (a half-precision draft drafting for several rows computes in fp32).
# Run from /work/main, each command alone, nothing else on the machine.
cd /work/main
R=docs/bench/auto/r19
X=.venv/bin/exactspec
PY=.venv/bin/python
# interleaved A/B of the change (fp32 compute against the draft's own fp16), batch 4:
# $PY benchmarks/bench_batch_draft_dtype.py --num-prompts 8 --out $R/b4_heldout_greedy.json
# $PY benchmarks/bench_batch_draft_dtype.py --prompts benchmarks/prompts/unseen_code.json --num-prompts 8 --out $R/b4_unseen_greedy.json
# $PY benchmarks/bench_batch_draft_dtype.py --num-prompts 8 --temperature 1 --out $R/b4_heldout_t1.json
B4="$X bench --max-new-tokens 64 --repeats 3 --num-prompts 8 --batch-size 4 --gammas 2,4 --tree none"
$B4 --prompts benchmarks/prompts/unseen_code.json --out $R/batch4_unseen > $R/batch4_unseen.out 2>&1
$B4 --out $R/batch4_greedy > $R/batch4_greedy.out 2>&1
date > $R/done.txt
