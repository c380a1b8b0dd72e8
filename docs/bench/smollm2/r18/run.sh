#!/bin/bash
# Feature draft (EAGLE-style) for SmolLM2-135M-Instruct, as run on 2026-12-02 (W=/work/eagle there).
# Run from the repository root with nothing else on the CPU.
set -e
W=${W:-training/work-smollm2}
# 1. the target's own answers to the training and held-out chat prompts (distill_smollm2's gen stage)
python training/distill_smollm2.py --stage gen --gen-minutes 28 --work $W
# 2. the target's features over them; off-policy text (top-64 and features in one pass)
python training/distill_feature_draft.py --work $W --stage feats
python training/distill_feature_draft.py --work $W --stage text --text-minutes 6
# 3a. (tried first, stopped at step 1,100: held-out alpha >= 0.43) one layer from the target's last layer:
#     python training/distill_feature_draft.py --work $W --stage train --train-minutes 30 --chat-weight 2 --out $W/export
# 3b. the reported draft: from the shipped token draft, feature gain, lr 3e-4
python training/distill_feature_draft.py --work $W --stage train --train-minutes 28 --chat-weight 2 --layers 2 \
    --from-token-draft --reg 0.1 --lr 3e-4 --out $W/export
# 4. end to end against the shipped token draft, interleaved, held-out chat prompts, greedy
python benchmarks/bench_draft_ab.py --a src/exactspec/smollm2_pair --b feature:$W/export --gammas 2,auto \
    --num-prompts 4 --repeats 2 --out docs/bench/smollm2/r18/heldout_greedy.json
