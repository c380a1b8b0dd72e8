"""Distil a small draft for SmolLM2-135M-Instruct (seeded, resumable, time-budgeted) and ship it.

Stages (each cached under --work; a rerun resumes):
  1. gen      the target answers the training chat prompts (`training/chat_prompts.py`), half greedy, half
              sampled at T=0.7, top-p 0.9; for every answer token the target's raw logits come for free from
              `generate(output_logits=True)` and are kept as the top-64 log-probabilities (enough to hold
              ~all of p's mass on this text). One shard per batch.
  2. vocab    the draft's head vocabulary (FR-Spec): the most frequent answer tokens, weighted by p.
  3. train    the draft: the target's token embedding (frozen, borrowed at load time), layers initialised from
              the target's first layers, a head over the subset initialised from the embedding rows; loss =
              cross-entropy against the target's top-64 distribution (forward KL up to a constant).
  4. export   fp16 safetensors + config into src/exactspec/smollm2_pair/, with a report: held-out
              alpha = sum min(p, q) and greedy agreement on the held-out prompts' answers.

    python training/distill_smollm2.py --gen-minutes 20 --train-minutes 40
"""
from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys
import time

import torch
import torch.nn.functional as F

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))
import chat_prompts  # noqa: E402

EXPORT = HERE.parent / "src" / "exactspec" / "smollm2_pair"
TOPK = 64


def chat_ids(tok, prompts):
    texts = [tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
             for p in prompts]
    return tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)


def stage_gen(work, which, minutes, batch, max_new, seed):
    from exactspec.smollm2 import load_target

    out = work / f"gen_{which}"
    out.mkdir(parents=True, exist_ok=True)
    target, tok = load_target()
    tok.padding_side = "left"
    prompts = chat_prompts.prompts(which, seed=seed)
    # Each prompt twice: once greedy, once sampled; batches alternate.
    jobs = [(p, False) for p in prompts] + [(p, True) for p in prompts]
    jobs = [jobs[i::2] for i in range(2)]
    jobs = [j for pair in zip(jobs[0], jobs[1]) for j in pair]
    greedy = [p for p, s in jobs if not s]
    sampled = [p for p, s in jobs if s]
    batches = []
    for i in range(0, max(len(greedy), len(sampled)), batch):
        batches += [(greedy[i:i + batch], False), (sampled[i:i + batch], True)]
    t0, done = time.time(), 0
    for b, (ps, sample) in enumerate(batches):
        path = out / f"shard_{b:05d}.pt"
        if path.exists() or not ps:
            continue
        if time.time() - t0 > minutes * 60:
            print(f"gen {which}: time budget reached after {done} new shards")
            break
        enc = chat_ids(tok, ps)
        torch.manual_seed(seed * 100003 + b)
        with torch.inference_mode():
            g = target.generate(**enc, max_new_tokens=max_new, do_sample=sample, temperature=0.7 if sample else None,
                                top_p=0.9 if sample else None, top_k=0 if sample else None,
                                output_logits=True, return_dict_in_generate=True, pad_token_id=tok.pad_token_id)
        logits = torch.stack(g.logits, 1).float()  # [B, N, V]: raw target logits for every answer position
        lp = torch.log_softmax(logits, -1)
        top_lp, top_ix = lp.topk(TOPK, -1)
        new = g.sequences[:, enc["input_ids"].shape[1]:]
        rows = []
        for r in range(len(ps)):
            n = new.shape[1]
            ends = (new[r] == tok.eos_token_id).nonzero()
            n = int(ends[0]) + 1 if len(ends) else n
            plen = int(enc["attention_mask"][r].sum())
            rows.append({"prompt": ps[r], "sampled": sample,
                         "ids": torch.cat([enc["input_ids"][r, -plen:], new[r, :n]]).to(torch.int32),
                         "answer_start": plen,
                         "top_ix": top_ix[r, :n].to(torch.int32), "top_lp": top_lp[r, :n].to(torch.float16)})
        torch.save(rows, path)
        done += 1
        ntok = sum(len(r["top_ix"]) for r in rows)
        print(f"gen {which}: shard {b}/{len(batches)} {ntok} tokens, {time.time() - t0:.0f}s", flush=True)


def load_shards(work, which):
    rows = []
    for p in sorted((work / f"gen_{which}").glob("shard_*.pt")):
        rows += torch.load(p)
    return rows


def stage_vocab(work, size):
    """The head's token subset: answer tokens ranked by the target's probability mass on them, plus EOS."""
    path = work / f"vocab_{size}.pt"
    if path.exists():
        return torch.load(path)
    from exactspec.smollm2 import load_target

    _, tok = load_target()
    mass = torch.zeros(len(tok))
    for r in load_shards(work, "train"):
        mass.index_add_(0, r["top_ix"].long().flatten(), r["top_lp"].float().exp().flatten())
    mass[tok.eos_token_id] = float("inf")
    ids = mass.topk(size).indices.sort().values
    covered = (mass[ids].clamp(max=1e9).sum() / mass.clamp(max=1e9).sum()).item()
    print(f"vocab: {size} tokens hold {covered:.4f} of the target's top-{TOPK} mass on the training answers")
    torch.save(ids, path)
    return ids


def batches(rows, batch, gen):
    """Shuffled batches of rows (by `gen`), grouped by length so little of a batch is padding."""
    order = torch.randperm(len(rows), generator=gen).tolist()
    chunks = [order[i:i + batch * 8] for i in range(0, len(order), batch * 8)]
    for c in chunks:
        c.sort(key=lambda i: len(rows[i]["ids"]))
        for j in range(0, len(c), batch):
            yield [rows[i] for i in c[j:j + batch]]


def collate(rows, slot):
    """ids [B, L], mask [B, L], and per answer position: (row, seq pos predicting it, subset idx [K], p [K])."""
    L = max(len(r["ids"]) for r in rows)
    ids = torch.zeros(len(rows), L, dtype=torch.long)
    mask = torch.zeros(len(rows), L, dtype=torch.long)
    b_ix, s_ix, t_ix, t_p = [], [], [], []
    for b, r in enumerate(rows):
        n = len(r["ids"])
        ids[b, :n] = r["ids"].long()
        mask[b, :n] = 1
        a = r["answer_start"]
        m = len(r["top_ix"])
        b_ix.append(torch.full((m,), b))
        s_ix.append(torch.arange(a - 1, a - 1 + m))
        t_ix.append(slot[r["top_ix"].long()])
        t_p.append(r["top_lp"].float().exp())
    t_ix, t_p = torch.cat(t_ix), torch.cat(t_p)
    t_p = torch.where(t_ix >= 0, t_p, torch.zeros_like(t_p))  # mass the head cannot hold is dropped
    return ids, mask, torch.cat(b_ix), torch.cat(s_ix), t_ix.clamp(min=0), t_p


def draft_loss(draft, ids, mask, b_ix, s_ix, t_ix, t_p):
    """Cross-entropy of the draft's subset distribution against the target's top-64 probabilities."""
    h = draft.model(input_ids=ids, attention_mask=mask).last_hidden_state  # [B, L, H]
    logq = torch.log_softmax(draft.lm_head.subset_logits(h[b_ix, s_ix]), -1)  # [N, S]
    return -(t_p * logq.gather(1, t_ix)).sum(1).mean()


def stage_train(work, minutes, vocab, layers, batch, lr, seed):
    from exactspec.smollm2 import build_draft, load_target

    target, _ = load_target()
    ids_sub = stage_vocab(work, vocab)
    slot = torch.full((target.config.vocab_size,), -1, dtype=torch.long)
    slot[ids_sub] = torch.arange(len(ids_sub))
    draft = build_draft(target, ids_sub, num_layers=layers).train()
    with torch.no_grad():  # the target's head on a 2-layer state is far too sure of itself (loss 17 vs 7)
        draft.lm_head.weight.mul_(0.1)
    params = [p for n, p in draft.named_parameters() if not n.startswith("model.embed_tokens.")]
    draft.model.embed_tokens.weight.requires_grad_(False)
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0, betas=(0.9, 0.98))
    ckpt = work / f"draft_L{layers}_V{vocab}.ckpt"
    state = {"elapsed": 0.0, "step": 0, "epoch": 0, "log": []}
    if ckpt.exists():
        saved = torch.load(ckpt)
        draft.load_state_dict(saved["model"], strict=False)
        opt.load_state_dict(saved["opt"])
        state = saved["state"]
        print(f"train: resumed at step {state['step']} ({state['elapsed'] / 60:.1f} min)")
    rows = load_shards(work, "train")
    print(f"train: {len(rows)} answers, {sum(len(r['top_ix']) for r in rows)} answer tokens")
    budget = minutes * 60
    t_last, t_save = time.time(), time.time()
    while state["elapsed"] < budget:
        gen = torch.Generator().manual_seed(seed * 7919 + state["epoch"])
        skip = state.get("in_epoch", 0)
        for k, rows_b in enumerate(batches(rows, batch, gen)):
            if k < skip:
                continue
            frac = state["elapsed"] / budget
            warm = min(1.0, state["step"] / 20)
            for g in opt.param_groups:  # warm-up, then cosine to 10% over the time budget
                g["lr"] = lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))
            loss = draft_loss(draft, *collate(rows_b, slot))
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            now = time.time()
            state["elapsed"] += now - t_last
            t_last = now
            state["step"] += 1
            state["in_epoch"] = k + 1
            if state["step"] % 10 == 0:
                state["log"].append((state["step"], round(state["elapsed"]), float(loss)))
                print(f"train: step {state['step']} epoch {state['epoch']} loss {float(loss):.4f} "
                      f"{state['elapsed'] / 60:.1f}/{minutes} min", flush=True)
            if now - t_save > 300 or state["elapsed"] >= budget:
                torch.save({"model": draft.state_dict(), "opt": opt.state_dict(), "state": state}, ckpt)
                t_save = now
            if state["elapsed"] >= budget:
                break
        else:
            state["epoch"] += 1
            state["in_epoch"] = 0
    torch.save({"model": draft.state_dict(), "opt": opt.state_dict(), "state": state}, ckpt)
    return target, draft.eval(), state


@torch.inference_mode()
def evaluate(target, draft, rows, batch=8):
    """Held-out alpha = mean sum min(p, q) and greedy agreement (argmax p == argmax q), p and q exact."""
    alpha, agree, n = 0.0, 0.0, 0
    for i in range(0, len(rows), batch):
        rb = rows[i:i + batch]
        L = max(len(r["ids"]) for r in rb)
        ids = torch.zeros(len(rb), L, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for b, r in enumerate(rb):
            ids[b, :len(r["ids"])] = r["ids"].long()
            mask[b, :len(r["ids"])] = 1
        p = torch.softmax(target(input_ids=ids, attention_mask=mask).logits.float(), -1)
        q = torch.softmax(draft(input_ids=ids, attention_mask=mask).logits.float(), -1)
        for b, r in enumerate(rb):
            s = slice(r["answer_start"] - 1, len(r["ids"]) - 1)
            alpha += torch.minimum(p[b, s], q[b, s]).sum(-1).sum().item()
            agree += (p[b, s].argmax(-1) == q[b, s].argmax(-1)).sum().item()
            n += s.stop - s.start
    return {"alpha": alpha / max(n, 1), "greedy_agreement": agree / max(n, 1), "tokens": n}


def stage_export(work, target, draft, state, args):
    from safetensors.torch import save_file

    from exactspec.smollm2 import draft_state

    held = load_shards(work, "heldout")
    report = {"held_out": {k: evaluate(target, draft, [r for r in held if r["sampled"] == s])
                           for k, s in (("greedy_answers", False), ("sampled_answers", True))}}
    EXPORT.mkdir(parents=True, exist_ok=True)
    tensors = {k: (v.half() if v.is_floating_point() else v).contiguous() for k, v in draft_state(draft).items()}
    save_file(tensors, EXPORT / "draft.safetensors")
    (EXPORT / "draft.json").write_text(json.dumps({"num_layers": args.layers, "vocab_subset": args.vocab}, indent=1))
    report.update({"training": {"steps": state["step"], "minutes": round(state["elapsed"] / 60, 1),
                                "epochs": state["epoch"], "layers": args.layers, "vocab_subset": args.vocab,
                                "batch": args.train_batch, "lr": args.lr, "seed": args.seed,
                                "train_answers": len(load_shards(work, "train")), "loss_log": state["log"][-20:]},
                   "command": "python training/distill_smollm2.py " + " ".join(sys.argv[1:])})
    (EXPORT / "training_report.json").write_text(json.dumps(report, indent=1))
    prompts = sorted({r["prompt"] for r in held})
    (EXPORT / "prompts.json").write_text(json.dumps({"split": "heldout", "prompts": prompts}, indent=1))
    print(json.dumps(report["held_out"], indent=1))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=pathlib.Path, default=HERE / "work-smollm2")
    ap.add_argument("--stage", choices=["gen", "train", "all"], default="all")
    ap.add_argument("--gen-minutes", type=float, default=20)
    ap.add_argument("--train-minutes", type=float, default=40)
    ap.add_argument("--batch", type=int, default=24)
    ap.add_argument("--train-batch", type=int, default=16)
    ap.add_argument("--max-new", type=int, default=160)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    torch.set_num_threads(2)
    if args.stage in ("gen", "all"):
        stage_gen(args.work, "heldout", args.gen_minutes, args.batch, args.max_new, args.seed)
        stage_gen(args.work, "train", args.gen_minutes, args.batch, args.max_new, args.seed)
    if args.stage in ("train", "all"):
        target, draft, state = stage_train(args.work, args.train_minutes, args.vocab, args.layers,
                                           args.train_batch, args.lr, args.seed)
        stage_export(args.work, target, draft, state, args)


if __name__ == "__main__":
    main()
