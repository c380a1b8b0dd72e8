"""Train the demo model pair that ships inside exactspec (reproducible, seeded, resumable).

Corpus: the Python standard library's own source (the running interpreter's `Lib/`, test suites excluded),
which is on every machine, offline. A fixed set of files (chosen by a hash of the file's *path*, so the choice
does not depend on the content of this Python's copy) is held out for evaluation and benchmark prompts.

Stages (each cached under --work, so a rerun resumes where it stopped):
  1. manifest   names + sha256 of every corpus file, the held-out split, the Python version
  2. tokenizer  byte-level BPE (`tokenizers`), saved so `AutoTokenizer.from_pretrained(dir)` loads it
  3. tokens     the corpus encoded once, train and held-out streams
  4. train      target and draft trained together on the same batches; the draft's loss mixes the data's
                cross-entropy with KL(target || draft), using the target logits the step already computed,
                so the draft is distilled towards the target it will have to agree with
  5. export     fp16 safetensors + config + tokenizer into src/exactspec/pairs/demo_pair/{target,draft}
  6. distill    (optional, `--distill MINUTES`) the target frozen, the draft alone trained further on
                KL(target || draft): a distillation step costs one no-grad target forward instead of the
                target's forward + backward, so the draft sees ~2-3x more batches per minute. Resumable
                (its own checkpoint); exports the draft only, so the shipped target's bytes do not change.

    python training/train_demo.py --time-budget 60          # minutes of training, then export
    python training/train_demo.py --resume --time-budget 30  # go on from the last checkpoint
    python training/train_demo.py --distill 60              # then distil the draft for 60 more minutes
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import pathlib
import platform
import sys
import sysconfig
import time

import torch
import torch.nn.functional as F

HERE = pathlib.Path(__file__).resolve().parent
EXPORT = HERE.parent / "src" / "exactspec" / "demo_pair"
EOT = "<|endoftext|>"
EXCLUDED_DIRS = {"test", "tests", "idle_test", "site-packages", "__pycache__"}

TARGET = dict(hidden_size=512, num_hidden_layers=6, intermediate_size=1376, num_attention_heads=8,
              num_key_value_heads=8)
DRAFT = dict(hidden_size=256, num_hidden_layers=2, intermediate_size=688, num_attention_heads=4,
             num_key_value_heads=4)


def corpus_manifest(work: pathlib.Path, holdout_mod: int) -> dict:
    path = work / "manifest.json"
    if path.exists():
        return json.loads(path.read_text())
    lib = pathlib.Path(sysconfig.get_paths()["stdlib"])
    files = []
    for p in sorted(lib.rglob("*.py")):
        rel = p.relative_to(lib)
        if EXCLUDED_DIRS & set(rel.parts):
            continue
        data = p.read_bytes()
        # Hold out by a hash of the relative path: the same files on every machine and Python build.
        held_out = int(hashlib.sha256(str(rel).encode()).hexdigest(), 16) % holdout_mod == 0
        files.append({"path": str(rel), "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data),
                      "split": "heldout" if held_out else "train"})
    manifest = {"python": platform.python_version(), "stdlib": str(lib), "holdout_mod": holdout_mod,
                "files": files}
    path.write_text(json.dumps(manifest, indent=1))
    return manifest


def read_split(manifest: dict, split: str) -> list[str]:
    lib = pathlib.Path(manifest["stdlib"])
    return [(lib / f["path"]).read_text(encoding="utf-8", errors="replace")
            for f in manifest["files"] if f["split"] == split]


def train_tokenizer(work: pathlib.Path, texts: list[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    out = work / "tokenizer"
    if (out / "tokenizer.json").exists():
        return PreTrainedTokenizerFast.from_pretrained(out)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOT], show_progress=True,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOT, bos_token=EOT, unk_token=EOT,
                                   pad_token=EOT, model_max_length=1024)
    fast.save_pretrained(out)
    return fast


def encode(work: pathlib.Path, tokenizer, manifest: dict) -> dict[str, torch.Tensor]:
    path = work / "tokens.pt"
    if path.exists():
        return torch.load(path)
    streams = {}
    for split in ("train", "heldout"):
        ids: list[int] = []
        for text in read_split(manifest, split):
            ids.extend(tokenizer(text)["input_ids"])
            ids.append(tokenizer.eos_token_id)
        streams[split] = torch.tensor(ids, dtype=torch.int16 if len(tokenizer) < 32768 else torch.int32)
    torch.save(streams, path)
    return streams


def make_model(arch: dict, vocab: int, seq_len: int, eot: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=vocab, max_position_embeddings=1024, tie_word_embeddings=False,
                      bos_token_id=eot, eos_token_id=eot, pad_token_id=eot, rope_theta=10000.0, **arch)
    return LlamaForCausalLM(cfg)


def batches(stream: torch.Tensor, batch: int, seq_len: int, gen: torch.Generator):
    starts = torch.randint(0, len(stream) - seq_len - 1, (batch,), generator=gen)
    x = torch.stack([stream[s:s + seq_len + 1].long() for s in starts.tolist()])
    return x[:, :-1], x[:, 1:]


@torch.no_grad()
def evaluate(target, draft, stream: torch.Tensor, seq_len: int, max_windows: int = 64) -> dict:
    target.eval(), draft.eval()
    n = min(max_windows, (len(stream) - 1) // seq_len)
    tot_t = tot_d = tot_tv = tot_agree = count = 0.0
    for i in range(0, n, 8):
        rows = [stream[j * seq_len:(j + 1) * seq_len + 1].long() for j in range(i, min(n, i + 8))]
        x = torch.stack(rows)
        inp, tgt = x[:, :-1], x[:, 1:]
        lt = target(inp).logits.float()
        ld = draft(inp).logits.float()
        tot_t += F.cross_entropy(lt.flatten(0, 1), tgt.flatten(), reduction="sum").item()
        tot_d += F.cross_entropy(ld.flatten(0, 1), tgt.flatten(), reduction="sum").item()
        p, q = lt.softmax(-1), ld.softmax(-1)
        tot_tv += torch.minimum(p, q).sum(-1).sum().item()     # acceptance rate at T=1
        tot_agree += (lt.argmax(-1) == ld.argmax(-1)).sum().item()  # greedy agreement
        count += tgt.numel()
    target.train(), draft.train()
    return {"target_loss": tot_t / count, "draft_loss": tot_d / count, "target_ppl": math.exp(tot_t / count),
            "draft_ppl": math.exp(tot_d / count), "alpha_t1": tot_tv / count, "greedy_agreement": tot_agree / count,
            "eval_tokens": int(count)}


def lr_at(step: int, frac: float, peak: float, warmup: int = 50) -> float:
    """Linear warm-up, then cosine decay to 10% over the *time* schedule (frac = elapsed / schedule)."""
    if step < warmup:
        return peak * (step + 1) / warmup
    frac = min(1.0, frac)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


def train(args) -> None:
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    work = pathlib.Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    manifest = corpus_manifest(work, args.holdout_mod)
    tokenizer = train_tokenizer(work, read_split(manifest, "train"), args.vocab)
    streams = encode(work, tokenizer, manifest)
    print(f"corpus: {sum(f['split'] == 'train' for f in manifest['files'])} train files, "
          f"{len(streams['train'])} train tokens, {len(streams['heldout'])} held-out tokens")
    vocab, eot = len(tokenizer), tokenizer.eos_token_id
    target = make_model(TARGET, vocab, args.seq_len, eot)
    draft = make_model(DRAFT, vocab, args.seq_len, eot)
    params = {n: sum(p.numel() for p in m.parameters()) for n, m in (("target", target), ("draft", draft))}
    print(f"params: {params}")
    opt_t = torch.optim.AdamW(target.parameters(), lr=args.lr, weight_decay=0.1, betas=(0.9, 0.95))
    opt_d = torch.optim.AdamW(draft.parameters(), lr=args.lr * 2, weight_decay=0.1, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(args.seed)
    step, elapsed, log = 0, 0.0, []
    ckpt = work / "checkpoint.pt"
    if args.resume and ckpt.exists():
        state = torch.load(ckpt, weights_only=False)
        target.load_state_dict(state["target"]), draft.load_state_dict(state["draft"])
        opt_t.load_state_dict(state["opt_t"]), opt_d.load_state_dict(state["opt_d"])
        gen.set_state(state["gen"])
        step, elapsed, log = state["step"], state["elapsed"], state["log"]
        print(f"resumed at step {step} ({elapsed / 60:.1f} min trained)")
    budget = elapsed + args.time_budget * 60
    total_steps = args.max_steps
    schedule = 60 * (args.schedule_minutes or (elapsed / 60 + args.time_budget))
    start = time.perf_counter() - elapsed
    with progress_bar() as progress:
        task = progress.add_task("training", total=budget, completed=elapsed, info="")
        while step < total_steps and (time.perf_counter() - start) < budget:
            x, y = batches(streams["train"], args.batch, args.seq_len, gen)
            for opt in (opt_t, opt_d):
                for g in opt.param_groups:
                    g["lr"] = lr_at(step, elapsed / schedule, args.lr * (2 if opt is opt_d else 1))
            with torch.autocast("cpu", dtype=torch.bfloat16):
                lt = target(x).logits.float()
                loss_t = F.cross_entropy(lt.flatten(0, 1), y.flatten())
                ld = draft(x).logits.float()
            ce_d = F.cross_entropy(ld.flatten(0, 1), y.flatten())
            # KL(target || draft) on the target's current (detached) prediction: distillation for free.
            kl_d = F.kl_div(ld.log_softmax(-1).flatten(0, 1), lt.detach().log_softmax(-1).flatten(0, 1),
                            log_target=True, reduction="batchmean")
            loss_d = (1 - args.kl_weight) * ce_d + args.kl_weight * kl_d
            for opt, loss, model in ((opt_t, loss_t, target), (opt_d, loss_d, draft)):
                optimizer_step(opt, loss, model)
            step += 1
            elapsed = time.perf_counter() - start
            if step % 10 == 0:
                log.append({"step": step, "minutes": elapsed / 60, "target_loss": loss_t.item(),
                            "draft_ce": ce_d.item(), "draft_kl": kl_d.item()})
                progress.update(task, completed=elapsed,
                                info=f"step {step} target {loss_t.item():.3f} draft {ce_d.item():.3f} kl {kl_d.item():.3f}")
            if step % args.ckpt_every == 0:
                save_checkpoint(ckpt, target, draft, opt_t, opt_d, gen, step, elapsed, log)
    save_checkpoint(ckpt, target, draft, opt_t, opt_d, gen, step, elapsed, log)
    metrics = evaluate(target, draft, streams["heldout"], args.seq_len)
    report = {"steps": step, "train_minutes": elapsed / 60, "tokens_seen": step * args.batch * args.seq_len,
              "params": params, "heldout": metrics, "args": vars(args), "torch": torch.__version__,
              "python": manifest["python"]}
    print(json.dumps(report, indent=1))
    export(target, draft, tokenizer, manifest, report, log)


def distill(args) -> None:
    """Stage 6: train the draft alone towards the frozen target (see the module docstring)."""
    torch.manual_seed(args.seed + 1)
    torch.set_num_threads(args.threads)
    work = pathlib.Path(args.work)
    manifest = corpus_manifest(work, args.holdout_mod)
    tokenizer = train_tokenizer(work, read_split(manifest, "train"), args.vocab)
    streams = encode(work, tokenizer, manifest)
    vocab, eot = len(tokenizer), tokenizer.eos_token_id
    target, draft = make_model(TARGET, vocab, args.seq_len, eot), make_model(DRAFT, vocab, args.seq_len, eot)
    base = torch.load(work / "checkpoint.pt", weights_only=False)  # stage 4's result
    target.load_state_dict(base["target"]), draft.load_state_dict(base["draft"])
    target.eval().requires_grad_(False)
    opt = torch.optim.AdamW(draft.parameters(), lr=args.distill_lr, weight_decay=0.1, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(args.seed + 1)
    step, elapsed, log = 0, 0.0, []
    ckpt = work / "distill.pt"
    if ckpt.exists():
        state = torch.load(ckpt, weights_only=False)
        if state["base_step"] != base["step"]:  # stage 4 was retrained: this distillation is of another target
            raise SystemExit(f"{ckpt} distils the draft of stage-4 step {state['base_step']}, but "
                             f"checkpoint.pt is at step {base['step']}: delete {ckpt} to start over")
        draft.load_state_dict(state["draft"]), opt.load_state_dict(state["opt"]), gen.set_state(state["gen"])
        step, elapsed, log, before = state["step"], state["elapsed"], state["log"], state["before"]
        print(f"distillation resumed at step {step} ({elapsed / 60:.1f} min)")
    else:
        before = evaluate(target, draft, streams["heldout"], args.seq_len)
    target.eval()
    print(f"before distillation: {before}")
    budget = args.distill * 60
    start = time.perf_counter() - elapsed

    def save_distill():
        _save(ckpt, {"draft": draft.state_dict(), "opt": opt.state_dict(), "gen": gen.get_state(), "step": step,
                     "elapsed": elapsed, "log": log, "before": before, "base_step": base["step"]})

    with progress_bar() as progress:
        task = progress.add_task("distilling", total=budget, completed=elapsed, info="")
        while (time.perf_counter() - start) < budget:
            x, y = batches(streams["train"], args.batch, args.seq_len, gen)
            for g in opt.param_groups:
                g["lr"] = lr_at(step, elapsed / budget, args.distill_lr, warmup=20)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                with torch.no_grad():
                    lt = target(x).logits.float()
                ld = draft(x).logits.float()
            log_p = lt.log_softmax(-1).flatten(0, 1)
            # The draft's acceptance depends only on how close q is to p, so the loss is the KL alone.
            kl = F.kl_div(ld.log_softmax(-1).flatten(0, 1), log_p, log_target=True, reduction="batchmean")
            optimizer_step(opt, kl, draft)
            step += 1
            elapsed = time.perf_counter() - start
            if step % 10 == 0:
                agree = (lt.argmax(-1) == ld.argmax(-1)).float().mean().item()
                log.append({"step": step, "minutes": elapsed / 60, "draft_kl": kl.item(), "greedy_agreement": agree})
                progress.update(task, completed=elapsed, info=f"step {step} kl {kl.item():.3f} agree {agree:.3f}")
            if step % args.ckpt_every == 0:
                save_distill()
    save_distill()
    after = evaluate(target, draft, streams["heldout"], args.seq_len)
    print(f"after distillation: {after}")
    report_path = EXPORT / "training_report.json"
    report = json.loads(report_path.read_text())
    report["distill"] = {"steps": step, "minutes": elapsed / 60, "tokens_seen": step * args.batch * args.seq_len,
                         "loss": "KL(target || draft), target frozen", "lr": args.distill_lr,
                         "heldout_before": before, "heldout_after": after, "log": log[::5]}
    report["heldout"] = {**report["heldout"], "draft_loss": after["draft_loss"], "draft_ppl": after["draft_ppl"],
                         "alpha_t1": after["alpha_t1"], "greedy_agreement": after["greedy_agreement"]}
    out = EXPORT / "draft"
    draft.to(torch.float16).save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    report_path.write_text(json.dumps(report, indent=1))
    print(f"exported the distilled draft to {out}")


def optimizer_step(opt, loss, model) -> None:
    """One clipped optimiser step of `model` on `loss`."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()


def progress_bar():
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
                    TimeElapsedColumn(), TimeRemainingColumn())


def _save(path: pathlib.Path, state: dict) -> None:
    """Write a checkpoint atomically (a crash mid-write leaves the previous one intact)."""
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    tmp.replace(path)


def save_checkpoint(path, target, draft, opt_t, opt_d, gen, step, elapsed, log) -> None:
    _save(path, {"target": target.state_dict(), "draft": draft.state_dict(), "opt_t": opt_t.state_dict(),
                 "opt_d": opt_d.state_dict(), "gen": gen.get_state(), "step": step, "elapsed": elapsed,
                 "log": log})


def export(target, draft, tokenizer, manifest: dict, report: dict, log: list) -> None:
    for name, model in (("target", target), ("draft", draft)):
        out = EXPORT / name
        model.to(torch.float16).save_pretrained(out, safe_serialization=True)
        tokenizer.save_pretrained(out)
        model.to(torch.float32)
    heldout = [f for f in manifest["files"] if f["split"] == "heldout"]
    (EXPORT / "manifest.json").write_text(json.dumps(
        {"python": manifest["python"], "holdout_mod": manifest["holdout_mod"], "heldout": heldout,
         "train": [f for f in manifest["files"] if f["split"] == "train"]}, indent=1))
    (EXPORT / "training_report.json").write_text(json.dumps({**report, "log": log[::5]}, indent=1))
    print(f"exported to {EXPORT}")
    from make_prompts import main as make_prompts  # noqa: E402  (same folder)

    make_prompts([])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default=str(HERE / "checkpoints"), help="cache + checkpoint directory")
    ap.add_argument("--time-budget", type=float, default=60.0, help="minutes of training in this run")
    ap.add_argument("--max-steps", type=int, default=100000, help="stop after this many steps")
    ap.add_argument("--schedule-minutes", type=float, default=None,
                    help="cosine-decay horizon in minutes of training (default: this run's end)")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--kl-weight", type=float, default=0.5)
    ap.add_argument("--holdout-mod", type=int, default=40, help="hold out files whose path hash %% N == 0")
    ap.add_argument("--ckpt-every", type=int, default=100)
    ap.add_argument("--distill", type=float, default=None, metavar="MINUTES",
                    help="skip stages 4-5: distil the trained draft towards the frozen target for MINUTES in all "
                         "(a total: a rerun resumes distill.pt up to that total, then exports again)")
    ap.add_argument("--distill-lr", type=float, default=1e-3)
    args = ap.parse_args(argv)
    distill(args) if args.distill else train(args)


if __name__ == "__main__":
    main(sys.argv[1:])
