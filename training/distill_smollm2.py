"""Distil a small draft for SmolLM2-135M-Instruct (seeded, resumable, time-budgeted) and ship it.

Stages (each cached under --work; a rerun resumes):
  1. gen      the target answers the training chat prompts (`training/chat_prompts.py`), half greedy, half
              sampled at T=0.7, top-p 0.9 (`gen-self`: the prompts the target wrote itself,
              `training/self_instruct.py`, each answered once); for every answer token the target's raw
              logits come for free from `generate(output_logits=True)` and are kept as the top-64
              log-probabilities (enough to hold ~all of p's mass on this text). One shard per batch.
  2. vocab    the draft's head vocabulary (FR-Spec): the most frequent answer tokens, weighted by p.
  3. train    the draft: the target's token embedding (frozen, borrowed at load time), layers initialised from
              the target's first layers, a head over the subset initialised from the embedding rows; loss =
              cross-entropy against the target's top-64 distribution (forward KL up to a constant).
  4. export   fp16 safetensors + config into src/exactspec/pairs/smollm2_pair/, with a report: held-out
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
import self_instruct  # noqa: E402

EXPORT = HERE.parent / "src" / "exactspec" / "smollm2_pair"
TOPK = 64


def chat_ids(tok, prompts):
    from exactspec.pairs.load import chat_prompt  # the same rendering the demo and the bench use

    return tok([chat_prompt(tok, p) for p in prompts], return_tensors="pt", padding=True, add_special_tokens=False)


def stage_gen(work, which, minutes, batch, max_new, seed):
    from exactspec.pairs.smollm2 import load_target

    out = work / f"gen_{which}"
    out.mkdir(parents=True, exist_ok=True)
    target, tok = load_target()
    tok.padding_side = "left"
    if which.startswith("self_"):  # the target's own user messages (training/self_instruct.py): each answered
        # once, greedy or sampled by turns, for breadth per answer token
        prompts = self_instruct.prompts(which[len("self_"):], seed=seed)
        jobs = [(p, i % 2 == 1) for i, p in enumerate(prompts)]
    else:
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


def text_chunks(tok, chunk_tokens, seed):
    """Off-policy text for teacher forcing, all offline: Python's documentation topics (English prose with
    code), the README text of the installed packages' METADATA, and standard-library source; cut into
    chunks of `chunk_tokens` tokens and interleaved by a seeded shuffle."""
    import importlib.metadata
    import random
    import sysconfig

    lib = pathlib.Path(sysconfig.get_paths()["stdlib"])
    from pydoc_data.topics import topics  # the text behind `help("topic")`

    texts = list(topics.values())
    for dist in sorted(importlib.metadata.distributions(), key=lambda d: d.metadata["Name"] or ""):
        body = dist.metadata.get_payload() if hasattr(dist.metadata, "get_payload") else None
        if body and len(body) > 500:
            texts.append(body)
    for path in sorted(lib.glob("*.py"))[::3]:
        texts.append(path.read_text(encoding="utf-8", errors="replace"))
    chunks = []
    for t in texts:
        ids = tok(t, add_special_tokens=False)["input_ids"]
        chunks += [ids[i:i + chunk_tokens] for i in range(0, len(ids) - chunk_tokens + 1, chunk_tokens)]
    random.Random(seed).shuffle(chunks)
    return chunks


def stage_teacher(work, minutes, batch, chunk_tokens, seed):
    """The target's top-64 log-probs over off-policy text, each chunk placed as an assistant answer."""
    from exactspec.pairs.smollm2 import load_target

    out = work / "gen_tf"
    out.mkdir(parents=True, exist_ok=True)
    target, tok = load_target()
    prefix = tok.apply_chat_template([{"role": "user", "content": "Tell me more."}], add_generation_prompt=True,
                                     tokenize=True, return_dict=True)["input_ids"]
    chunks = text_chunks(tok, chunk_tokens, seed)
    t0 = time.time()
    for b in range(0, len(chunks), batch):
        path = out / f"shard_{b // batch:05d}.pt"
        if path.exists():
            continue
        if time.time() - t0 > minutes * 60:
            print(f"teacher: time budget reached at chunk {b} of {len(chunks)}")
            break
        ids = torch.tensor([prefix + c for c in chunks[b:b + batch]])  # [B, P + C]
        with torch.inference_mode():
            lp = torch.log_softmax(target(input_ids=ids).logits[:, len(prefix) - 1:-1].float(), -1)  # [B, C, V]
        top_lp, top_ix = lp.topk(TOPK, -1)
        rows = [{"prompt": None, "sampled": None, "ids": ids[r].to(torch.int32), "answer_start": len(prefix),
                 "top_ix": top_ix[r].to(torch.int32), "top_lp": top_lp[r].to(torch.float16)} for r in range(len(ids))]
        torch.save(rows, path)
        print(f"teacher: shard {b // batch} ({ids.numel()} tokens) {time.time() - t0:.0f}s", flush=True)


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
    from exactspec.pairs.smollm2 import load_target

    _, tok = load_target()
    mass = torch.zeros(len(tok))
    for r in load_shards(work, "train"):
        mass.index_add_(0, r["top_ix"].long().flatten(), r["top_lp"].float().exp().flatten())
    total = mass.sum().item()
    covered_before_eos = mass.topk(size).values.sum().item() / total
    mass[tok.eos_token_id] = float("inf")  # the head must be able to end a turn
    ids = mass.topk(size).indices.sort().values
    mass[tok.eos_token_id] = 0.0
    covered = mass[ids].sum().item() / total
    del covered_before_eos
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


@torch.inference_mode()
def quick_alpha(draft, rows, slot, batch=16):
    """alpha = sum min(p, q) over the stored top-64 of p (a lower bound: p's tail is left out); for picking
    the checkpoint, where only the draft has to run."""
    total, n = 0.0, 0
    draft.eval()
    for i in range(0, len(rows), batch):
        ids, mask, b_ix, s_ix, _, _ = collate(rows[i:i + batch], slot)
        h = draft.model(input_ids=ids, attention_mask=mask).last_hidden_state
        q_sub = torch.softmax(draft.lm_head.subset_logits(h[b_ix, s_ix]), -1)  # [N, S]
        top_ix = torch.cat([r["top_ix"].long() for r in rows[i:i + batch]])  # [N, 64]
        top_p = torch.cat([r["top_lp"].float().exp() for r in rows[i:i + batch]])
        k = slot[top_ix]
        q = torch.where(k >= 0, q_sub.gather(1, k.clamp(min=0)), torch.zeros_like(top_p))
        total += torch.minimum(top_p, q).sum().item()
        n += len(top_ix)
    draft.train()
    return total / n


def stage_train(work, minutes, vocab, layers, batch, lr, seed, init=None, tag="", chat_weight=1):
    from exactspec.pairs.smollm2 import build_draft, load_target

    target, _ = load_target()
    init_state = None
    if init is not None:  # a best_*.pt of an earlier run, or a shipped draft.safetensors (its own head subset)
        if init.suffix == ".safetensors":
            from safetensors.torch import load_file

            init_state = {k: v.to(target.dtype) if v.is_floating_point() else v for k, v in load_file(init).items()}
        else:
            init_state = torch.load(init)
    ids_sub = init_state["lm_head.token_ids"] if init_state and "lm_head.token_ids" in init_state \
        else stage_vocab(work, vocab)
    if len(ids_sub) != vocab:
        raise SystemExit(f"--init {init} has a {len(ids_sub)}-token head, not --vocab {vocab}")
    slot = torch.full((target.config.vocab_size,), -1, dtype=torch.long)
    slot[ids_sub] = torch.arange(len(ids_sub))
    draft = build_draft(target, ids_sub, num_layers=layers).train()
    with torch.no_grad():  # the target's head on a 2-layer state is far too sure of itself (loss 17 vs 7)
        draft.lm_head.weight.mul_(0.1)
    if init is not None:  # go on from an earlier run's weights (e.g. its best checkpoint), fresh optimiser
        missing, unexpected = draft.load_state_dict(init_state, strict=False)
        if [k for k in missing if not k.startswith("model.embed_tokens.")] or unexpected:
            raise SystemExit(f"--init {init} does not fit this draft: missing {missing}, unexpected {unexpected}")
        print(f"train: initialised from {init}")
    params = [p for n, p in draft.named_parameters() if not n.startswith("model.embed_tokens.")]
    draft.model.embed_tokens.weight.requires_grad_(False)
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0, betas=(0.9, 0.98))
    ckpt = work / f"draft_L{layers}_V{vocab}{tag}.ckpt"
    state = {"elapsed": 0.0, "step": 0, "epoch": 0, "log": []}
    if ckpt.exists():
        saved = torch.load(ckpt)
        draft.load_state_dict(saved["model"], strict=False)
        opt.load_state_dict(saved["opt"])
        state = saved["state"]
        print(f"train: resumed at step {state['step']} ({state['elapsed'] / 60:.1f} min)")
    # The target's own answers (on-policy), `chat_weight` times, plus the teacher-forced text if any.
    rows = (load_shards(work, "train") + load_shards(work, "self_train")) * chat_weight + load_shards(work, "tf")
    held = load_shards(work, "heldout") + load_shards(work, "self_heldout")
    best = state.get("best", (-1.0, None))
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
            if state["step"] % 100 == 0 or state["elapsed"] >= budget:
                a = quick_alpha(draft, held, slot)
                state["log"].append((state["step"], "held-out alpha (top-64 lower bound)", round(a, 4)))
                print(f"train: step {state['step']} held-out alpha >= {a:.4f}", flush=True)
                if a > best[0]:
                    best = (a, state["step"])
                    torch.save(draft.state_dict(), work / f"best_L{layers}_V{vocab}{tag}.pt")
                state["best"] = best
                t_last = time.time()  # evaluation time is not training time
            if now - t_save > 300 or state["elapsed"] >= budget:
                torch.save({"model": draft.state_dict(), "opt": opt.state_dict(), "state": state}, ckpt)
                t_save = now
            if state["elapsed"] >= budget:
                break
        else:
            state["epoch"] += 1
            state["in_epoch"] = 0
    torch.save({"model": draft.state_dict(), "opt": opt.state_dict(), "state": state}, ckpt)
    if best[1] is not None:  # the checkpoint with the best held-out alpha, not merely the last one
        draft.load_state_dict(torch.load(work / f"best_L{layers}_V{vocab}{tag}.pt"))
        print(f"train: exporting step {best[1]} (held-out alpha >= {best[0]:.4f})")
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

    from exactspec.pairs.smollm2 import draft_state, load_draft

    held, held_self = load_shards(work, "heldout"), load_shards(work, "self_heldout")
    train, tf = load_shards(work, "train") + load_shards(work, "self_train"), load_shards(work, "tf")
    parts = {k: [r for r in held if r["sampled"] == s]
             for k, s in (("greedy_answers", False), ("sampled_answers", True))}
    if held_self:  # the held-out self-instruct prompts' answers (greedy and sampled together)
        parts["self_instruct_answers"] = held_self
    report = {"held_out": {k: evaluate(target, draft, rows) for k, rows in parts.items()}}
    if (EXPORT / "draft.safetensors").exists():  # the draft this one replaces, on the same held-out answers
        previous = load_draft(target, EXPORT)
        report["previous_draft_held_out"] = {k: evaluate(target, previous, rows) for k, rows in parts.items()}
    EXPORT.mkdir(parents=True, exist_ok=True)
    tensors = {k: (v.half() if v.is_floating_point() else v).contiguous() for k, v in draft_state(draft).items()}
    save_file(tensors, EXPORT / "draft.safetensors")
    (EXPORT / "draft.json").write_text(json.dumps({"num_layers": args.layers, "vocab_subset": args.vocab}, indent=1))
    report.update({"training": {"steps": state["step"], "minutes": round(state["elapsed"] / 60, 1),
                                "epochs": state["epoch"], "layers": args.layers, "vocab_subset": args.vocab,
                                "batch": args.train_batch, "lr": args.lr, "seed": args.seed,
                                "exported_step": state.get("best", (None, None))[1],
                                "init": str(args.init) if args.init else None, "chat_weight": args.chat_weight,
                                "loss_log": state["log"][-30:]},
                   "data": {"train_answers": len(train), "train_answer_tokens": sum(len(r["top_ix"]) for r in train),
                            "teacher_forced_tokens": sum(len(r["top_ix"]) for r in tf),
                            "heldout_answers": len(held), "heldout_prompts": len({r["prompt"] for r in held})},
                   "command": "python training/distill_smollm2.py " + " ".join(sys.argv[1:])})
    (EXPORT / "training_report.json").write_text(json.dumps(report, indent=1))
    prompts = sorted({r["prompt"] for r in held})
    (EXPORT / "prompts.json").write_text(json.dumps({"split": "heldout", "prompts": prompts}, indent=1))
    print(json.dumps(report["held_out"], indent=1))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=pathlib.Path, default=HERE / "work-smollm2")
    ap.add_argument("--stage", choices=["gen", "gen-self", "teacher", "train", "all"], default="all")
    ap.add_argument("--teacher-minutes", type=float, default=15)
    ap.add_argument("--chunk-tokens", type=int, default=160)
    ap.add_argument("--gen-minutes", type=float, default=20)
    ap.add_argument("--train-minutes", type=float, default=40)
    ap.add_argument("--batch", type=int, default=24)
    ap.add_argument("--train-batch", type=int, default=16)
    ap.add_argument("--max-new", type=int, default=160)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--init", type=pathlib.Path, help="start the draft from these weights: a best_*.pt, or a "
                                                  "shipped draft.safetensors (whose head subset is then kept)")
    ap.add_argument("--tag", default="", help="suffix of this run's checkpoint names")
    ap.add_argument("--chat-weight", type=int, default=1, help="times each on-policy answer is seen per epoch")
    args = ap.parse_args(argv)
    torch.set_num_threads(2)
    if args.stage in ("gen", "all"):
        stage_gen(args.work, "heldout", args.gen_minutes, args.batch, args.max_new, args.seed)
        stage_gen(args.work, "train", args.gen_minutes, args.batch, args.max_new, args.seed)
    if args.stage == "gen-self":  # answers to training/self_prompts.json (training/self_instruct.py)
        stage_gen(args.work, "self_heldout", args.gen_minutes, args.batch, args.max_new, args.seed)
        stage_gen(args.work, "self_train", args.gen_minutes, args.batch, args.max_new, args.seed)
    if args.stage in ("teacher", "all"):
        stage_teacher(args.work, args.teacher_minutes, args.batch, args.chunk_tokens, args.seed)
    if args.stage in ("train", "all"):
        target, draft, state = stage_train(args.work, args.train_minutes, args.vocab, args.layers,
                                           args.train_batch, args.lr, args.seed, args.init, args.tag,
                                           args.chat_weight)
        stage_export(args.work, target, draft, state, args)


if __name__ == "__main__":
    main()
