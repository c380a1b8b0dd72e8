"""`exactspec bench`: measured speedups of every system side by side, with the cost model's predictions."""
from __future__ import annotations

import argparse

from exactspec.cli.backend import add_backend, backend_for, load_on_backend
from exactspec.cli import DRAFT_DTYPE_HELP, DRAFT_DTYPES, SEED, cast_draft, check_in_file, integer, pair, real


def register(sub) -> None:
    p = sub.add_parser("bench", help="benchmark exactspec against target alone and HF assisted generation",
                       description=__doc__)
    p.add_argument("--target", help="target model: a directory or a .gguf file (default: the shipped demo pair)")
    p.add_argument("--draft", help="draft model: a directory or a .gguf file (default: the shipped demo pair)")
    p.add_argument("--pair", type=pair, metavar="NAME", help="a shipped pair instead of --target/--draft: stdlib (the demo "
                   "pair, the default) or smollm2 (SmolLM2-135M-Instruct and its distilled draft; chat prompts)")
    p.add_argument("--chat", action=argparse.BooleanOptionalAction, default=None,
                   help="wrap each prompt as a user message with the chat template (default: on for a chat pair)")
    p.add_argument("--draft-dtype", choices=DRAFT_DTYPES, help=DRAFT_DTYPE_HELP)
    p.add_argument("--prompts", help="prompt file: JSON (a list, or {\"prompts\": [...]}), Spec-Bench's "
                   "question.jsonl (first turns) or text with one prompt "
                   "per blank-line-separated block (default: the demo pair's held-out prompts); e.g. "
                   "benchmarks/prompts/unseen_code.json, the hand-written unseen set")
    p.add_argument("--num-prompts", type=integer(1), default=4, help="how many prompts to use (default 4)")
    p.add_argument("--max-new-tokens", type=integer(1), default=64)
    p.add_argument("--temperature", type=real(0), default=0.0)
    p.add_argument("--top-p", type=real(0, 1), default=1.0, help="top-p filter when sampling (default 1 = off)")
    p.add_argument("--gamma", default="4", help="draft length N or 'auto' of the HF assisted, block and prompt "
                   "lookup systems (default 4)")
    p.add_argument("--gammas", help="fixed draft lengths of the token rule, e.g. 1,2,3,4,6,8 (default: --gamma); "
                   "the report puts the best of them beside gamma=auto")
    p.add_argument("--batch-size", type=integer(1), default=1)
    p.add_argument("--repeats", type=integer(1), default=3)
    p.add_argument("--threads", type=integer(1), default=2, help="threads of torch and of llama.cpp (default 2)")
    p.add_argument("--tree", default=None, metavar="T1;T2;..",
                   help="tree speculation systems, ';'-separated: branching factors 3,2,1,1, a node budget N, "
                        "auto; 'none' for no tree system (default: auto on transformers, none on llama.cpp, "
                        "where trees do not pay on a CPU: docs/llamacpp.md)")
    p.add_argument("--systems", help="comma-separated substrings selecting systems (default: all)")
    p.add_argument("--out", default="bench-out", help="directory for bench.json, bench.md and plots")
    p.add_argument("--seed", type=SEED, default=0)
    p.add_argument("--json", action="store_true", help="print the report as JSON instead of a table")
    add_backend(p)
    p.add_argument("--peers", action=argparse.BooleanOptionalAction, default=True,
                   help="with --backend llamacpp: also run llama.cpp's own plain and speculative decoding on the "
                        "same GGUF files (its example binaries, built once from the vendored source and cached; "
                        "default on)")
    p.set_defaults(func=run)


def _gammas(value: str | None):
    if not value:
        return None
    from exactspec.cli import parse_gamma

    gammas = tuple(parse_gamma(v.strip()) for v in value.split(","))
    if "auto" in gammas:
        raise ValueError("--gammas takes fixed draft lengths; gamma=auto always runs beside them")
    return gammas


def _pair(args: argparse.Namespace) -> str | None:
    """The shipped pair's name (None for --target/--draft), checked before any model loads."""
    if args.pair is None:
        if (args.target is None) != (args.draft is None):
            raise ValueError("give both --target and --draft, or neither (the shipped demo pair)")
        return None if args.target else "stdlib"
    if args.target or args.draft:
        raise ValueError("--pair replaces --target/--draft; give one or the other")
    return args.pair


def _load(args: argparse.Namespace, pair: str | None, backend: str):
    return load_on_backend(backend, pair, args.target, args.draft, threads=args.threads)


def _check_out_dir(out: str) -> None:
    """--out must be a directory or creatable as one: its first existing ancestor is a directory."""
    import os

    path = os.path.abspath(out)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    if not os.path.isdir(path):
        raise ValueError(f"--out: {out!r} cannot be a directory ({path!r} is a file)")


def _check_systems(systems: str | None, gamma_n: int, gammas, trees=()) -> None:
    """Every --systems entry must select some system (names as exactspec.bench.bench.build_systems makes them)."""
    from exactspec.bench.bench import system_names

    if systems is None:
        return
    names = system_names(gamma_n, gammas, trees)
    for s in systems.split(","):
        if not s.strip() or not any(s.lower() in n.lower() for n in names):
            raise ValueError(f"--systems: {s!r} selects no system; systems are: {'; '.join(names)}")


def run(args: argparse.Namespace) -> int:
    import pathlib

    import torch

    from exactspec.bench.bench import BenchConfig, load_prompts, run_bench
    from exactspec.bench.benchpartial import BenchInterrupted
    from exactspec.cli import parse_gamma, parse_tree
    from exactspec.cli.progress import Progress
    from exactspec.pairs.load import chat_prompt, is_chat, pair_prompts

    gamma, gammas = parse_gamma(args.gamma), _gammas(args.gammas)
    if args.top_p <= 0:
        raise ValueError(f"--top-p must be in (0, 1], got {args.top_p}")
    tree = args.tree
    if tree is not None:  # parsed before anything is loaded
        trees = () if tree == "none" else tuple(parse_tree(t) for t in tree.split(";") if t)
    _check_out_dir(args.out)
    if args.prompts:  # read (and checked) before any model loads
        check_in_file("--prompts", args.prompts)
    pair = _pair(args)
    backend = backend_for(args, args.target)
    if tree is None:  # trees are a system of their own on transformers; on llama.cpp's CPU they do not pay
        trees = () if backend == "llamacpp" else (parse_tree("auto"),)
    _check_systems(args.systems, gamma if isinstance(gamma, int) else 4, gammas, trees)
    prompts = load_prompts(args.prompts) if args.prompts else pair_prompts(pair or "stdlib")
    chat = args.chat if args.chat is not None else bool(pair and is_chat(pair))
    torch.set_num_threads(args.threads)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    # transformers' assisted generation warns about the arguments it passes itself; not the user's concern.
    hf_logging.set_verbosity_error()
    pathlib.Path(args.out).mkdir(parents=True, exist_ok=True)
    with Progress("bench", log=str(pathlib.Path(args.out) / "bench.log")) as progress:
        progress.phase("loading the models")
        target, draft, tokenizer = _load(args, pair, backend)
        draft = cast_draft(draft, args.draft_dtype, target)
        prompts = prompts[: args.num_prompts]
        if chat:
            try:
                prompts = [chat_prompt(tokenizer, p) for p in prompts]
            except ValueError as exc:
                raise ValueError(f"--{exc}") from None
        cfg = BenchConfig(prompts=prompts, max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                          top_p=args.top_p,
                          gamma=gamma, batch_size=args.batch_size, repeats=args.repeats, seed=args.seed,
                          systems=args.systems.split(",") if args.systems else None, gammas=gammas,
                          trees=trees,
                          peers=backend == "llamacpp" and args.peers)
        try:
            report = run_bench(target, draft, tokenizer, cfg, events=lambda info: _event(progress, cfg, info))
        except BenchInterrupted as exc:
            return _interrupted(args, exc.report, progress)
    _show(report, args)
    return 0


_PHASES = {"cost model": "measuring the cost model (bare forward passes)",
           "warm-up": "warm-up (one untimed call per system)"}


def _event(progress, cfg, info: dict) -> None:
    """run_bench's events as progress: a phase, the start of the timed calls, one finished timed call."""
    if info.get("phase") == "timed calls":
        progress.start(info["total"], "timed calls (prompt x system x repeat, interleaved)")
    elif "phase" in info:
        progress.phase(_PHASES.get(info["phase"], info["phase"]))
    else:
        rows = info["prompts"]
        which = f"prompt {rows[0] + 1}" if len(rows) == 1 else f"prompts {rows[0] + 1}-{rows[-1] + 1}"
        rep = f"repeat {info['repeat'] + 1}/{cfg.repeats} " if cfg.repeats > 1 else ""
        progress.unit(f"{rep}{which} x {info['system']} {info['seconds']:.2f} s", info["done"])


def _show(report: dict, args, paths=None) -> list:
    """Write the report where --out says and show it: JSON, a rendered table on a terminal, else Markdown."""
    import json

    from rich.console import Console
    from rich.markdown import Markdown

    from exactspec.bench.report import bench_markdown, write_bench

    paths = write_bench(report, args.out)
    if args.json:
        print(json.dumps(report), flush=True)
        return paths
    console = Console()
    md = bench_markdown(report)
    # A terminal gets the rendered table; a pipe or file gets the Markdown itself (an 80-column
    # rendering of a 10-column table is unreadable, the Markdown is not).
    console.print(Markdown(md)) if console.is_terminal else print(md, flush=True)
    print(f"wrote {', '.join(str(p) for p in paths)}", flush=True)
    return paths


def _interrupted(args, report: dict | None, progress) -> int:
    """Ctrl-C: the rows measured so far written where a full run writes them, marked partial, and said."""
    from exactspec.cli.progress import interrupted

    progress.stop_bar()
    if report is None:
        return interrupted("bench", "the measurements so far could not be summarised; nothing written", progress)
    paths = _show(report, args)
    part = report["partial"]
    planned = "?" if part["timed_calls_planned"] is None else part["timed_calls_planned"]
    return interrupted("bench", f"{part['timed_calls_done']} of {planned} timed calls done; wrote a partial report "
                                f"(rows from {part['rows_from']}) to {', '.join(str(p) for p in paths[:2])}",
                       progress)
