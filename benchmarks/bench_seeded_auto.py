"""What a seed's promise costs: gamma="auto" seeded (stored cost profile, fresh acceptance model each run) vs
drawn from a torch.Generator (the generator's learning and calibrated costs, as an unseeded run), interleaved,
on the stdlib pair's held-out prompts and an unseen set. Prints one line per prompt and the median ratio.

    .venv/bin/python benchmarks/bench_seeded_auto.py --prompts 8 --temperature 1.0
"""
from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import time

import torch

from exactspec import SpeculativeGenerator, load_pair
from exactspec.pairs.load import pair_prompts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--unseen", default=str(pathlib.Path(__file__).parent / "prompts" / "unseen_code.json"))
    args = ap.parse_args()
    t, d, tok = load_pair("stdlib")
    unseen = json.loads(pathlib.Path(args.unseen).read_text())
    unseen = unseen["prompts"] if isinstance(unseen, dict) else unseen
    unseen = [p["text"] if isinstance(p, dict) else p for p in unseen]
    sets = {"held-out": pair_prompts("stdlib")[: args.prompts], "unseen": unseen[: args.prompts]}
    gen = SpeculativeGenerator(t, d)
    kw = dict(max_new_tokens=args.max_new_tokens, do_sample=args.temperature > 0, temperature=args.temperature,
              top_k=0, eos_token_id=[])
    warm = tok(sets["held-out"][0], return_tensors="pt")
    gen.generate(warm["input_ids"], warm["attention_mask"], **kw, generator=torch.Generator().manual_seed(0))
    gen.generate(warm["input_ids"], warm["attention_mask"], **kw, seed=0)  # measures the stored profile
    for name, prompts in sets.items():
        ratios = []
        for i, p in enumerate(prompts):
            enc = tok(p, return_tensors="pt")
            secs = {"seeded": [], "generator": []}
            for r in range(3):
                for mode in (("seeded", "generator") if r % 2 == 0 else ("generator", "seeded")):
                    extra = {"seed": 100 + r} if mode == "seeded" else {"generator": torch.Generator().manual_seed(100 + r)}
                    t0 = time.perf_counter()
                    gen.generate(enc["input_ids"], enc["attention_mask"], **kw, **extra)
                    secs[mode].append(time.perf_counter() - t0)
            ratio = statistics.median(secs["generator"]) / statistics.median(secs["seeded"])
            ratios.append(ratio)
            print(f"{name} prompt {i}: seeded / generator speed {ratio:.3f}", flush=True)
        print(f"{name}: median seeded / generator speed {statistics.median(ratios):.3f} over {len(ratios)} prompts")


if __name__ == "__main__":
    main()
