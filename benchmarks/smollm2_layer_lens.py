"""How predictable is SmolLM2 from its own first layers? A ceiling check for issue 12's alpha >= 0.75.

The target answers chat prompts (greedy, and sampled at T=0.7, top-p 0.9 under a seed); one batched
teacher-forced forward then gives, at every answer position, the target's p and the hidden state after each
layer L. Read through the target's own final norm and head (the "logit lens", no training), layer L's
hidden state is a draft that costs L/30 of the target: q_L. For each L this prints
alpha = sum_x min(p, q_L) (the expected acceptance of one drafted token; p and q_L both through the sampling
settings when sampled) and greedy agreement (argmax q_L == argmax p), next to the shipped draft's (and, for
the sampled answers, the shipped draft's alpha when its q is drawn at another temperature than p's 0.7).

Untrained exits are a weak draft (a trained exit, LayerSkip-style, does better), so this is not a bound; it
shows how much of the target's prediction is still changing in its last layers, which is what a 2-layer
draft has to imitate. Held-out prompts (never trained on) and the three hand-written unseen sets.

    python benchmarks/smollm2_layer_lens.py [--num-prompts 6] [--max-new-tokens 80] [--out lens.json]
        [--sets held-out,unseen,unseen2,unseen3] [--draft old=DIR --no-layers]   # drafts side by side
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys

import torch

SETS = {"held-out": None, "unseen": "benchmarks/prompts/unseen_chat.json",
        "unseen2": "benchmarks/prompts/unseen_chat2.json", "unseen3": "benchmarks/prompts/unseen_chat3.json"}
LAYERS = (4, 8, 12, 16, 20, 24, 26, 28, 29)


def answers(target, tok, prompts, max_new, sample, seed):
    """Token ids [B, P+N] of the target's answers and a mask [B, N] of answer positions up to the first EOS."""
    from exactspec.pairs.load import chat_prompt

    enc = tok([chat_prompt(tok, p) for p in prompts], return_tensors="pt", padding=True, add_special_tokens=False)
    torch.manual_seed(seed)
    extra = dict(do_sample=True, temperature=0.7, top_p=0.9, top_k=0) if sample else dict(do_sample=False)
    seq = target.generate(**enc, max_new_tokens=max_new, pad_token_id=tok.pad_token_id, **extra)
    plen = enc["input_ids"].shape[1]
    new = seq[:, plen:]
    after_eos = (new == tok.eos_token_id).long().cumsum(1) - (new == tok.eos_token_id).long() > 0
    keep = ~after_eos  # [B, N]: answer tokens up to and including the first EOS
    mask = torch.cat([enc["attention_mask"], keep.long()], 1)
    return seq, mask, keep, plen


def probs(logits, sample, temperature=0.7):
    """p or q [B, N, V] fp32 under the bench's settings: T=0.7, top-p 0.9 when sampled; raw softmax for greedy
    (only its argmax is used then, besides alpha)."""
    from transformers import TemperatureLogitsWarper, TopPLogitsWarper

    s = logits.float()
    if sample:
        flat = s.reshape(-1, s.shape[-1])
        flat = TopPLogitsWarper(0.9)(None, TemperatureLogitsWarper(temperature)(None, flat))
        s = flat.reshape(s.shape)
    return torch.softmax(s, -1)


def measure(target, draft, seq, mask, keep, plen, sample, others=None, layers=LAYERS):
    out = target(input_ids=seq, attention_mask=mask, output_hidden_states=True)
    p = probs(out.logits[:, plen - 1:-1], sample)  # [B, N, V]: the target's law at each answer token
    pg = p.argmax(-1)
    row = {}

    def score(q):
        return {"alpha": round(torch.minimum(p, q).sum(-1)[keep].mean().item(), 4),
                "greedy_agreement": round((q.argmax(-1) == pg)[keep].float().mean().item(), 4)}

    for L in layers:
        h = out.hidden_states[L][:, plen - 1:-1]
        row[f"layer {L}"] = score(probs(target.lm_head(target.model.norm(h)), sample))
    dl = draft(input_ids=seq, attention_mask=mask).logits[:, plen - 1:-1]
    row["shipped draft"] = score(probs(dl, sample))
    if sample:  # any q keeps the rule exact: would sampling the draft at another temperature match p better?
        for t in (0.5, 0.6, 0.8):
            row[f"shipped draft at T={t}"] = score(probs(dl, sample, t))
    for name, other in (others or {}).items():  # --draft NAME=DIR: another token draft on the same answers
        row[name] = score(probs(other(input_ids=seq, attention_mask=mask).logits[:, plen - 1:-1], sample))
    row["tokens"] = int(keep.sum())
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--num-prompts", type=int, default=6)
    ap.add_argument("--max-new-tokens", type=int, default=80)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=pathlib.Path, default=None)
    ap.add_argument("--draft", action="append", default=[], metavar="NAME=DIR",
                    help="also score the token draft in DIR (draft.safetensors + draft.json) as NAME; repeatable")
    ap.add_argument("--no-layers", action="store_true", help="drafts only, no layer read-outs")
    ap.add_argument("--sets", default=",".join(SETS), help=f"comma-separated prompt sets of {sorted(SETS)}")
    args = ap.parse_args()
    torch.set_num_threads(2)
    torch.set_grad_enabled(False)
    import exactspec as es
    from exactspec.pairs.smollm2 import heldout_prompts, load_draft

    target, draft, tok = es.load_pair("smollm2")
    tok.padding_side = "left"
    others = {}
    for spec in args.draft:
        name, _, path = spec.partition("=")
        if not name or not path:
            ap.error(f"--draft: expected NAME=DIR, got {spec!r}")
        others[name] = load_draft(target, pathlib.Path(path)).eval()
    report = {"command": "python benchmarks/smollm2_layer_lens.py " + " ".join(sys.argv[1:]),
              "layers": target.config.num_hidden_layers}
    for name in args.sets.split(","):
        if name not in SETS:
            ap.error(f"--sets: unknown set {name!r}; choose from {sorted(SETS)}")
        path = SETS[name]
        prompts = heldout_prompts() if path is None else json.loads(pathlib.Path(path).read_text())["prompts"]
        for sample in (False, True):
            seq, mask, keep, plen = answers(target, tok, prompts[:args.num_prompts], args.max_new_tokens, sample,
                                            args.seed)
            key = f"{name}, {'T=0.7 top-p 0.9' if sample else 'greedy'}"
            report[key] = measure(target, draft, seq, mask, keep, plen, sample, others,
                                  () if args.no_layers else LAYERS)
            print(key, json.dumps(report[key]), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
