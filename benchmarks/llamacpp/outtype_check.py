"""Which GGUF type the stdlib pair should be converted to: f16 or f32, by tokens/s of exactspec's own loop on
llama.cpp (the target alone, and speculative at a fixed gamma and at gamma="auto"; greedy and T=1).

Both files come from `exactspec.pairs.gguf.stdlib_gguf(outtype)` (converted once into the cache). Per prompt the
two types run interleaved (their order alternates), each system once untimed and once timed; 64 new tokens,
EOS off, batch 1. Printed: a line per prompt, then medians of tokens/s and of the per-prompt f16/f32 ratio.

    .venv/bin/python benchmarks/llamacpp/outtype_check.py --prompts 6 --threads 2 --out /tmp/outtype.json
"""
from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import time

import torch


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import AutoTokenizer, GenerationConfig

    from exactspec import SpeculativeGenerator
    from exactspec.backends.llamacpp import LlamaCppLM
    from exactspec.engine.baseline import target_alone_loop
    from exactspec.pairs.gguf import stdlib_gguf
    from exactspec.pairs.load import pair_prompts
    from exactspec.pairs.stdlib import PAIR_DIR

    tok = AutoTokenizer.from_pretrained(PAIR_DIR / "target", local_files_only=True)
    gc = {p: GenerationConfig.from_pretrained(PAIR_DIR / p) for p in ("target", "draft")}
    gens = {}
    for outtype in ("f16", "f32"):
        t, d = stdlib_gguf(outtype)
        gens[outtype] = SpeculativeGenerator(LlamaCppLM(t, threads=args.threads, generation_config=gc["target"]),
                                             LlamaCppLM(d, threads=args.threads, generation_config=gc["draft"]))
    n = args.max_new_tokens
    base = dict(max_new_tokens=n, eos_token_id=[])
    modes = {"greedy": dict(do_sample=False), "T=1": dict(do_sample=True, temperature=1.0, top_k=0)}

    def systems(gen):
        out = {"loop greedy": lambda ids, s: target_alone_loop(gen.target, ids, torch.ones_like(ids),
                                                               max_new_tokens=n, temperature=0, seed=s)}
        for mode, kw in modes.items():
            for gamma in (4, "auto"):
                out[f"g{gamma} {mode}"] = (lambda kw, gamma: lambda ids, s: gen.generate(
                    ids, **base, **kw, gamma=gamma, generator=torch.Generator().manual_seed(s)))(kw, gamma)
        return out

    runs = {o: systems(g) for o, g in gens.items()}
    records = []
    for i, prompt in enumerate(pair_prompts("stdlib")[:args.prompts]):
        ids = tok(prompt, return_tensors="pt").input_ids
        rec = {}
        order = ("f16", "f32") if i % 2 == 0 else ("f32", "f16")
        for name in runs["f16"]:
            for o in order:
                fn = runs[o][name]
                fn(ids, 1000 + i)  # untimed: gamma="auto" learns its costs, the context is allocated
                t0 = time.perf_counter()
                fn(ids, 1000 + i)
                rec[f"{o} {name}"] = n / (time.perf_counter() - t0)
        records.append(rec)
        print(f"prompt {i + 1} ({ids.shape[1]} tokens): " + ", ".join(f"{k} {v:.0f}" for k, v in rec.items()),
              flush=True)
    summary = {}
    for name in runs["f16"]:
        f16 = statistics.median(r[f"f16 {name}"] for r in records)
        f32 = statistics.median(r[f"f32 {name}"] for r in records)
        ratio = statistics.median(r[f"f16 {name}"] / r[f"f32 {name}"] for r in records)
        summary[name] = {"f16": f16, "f32": f32, "f16/f32": ratio}
        print(f"{name:14s} f16 {f16:6.0f}  f32 {f32:6.0f} tokens/s   f16/f32 {ratio:.2f}", flush=True)
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps({"args": vars(args), "records": records, "summary": summary},
                                                     indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
