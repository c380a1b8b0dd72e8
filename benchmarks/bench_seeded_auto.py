"""What a seed's promise costs, and whether seeded gamma="auto" keeps up: × our target-alone loop on the same
backend, per prompt, interleaved rounds: gamma="auto" seeded (a fresh acceptance model from the prompt's evidence,
the stored loop-priced profile), gamma="auto" drawn from a torch.Generator (the generator's learning and
calibrated costs: an unseeded run; the bench runs these) and fixed gamma = 4 (seeded). A line per round; medians
of per-prompt ratios at the end, as JSON to --out.

    .venv/bin/python benchmarks/bench_seeded_auto.py --backend llamacpp --prompts benchmarks/prompts/unseen_code7.json
    .venv/bin/python benchmarks/bench_seeded_auto.py --temperature 1 --num-prompts 8   # transformers, held-out
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from _abcommon import add_common, dump, prompts_of, rounds, setup
from exactspec import SpeculativeGenerator, load_pair
from exactspec.engine.baseline import target_alone_loop

SYSTEMS = ("loop", "auto seeded", "auto generator", "gamma=4 seeded")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    add_common(ap, repeats=3)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--backend", choices=("transformers", "llamacpp"), default="transformers")
    args = ap.parse_args()
    setup(args)
    t, d, tok = load_pair(args.pair, backend=args.backend,
                          **({"threads": args.threads} if args.backend == "llamacpp" else {}))
    prompts = [torch.tensor([tok.encode(p)]) for p in prompts_of(args, args.pair, tok)]
    gen = SpeculativeGenerator(t, d)
    temp = args.temperature
    kw = dict(max_new_tokens=args.max_new_tokens, eos_token_id=[],
              **(dict(do_sample=True, temperature=temp, top_k=0) if temp > 0 else dict(do_sample=False)))
    plain_steps = {s: [] for s in SYSTEMS}

    def run(system, seed):
        secs = []
        for i, ids in enumerate(prompts):
            s = seed + i
            t0 = time.perf_counter()
            if system == "loop":
                target_alone_loop(t, ids, torch.ones_like(ids), max_new_tokens=args.max_new_tokens,
                                  temperature=temp, seed=s)
            else:
                extra = {"generator": torch.Generator().manual_seed(s)} if system == "auto generator" else {"seed": s}
                out = gen.generate(ids, gamma=4 if system.startswith("gamma") else "auto", **kw, **extra)
                plain_steps[system].append(out.stats.plain_steps)
            secs.append(time.perf_counter() - t0)
        return secs, []

    def progress(rep, times):
        last = {s: times[s][-1] for s in SYSTEMS}
        print(f"round {rep + 1}/{args.repeats}: × loop " + ", ".join(
            f"{s} {statistics.median(a / b for a, b in zip(last['loop'], last[s])):.3f}" for s in SYSTEMS[1:]),
            flush=True)

    times, _ = rounds(list(SYSTEMS), run, plain_steps, args.repeats, progress=progress)
    ratios = {s: statistics.median(a / b for rl, rs in zip(times["loop"], times[s]) for a, b in zip(rl, rs))
              for s in SYSTEMS[1:]}
    dump({"backend": args.backend, "pair": args.pair, "prompts": args.prompts or "held-out", "temperature": temp,
          "num_prompts": len(prompts), "repeats": args.repeats, "max_new_tokens": args.max_new_tokens,
          "median_x_loop": ratios, "plain_steps": {s: sum(v) for s, v in plain_steps.items() if v},
          "seconds": times}, args.out)


if __name__ == "__main__":
    main()
