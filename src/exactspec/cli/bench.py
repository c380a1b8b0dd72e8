"""`exactspec bench`: measured speedups of every system side by side, with the cost model's predictions."""
from __future__ import annotations

import argparse


def register(sub) -> None:
    p = sub.add_parser("bench", help="benchmark exactspec against target alone and HF assisted generation",
                       description=__doc__)
    p.add_argument("--target", help="target model path (default: the shipped demo pair)")
    p.add_argument("--draft", help="draft model path (default: the shipped demo pair)")
    p.add_argument("--prompts", help="file with one prompt per blank-line-separated block (default: demo prompts)")
    p.add_argument("--num-prompts", type=int, default=4, help="how many prompts to use (default 4)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--gamma", default="4", help="draft length N or 'auto' (default 4)")
    p.add_argument("--tree", default="auto", metavar="T1;T2;..",
                   help="tree speculation systems, ';'-separated: branching factors 3,2,1,1, a node budget N, "
                        "auto; 'none' for no tree system (default auto)")
    p.add_argument("--batch-size", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    p.add_argument("--systems", help="comma-separated substrings selecting systems (default: all)")
    p.add_argument("--out", default="bench-out", help="directory for bench.json, bench.md and plots")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print the report as JSON instead of a table")
    p.set_defaults(func=run)


def _load(args: argparse.Namespace):
    from exactspec.demo import load_pair

    if (args.target is None) != (args.draft is None):
        raise ValueError("give both --target and --draft, or neither (the shipped demo pair)")
    return load_pair(args.target, args.draft)


def run(args: argparse.Namespace) -> int:
    import json

    import torch
    from rich.console import Console
    from rich.markdown import Markdown
    from rich.progress import Progress

    from exactspec.bench import BenchConfig, run_bench
    from exactspec.cli import parse_gamma, parse_tree
    from exactspec.demo import demo_prompts
    from exactspec.report import bench_markdown, write_bench

    if args.repeats < 1 or args.max_new_tokens < 1 or args.batch_size < 1 or args.num_prompts < 1:
        raise ValueError("--repeats, --max-new-tokens, --batch-size and --num-prompts must be >= 1")
    torch.set_num_threads(args.threads)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    # transformers' assisted generation warns about the arguments it passes itself; not the user's concern.
    hf_logging.set_verbosity_error()
    target, draft, tokenizer = _load(args)
    if args.prompts:
        with open(args.prompts, encoding="utf-8") as fh:
            prompts = [b.strip("\n") for b in fh.read().split("\n\n") if b.strip()]
    else:
        prompts = demo_prompts()
    prompts = prompts[: args.num_prompts]
    cfg = BenchConfig(prompts=prompts, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                      gamma=parse_gamma(args.gamma), batch_size=args.batch_size, repeats=args.repeats, seed=args.seed,
                      systems=args.systems.split(",") if args.systems else None,
                      trees=() if args.tree == "none" else tuple(parse_tree(t) for t in args.tree.split(";") if t))
    console = Console(stderr=args.json)
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("benchmarking (cost model, warm-up, then interleaved runs)", total=None)
        report = run_bench(target, draft, tokenizer, cfg,
                           progress=lambda done, total: progress.update(task, completed=done, total=total))
    paths = write_bench(report, args.out)
    if args.json:
        print(json.dumps(report))
    else:
        md = bench_markdown(report)
        # A terminal gets the rendered table; a pipe or file gets the Markdown itself (an 80-column
        # rendering of a 10-column table is unreadable, the Markdown is not).
        console.print(Markdown(md)) if console.is_terminal else print(md)
        console.print(f"wrote {', '.join(str(p) for p in paths)}")
    return 0
