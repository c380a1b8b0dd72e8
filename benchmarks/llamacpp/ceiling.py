"""How fast can greedy chain speculation be on this machine's llama.cpp forward, with no engine at all?

A lower bound on overhead, so an upper bound on speed: two loops written straight on llama.cpp contexts
(`exactspec.backends.llamacppctx.Context`, one sequence, numpy argmax, no torch, no policy, no statistics):

- *plain*: feed one token, take the argmax, repeat;
- *chain γ*: the draft proposes γ tokens greedily (its pending tokens, then d_1 .. d_{γ-1}), the target
  verifies them in one decode, keeps the agreeing prefix and its own next token, both caches roll back.

Both emit the same tokens as the target decoding alone (checked: a near-tie that a k-token batch rounds the other
way is counted, not hidden). The ratio chain / plain is what speculation can buy here at best with this draft,
whatever the loop around it; `--peers` times llama.cpp's own `llama-completion` and `llama-speculative-simple`
(γ = 4) in the same rounds, by their own clocks (generation phase). The target is the stdlib pair's f16 file and,
with `--target-types`, the same weights requantized by llama.cpp (`llama_model_quantize`, a temporary directory).
A line per round on stderr.

    .venv/bin/python benchmarks/llamacpp/ceiling.py [--prompts FILE] [--target-types f16,f32,q8_0]
        [--gammas 2,4,6] [--repeats 3] [--peers] [--out R.json]
"""
from __future__ import annotations

import argparse
import atexit
import ctypes
import pathlib
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from _abcommon import add_common, dump, prompts_of, setup  # noqa: E402

FTYPES = {"f32": 0, "f16": 1, "q8_0": 7, "q4_0": 2}  # llama.cpp's LLAMA_FTYPE_* values


def quantize(src: pathlib.Path, dst: pathlib.Path, kind: str) -> pathlib.Path:
    """`src` requantized by llama.cpp itself (`llama_model_quantize`) to `kind`, written to `dst`."""
    from exactspec.backends.llamacppctx import llama

    L = llama()
    p = L.llama_model_quantize_default_params()
    p.ftype, p.nthread, p.allow_requantize = FTYPES[kind], 2, True
    if L.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(p)) != 0:
        raise SystemExit(f"llama_model_quantize failed for {kind}")
    return dst


def _decode(ctx, toks, pos0: int, last_only: bool = False) -> np.ndarray:
    """Feed `toks` to sequence 0 from position `pos0`; logits `[n, V]` (`[1, V]` with `last_only`)."""
    n = len(toks)
    flags = np.zeros(n, np.int8)
    flags[n - 1 if last_only else 0:] = 1
    return ctx.decode(np.asarray(toks, np.int32), np.arange(pos0, pos0 + n, dtype=np.int32), np.zeros(n, np.int32),
                      flags)


def plain(tc, ids: list[int], n_new: int) -> tuple[list[int], float]:
    """The target alone: `(tokens, seconds after the prompt)`."""
    tc.clear()
    t = int(_decode(tc, ids, 0, last_only=True)[-1].argmax())
    out, pos, t0 = [t], len(ids), time.perf_counter()
    while len(out) < n_new:
        t = int(_decode(tc, [t], pos)[0].argmax())
        out.append(t)
        pos += 1
    return out, time.perf_counter() - t0


def chain(tc, dc, ids: list[int], n_new: int, gamma: int) -> tuple[list[int], float, int]:
    """Greedy chain speculation: `(tokens, seconds after the prompt, target calls)`."""
    tc.clear()
    dc.clear()
    t = int(_decode(tc, ids, 0, last_only=True)[-1].argmax())
    if len(ids) > 1:
        _decode(dc, ids[:-1], 0, last_only=True)
    out, tpos, steps = [t], len(ids), 0
    dpend, dpos = [ids[-1], t], len(ids) - 1  # the draft lags: tokens emitted but not fed to it yet
    t0 = time.perf_counter()
    while len(out) < n_new:
        d, inp, p = [], dpend, dpos
        for _ in range(gamma):  # feeds the pending tokens, then d_1 .. d_{γ-1}
            x = int(_decode(dc, inp, p, last_only=True)[-1].argmax())
            p += len(inp)
            d.append(x)
            inp = [x]
        am = _decode(tc, [t] + d, tpos).argmax(1)  # [γ+1]
        n = 0
        while n < gamma and am[n] == d[n]:
            n += 1
        t = int(am[n])
        out += d[:n] + [t]
        steps += 1
        tpos += n + 1
        tc.remove(0, tpos)
        dpos += len(dpend) + min(n, gamma - 1)  # the draft keeps its pending tokens and the accepted d_i it fed
        dc.remove(0, dpos)
        dpend = ([d[-1]] if n == gamma else []) + [t]
    return out[:n_new], time.perf_counter() - t0, steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common(ap, repeats=3, pair=False)
    ap.add_argument("--target-types", default="f16",
                    help="the target's file types (f16 = the shipped file; f32, q8_0, q4_0)")
    ap.add_argument("--gammas", default="2,4,6")
    ap.add_argument("--peers", action="store_true",
                    help="also llama.cpp's llama-completion and speculative-simple (γ=4)")
    args = ap.parse_args()
    setup(args)
    from exactspec import load_pair
    from exactspec.backends.llamacpp import LlamaCppLM
    from exactspec.backends.llamacppctx import Context

    target16, draft, tok = load_pair("stdlib", backend="llamacpp", threads=args.threads)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="ceiling-"))  # the requantized targets, removed at the end
    atexit.register(shutil.rmtree, tmp, True)
    kinds = args.target_types.split(",")
    for k in kinds:
        if k not in FTYPES:
            raise SystemExit(f"--target-types: unknown file type {k!r} (one of {', '.join(FTYPES)})")
    paths = {k: target16.gguf_path if k == "f16" else str(quantize(pathlib.Path(target16.gguf_path),
                                                                  tmp / f"target-{k}.gguf", k)) for k in kinds}
    gammas = [int(g) for g in args.gammas.split(",")]
    dctx = Context(draft._model, draft.vocab_size, n_seq=1, n_ctx=2048, threads=args.threads)
    prompts = prompts_of(args, "stdlib", tok)
    inputs = [tok.encode(p) for p in prompts]
    text = {tuple(i): p for i, p in zip(inputs, prompts)}
    n_new = args.max_new_tokens
    result = {"prompts": args.prompts or "held-out", "n_prompts": len(inputs), "max_new_tokens": n_new,
              "repeats": args.repeats, "threads": args.threads, "draft": pathlib.Path(draft.gguf_path).name,
              "targets": {}}
    for kind in kinds:
        model = target16 if kind == "f16" else LlamaCppLM(paths[kind], threads=args.threads)
        tctx = Context(model._model, model.vocab_size, n_seq=1, n_ctx=2048, threads=args.threads)
        systems = ["plain"] + [f"chain γ={g}" for g in gammas] + (["llama-completion", "speculative-simple γ=4"]
                                                                  if args.peers else [])
        secs = {s: [] for s in systems}  # per (round, prompt): seconds per generated token
        per_step = {s: [] for s in systems if s.startswith("chain")}
        unlike = {s: 0 for s in systems[1:] if s.startswith("chain")}  # (the binaries' text is not compared)
        failed: dict = {}  # peer runs that failed, per system

        def one(system, ids):
            if system == "plain":
                out, dt = plain(tctx, ids, n_new)
                return out, dt / (n_new - 1)
            if system.startswith("chain"):
                out, dt, steps = chain(tctx, dctx, ids, n_new, int(system.split("=")[1]))
                per_step[system].append((n_new - 1) / steps)
                return out, dt / (n_new - 1)
            from exactspec.bench.llamacpp_peers import PeerError, run_peer

            try:
                r = run_peer("llamacpp-plain" if system == "llama-completion" else "llamacpp-spec-simple", paths[kind],
                             draft.gguf_path, text[tuple(ids)], n_new=n_new, draft_len=4, threads=args.threads)
            except PeerError as exc:  # (seen once: speculative-simple printed no timing line) counted, not fatal
                failed[system] = failed.get(system, 0) + 1
                print(f"{system}: {exc}", file=sys.stderr)
                return None, float("nan")
            # llama-completion's clock is its eval time: `tokens - 1` decodes (the first token comes from the
            # prompt's logits), as the loops here time n_new - 1 decodes; speculative-simple's covers its tokens
            return None, r.seconds / max(r.tokens - (system == "llama-completion"), 1)

        for ids in inputs[:1]:  # warm-up
            for s in systems:
                one(s, ids)
        for s in per_step:
            per_step[s].clear()
        for rep in range(args.repeats):
            for ids in inputs:
                ref = None
                for s in systems:
                    out, spt = one(s, ids)
                    secs[s].append(spt)
                    if ref is None:
                        ref = out
                    elif s in unlike:
                        unlike[s] += out != ref
            done = {s: [x for x in secs[s] if x == x] or [0.0] for s in systems}  # (a failed peer run is NaN)
            print(f"{kind} round {rep + 1}/{args.repeats}: " + ", ".join(
                f"{s} {1e3 * statistics.median(done[s]):.3f} ms/token" for s in systems), file=sys.stderr, flush=True)
        pairs = {s: [p / x for p, x in zip(secs["plain"], secs[s]) if x == x] for s in systems}  # paired, per run
        result["targets"][kind] = {
            "ms_per_token": {s: round(1e3 * statistics.median([x for x in v if x == x]), 4) for s, v in secs.items()},
            "failed_peer_runs": failed,
            "speed_vs_plain": {s: round(statistics.median(v), 3) for s, v in pairs.items()},
            "tokens_per_target_call": {s: round(statistics.mean(v), 3) for s, v in per_step.items()},
            "outputs_unlike_plain": unlike}
        tctx.close()
    dctx.close()
    dump(result, args.out)


if __name__ == "__main__":
    main()
