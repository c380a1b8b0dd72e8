"""What a lean forward buys, end to end: the same generation with the draft (or, with --part target, the
target) run through transformers' forward (EXACTSPEC_LEAN_DRAFT=0 / EXACTSPEC_LEAN_TARGET=0) and through
exactspec.backends.leanforward, against target-alone `generate`, interleaved, medians over repeats. Greedy outputs
must all equal the target's.

    python benchmarks/bench_lean_draft.py [--part draft|target] [--pair stdlib|smollm2] [--prompts FILE]
        [--gammas 2,4,auto]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from _abcommon import add_common, dump, prompts_of, setup


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    add_common(ap, repeats=5)
    ap.add_argument("--gammas", default="2,4,auto")
    ap.add_argument("--part", choices=("draft", "target"), default="draft",
                    help="which model's forward the two systems differ in")
    args = ap.parse_args()
    setup(args)
    import exactspec as es
    from exactspec.bench.bench import eos_ids, greedy_prefix_equal

    target, draft, tok = es.load_pair(args.pair)
    inputs = [tok(p, return_tensors="pt").input_ids for p in prompts_of(args, args.pair, tok)]
    gens: dict = {}  # a generator per system: gamma="auto" learns costs and acceptance per generator
    gammas = [g if g == "auto" else int(g) for g in args.gammas.split(",")]
    switch = "EXACTSPEC_LEAN_TARGET" if args.part == "target" else "EXACTSPEC_LEAN_DRAFT"

    def run(system):
        outs, t0 = [], time.perf_counter()
        for ids in inputs:
            if system == "target":
                seq = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.max_new_tokens,
                                      min_new_tokens=args.max_new_tokens, do_sample=False,
                                      pad_token_id=0, eos_token_id=None)
            else:
                os.environ[switch] = "1" if system[0] == "lean" else "0"
                gen = gens.setdefault(system, es.SpeculativeGenerator(target, draft))
                seq = gen.generate(ids, max_new_tokens=args.max_new_tokens, gamma=system[1],
                                   do_sample=False, eos_token_id=[]).sequences
            outs.append(seq[:, ids.shape[1]:])
        return time.perf_counter() - t0, outs

    # `generate` runs with min_new_tokens (equal lengths), which bans EOS; exactspec runs without EOS and
    # keeps the target's argmax, EOS included: outputs are compared up to exactspec's first EOS
    eos = eos_ids(target, tok)
    systems = ["target"] + [(kind, g) for g in gammas for kind in ("transformers", "lean")]
    times = {str(s): [] for s in systems}
    ref = run("target")[1]  # warm-up, and the reference output
    for s in systems[1:]:
        run(s)  # warm-up (and gamma="auto"'s first run, which learns)
    for _ in range(args.repeats):
        for s in systems:
            dt, outs = run(s)
            if not all(greedy_prefix_equal(o, r, eos)[0] for o, r in zip(outs, ref)):
                raise SystemExit(f"{s}: greedy output differs from target-alone generate")
            times[str(s)].append(dt)
    base = statistics.median(times["target"])
    result = {"part": args.part, "pair": args.pair, "prompts": args.prompts or "held-out", "n_prompts": len(inputs),
              "max_new_tokens": args.max_new_tokens, "repeats": args.repeats, "threads": args.threads,
              "median_seconds": {k: statistics.median(v) for k, v in times.items()},
              "speedup_vs_target": {k: base / statistics.median(v) for k, v in times.items()}}
    for g in gammas:
        result.setdefault("lean_over_transformers", {})[str(g)] = (
            statistics.median(times[str(("transformers", g))]) / statistics.median(times[str(("lean", g))]))
    dump(result, args.out)


if __name__ == "__main__":
    main()
