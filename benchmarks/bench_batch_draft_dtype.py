"""A half-precision draft drafting for several rows: computing in fp32 (the default) against its own dtype,
end to end, in one interleaved run.

exactspec.backends.leanforward computes a half-precision draft's forward in fp32 when a run drafts for more than one
row (``EXACTSPEC_DRAFT_UPCAST=0`` keeps the draft's dtype). This script times, on the same prompt batches and
in the same rounds: target-alone batched `generate` (the baseline) and exactspec at each gamma with the draft
computing in fp32 ("fp32") and in its own dtype ("own"). One generator per system for the whole run, as the
bench keeps. Rows run to max_new_tokens (no EOS); greedy outputs must equal `generate`'s up to the first
EOS. Medians over repeats of each system's time for all batches, as ratios to the baseline's time in the
same repeat.

    python benchmarks/bench_batch_draft_dtype.py [--prompts benchmarks/prompts/unseen_code.json]
        [--num-prompts 8] [--batch-size 4] [--gammas 2,auto] [--temperature 1] [--out r.json]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from _abcommon import add_common, batches_of, dump, prompts_of, rounds, setup


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common(ap, repeats=5)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--gammas", default="2,auto")
    ap.add_argument("--temperature", type=float, default=0.0)
    args = ap.parse_args()
    args.num_prompts = max(args.num_prompts, args.batch_size)
    setup(args)
    import exactspec as es
    from exactspec.bench.bench import eos_ids, greedy_prefix_equal
    from exactspec.speed.stats import GenerationStats

    target, draft, tok = es.load_pair(args.pair)
    batches = batches_of(prompts_of(args, args.pair, tok), tok, args.batch_size)
    greedy = args.temperature == 0
    sampling = dict(do_sample=False) if greedy else dict(do_sample=True, temperature=args.temperature, top_k=0)
    n_new = args.max_new_tokens
    gammas = [g if g == "auto" else int(g) for g in args.gammas.split(",")]
    systems = ["target"] + [f"gamma={g} {mode}" for g in gammas for mode in ("fp32", "own")]
    gens = {s: es.SpeculativeGenerator(target, draft) for s in systems[1:]}
    stats: dict = {s: [] for s in systems[1:]}

    def run(system, seed):
        outs, t0 = [], time.perf_counter()
        for i, enc in enumerate(batches):
            if system == "target":
                torch.manual_seed(seed + i)
                seq = target.generate(**enc, max_new_tokens=n_new, min_new_tokens=n_new,
                                      pad_token_id=tok.pad_token_id, **sampling)
            else:
                g, mode = system.split()
                os.environ["EXACTSPEC_DRAFT_UPCAST"] = "1" if mode == "fp32" else "0"
                o = gens[system].generate(enc["input_ids"], enc["attention_mask"], max_new_tokens=n_new,
                                          gamma=g[6:] if g[6:] == "auto" else int(g[6:]), seed=seed + i,
                                          eos_token_id=[], **sampling)
                seq = o.sequences
                stats[system].append(o.stats)
            outs.append(seq[:, enc["input_ids"].shape[1]:])
        return time.perf_counter() - t0, outs

    eos = eos_ids(target, tok)  # generate() bans EOS until min_new_tokens; rows are compared up to it
    times, equal = rounds(systems, run, stats, args.repeats,
                          (lambda o, r: greedy_prefix_equal(o, r, eos)[0]) if greedy else None)
    os.environ.pop("EXACTSPEC_DRAFT_UPCAST", None)
    merged = {k: GenerationStats.merge(v) for k, v in stats.items()}
    result = {"pair": args.pair, "prompts": args.prompts or "held-out", "batches": len(batches),
              "batch_size": args.batch_size, "max_new_tokens": n_new, "temperature": args.temperature,
              "draft_dtype": str(draft.dtype), "repeats": args.repeats, "threads": args.threads,
              "speedup_vs_target": {s: statistics.median(t0 / t for t0, t in zip(times["target"], times[s]))
                                    for s in systems},
              "times": times,
              "draft_ms_per_call": {k: 1e3 * m.draft_time / max(m.draft_calls, 1) for k, m in merged.items()},
              "tokens_per_target_call": {k: m.tokens_per_target_call for k, m in merged.items()},
              "greedy_equals_generate": equal if greedy else None}
    dump(result, args.out)


if __name__ == "__main__":
    main()
