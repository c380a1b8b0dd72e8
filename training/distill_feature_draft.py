"""Distil a feature draft (EAGLE-style, `exactspec.pairs.featuredraft`) for SmolLM2-135M-Instruct.

Reads the answers `distill_smollm2.py --stage gen` wrote under --work (the target's own answers to the
training and held-out chat prompts, with its top-64 log-probabilities at every answer position), then:
  1. feats   the target's final hidden state (after its final norm) at every position of every answer's
             prompt + answer, fp16, one file per shard (the target runs once over each, batched);
  2. train   the draft: pair j = (f_j, x_{j+1}) -> f^_{j+1} -> q(x_{j+2}); loss = cross-entropy against the
             target's top-64 p at answer positions + a smooth-L1 pull of f^ towards the target's feature;
             each batch also runs a second pass fed the draft's own f^ in place of f (as drafting beyond the
             first token does), with the same targets. Seeded, resumable, time-budgeted; the checkpoint with
             the best held-out alpha (top-64 lower bound, second token of a draft) is kept;
  3. export  fp16 safetensors + config into --out, with held-out alpha at the first and the second drafted
             position (exact: full-vocabulary p against q).

    python training/distill_feature_draft.py --work training/work-smollm2 --train-minutes 25
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
from distill_smollm2 import batches, load_shards  # noqa: E402

EXPORT = HERE.parent / "src" / "exactspec" / "smollm2_pair"


def stage_feats(work, which, batch=8):
    from exactspec.pairs.smollm2 import load_target

    target, _ = load_target()
    out = work / f"feat_{which}"
    out.mkdir(parents=True, exist_ok=True)
    t0, n = time.time(), 0
    for p in sorted((work / f"gen_{which}").glob("shard_*.pt")):
        dest = out / p.name
        if dest.exists():
            continue
        rows = torch.load(p)
        feats = []
        for i in range(0, len(rows), batch):
            rb = rows[i:i + batch]
            L = max(len(r["ids"]) for r in rb)
            ids = torch.zeros(len(rb), L, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for b, r in enumerate(rb):
                ids[b, :len(r["ids"])] = r["ids"].long()
                mask[b, :len(r["ids"])] = 1
            with torch.inference_mode():
                h = target.model(input_ids=ids, attention_mask=mask).last_hidden_state  # [B, L, H] after the norm
            feats += [h[b, :len(r["ids"])].half().clone() for b, r in enumerate(rb)]
            n += int(mask.sum())
        torch.save(feats, dest)
        print(f"feats {which}: {p.name} {n} tokens {time.time() - t0:.0f}s", flush=True)


def stage_text(work, minutes, batch, chunk_tokens, seed):
    """Off-policy text (distill_smollm2.text_chunks: Python's docs, package READMEs, stdlib source), each chunk
    placed as an assistant answer: the target's top-64 log-probs (gen_tf/) and features (feat_tf/), one pass."""
    from distill_smollm2 import TOPK, text_chunks

    from exactspec.pairs.smollm2 import load_target

    target, tok = load_target()
    (work / "gen_tf").mkdir(parents=True, exist_ok=True)
    (work / "feat_tf").mkdir(parents=True, exist_ok=True)
    prefix = tok.apply_chat_template([{"role": "user", "content": "Tell me more."}], add_generation_prompt=True,
                                     tokenize=True, return_dict=True)["input_ids"]
    chunks = text_chunks(tok, chunk_tokens, seed)
    t0 = time.time()
    for b in range(0, len(chunks), batch):
        name = f"shard_{b // batch:05d}.pt"
        if (work / "feat_tf" / name).exists():
            continue
        if time.time() - t0 > minutes * 60:
            print(f"text: time budget reached at chunk {b} of {len(chunks)}")
            break
        ids = torch.tensor([prefix + c for c in chunks[b:b + batch]])  # [B, P + C]
        with torch.inference_mode():
            h = target.model(input_ids=ids).last_hidden_state  # [B, P + C, H]
            lp = torch.log_softmax(target.lm_head(h[:, len(prefix) - 1:-1]).float(), -1)  # [B, C, V]
        top_lp, top_ix = lp.topk(TOPK, -1)
        rows = [{"prompt": None, "sampled": None, "ids": ids[r].to(torch.int32), "answer_start": len(prefix),
                 "top_ix": top_ix[r].to(torch.int32), "top_lp": top_lp[r].to(torch.float16)} for r in range(len(ids))]
        torch.save(rows, work / "gen_tf" / name)
        torch.save([h[r].half().clone() for r in range(len(ids))], work / "feat_tf" / name)
        print(f"text: shard {b // batch} ({ids.numel()} tokens) {time.time() - t0:.0f}s", flush=True)


def load_rows(work, which):
    rows = load_shards(work, which)
    feats = []
    for p in sorted((work / f"gen_{which}").glob("shard_*.pt")):
        feats += torch.load(work / f"feat_{which}" / p.name)
    assert len(feats) == len(rows), (which, len(feats), len(rows))
    for r, f in zip(rows, feats):
        r["feat"] = f
    return rows


def collate(rows, slot):
    """Pairs: tokens [B, L-1] (x_{j+1}), feats_in [B, L-1, H] (f_j), feats_out (f_{j+1}), mask [B, L-1]; and per
    answer position (row, pair index predicting it, subset idx [64], p [64])."""
    L = max(len(r["ids"]) for r in rows)
    H = rows[0]["feat"].shape[1]
    ids = torch.zeros(len(rows), L, dtype=torch.long)
    feat = torch.zeros(len(rows), L, H)
    mask = torch.zeros(len(rows), L, dtype=torch.long)
    b_ix, s_ix, t_ix, t_p = [], [], [], []
    for b, r in enumerate(rows):
        n = len(r["ids"])
        ids[b, :n] = r["ids"].long()
        feat[b, :n] = r["feat"].float()
        mask[b, :n] = 1
        a, m = r["answer_start"], len(r["top_ix"])
        b_ix.append(torch.full((m,), b))
        s_ix.append(torch.arange(a - 2, a - 2 + m))  # pair j = t - 2 predicts the token at position t
        t_ix.append(slot[r["top_ix"].long()])
        t_p.append(r["top_lp"].float().exp())
    t_ix, t_p = torch.cat(t_ix), torch.cat(t_p)
    t_p = torch.where(t_ix >= 0, t_p, torch.zeros_like(t_p))
    return (ids[:, 1:], feat[:, :-1], feat[:, 1:], mask[:, 1:], torch.cat(b_ix), torch.cat(s_ix),
            t_ix.clamp(min=0), t_p)


def two_passes(draft, tokens, f_in, mask):
    """f^ of the first pass (fed the target's features) and of the second (fed the first pass's guesses)."""
    h1 = draft(tokens, f_in, mask)  # [B, S, H]
    f2 = torch.cat([f_in[:, :1], h1[:, :-1]], 1)  # pair j fed f^_j (guessed from pair j-1) instead of f_j
    return h1, draft(tokens, f2, mask)


def loss_of(draft, batch, reg):
    tokens, f_in, f_out, mask, b_ix, s_ix, t_ix, t_p = batch
    total, parts = 0.0, []
    for h in two_passes(draft, tokens, f_in, mask):
        logq = torch.log_softmax(draft.lm.lm_head.subset_logits(h[b_ix, s_ix]), -1)  # [N, S]
        ce = -(t_p * logq.gather(1, t_ix)).sum(1).mean()
        m = mask.bool()
        l1 = F.smooth_l1_loss(h[m], f_out[m])
        total = total + ce + reg * l1
        parts += [ce.item(), l1.item()]
    return total, parts


@torch.inference_mode()
def quick_alpha(draft, rows, slot, batch=16):
    """Held-out alpha = sum min(p, q) over the stored top-64 of p (a lower bound), first and second pass."""
    sums, n = [0.0, 0.0], 0
    draft.eval()
    for i in range(0, len(rows), batch):
        tokens, f_in, _, mask, b_ix, s_ix, _, _ = collate(rows[i:i + batch], slot)
        top_ix = torch.cat([r["top_ix"].long() for r in rows[i:i + batch]])
        top_p = torch.cat([r["top_lp"].float().exp() for r in rows[i:i + batch]])
        k = slot[top_ix]
        for j, h in enumerate(two_passes(draft, tokens, f_in, mask)):
            q_sub = torch.softmax(draft.lm.lm_head.subset_logits(h[b_ix, s_ix]), -1)
            q = torch.where(k >= 0, q_sub.gather(1, k.clamp(min=0)), torch.zeros_like(top_p))
            sums[j] += torch.minimum(top_p, q).sum().item()
        n += len(top_ix)
    draft.train()
    return [s / n for s in sums]


def stage_train(work, args):
    from safetensors.torch import load_file

    from exactspec.pairs.featuredraft import FeatureDraft
    from exactspec.pairs.smollm2 import PAIR_DIR, load_target

    torch.manual_seed(args.seed)
    target, _ = load_target()
    ids_sub = load_file(PAIR_DIR / "draft.safetensors")["lm_head.token_ids"]  # the shipped draft's head subset
    slot = torch.full((target.config.vocab_size,), -1, dtype=torch.long)
    slot[ids_sub] = torch.arange(len(ids_sub))
    draft = FeatureDraft(target, ids_sub, num_layers=args.layers, init_from_target=not args.from_token_draft)
    if args.from_token_draft:  # start as the shipped token draft: its layers, norm and head; fc passes the
        # embedding through and ignores the feature, so pair j = x_{j+1} at position j, as the token draft
        # reads it (minus the first token); training then teaches it to use the target's features
        token = load_file(PAIR_DIR / "draft.safetensors")
        missing, unexpected = draft.lm.load_state_dict({k: v.float() if v.is_floating_point() else v
                                                        for k, v in token.items()}, strict=False)
        if [k for k in missing if "embed_tokens" not in k] or unexpected:
            raise SystemExit(f"--from-token-draft: the shipped draft does not fit {args.layers} layers")
        h = target.config.hidden_size
        with torch.no_grad():
            draft.fc.weight.zero_()
            draft.fc.weight[:, :h].copy_(torch.eye(h))
            draft.fc.bias.zero_()
    draft.train()
    params = [p for n, p in draft.named_parameters() if "embed_tokens" not in n]
    for n, p in draft.named_parameters():
        p.requires_grad_("embed_tokens" not in n)
    opt = torch.optim.AdamW(params, lr=args.lr, weight_decay=0.0, betas=(0.9, 0.98))
    tag = f"feat_L{args.layers}{'_tok' if args.from_token_draft else ''}{args.tag}"
    ckpt, best_path = work / f"{tag}.ckpt", work / f"{tag}_best.pt"
    state = {"elapsed": 0.0, "step": 0, "epoch": 0, "log": [], "best": (-1.0, None)}
    if ckpt.exists():
        saved = torch.load(ckpt)
        draft.load_state_dict(saved["model"], strict=False)
        opt.load_state_dict(saved["opt"])
        state = saved["state"]
        print(f"train: resumed at step {state['step']} ({state['elapsed'] / 60:.1f} min)")
    rows = load_rows(work, "train") * args.chat_weight + (load_rows(work, "tf") if (work / "feat_tf").exists() else [])
    held = load_rows(work, "heldout")
    print(f"train: {len(rows)} answers, {sum(len(r['top_ix']) for r in rows)} answer tokens; held-out {len(held)}")
    if state["step"] == 0:
        a = quick_alpha(draft, held, slot)
        state["log"].append((0, "held-out alpha (top-64 lower bound), passes 1 and 2", [round(x, 4) for x in a]))
        print(f"train: untrained held-out alpha >= {a[0]:.4f} / {a[1]:.4f}", flush=True)
    budget = args.train_minutes * 60
    t_last, t_save = time.time(), time.time()
    while state["elapsed"] < budget:
        gen = torch.Generator().manual_seed(args.seed * 7919 + state["epoch"])
        skip = state.get("in_epoch", 0)
        for k, rows_b in enumerate(batches(rows, args.train_batch, gen)):
            if k < skip:
                continue
            frac = state["elapsed"] / budget
            warm = min(1.0, state["step"] / 20)
            for g in opt.param_groups:
                g["lr"] = args.lr * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))
            loss, parts = loss_of(draft, collate(rows_b, slot), args.reg)
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
                state["log"].append((state["step"], round(state["elapsed"]), [round(x, 4) for x in parts]))
                print(f"train: step {state['step']} epoch {state['epoch']} ce/l1 pass 1 {parts[0]:.3f}/{parts[1]:.3f} "
                      f"pass 2 {parts[2]:.3f}/{parts[3]:.3f} {state['elapsed'] / 60:.1f}/{args.train_minutes} min",
                      flush=True)
            if state["step"] % args.eval_every == 0 or state["elapsed"] >= budget:
                a = quick_alpha(draft, held, slot)
                state["log"].append((state["step"], "held-out alpha (top-64 lower bound), passes 1 and 2",
                                     [round(x, 4) for x in a]))
                print(f"train: step {state['step']} held-out alpha >= {a[0]:.4f} / {a[1]:.4f}", flush=True)
                if a[0] + a[1] > state["best"][0]:
                    state["best"] = (a[0] + a[1], state["step"])
                    torch.save(draft.state_dict(), best_path)
                t_last = time.time()
            if now - t_save > 300 or state["elapsed"] >= budget:
                torch.save({"model": draft.state_dict(), "opt": opt.state_dict(), "state": state}, ckpt)
                t_save = now
            if state["elapsed"] >= budget:
                break
        else:
            state["epoch"] += 1
            state["in_epoch"] = 0
    torch.save({"model": draft.state_dict(), "opt": opt.state_dict(), "state": state}, ckpt)
    if state["best"][1] is not None:
        draft.load_state_dict(torch.load(best_path))
        print(f"train: exporting step {state['best'][1]}")
    return target, draft.eval(), state


@torch.inference_mode()
def evaluate(target, draft, rows, batch=8):
    """Exact held-out alpha = mean sum min(p, q) (full vocabulary) and greedy agreement at the first drafted
    position (fed the target's features) and the second (fed the draft's own guess)."""
    acc = {"alpha_1": 0.0, "alpha_2": 0.0, "agree_1": 0.0, "agree_2": 0.0}
    n = 0
    for i in range(0, len(rows), batch):
        rb = rows[i:i + batch]
        tokens, f_in, _, mask, b_ix, s_ix, _, _ = collate(rb, torch.zeros(target.config.vocab_size, dtype=torch.long))
        p = torch.softmax(target.lm_head(torch.stack([rb[b]["feat"][s + 1].float() for b, s in
                                                      zip(b_ix.tolist(), s_ix.tolist())])), -1)  # [N, V]
        for j, h in enumerate(two_passes(draft, tokens, f_in, mask), 1):
            q = torch.softmax(draft.head(h[b_ix, s_ix]).float(), -1)
            acc[f"alpha_{j}"] += torch.minimum(p, q).sum().item()
            acc[f"agree_{j}"] += (p.argmax(-1) == q.argmax(-1)).sum().item()
        n += len(b_ix)
    return {**{k: v / max(n, 1) for k, v in acc.items()}, "tokens": n}


def stage_export(work, target, draft, state, args):
    from exactspec.pairs.featuredraft import save_feature_draft

    held = load_rows(work, "heldout")
    parts = {k: [r for r in held if r["sampled"] == s] for k, s in (("greedy_answers", False), ("sampled_answers", True))}
    report = {"held_out": {k: evaluate(target, draft, rows) for k, rows in parts.items()},
              "training": {"steps": state["step"], "minutes": round(state["elapsed"] / 60, 1), "epochs": state["epoch"],
                           "layers": args.layers, "batch": args.train_batch, "lr": args.lr, "reg": args.reg,
                           "chat_weight": args.chat_weight, "from_token_draft": args.from_token_draft,
                           "seed": args.seed, "exported_step": state["best"][1], "log": state["log"][-40:]},
              "command": "python training/distill_feature_draft.py " + " ".join(sys.argv[1:])}
    save_feature_draft(draft, args.out)
    (args.out / "feature_training_report.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report["held_out"], indent=1))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=pathlib.Path, default=HERE / "work-smollm2")
    ap.add_argument("--out", type=pathlib.Path, default=EXPORT)
    ap.add_argument("--stage", choices=["feats", "text", "train", "all"], default="all")
    ap.add_argument("--text-minutes", type=float, default=0, help="off-policy text to add (0: none)")
    ap.add_argument("--chunk-tokens", type=int, default=160)
    ap.add_argument("--chat-weight", type=int, default=1, help="times each on-policy answer is seen per epoch")
    ap.add_argument("--train-minutes", type=float, default=25)
    ap.add_argument("--train-batch", type=int, default=16)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--reg", type=float, default=1.0, help="weight of the smooth-L1 feature loss")
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--from-token-draft", action="store_true",
                    help="start from the shipped token draft (its --layers layers, norm and head) instead of the "
                         "target's last layers")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tag", default="")
    args = ap.parse_args(argv)
    torch.set_num_threads(2)
    if args.stage in ("feats", "all"):
        stage_feats(args.work, "heldout")
        stage_feats(args.work, "train")
    if args.stage in ("text", "all") and args.text_minutes > 0:
        stage_text(args.work, args.text_minutes, 24, args.chunk_tokens, args.seed)
    if args.stage in ("train", "all"):
        target, draft, state = stage_train(args.work, args)
        stage_export(args.work, target, draft, state, args)


if __name__ == "__main__":
    main()
