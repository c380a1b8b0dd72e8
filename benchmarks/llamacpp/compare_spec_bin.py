#!/usr/bin/env python3
"""Run run_llamacpp_spec.sh (llama-speculative-simple) on 8 demo prompts (first 96 HF token ids, passed
with -i) at temp 0 and compare its text with greedy decoding through LlamaCppModel (same target GGUF);
then tokens/s vs draft length, and llama-simple (plain decoding) for reference.
Usage: python compare_spec_bin.py [--type f16|f32] [--n 64]"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from llamacpp_model import LlamaCppModel  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

PAIR = Path("src/exactspec/pairs/demo_pair")


def spec(ids, k, n, t, tdir):
    out = Path(tempfile.mkdtemp(dir=tdir))
    subprocess.run([str(HERE / "run_llamacpp_spec.sh"), "-t", str(HERE / f"gguf/demo_target_{t}.gguf"),
                    "-d", str(HERE / f"gguf/demo_draft_{t}.gguf"), "-i", ",".join(map(str, ids)),
                    "-k", str(k), "-n", str(n), "-o", str(out)], check=True, capture_output=True)
    return json.loads((out / "result.json").read_text())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--type", default="f16")
    ap.add_argument("--n", type=int, default=64)
    a = ap.parse_args()
    tok = Tokenizer.from_file(str(PAIR / "target/tokenizer.json"))
    prompts = [tok.encode(p["text"]).ids[:96] for p in json.loads((PAIR / "prompts.json").read_text())["prompts"][:8]]
    tdir = tempfile.mkdtemp()
    m = LlamaCppModel(str(HERE / f"gguf/demo_target_{a.type}.gguf"), n_ctx=1024)
    same, rows = 0, []
    for ids in prompts:
        r = spec(ids, 4, a.n, a.type, tdir)
        m.reset()
        o = m.forward([ids], [0], [0], last_only=True)
        gen = []
        for _ in range(r["n_predict"]):
            t = int(o[-1].argmax())
            if t == 0:
                break
            gen.append(t)
            o = m.forward([[t]], [m.length(0)], [0])
        ref = tok.decode(gen)
        got = r["generated_text"]
        ok = got == ref
        same += ok
        rows.append((r["prompt_tokens_llamacpp"], r.get("prompt_ids_roundtrip_ok"), ok, r["accept_rate"],
                     r["tokens_per_s"]))
    print(f"speculative-simple text == LlamaCppModel greedy text: {same}/{len(prompts)}")
    print("per prompt (prompt toks, ids roundtrip, same text, accept, tok/s):", rows)
    # tokens/s vs draft length on prompt 1 (median of 3 runs), 256 tokens
    for k in (1, 2, 4, 5, 8):
        ts = sorted(spec(prompts[1], k, 256, a.type, tdir)["tokens_per_s"] for _ in range(3))
        print(f"draft len {k}: {ts[1]:.0f} tok/s (median of 3, 256 tokens, {a.type})")
    # plain decoding reference: llama-simple
    txt = tok.decode(prompts[1])
    ts = []
    for _ in range(3):
        p = subprocess.run([str(HERE / "bin/llama-simple"), "-m", str(HERE / f"gguf/demo_target_{a.type}.gguf"),
                            "-n", "256", txt], capture_output=True, text=True)
        mm = re.search(r"decoded (\d+) tokens in\s+([\d.]+) s, speed:\s+([\d.]+) t/s", p.stderr)
        ts.append(float(mm.group(3)) if mm else float("nan"))
    print(f"llama-simple plain decoding: {sorted(ts)[1]:.0f} tok/s (median of 3; llama-simple has no -t: "
          f"it runs GGML_DEFAULT_N_THREADS=4 threads on 2 cores)")
    # plain greedy decoding through LlamaCppModel (2 threads), same prompt, 256 tokens
    import time
    ts = []
    for _ in range(3):
        m.reset()
        t0 = time.perf_counter()
        o = m.forward([prompts[1]], [0], [0], last_only=True)
        t1 = time.perf_counter()
        for _ in range(256):
            o = m.forward([[int(o[-1].argmax())]], [m.length(0)], [0])
        ts.append(256 / (time.perf_counter() - t1))
    print(f"plain greedy via LlamaCppModel (Python loop, 2 threads): {sorted(ts)[1]:.0f} tok/s")


if __name__ == "__main__":
    main()
