"""Benchmark of exactspec.verify on CPU (not a test).

B=32 drafts of K=8 tokens over V=32000, fp32, torch.set_num_threads(2). Every candidate is timed in the
same interleaved loop (one call of each per round, many rounds) and reported as a median, against a floor
measured in the same run: one pass reading target_probs[:, :K] and draft_probs once,
``torch.minimum(tp[:, :K], dp).sum()``. Ratios from one run are what to quote (the machine is shared).

    python benchmarks/bench_verify.py [--rounds 60] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

from exactspec import probs_from_logits, sample_from_probs, verify, verify_logits


def make_inputs(B=32, K=8, V=32000, seed=0):
    g = torch.Generator().manual_seed(seed)
    # A draft that roughly agrees with the target, as in real speculative decoding.
    draft_logits = torch.randn(B, K + 1, V, generator=g) * 3.0
    target_logits = draft_logits + torch.randn(B, K + 1, V, generator=g) * 1.0
    draft_logits = draft_logits[:, :K].contiguous()
    dp = torch.softmax(draft_logits, -1)
    tp = torch.softmax(target_logits, -1)
    tokens = sample_from_probs(dp, g)  # [B, K], really drawn from the draft
    return target_logits, draft_logits, tp, dp, tokens


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (goal setting: 2)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    B, K, V = 32, 8, 32000
    tl, dl, tp, dp, tokens = make_inputs(B, K, V)
    g = torch.Generator().manual_seed(1)

    from transformers.generation.utils import _speculative_sampling

    rows32 = tp[:, 0].contiguous()  # [B, V]
    prompt = torch.zeros(1, 5, dtype=torch.long)
    cand_ids = [torch.cat([prompt, tokens[b : b + 1]], 1) for b in range(B)]

    def hf_per_row():
        for b in range(B):
            _speculative_sampling(cand_ids[b], dl[b : b + 1], K, tl[b : b + 1])

    def eager_from_logits():
        verify(probs_from_logits(tl), probs_from_logits(dl), tokens, method="token", generator=g)

    cases = {
        "floor: minimum(tp[:, :K], dp).sum()": lambda: torch.minimum(tp[:, :K], dp).sum(),
        'verify(method="token")': lambda: verify(tp, dp, tokens, method="token", generator=g),
        'verify(method="block")': lambda: verify(tp, dp, tokens, method="block", generator=g),
        'verify(method="greedy")': lambda: verify(tp, None, tokens, method="greedy", generator=g),
        'from logits: probs_from_logits x2 + verify("token")': eager_from_logits,
        'from logits: verify_logits("token") (lazy rows)': lambda: verify_logits(tl, dl, tokens, generator=g),
        "from logits: HF _speculative_sampling per row": hf_per_row,
        "sampler: sample_from_probs(p [32, 32000])": lambda: sample_from_probs(rows32, g),
        "sampler: torch.multinomial(p [32, 32000], 1)": lambda: torch.multinomial(rows32, 1, generator=g),
    }
    names = list(cases)
    times = {n: [] for n in names}
    for f in cases.values():  # warm-up
        f()
    for _ in range(args.rounds):
        for n in names:  # interleaved: every case sees the same machine load
            t0 = time.perf_counter()
            cases[n]()
            times[n].append(time.perf_counter() - t0)
    med = {n: statistics.median(v) * 1e3 for n, v in times.items()}
    refs = {"floor": med[names[0]], "HF per row": med[names[6]], "multinomial": med[names[8]]}
    rows = []
    for n in names:
        vs = "HF per row" if n.startswith("from logits") else "multinomial" if n.startswith("sampler") else "floor"
        rows.append({"case": n, "median_ms": round(med[n], 3), "ratio": round(med[n] / refs[vs], 3), "vs": vs})
    if args.json:
        print(json.dumps({"B": B, "K": K, "V": V, "threads": args.threads, "rounds": args.rounds, "rows": rows}, indent=1))
        return 0
    print(f"B={B} K={K} V={V} fp32, torch {torch.__version__}, {args.threads} threads, "
          f"{args.rounds} interleaved rounds, load average {os.getloadavg()[0]:.1f}")
    print(f"| {'case':<52} | {'median ms':>9} | {'ratio':>6} | vs |")
    print(f"|{'-' * 54}|{'-' * 11}|{'-' * 8}|----|")
    for r in rows:
        print(f"| {r['case']:<52} | {r['median_ms']:>9.2f} | {r['ratio']:>5.2f}x | {r['vs']} |")
    hf = refs["HF per row"]
    print(f"from logits, HF per row / ours: eager {hf / med[names[4]]:.2f}x, lazy {hf / med[names[5]]:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
