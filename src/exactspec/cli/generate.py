"""`exactspec generate`: speculative generation from the command line, streamed and coloured.

Thin: loads models offline (`local_files_only=True`), calls `SpeculativeGenerator.stream`, and renders.
Accepted draft tokens are shown in green, tokens the target drew after a rejection in red, bonus tokens
(every draft kept) in cyan. Statistics follow as a table, or everything as one JSON object (--json).
"""
from __future__ import annotations

import argparse
import json
import sys

from exactspec.cli.backend import add_backend, backend_for, load_on_backend
from exactspec.cli import DRAFT_DTYPE_HELP, DRAFT_DTYPES, SEED, cast_draft, device, integer, pair, real

# One palette for `generate` and `demo`.
STYLES = {"prompt": "dim", "accepted": "bold green", "corrected": "bold red", "bonus": "bold cyan"}


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "generate",
        help="generate text with exact speculative decoding",
        description="Generate with exact speculative decoding (output distributed exactly as the target's "
                    "own sampling). Without --target/--draft the shipped demo pair is used. Models are "
                    "loaded from local paths or the local Hugging Face cache only; nothing is downloaded.",
    )
    p.add_argument("prompts", nargs="+", metavar="PROMPT", help="prompt text (several prompts form a batch)")
    p.add_argument("--target", metavar="PATH_OR_ID",
                   help="target model: a Hugging Face directory or id, or a .gguf file (default: the demo pair's)")
    p.add_argument("--draft", metavar="PATH_OR_ID", help="draft model sharing the target's tokenizer (same forms)")
    p.add_argument("--pair", type=pair, metavar="NAME", help="a shipped pair instead of --target/--draft: stdlib (the demo "
                   "pair) or smollm2 (SmolLM2-135M-Instruct and its distilled draft; use with --chat)")
    p.add_argument("--chat", action=argparse.BooleanOptionalAction, default=None,
                   help="wrap each prompt as a user message with the tokenizer's chat template (default: on for "
                        "a chat pair such as --pair smollm2, off otherwise)")
    p.add_argument("--draft-dtype", choices=DRAFT_DTYPES, help=DRAFT_DTYPE_HELP)
    p.add_argument("--prompt-lookup", action="store_true", help="draft by n-gram prompt lookup (no draft model)")
    p.add_argument("--ngram", type=integer(1), default=3, metavar="N",
                   help="longest n-gram --prompt-lookup matches (tries N down to 1; default 3)")
    p.add_argument("--gamma", default="auto", help="draft tokens per step, or 'auto' (default: auto, which drafts "
                   "while drafting pays and takes plain steps when it does not)")
    p.add_argument("--tree", metavar="B1,B2,..|N|auto",
                   help="tree speculation instead of a chain (needs a draft model): branching factors per "
                        "depth (3,2,1,1), a dynamic tree of N nodes, or auto; replaces --gamma")
    p.add_argument("--method", default="token", choices=("token", "block", "greedy"),
                   help="verification rule (default token)")
    # Sampling settings default to the target's generation_config, as target.generate() resolves them.
    p.add_argument("--do-sample", action=argparse.BooleanOptionalAction, default=None,
                   help="sample (--do-sample) or decode greedily (--no-do-sample); default: the target's "
                        "generation_config, or sampling when a setting below is given")
    p.add_argument("--temperature", type=real(0), help="sampling temperature; 0 = greedy (default: config)")
    p.add_argument("--top-k", type=integer(0), help="top-k filter, 0 = off (default: config, else transformers' 50)")
    p.add_argument("--top-p", type=real(0, 1), help="top-p filter, 1 = off (default: config)")
    p.add_argument("--min-p", type=real(0, 1), help="min-p filter (default: config)")
    p.add_argument("--repetition-penalty", type=real(0), help="repetition penalty (default: config)")
    p.add_argument("--max-new-tokens", type=integer(0), default=64, help="new tokens per prompt (default 64)")
    p.add_argument("--seed", type=SEED, default=None, help="the same seed and arguments give the same tokens, in any process on this machine and build (docs/generation.md, Seeds)")
    p.add_argument("--device", type=device, default="cpu", help="torch device (default cpu)")
    p.add_argument("--json", action="store_true", help="print one JSON object (texts + stats) instead")
    add_backend(p)
    p.add_argument("--threads", type=integer(1), default=None,
                   help="threads of torch and of llama.cpp (default: torch's setting; llama.cpp: every core)")
    p.set_defaults(func=run)


def load_models(args):
    """(target, draft or None, tokenizer) for the parsed arguments, offline only."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # stderr stays for errors
    if args.prompt_lookup:  # no draft to cast: --draft-dtype is refused before any model loads
        cast_draft(None, args.draft_dtype)
    if args.pair is not None:
        from exactspec.pairs.load import is_chat

        name = args.pair
        if args.target or args.draft:
            raise ValueError("--pair replaces --target/--draft; give one or the other")
        if args.chat is None:
            args.chat = is_chat(name)
        # (no stderr redirection: a shipped pair hides its conversion's tqdm bar itself, and says on stderr
        # when it rebuilds its cache)
        target, draft, tok = load_on_backend(backend_for(args), name, None, None, threads=args.threads,
                                             device=args.device)
        return target, cast_draft(None if args.prompt_lookup else draft, args.draft_dtype, target), tok
    if args.prompt_lookup and args.draft:
        raise ValueError("--prompt-lookup and --draft exclude each other")
    if args.target is not None and args.draft is None and not args.prompt_lookup:
        raise ValueError("--target needs --draft or --prompt-lookup")
    target, draft, tok = load_on_backend(backend_for(args, args.target), None, args.target, args.draft,
                                         threads=args.threads, device=args.device)
    return target, cast_draft(None if args.prompt_lookup else draft, args.draft_dtype, target), tok


def chat_prompt(tok, prompt: str) -> str:
    """`prompt` as one user turn in the tokenizer's chat template, ready for the assistant's answer."""
    from exactspec.pairs.load import chat_prompt as render

    try:
        return render(tok, prompt)
    except ValueError as exc:
        raise ValueError(f"--{exc}") from None


def stats_table(stats):
    """A rich Table of the run's statistics."""
    from rich.table import Table

    t = Table(title="speculative decoding statistics", show_header=False)
    t.add_column("quantity")
    t.add_column("value", justify="right")
    rows = [
        ("target calls", f"{stats.target_calls}"),
        ("draft forward passes", f"{stats.draft_calls}"),
        ("drafted / accepted tokens", f"{stats.drafted_tokens} / {stats.accepted_tokens}"),
        ("acceptance rate", f"{stats.acceptance_rate:.3f}"),
        ("per-position acceptance", " ".join(f"{a:.2f}" for a in stats.per_position_acceptance) or "-"),
        ("accepted draft tokens / step (no bonus)", f"{stats.mean_accepted_per_step:.3f}"),
        ("tokens / step (with bonus)", f"{stats.mean_tokens_per_step:.3f}"),
        ("gamma used", " ".join(str(g) for g in sorted(set(stats.gamma_history))) or "-"),
        ("plain steps / early stops", f"{stats.plain_steps} / {stats.early_stops}"),
        *([("tokens / target call", f"{stats.tokens_per_target_call:.3f}"),
           ("tree nodes verified", f"{stats.tree_nodes}"),
           ("accepted depth histogram", " ".join(str(c) for c in stats.accepted_depths)),
           ("acceptance per (depth, rank)", " | ".join(" ".join(f"{a:.2f}" for a in row)
                                                       for row in stats.rank_acceptance))]
          if stats.tree_nodes else []),
        ("new tokens", f"{stats.new_tokens}"),
        ("time: prefill / draft / target / verify",
         f"{stats.prefill_time:.3f} / {stats.draft_time:.3f} / {stats.target_time:.3f} / "
         f"{stats.verify_time:.3f} s"),
        ("tokens / second", f"{stats.tokens_per_second:.1f}"),
    ]
    for r in rows:
        t.add_row(*r)
    return t


def run(args) -> int:
    from rich.console import Console
    from rich.text import Text

    from exactspec.cli import parse_gamma, parse_tree
    from exactspec.engine.decoding import SpeculativeGenerator
    from exactspec.engine.drafters import PromptLookupDrafter
    from exactspec.engine.text import styled_pieces, token_kinds

    gamma = parse_gamma(args.gamma)
    empty = [i + 1 for i, text in enumerate(args.prompts) if not text]
    if empty:
        raise ValueError(f"PROMPT {empty[0]} of {len(args.prompts)} is empty ('')")
    tree = parse_tree(args.tree)
    if tree is not None and args.prompt_lookup:
        raise ValueError("--tree needs a draft model; --prompt-lookup drafts chains")
    target, draft, tok = load_models(args)
    if draft is not None:
        gen = SpeculativeGenerator(target, draft)
    else:  # prompt lookup: draft as many tokens as gamma allows (auto gamma up to the generator's max)
        gen = SpeculativeGenerator(target, drafter=PromptLookupDrafter(max_ngram=args.ngram, max_draft=16))
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token if tok.eos_token is not None else tok.convert_ids_to_tokens(0)
    tok.padding_side = "left"
    args.chat = bool(args.chat)  # None (not given) is off for a path-given model
    texts = [chat_prompt(tok, p) for p in args.prompts] if args.chat else args.prompts
    # A chat template writes its own special tokens (BOS included): the tokenizer must not add them again.
    enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=not args.chat)
    if enc["input_ids"].shape[1] == 0:
        raise ValueError("PROMPT is empty after tokenization")
    sampling = dict(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
                    repetition_penalty=args.repetition_penalty)
    do_sample = args.do_sample
    if do_sample is None and any(v is not None for v in sampling.values()):
        do_sample = args.temperature != 0  # a sampling setting on the command line asks for sampling
    # EOS: the config's list (e.g. <|im_end|> and <|endoftext|>), else the tokenizer's.
    eos = None if target.generation_config.eos_token_id is not None else tok.eos_token_id
    stream = gen.stream(enc["input_ids"], enc["attention_mask"], max_new_tokens=args.max_new_tokens,
                        do_sample=do_sample, **sampling, gamma=gamma, method=args.method,
                        eos_token_id=eos, pad_token_id=tok.pad_token_id, seed=args.seed,
                        tree=tree)
    console = Console(highlight=False)
    single = len(args.prompts) == 1 and not args.json
    ids = [[] for _ in args.prompts]
    flags = [[] for _ in args.prompts]
    kinds = [[] for _ in args.prompts]
    if single:
        console.print(Text(args.prompts[0], style="bold"), end="")
        console.file.flush()
    interrupted = False
    try:
        for step in stream:  # stream live for one prompt; batches are printed whole at the end
            for row, toks, fd, drafted in zip(step.rows, step.tokens, step.from_draft, step.drafted):
                n0 = len(ids[row])
                ids[row] += toks
                flags[row] += fd
                kinds[row] += token_kinds(fd, drafted)
                if single:
                    for piece, kind in styled_pieces(tok, ids[row], kinds[row], n0):
                        console.print(Text(piece, style=STYLES[kind]), end="")
                    console.file.flush()  # a pipe or a file sees each step as it comes
    except KeyboardInterrupt:  # Ctrl-C: what was produced so far is printed below, and the status is 130
        interrupted = True
        for row in range(len(ids)):  # a step cut half-way through its bookkeeping: keep what all three agree on
            n = min(len(ids[row]), len(flags[row]), len(kinds[row]))
            ids[row], flags[row], kinds[row] = ids[row][:n], flags[row][:n], kinds[row][:n]
    out = stream.output
    texts = [tok.decode(i, skip_special_tokens=True) for i in ids]
    if args.json:
        print(json.dumps({"text": texts[0] if len(texts) == 1 else None, "texts": texts,
                          "prompts": args.prompts, "token_ids": ids, "from_draft": flags,
                          "stats": out.stats.to_dict() if out is not None else None,
                          **({"interrupted": True} if interrupted else {}),
                          "config": {"gamma": args.gamma, "tree": args.tree, "method": args.method, "do_sample": do_sample,
                                     **sampling, "chat": args.chat, "seed": args.seed,
                                     "max_new_tokens": args.max_new_tokens,
                                     "drafter": "prompt_lookup" if draft is None else "model"}}), flush=True)
        return _interrupted(ids) if interrupted else 0
    if single:
        console.print()
    else:
        for prompt, i, k in zip(args.prompts, ids, kinds):
            line = Text(prompt, style="bold")
            for piece, kind in styled_pieces(tok, i, k):
                line.append(piece, style=STYLES[kind])
            console.print(line)
            console.print()
    console.print(Text("accepted draft token", style=STYLES["accepted"]), "  ",
                  Text("corrected after a rejection", style=STYLES["corrected"]), "  ",
                  Text("bonus token (all drafts kept)", style=STYLES["bonus"]))
    if interrupted:  # no statistics: the run did not end
        console.file.flush()
        return _interrupted(ids)
    console.print(stats_table(out.stats))
    return 0


def _interrupted(ids: list[list[int]]) -> int:
    from exactspec.cli.progress import interrupted

    n = sum(map(len, ids))
    return interrupted("generate", f"{n} new token{'s' if n != 1 else ''} produced"
                                   + (f" ({', '.join(str(len(i)) for i in ids)} per prompt)" if len(ids) > 1 else "")
                                   + "; printed the text so far, no statistics (the run did not end)")


if __name__ == "__main__":  # pragma: no cover
    from exactspec.cli import main

    sys.exit(main(["generate", *sys.argv[1:]]))
