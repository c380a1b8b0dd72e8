#!/usr/bin/env python3
"""Check llama.cpp's own systems (exactspec.bench.llamacpp_peers) on the demo pair's GGUF files.

1. Greedy: the text of llama-completion (plain) and of llama-speculative-simple equals, token for token after
   re-tokenizing, what exactspec's target-alone loop on LlamaCppLM produces on the same file and prompt.
2. Speed: tokens/s of the generation phase, by each binary's own clock, plain vs speculative-simple at several
   draft lengths (median over prompts x repeats), and llama-speculative at T = 1.

    python benchmarks/llamacpp/peers_check.py [--gguf-dir /tmp/gg] [--prompts 4] [--n 64] [--draft-lens 4,2,8]

The GGUF files are conversions of src/exactspec/pairs/demo_pair, e.g. for f16:
    python -m exactspec.pairs.gguf src/exactspec/pairs/demo_pair/target /tmp/gg/demo_target_f16.gguf --outtype f16
    python -m exactspec.pairs.gguf src/exactspec/pairs/demo_pair/draft /tmp/gg/demo_draft_f16.gguf --outtype f16
The first run builds the binaries (minutes; see peer_binaries).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import time

import torch
from transformers import AutoTokenizer

from exactspec.backends.llamacpp import LlamaCppLM
from exactspec.bench.llamacpp_peers import peer_binaries, run_peer
from exactspec.engine.baseline import target_alone_loop
from exactspec.pairs.load import pair_prompts

PAIR = pathlib.Path(__file__).resolve().parents[2] / "src/exactspec/pairs/demo_pair"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf-dir", default="/tmp/gg")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--draft-lens", default="4,2,8")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None, help="write the numbers as JSON here")
    a = ap.parse_args()
    tok = AutoTokenizer.from_pretrained(PAIR / "target")
    prompts = pair_prompts("stdlib")[: a.prompts]
    bins = peer_binaries(print)
    d = pathlib.Path(a.gguf_dir)
    ks = [int(k) for k in a.draft_lens.split(",")]
    report = {}
    for dtype in ("f16", "f32"):
        tgt, dft = d / f"demo_target_{dtype}.gguf", d / f"demo_draft_{dtype}.gguf"
        target = LlamaCppLM(tgt, threads=a.threads)
        kw = dict(n_new=a.n, threads=a.threads, binaries=bins, seed=0)
        same = {"plain": 0, "spec-simple": 0}
        speeds = {"exactspec target-alone loop": [], "llamacpp-plain": []} | {f"spec-simple K={k}": [] for k in ks}
        accepts = {k: [] for k in ks}
        for p in prompts:
            ids = tok(p, return_tensors="pt").input_ids
            timings = {}
            t0 = time.perf_counter()
            ours = target_alone_loop(target, ids, torch.ones_like(ids), max_new_tokens=a.n, temperature=0, seed=0,
                                     timings=timings)[0].tolist()
            speeds["exactspec target-alone loop"].append((a.n - 1) / (time.perf_counter() - t0 - timings["prefill"]))
            # llama.cpp masks EOS out (--ignore-eos); our loop keeps its argmax: compare up to a first EOS
            upto = ours.index(0) if 0 in ours else a.n
            for name, res in (("plain", run_peer("llamacpp-plain", tgt, None, p, **kw)),
                              ("spec-simple", run_peer("llamacpp-spec-simple", tgt, dft, p, draft_len=4, **kw))):
                got = tok(res.text, add_special_tokens=False).input_ids[:upto]
                assert res.prompt_tokens == ids.shape[1], (name, res.prompt_tokens, ids.shape[1])
                if got == ours[:upto] and res.text.startswith(tok.decode(ours[:upto])):
                    same[name] += 1
                else:
                    print(f"{dtype} {name} differs:\n  ours {tok.decode(ours[:upto])!r}\n  its  {res.text!r}")
            for _ in range(a.repeats):
                speeds["llamacpp-plain"].append(run_peer("llamacpp-plain", tgt, None, p, **kw).tokens_per_s)
                for k in ks:
                    r = run_peer("llamacpp-spec-simple", tgt, dft, p, draft_len=k, **kw)
                    speeds[f"spec-simple K={k}"].append(r.tokens_per_s)
                    accepts[k].append(r.accept)
        t1 = [run_peer("llamacpp-spec", tgt, dft, p, temperature=1.0, draft_len=4, **kw) for p in prompts]
        row = {"greedy equal to exactspec (of prompts)": {k: f"{v}/{len(prompts)}" for k, v in same.items()},
               "tokens/s (median)": {k: round(statistics.median(v)) for k, v in speeds.items()},
               "accept (median) spec-simple": {k: round(statistics.median(v), 3) for k, v in accepts.items()},
               "llamacpp-spec T=1 K=4 tokens/s, accept (median)": [
                   round(statistics.median(r.tokens_per_s for r in t1)),
                   round(statistics.median(r.accept for r in t1), 3)]}
        report[dtype] = row
        print(dtype, json.dumps(row, indent=1))
        del target
    if a.out:
        pathlib.Path(a.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
