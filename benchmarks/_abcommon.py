"""What the interleaved A/B scripts of benchmarks/ share: their common options, a quiet transformers, the
prompts of a shipped pair (chat-wrapped for a chat pair), and the JSON result."""
from __future__ import annotations

import argparse
import json


def add_common(ap: argparse.ArgumentParser, *, repeats: int, pair: bool = True) -> None:
    """--pair (unless `pair` is False), --prompts, --num-prompts, --max-new-tokens, --repeats, --threads, --out."""
    if pair:
        ap.add_argument("--pair", default="stdlib")
    ap.add_argument("--prompts", default=None, help="a prompt file (default: the pair's held-out prompts)")
    ap.add_argument("--num-prompts", type=int, default=6)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=repeats)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None, help="write the result as JSON here")


def setup(args) -> None:
    """Threads as asked; transformers without progress bars or the warnings it raises about its own calls."""
    import torch
    from transformers.utils import logging as hf_logging

    torch.set_num_threads(args.threads)
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def prompts_of(args, pair: str, tok) -> list[str]:
    """The first --num-prompts of --prompts (default: `pair`'s held-out prompts), chat-wrapped for a chat pair."""
    from exactspec.bench.bench import load_prompts
    from exactspec.pairs.load import chat_prompt, is_chat, pair_prompts

    prompts = (load_prompts(args.prompts) if args.prompts else pair_prompts(pair))[: args.num_prompts]
    return [chat_prompt(tok, p) for p in prompts] if is_chat(pair) else prompts


def dump(result: dict, out: str | None) -> None:
    """Print `result` as JSON, and write it to `out` when given."""
    print(json.dumps(result, indent=1))
    if out:
        with open(out, "w") as f:
            json.dump(result, f, indent=1)


def rounds(systems: list, run, stats: dict, repeats: int, same=None, progress=None):
    """Warm every system up (``run(system, 0)``; the per-system `stats` lists are cleared after it), then
    `repeats` interleaved rounds with seeds 1000 (rep + 1). ``run(system, seed) -> (seconds, outputs)``;
    ``same(output, reference) -> bool``, when given, compares each system's outputs with the first system's
    (the baseline) of the same round; ``progress(rep, times)``, when given, is called after each round.
    Returns ``(times {system: [seconds]}, equal {system: bool} or None)``."""
    for s in systems:
        run(s, 0)  # warm-up (and gamma="auto"'s cost model, measured once per process)
    for v in stats.values():
        v.clear()
    times: dict = {s: [] for s in systems}
    equal = {s: True for s in systems[1:]}
    for rep in range(repeats):
        ref = None
        for s in systems:
            dt, outs = run(s, 1000 * (rep + 1))
            times[s].append(dt)
            if ref is None:
                ref = outs
            elif same is not None:
                equal[s] &= all(same(o, r) for o, r in zip(outs, ref))
        if progress is not None:
            progress(rep, times)
    return times, equal if same is not None else None


def batches_of(prompts: list[str], tok, batch_size: int) -> list:
    """The prompts as left-padded batches of `batch_size` (a last partial batch is dropped)."""
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return [tok(prompts[i:i + batch_size], return_tensors="pt", padding=True)
            for i in range(0, len(prompts) - batch_size + 1, batch_size)]
