"""gamma="auto" with plain steps priced apart from speculative ones, against one overhead pooled over both,
end to end, in one interleaved run.

Calibrated on a run (`CostModel.calibrate`), the cost model prices a plain step (nothing drafted: no
verification, rollback or drafter) at what the run's plain steps cost and a speculative step at what its
speculative steps cost. Before, one overhead was pooled over all steps, and a model-free drafter (prompt
lookup) was never re-priced at all: on the bare table a width-2 step cost about a plain one, and prompt
lookup drafted at a loss at T = 1. "pooled" here re-creates that pricing (`_learn_costs` as it was);
"apart" is the library's. Systems: target-alone `generate` (the baseline), prompt lookup and the token rule
under gamma="auto" each way, and with `--useless` the shipped draft's architecture with random weights.
One generator per system across the run, as the bench keeps (`--fresh`: a new one per call).

    python benchmarks/bench_plain_pricing_ab.py [--prompts benchmarks/prompts/unseen_code.json --num-prompts 8]
        [--temperature 1] [--useless] [--repeats 5] [--out r.json]
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import torch
from _abcommon import add_common, dump, prompts_of, setup


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common(ap, repeats=5)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--useless", action="store_true", help="also a random-weight draft of the same shape")
    ap.add_argument("--fresh", action=argparse.BooleanOptionalAction, default=False,
                    help="a fresh generator for every call (default: one per system, as the bench)")
    args = ap.parse_args()
    setup(args)
    import exactspec as es
    from exactspec.speed.stats import GenerationStats
    from transformers import AutoModelForCausalLM

    target, draft, tok = es.load_pair(args.pair)
    drafts = {"draft": draft}
    if args.useless:
        torch.manual_seed(0)
        drafts["useless"] = AutoModelForCausalLM.from_config(draft.config).to(draft.dtype).eval()

    class Pooled(es.SpeculativeGenerator):
        """Re-priced between runs as before plain steps were priced apart."""

        def _learn_costs(self, stats, batch_size, sampled):
            if self.calibrate and stats.draft_calls and stats.target_calls:
                pooled = dataclasses.replace(stats, plain_step_time=0.0)
                self._calibrated[batch_size] = self._base_cost(batch_size).calibrate(pooled)

    def make(kind: str, which: str):
        cls = Pooled if kind == "pooled" else es.SpeculativeGenerator
        return cls(target, drafter="prompt_lookup") if which == "lookup" else cls(target, drafts[which])

    setting = {f"{which} auto {kind}": (kind, which) for which in ["lookup", *drafts] for kind in ("pooled", "apart")}
    kept = {s: make(*v) for s, v in setting.items()}
    inputs = [tok(p, return_tensors="pt") for p in prompts_of(args, args.pair, tok)]
    sampling = dict(do_sample=False) if args.temperature == 0 else \
        dict(do_sample=True, temperature=args.temperature, top_k=0)
    n_new = args.max_new_tokens
    systems = ["target", *setting]
    stats: dict = {s: [] for s in setting}

    def run(system, seed):
        t0 = time.perf_counter()
        for i, enc in enumerate(inputs):
            if system == "target":
                torch.manual_seed(seed + i)
                target.generate(**enc, max_new_tokens=n_new, min_new_tokens=n_new, pad_token_id=tok.pad_token_id,
                                **sampling)
                continue
            gen = make(*setting[system]) if args.fresh else kept[system]
            out = gen.generate(enc["input_ids"], enc["attention_mask"], max_new_tokens=n_new, gamma="auto",
                               seed=seed + i, eos_token_id=[], **sampling)
            stats[system].append(out.stats)
        return time.perf_counter() - t0

    for s in systems:
        run(s, 0)  # warm-up: the cost model (measured once per process), and what each generator learns
    for v in stats.values():
        v.clear()
    times: dict = {s: [] for s in systems}
    for rep in range(args.repeats):
        for s in systems:
            times[s].append(run(s, 1000 * (rep + 1)))
    ratios = {s: [t0 / t for t0, t in zip(times["target"], times[s])] for s in systems}
    merged = {k: GenerationStats.merge(v) for k, v in stats.items()}
    result = {"pair": args.pair, "prompts": args.prompts or "held-out", "n_prompts": len(inputs),
              "max_new_tokens": n_new, "temperature": args.temperature, "fresh": args.fresh,
              "repeats": args.repeats, "threads": args.threads,
              "speedup_vs_target": {s: statistics.median(r) for s, r in ratios.items()},
              "speedup_per_repeat": ratios,
              "apart_over_pooled": {w: statistics.median(a / b for a, b in zip(ratios[f"{w} auto apart"],
                                                                                 ratios[f"{w} auto pooled"]))
                                    for w in ["lookup", *drafts]},
              "plain_steps": {k: m.plain_steps for k, m in merged.items()},
              "target_calls": {k: m.target_calls for k, m in merged.items()},
              "tokens_per_target_call": {k: m.tokens_per_target_call for k, m in merged.items()}}
    dump(result, args.out)


if __name__ == "__main__":
    main()
