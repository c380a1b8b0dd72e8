#!/usr/bin/env python3
"""Check converted GGUFs against the HF checkpoint.

For each (model, outtype): convert, then
  (a) transformers loads the GGUF (AutoModelForCausalLM.from_pretrained(dir, gguf_file=...)) -> logits vs HF
  (b) llama.cpp (LlamaCppModel) logits vs HF fp32 logits on the same ids: 8 prompts x (prompt + 64 greedy
      HF tokens) decoded in one llama_decode -> max abs diff, argmax agreement on the 64 generated positions
  (c) llama.cpp free-running greedy (1 token per call) vs HF greedy: identical token count
  (d) llama.cpp text tokenization of the prompts (llama_tokenize, the GGUF's tokenizer) vs HF tokenizers ids,
      and detokenization round trip.
Usage: python verify_convert.py [--pair DIR] [--models target draft] [--types f32 f16]
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
from pathlib import Path

import numpy as np
import torch
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM
from transformers.utils import logging as hf_logging

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from convert_hf_llama_to_gguf import convert  # noqa: E402
from llamacpp_model import LlamaCppModel  # noqa: E402
import llama_cpp as L  # noqa: E402

hf_logging.set_verbosity_error()
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
torch.set_num_threads(2)

N_PROMPTS, PROMPT_TOK, N_GEN = 8, 96, 64


def load_prompts(pair: Path, tok: Tokenizer) -> tuple[list[str], list[list[int]]]:
    data = json.loads((pair / "prompts.json").read_text())["prompts"]
    texts = [p["text"] for p in data]          # all prompts for the tokenizer check
    ids = [tok.encode(t).ids[:PROMPT_TOK] for t in texts[:N_PROMPTS]]
    return texts, ids


def llama_tokenize(m: LlamaCppModel, text: str) -> list[int]:
    vocab = L.llama_model_get_vocab(m._model)
    b = text.encode()
    buf = (L.llama_token * (len(b) + 8))()
    n = L.llama_tokenize(vocab, b, len(b), buf, len(buf), False, False)
    assert n >= 0
    return list(buf[:n])


def llama_detokenize(m: LlamaCppModel, ids: list[int]) -> str:
    vocab = L.llama_model_get_vocab(m._model)
    arr = (L.llama_token * len(ids))(*ids)
    out = ctypes.create_string_buffer(len(ids) * 64 + 16)
    n = L.llama_detokenize(vocab, arr, len(ids), out, len(out), False, False)
    assert n >= 0
    return out.raw[:n].decode("utf-8", errors="replace")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pair", default="src/exactspec/pairs/demo_pair")
    ap.add_argument("--models", nargs="+", default=["target", "draft"])
    ap.add_argument("--types", nargs="+", default=["f32", "f16"])
    ap.add_argument("--outdir", default=str(HERE / "gguf"))
    a = ap.parse_args()
    pair, outdir = Path(a.pair), Path(a.outdir)
    outdir.mkdir(exist_ok=True)
    tok = Tokenizer.from_file(str(pair / "target" / "tokenizer.json"))
    texts, prompts = load_prompts(pair, tok)
    results = {}
    for mname in a.models:
        hf = AutoModelForCausalLM.from_pretrained(pair / mname, dtype=torch.float32).eval()
        # HF greedy continuations (fp32)
        seqs, hf_logits = [], []
        with torch.no_grad():
            for p in prompts:
                g = hf.generate(torch.tensor([p]), max_new_tokens=N_GEN, do_sample=False, min_new_tokens=N_GEN,
                                pad_token_id=0)
                s = g[0].tolist()
                seqs.append(s)
                hf_logits.append(hf(torch.tensor([s])).logits[0].numpy())
        for t in a.types:
            path = outdir / f"demo_{mname}_{t}.gguf"
            convert(pair / mname, path, t)
            r = {}
            # (a) transformers GGUF loader
            g = AutoModelForCausalLM.from_pretrained(outdir, gguf_file=path.name, dtype=torch.float32).eval()
            with torch.no_grad():
                d = max(float(np.abs(g(torch.tensor([s])).logits[0].numpy() - hl).max())
                        for s, hl in zip(seqs[:2], hf_logits[:2]))
            r["transformers_gguf_vs_hf_maxabs"] = d
            del g
            # (b) llama.cpp teacher-forced
            m = LlamaCppModel(str(path), n_ctx=512, n_seq=1, threads=2, n_batch=512)
            maxd, agree, tot, spread = 0.0, 0, 0, 0.0
            for p, s, hl in zip(prompts, seqs, hf_logits):
                m.reset()
                lc = m.forward([s], [0], [0])
                maxd = max(maxd, float(np.abs(lc - hl).max()))
                spread = max(spread, float(np.abs(hl).max()))
                pos = slice(len(p) - 1, len(s) - 1)  # logits predicting the 64 generated tokens
                agree += int((lc[pos].argmax(-1) == hl[pos].argmax(-1)).sum())
                tot += N_GEN
            r["llamacpp_vs_hf_maxabs"] = maxd
            r["hf_max_abs_logit"] = spread
            r["argmax_agree"] = f"{agree}/{tot}"
            # (c) llama.cpp free-running greedy, one token per call
            same = 0
            for p, s in zip(prompts, seqs):
                m.reset()
                out = m.forward([p], [0], [0], last_only=True)
                gen = []
                for _ in range(N_GEN):
                    nt = int(out[-1].argmax())
                    gen.append(nt)
                    out = m.forward([[nt]], [m.length(0)], [0])
                ref = s[len(p):]
                k = next((i for i, (x, y) in enumerate(zip(gen, ref)) if x != y), N_GEN)
                same += k
            r["greedy_free_run_identical_prefix_tokens"] = f"{same}/{N_PROMPTS * N_GEN}"
            # (d) tokenization (only once per model)
            if t == a.types[0]:
                ok = sum(llama_tokenize(m, x) == tok.encode(x).ids for x in texts)
                r["llama_tokenize_equals_hf"] = f"{ok}/{len(texts)}"
                rt = sum(llama_detokenize(m, tok.encode(x).ids) == x for x in texts)
                r["llama_detokenize_roundtrip"] = f"{rt}/{len(texts)}"
            m.close()
            results[f"{mname}_{t}"] = r
            print(f"{mname} {t}: {json.dumps(r)}", flush=True)
    (HERE / "verify_results.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
