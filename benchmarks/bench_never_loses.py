"""gamma="auto" never loses: with a draft that cannot help, and with prompt lookup, it must run at >= 0.97x
target-alone `generate`, because it takes plain steps when no draft length pays.

The useless draft is the shipped draft's architecture with random weights (seeded). Systems are interleaved
by `exactspec.bench.bench.run_bench` (medians over repeats); the report goes to --out as bench.json / bench.md.

    python benchmarks/bench_never_loses.py --prompts benchmarks/prompts/unseen_code.json [--temperature 1]
    python benchmarks/bench_never_loses.py --backend llamacpp   # the f16 GGUF pair; the useless draft as GGUF too

On llama.cpp the baseline is our target-alone loop on the same backend (there is no `generate`).
"""
from __future__ import annotations

import argparse
import json

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--prompts", default="benchmarks/prompts/unseen_code.json")
    ap.add_argument("--num-prompts", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="bench-never-loses")
    ap.add_argument("--backend", choices=("transformers", "llamacpp"), default="transformers")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    from exactspec.bench.bench import BenchConfig, load_prompts, run_bench
    from exactspec.pairs.stdlib import load_demo_pair
    from exactspec.bench.report import bench_markdown, write_bench

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    target, draft, tok = load_demo_pair()
    torch.manual_seed(0)
    useless = AutoModelForCausalLM.from_config(draft.config).eval()  # same shape and cost, random weights
    if args.backend == "llamacpp":
        import tempfile

        from exactspec.backends.llamacpp import LlamaCppLM
        from exactspec.pairs.gguf import convert_to_gguf
        from exactspec.pairs.load import load_pair
        from exactspec.pairs.stdlib import PAIR_DIR

        target, _, tok = load_pair("stdlib", backend="llamacpp", threads=args.threads)
        where = tempfile.mkdtemp()
        useless.half().save_pretrained(where)
        tok.save_pretrained(where)
        convert_to_gguf(where, f"{where}/useless.gguf", "f16")
        useless = LlamaCppLM(f"{where}/useless.gguf", threads=args.threads,
                             generation_config=draft.generation_config)
    cfg = BenchConfig(prompts=load_prompts(args.prompts)[: args.num_prompts], max_new_tokens=args.max_new_tokens,
                      temperature=args.temperature, repeats=args.repeats,
                      systems=["exactspec loop", "token (γ=auto)", "prompt lookup (γ=auto)"])
    report = run_bench(target, useless, tok, cfg)
    write_bench(report, args.out)
    print(bench_markdown(report))
    rows = {r["system"]: r for r in report["rows"]}
    print(json.dumps({name: {"speedup_vs_target": r["speedup_vs_target"], "plain_steps": r["plain_steps"]}
                      for name, r in rows.items()}, indent=1))


if __name__ == "__main__":
    main()
