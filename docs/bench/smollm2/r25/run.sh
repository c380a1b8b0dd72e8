# smollm2 r25 (2026-12-03): how much of SmolLM2's prediction its first L layers already hold (logit lens,
# untrained), beside the shipped draft; 6 prompts of each set, 80 tokens, greedy and T = 0.7 top-p 0.9. ~90 s.
cd /work/main
.venv/bin/python benchmarks/smollm2_layer_lens.py --num-prompts 6 --max-new-tokens 80 --out docs/bench/smollm2/r25/layer_lens.json
