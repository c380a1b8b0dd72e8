"""Does the prompt's evidence predict the run? Per prompt: what gamma="auto"'s prompt evidence says (the mean expected
verdict of the prompt's last positions, exactspec.engine.promptprior), the acceptance a fixed gamma = 2 run then has
on that prompt (all positions, and the first position alone, over --seeds runs), and what the seeded gamma="auto" run
did (plain steps, drafted and kept tokens). The prompt is read even where its evidence could not make a step draft
(AdaptivePolicy.prompt_could_draft, where the landed runs skip it); nothing is timed, but the runs price with the
stored profile. Figures in docs/adaptive.md (round r33).

    .venv/bin/python benchmarks/auto_prompt_evidence.py --backend llamacpp --temperature 1 \\
        --prompts benchmarks/prompts/unseen_code21.json --num-prompts 8
"""
from __future__ import annotations

import argparse
import statistics

import torch

from _abcommon import add_common, dump, prompts_of, setup
from exactspec import SpeculativeGenerator, load_pair
from exactspec.engine.loopcosts import calibration_run
from exactspec.engine.policy import AdaptivePolicy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    add_common(ap, repeats=1)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--backend", choices=("transformers", "llamacpp"), default="transformers")
    ap.add_argument("--seeds", type=int, default=3, help="fixed gamma = 2 runs per prompt")
    args = ap.parse_args()
    setup(args)
    t, d, tok = load_pair(args.pair, backend=args.backend)
    gen = SpeculativeGenerator(t, d)
    law = dict(do_sample=True, temperature=args.temperature, top_k=0, top_p=1.0) if args.temperature > 0 \
        else dict(do_sample=False)
    kw = dict(max_new_tokens=args.max_new_tokens, eos_token_id=[], **law)
    said = []  # the evidence's mean expected verdict, one per read prompt
    read = AdaptivePolicy.seed_from_prompt

    def spy(policy, confidence, accept, after):
        said.append(statistics.fmean(accept))
        return read(policy, confidence, accept, after)
    AdaptivePolicy.seed_from_prompt = spy
    AdaptivePolicy.prompt_could_draft = lambda policy, n: True  # read it even where it could not make a step draft
    rows = []
    for i, text in enumerate(prompts_of(args, args.pair, tok)):
        ids, before = torch.tensor([tok.encode(text)]), len(said)
        auto = gen.generate(ids, seed=i, **kw).stats
        evidence = said[-1] if len(said) > before else None  # None: no position to read (a one-token prompt)
        kept = drafted = first_kept = first = 0
        for s in range(args.seeds):
            st = calibration_run(gen, ids, gamma=2, seed=100 + s, **kw).stats
            kept, drafted = kept + st.accepted_tokens, drafted + st.drafted_tokens
            first_kept, first = first_kept + st.position_accepted[0], first + st.position_drafted[0]
        rows.append({"prompt": i, "evidence": evidence, "gamma2_acceptance": kept / drafted,
                     "gamma2_first_position": first_kept / first, "auto_plain_steps": auto.plain_steps,
                     "auto_drafted": auto.drafted_tokens, "auto_kept": auto.accepted_tokens})
        said_here = "none" if evidence is None else f"{evidence:.2f}"
        print(f"prompt {i}: evidence {said_here}, gamma = 2 keeps {kept / drafted:.2f} (first position "
              f"{first_kept / first:.2f}); seeded auto: {auto.plain_steps} plain steps, {auto.accepted_tokens} of "
              f"{auto.drafted_tokens} drafted kept", flush=True)
    bias = [r["evidence"] - r["gamma2_first_position"] for r in rows if r["evidence"] is not None]
    dump({"pair": args.pair, "backend": args.backend, "temperature": args.temperature, "prompts": args.prompts,
          "rows": rows, "mean_evidence_minus_first_position": statistics.fmean(bias) if bias else None}, args.out)


if __name__ == "__main__":
    main()
