"""`exactspec demo`: speculative decoding on a shipped pair, offline, with what happened explained."""
from __future__ import annotations

import argparse

from exactspec.cli import SEED, integer, pair, real
from exactspec.cli.backend import add_backend, backend_for, load_on_backend
from exactspec.cli.generate import STYLES


def register(sub) -> None:
    p = sub.add_parser("demo", help="run speculative decoding on the shipped demo pair (offline)",
                       description=__doc__)
    p.add_argument("--pair", type=pair, default="stdlib", metavar="NAME",
                   help="stdlib (default: the demo pair trained on Python's standard library) or smollm2 "
                        "(SmolLM2-135M-Instruct, a real chat model, with its distilled draft)")
    p.add_argument("--prompts", type=integer(1), default=3, help="how many held-out prompts to complete (default 3)")
    p.add_argument("--max-new-tokens", type=integer(1), default=64)
    p.add_argument("--temperature", type=real(0), default=0.0, help="0 = greedy (default)")
    p.add_argument("--gamma", default="auto", help="draft tokens per step, or 'auto' (default: auto)")
    p.add_argument("--method", choices=("token", "block"), default="token")
    p.add_argument("--seed", type=SEED, default=0)
    p.add_argument("--threads", type=integer(1), default=2, help="threads of torch and of llama.cpp (default 2)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON, no streaming")
    add_backend(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json

    import torch
    from rich.console import Console
    from rich.rule import Rule
    from rich.table import Table
    from rich.text import Text

    from exactspec.cli import parse_gamma
    from exactspec.bench.demo import run_demo
    from exactspec.pairs.load import chat_prompt, is_chat, pair_prompts

    args.gamma = parse_gamma(args.gamma)
    pair = args.pair
    chat = is_chat(pair)
    n_prompts = len(pair_prompts(pair))
    if args.prompts > n_prompts:
        raise ValueError(f"--prompts must be <= {n_prompts} (the held-out prompts shipped), got {args.prompts}")
    torch.set_num_threads(args.threads)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # loading two small local models needs no progress bars
    console = Console(highlight=False)
    import contextlib
    import io

    backend = backend_for(args)
    with contextlib.redirect_stderr(io.StringIO()):  # the GGUF conversion (first run only) draws a tqdm bar
        target, draft, tokenizer = load_on_backend(backend, pair, None, None, threads=args.threads)
    messages = pair_prompts(pair)[: args.prompts]
    prompts = [chat_prompt(tokenizer, m) for m in messages] if chat else messages

    def on_text(i: int, text: str, kind: str) -> None:
        if args.json:
            return
        if kind == "prompt":
            if i:
                console.print()  # end the previous completion's last line
            console.print(Rule(f"held-out prompt {i + 1}/{len(prompts)}"))
            if chat:  # the user's message, not the template around it
                console.print(Text("user: " + messages[i], style="bold"))
                text = "assistant: "
            else:
                text = "…\n" + "\n".join(text.splitlines()[-6:]) + "\n"  # the prompt's tail is enough context
        console.print(Text(text, style=STYLES[kind]), end="")

    if not args.json:
        console.print(Text.assemble("colours: ", ("accepted draft token", STYLES["accepted"]), "  ",
                                    ("corrected after a rejection", STYLES["corrected"]), "  ",
                                    ("bonus token (all drafts kept)", STYLES["bonus"])))
    summary = run_demo(target, draft, tokenizer, prompts, max_new_tokens=args.max_new_tokens,
                       temperature=args.temperature, gamma=args.gamma, method=args.method, seed=args.seed,
                       on_text=on_text, eos_token_id=[tokenizer.eos_token_id] if chat else [])
    if args.json:
        print(json.dumps(summary))
        return 0
    console.print()
    console.print(Rule("what happened"))
    table = Table(show_header=False)
    pos = ", ".join(f"{a:.2f}" for a in summary["per_position_acceptance"])
    table.add_row("acceptance per draft position (P(accept i | accepted < i))", pos)
    table.add_row("accepted draft tokens per target call (without bonus)", f"{summary['mean_accepted_per_step']:.2f}")
    table.add_row("tokens per target call (with bonus/corrected token)", f"{summary['mean_tokens_per_step']:.2f}")
    table.add_row("speculative decoding", f"{summary['speculative_tokens_per_second']:.1f} tokens/s")
    table.add_row("plain decoding (transformers generate), measured now" if backend == "transformers" else
                  "plain decoding (llama.cpp, the target alone in our loop), measured now",
                  f"{summary['plain_tokens_per_second']:.1f} tokens/s")
    table.add_row("measured speedup", f"{summary['measured_speedup']:.2f}×")
    def times(x):
        return "—" if x is None else f"{x:.2f}×"

    table.add_row("predicted speedup, bare forward passes (c = T_draft/T_target = "
                  f"{summary['cost_ratio']:.3f}, measured acceptance)", times(summary["predicted_speedup_forwards"]))
    loop = summary["calibrated_cost_model"]
    table.add_row(f"predicted speedup, priced as these runs ran (draft step {loop['t_draft'] * 1e3:.2f} ms "
                  f"+ {loop['t_draft_cold'] * 1e3:.2f} ms for a step's first, "
                  f"{loop['t_overhead'] * 1e3:.2f} ms overhead per step, prefills)", times(summary["predicted_speedup"]))
    console.print(table)
    console.print("Output is distributed exactly as the target's own decoding (here greedy: identical tokens)."
                  if args.temperature == 0 else
                  "Output is distributed exactly as the target's own sampling at this temperature.")
    return 0
