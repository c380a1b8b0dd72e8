"""gamma="auto" in a batch as it is against as it was, end to end, in one interleaved run.

Two changes of 2026-12-02: a batch ends with its slowest row, so `AdaptivePolicy(weigh_left=True)` weighs the
rows with the most left most when it decides whether the batch drafts on (exactspec.engine.policy); and
`CostModel.calibrate` shrinks each drafted length's loop overhead towards a line through all lengths, not
towards the pooled overhead (`exactspec.speed.costmodel._TREND`), so the long drafts auto makes now and then are
priced near what they cost. This script times, on the same prompt batches and in the same rounds:
target-alone batched `generate` (the baseline), fixed gammas, auto with both ("auto new"), auto with
neither ("auto old"), and with `--each` auto with one of them each. One generator per system for the whole run, as the bench keeps. Rows run to
max_new_tokens (no EOS); greedy outputs must equal `generate`'s up to the first EOS. Medians over repeats
of each repeat's ratio to the baseline.

    python benchmarks/bench_batch_policy_ab.py [--prompts benchmarks/prompts/unseen_code.json]
        [--num-prompts 8] [--batch-size 4] [--gammas 2] [--temperature 1] [--out r.json]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
from _abcommon import add_common, batches_of, dump, prompts_of, rounds, setup


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common(ap, repeats=5)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--gammas", default="2", help="fixed gammas timed beside auto")
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--each", action="store_true", help="also auto with each change alone")
    args = ap.parse_args()
    args.num_prompts = max(args.num_prompts, args.batch_size)
    setup(args)
    import exactspec as es
    import exactspec.speed.costmodel
    from exactspec.bench.bench import eos_ids, greedy_prefix_equal
    from exactspec.engine.policy import AdaptivePolicy
    from exactspec.speed.stats import GenerationStats

    target, draft, tok = es.load_pair(args.pair)
    batches = batches_of(prompts_of(args, args.pair, tok), tok, args.batch_size)
    greedy = args.temperature == 0
    sampling = dict(do_sample=False) if greedy else dict(do_sample=True, temperature=args.temperature, top_k=0)
    n_new = args.max_new_tokens

    class Generator(es.SpeculativeGenerator):
        weigh_left, trend = True, True

        def _learn_costs(self, stats, batch_size, sampled):
            exactspec.speed.costmodel._TREND = self.trend
            try:
                super()._learn_costs(stats, batch_size, sampled)
            finally:
                exactspec.speed.costmodel._TREND = True

        def _policy(self, gamma, batch_size, key):
            policy = super()._policy(gamma, batch_size, key)
            if isinstance(policy, AdaptivePolicy):
                policy.weigh_left = self.weigh_left
            return policy

    setting = {f"gamma={g}": (int(g), True, True) for g in args.gammas.split(",") if g}
    setting |= {"auto new": ("auto", True, True), "auto old": ("auto", False, False)}
    if args.each:
        setting |= {"auto weigh_left only": ("auto", True, False), "auto trend only": ("auto", False, True)}
    systems = ["target"] + list(setting)
    gens = {}
    for s, (_, weigh, trend) in setting.items():
        gens[s] = Generator(target, draft)
        gens[s].weigh_left, gens[s].trend = weigh, trend
    stats: dict = {s: [] for s in systems[1:]}

    def run(system, seed):
        outs, t0 = [], time.perf_counter()
        for i, enc in enumerate(batches):
            if system == "target":
                torch.manual_seed(seed + i)
                seq = target.generate(**enc, max_new_tokens=n_new, min_new_tokens=n_new,
                                      pad_token_id=tok.pad_token_id, **sampling)
            else:
                o = gens[system].generate(enc["input_ids"], enc["attention_mask"], max_new_tokens=n_new,
                                          gamma=setting[system][0], seed=seed + i, eos_token_id=[], **sampling)
                seq = o.sequences
                stats[system].append(o.stats)
            outs.append(seq[:, enc["input_ids"].shape[1]:])
        return time.perf_counter() - t0, outs

    eos = eos_ids(target, tok)  # generate() bans EOS until min_new_tokens; rows are compared up to it
    times, equal = rounds(systems, run, stats, args.repeats,
                          (lambda o, r: greedy_prefix_equal(o, r, eos)[0]) if greedy else None)
    merged = {k: GenerationStats.merge(v) for k, v in stats.items()}
    result = {"pair": args.pair, "prompts": args.prompts or "held-out", "batches": len(batches),
              "batch_size": args.batch_size, "max_new_tokens": n_new, "temperature": args.temperature,
              "repeats": args.repeats, "threads": args.threads,
              "speedup_vs_target": {s: statistics.median(t0 / t for t0, t in zip(times["target"], times[s]))
                                    for s in systems},
              "times": times,
              "target_calls": {k: m.target_calls for k, m in merged.items()},
              "tokens_per_row_step": {k: (m.new_tokens / m.row_steps if m.row_steps else 0.0)
                                      for k, m in merged.items()},
              "greedy_equals_generate": equal if greedy else None}
    dump(result, args.out)


if __name__ == "__main__":
    main()
