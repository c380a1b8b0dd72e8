"""Two drafts for the same target, end to end, in one interleaved run: what a retrained draft buys.

For each draft (a directory holding `draft.safetensors` and `draft.json`, as `exactspec/pairs/smollm2_pair/`, or a
feature draft's `feature_draft.safetensors` and `feature_draft.json`: `--b feature:DIR`) and
each gamma, exactspec generates on the same prompts; target-alone `generate` is the baseline, timed in the
same rounds. Rows stop at EOS (the chat model's `<|im_end|>`), so speed is tokens per second; greedy outputs
must equal the target's token for token. Medians over repeats.

    python benchmarks/bench_draft_ab.py --a training/work-smollm2/shipped_r1 --b src/exactspec/pairs/smollm2_pair \\
        [--prompts benchmarks/prompts/unseen_chat.json] [--temperature 0.7 --top-p 0.9] [--gammas 2,auto]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
from _abcommon import add_common, dump, prompts_of, setup


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="the first draft's directory")
    ap.add_argument("--b", required=True, help="the second draft's directory")
    add_common(ap, repeats=3, pair=False)
    ap.add_argument("--gammas", default="2,auto")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--top-p", type=float, default=None)
    args = ap.parse_args()
    setup(args)
    import exactspec as es
    from exactspec.pairs.smollm2 import load_draft, load_target
    from exactspec.speed.stats import GenerationStats

    target, tok = load_target()
    import pathlib

    from exactspec.pairs.featuredraft import load_feature_draft

    def load(spec):  # "feature:DIR" is a feature draft (exactspec.pairs.featuredraft), else a token draft's directory
        return load_feature_draft(target, pathlib.Path(spec[8:])) if spec.startswith("feature:") else \
            load_draft(target, pathlib.Path(spec))

    drafts = {"a": load(args.a), "b": load(args.b)}
    inputs = [tok(p, return_tensors="pt", add_special_tokens=False).input_ids for p in prompts_of(args, "smollm2", tok)]
    greedy = args.temperature == 0
    sampling = dict(do_sample=False) if greedy else dict(do_sample=True, temperature=args.temperature,
                                                           top_p=args.top_p, top_k=0)
    gammas = [g if g == "auto" else int(g) for g in args.gammas.split(",")]
    systems = ["target"] + [(d, g) for g in gammas for d in ("a", "b")]
    gens = {s: es.SpeculativeGenerator(target, drafts[s[0]]) for s in systems[1:]}
    stats: dict = {str(s): [] for s in systems[1:]}

    def run(system, seed):
        outs, t0 = [], time.perf_counter()
        for i, ids in enumerate(inputs):
            if system == "target":
                torch.manual_seed(seed + i)
                seq = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=args.max_new_tokens,
                                      pad_token_id=tok.pad_token_id, **sampling)
            else:
                o = gens[system].generate(ids, max_new_tokens=args.max_new_tokens, gamma=system[1], seed=seed + i,
                                          **sampling)
                seq = o.sequences
                stats[str(system)].append(o.stats)
            outs.append(seq[0, ids.shape[1]:].tolist())
        return time.perf_counter() - t0, outs

    ref = run("target", 0)[1]  # warm-up, and the greedy reference
    for s in systems[1:]:
        run(s, 0)  # warm-up (gamma="auto" learns on its first run)
    for s in stats:
        stats[s].clear()
    times: dict = {str(s): [] for s in systems}
    tokens: dict = {str(s): [] for s in systems}
    for rep in range(args.repeats):
        for s in systems:
            dt, outs = run(s, 1000 * (rep + 1))
            if greedy and outs != ref:
                raise SystemExit(f"{s}: greedy output differs from target-alone generate")
            times[str(s)].append(dt)
            tokens[str(s)].append(sum(len(o) for o in outs))
    tps = {k: statistics.median(n / t for n, t in zip(tokens[k], times[k])) for k in times}
    per_rep = {k: [(n / t) / (n0 / t0) for n, t, n0, t0 in zip(tokens[k], times[k], tokens["target"], times["target"])]
               for k in times}  # within a repeat, so drift between repeats cancels
    result = {"a": args.a, "b": args.b, "prompts": args.prompts or "held-out", "n_prompts": len(inputs),
              "max_new_tokens": args.max_new_tokens, "temperature": args.temperature, "top_p": args.top_p,
              "repeats": args.repeats, "threads": args.threads, "tokens_per_second": tps,
              "speedup_vs_target": {k: statistics.median(v) for k, v in per_rep.items()},
              "speedup_vs_target_per_repeat": per_rep,
              "tokens_per_target_call": {k: GenerationStats.merge(v).tokens_per_target_call for k, v in stats.items()},
              "plain_steps": {k: GenerationStats.merge(v).plain_steps for k, v in stats.items()},
              "b_over_a": {str(g): statistics.median(b / a for b, a in zip(per_rep[str(("b", g))], per_rep[str(("a", g))]))
                           for g in gammas}}
    dump(result, args.out)


if __name__ == "__main__":
    main()
