"""Benchmark of the target's law p through transformers' processors (exactspec.engine.hfconfig) on CPU (not a test).

B=4 rows, K=4 drafts, V=32000 fp32 logits, rows with 200-token histories; torch.set_num_threads(1). Per round,
one call of each candidate (interleaved), medians over the rounds:

- ``probs_from_logits``: the transform the engine used before hfconfig (temperature / top-k / top-p);
- ``fast``: ``SamplingSpec.target_law`` with the same settings from a config (row-wise processors only: one
  vectorised call per processor, no per-position loop);
- ``prefix``: the same plus repetition_penalty=1.2 and no_repeat_ngram_size=3 (prefix-dependent processors,
  applied per group of positions with equal prefix length);
- ``draft q``: ``SamplingSpec.probs`` on one draft step's `[B, V]` logits, and its old equivalent.

    python benchmarks/bench_target_law.py [--rounds 40]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from exactspec.engine.hfconfig import Prefixes, SamplingConfig, SamplingSpec
from exactspec.verification.sampling import probs_from_logits


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=40)
    args = ap.parse_args()
    torch.set_num_threads(1)
    b, k, v, hist = 4, 4, 32000, 200
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(b, k + 1, v, generator=g) * 3
    drafts = torch.randint(0, v, (b, k), generator=g)
    lengths = torch.full((b,), k)
    prefixes = Prefixes(torch.randint(0, v, (b, hist), generator=g), torch.ones(b, hist, dtype=torch.long),
                        torch.zeros(b, 8, dtype=torch.long), torch.zeros(b, dtype=torch.long), torch.arange(b))
    kw = dict(do_sample=True, temperature=0.7, top_k=40, top_p=0.9)
    fast = SamplingSpec(SamplingConfig(**kw), g, v, max_new_tokens=64)
    prefix = SamplingSpec(SamplingConfig(**kw, repetition_penalty=1.2, no_repeat_ngram_size=3), g, v, max_new_tokens=64)
    cands = {
        "probs_from_logits [B,K+1,V]": lambda: probs_from_logits(logits, temperature=0.7, top_k=40, top_p=0.9),
        "fast target_law [B,K+1,V]": lambda: fast.target_law(logits, drafts, lengths, prefixes),
        "prefix target_law [B,K+1,V]": lambda: prefix.target_law(logits, drafts, lengths, prefixes),
        "probs_from_logits draft [B,V]": lambda: probs_from_logits(logits[:, 0], temperature=0.7, top_k=40, top_p=0.9),
        "SamplingSpec.probs draft [B,V]": lambda: fast.probs(logits[:, 0]),
    }
    times = {name: [] for name in cands}
    for r in range(args.rounds + 3):
        for name, fn in cands.items():
            t0 = time.perf_counter()
            fn()
            if r >= 3:  # warm-up rounds not counted
                times[name].append(time.perf_counter() - t0)
    base = statistics.median(times["probs_from_logits [B,K+1,V]"])
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:32s} {med * 1e3:8.3f} ms   {med / base:5.2f}x probs_from_logits [B,K+1,V]")


if __name__ == "__main__":
    main()
