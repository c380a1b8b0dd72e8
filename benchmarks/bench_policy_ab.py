"""gamma="auto" with and without optimism under uncertainty, end to end, in one interleaved run.

`AdaptivePolicy(optimism=z)` adds z standard errors to its acceptance estimates where the evidence is thin
(exactspec.engine.policy). This script times, on the same prompts and in the same rounds: target-alone `generate`
(the baseline), fixed gammas, and gamma="auto" at each optimism. With `--fresh` (the default) every call
gets a fresh generator, as every `exactspec generate` invocation does, so what is measured includes each
run's learning from nothing; `--no-fresh` keeps one generator per system across the whole run, as the bench
does. Rows run to max_new_tokens (no EOS); greedy outputs must equal `generate`'s up to the first EOS.
Medians over repeats.

    python benchmarks/bench_policy_ab.py [--prompts benchmarks/prompts/unseen_code.json --num-prompts 8]
        [--temperature 1] [--optimism 0,1] [--gammas 2,4] [--draft-dtypes float32,float16] [--out r.json]

With several `--draft-dtypes` every gamma and optimism runs once per dtype of the draft (the target stays as
loaded), so a half-precision draft is timed against the fp32 one in the same rounds.
"""
from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch
from _abcommon import add_common, dump, prompts_of, rounds, setup


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common(ap, repeats=3)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--optimism", default="0,1", help="optimism values of the gamma='auto' systems")
    ap.add_argument("--by-gamma", default="1", help="gamma='auto' systems re-priced with the loop's overhead per "
                    "drafted length (1, CostModel.t_overhead_by_gamma) or one pooled overhead (0); e.g. 0,1")
    ap.add_argument("--gammas", default="2,4", help="fixed gammas timed beside them")
    ap.add_argument("--draft-dtypes", default="float32", help="the draft's dtypes, e.g. float32,float16")
    ap.add_argument("--fresh", action=argparse.BooleanOptionalAction, default=True,
                    help="a fresh generator for every call (default), as every CLI invocation has")
    args = ap.parse_args()
    setup(args)
    import exactspec as es
    from exactspec.bench.bench import eos_ids, greedy_prefix_equal
    from exactspec.engine.policy import AdaptivePolicy
    from exactspec.speed.stats import GenerationStats

    target, loaded, tok = es.load_pair(args.pair)
    dtypes = args.draft_dtypes.split(",")
    drafts = {d: copy.deepcopy(loaded).to(getattr(torch, d)) for d in dtypes}
    inputs = [tok(p, return_tensors="pt") for p in prompts_of(args, args.pair, tok)]
    greedy = args.temperature == 0
    sampling = dict(do_sample=False) if greedy else dict(do_sample=True, temperature=args.temperature, top_k=0)
    n_new = args.max_new_tokens

    class Generator(es.SpeculativeGenerator):
        optimism, by_gamma = 1.0, True

        def _learn_costs(self, stats, batch_size):
            super()._learn_costs(stats, batch_size)
            cm = self._calibrated.get(batch_size)
            if cm is not None and not self.by_gamma:
                cm.t_overhead_by_gamma = None

        def _policy(self, gamma, batch_size, key):
            policy = super()._policy(gamma, batch_size, key)
            if isinstance(policy, AdaptivePolicy):
                policy.optimism = self.optimism
            return policy

    def make(optimism: float, dtype: str, by_gamma: bool = True):
        gen = Generator(target, drafts[dtype])
        gen.optimism, gen.by_gamma = optimism, by_gamma
        return gen

    tag = (lambda d: f" {d}") if len(dtypes) > 1 else (lambda d: "")
    setting = {f"gamma={g}{tag(d)}": (int(g), 1.0, d, True) for d in dtypes for g in args.gammas.split(",") if g}
    pricing = [bool(int(x)) for x in args.by_gamma.split(",")]
    tag_p = (lambda p: f" by_gamma={int(p)}") if len(pricing) > 1 else (lambda p: "")
    setting |= {f"auto optimism={float(z):g}{tag(d)}{tag_p(p)}": ("auto", float(z), d, p)
                for d in dtypes for z in args.optimism.split(",") for p in pricing}
    systems = ["target"] + list(setting)
    kept = {s: make(z, d, p) for s, (_, z, d, p) in setting.items()}
    stats: dict = {s: [] for s in systems[1:]}

    def run(system, seed):
        outs, t0 = [], time.perf_counter()
        for i, enc in enumerate(inputs):
            if system == "target":
                torch.manual_seed(seed + i)
                seq = target.generate(**enc, max_new_tokens=n_new, min_new_tokens=n_new,
                                      pad_token_id=tok.pad_token_id, **sampling)
            else:
                gamma, z, dtype, by_gamma = setting[system]
                gen = make(z, dtype, by_gamma) if args.fresh else kept[system]
                o = gen.generate(enc["input_ids"], enc["attention_mask"], max_new_tokens=n_new, gamma=gamma,
                                 seed=seed + i, eos_token_id=[], **sampling)
                seq = o.sequences
                stats[system].append(o.stats)
            outs.append(seq[:, enc["input_ids"].shape[1]:])
        return time.perf_counter() - t0, outs

    eos = eos_ids(target, tok)  # generate() bans EOS until min_new_tokens; rows are compared up to it
    times, equal = rounds(systems, run, stats, args.repeats,
                          (lambda o, r: greedy_prefix_equal(o, r, eos)[0]) if greedy else None)
    n = n_new * len(inputs)
    tps = {k: statistics.median(n / t for t in v) for k, v in times.items()}
    merged = {k: GenerationStats.merge(v) for k, v in stats.items()}
    result = {"pair": args.pair, "prompts": args.prompts or "held-out", "n_prompts": len(inputs),
              "max_new_tokens": n_new, "temperature": args.temperature, "draft_dtypes": dtypes,
              "fresh": args.fresh, "repeats": args.repeats, "threads": args.threads, "tokens_per_second": tps,
              "speedup_vs_target": {k: v / tps["target"] for k, v in tps.items()},
              "times": times,
              "tokens_per_target_call": {k: m.tokens_per_target_call for k, m in merged.items()},
              "plain_steps": {k: m.plain_steps for k, m in merged.items()},
              "target_calls": {k: m.target_calls for k, m in merged.items()},
              "greedy_equals_generate": equal if greedy else None}
    dump(result, args.out)


if __name__ == "__main__":
    main()
