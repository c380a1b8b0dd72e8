"""The stdlib pair on llama.cpp with its draft in several GGUF file types, end to end, in one interleaved run.

The draft's numerics never decide exactness (verification corrects any q), only speed: a quantized draft reads
fewer bytes per call. The draft is requantized from the cached f16 file by llama.cpp itself
(`llama_model_quantize`, into a temporary directory); the target is the pair's f16 file throughout. The
baseline is exactspec's target-alone loop on llama.cpp, timed in the same rounds, which never stops at EOS: nor do
the speculative runs here (`eos_token_id=[]`), so every system makes the same tokens. Greedy outputs are compared
with the loop's (ggml rounds a k-token batch otherwise than a 1-token call, so a near-tie may flip: the count is
reported). llama.cpp's quantizer keeps the output matrix at Q6_K in a Q4_0 file.
A line per round on stderr; medians per system, ratios paired within a round.

    .venv/bin/python benchmarks/llamacpp/draft_type_ab.py [--types f16,q8_0,q4_0] [--gammas 4,auto]
        [--prompts benchmarks/prompts/unseen_code5.json] [--temperature 1] [--out R.json]
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

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))
from _abcommon import add_common, dump, prompts_of, rounds, setup  # noqa: E402

FTYPES = {"f32": 0, "f16": 1, "q8_0": 7, "q4_0": 2}  # llama.cpp's LLAMA_FTYPE_* values


def quantize(src: pathlib.Path, dst: pathlib.Path, kind: str) -> pathlib.Path:
    from exactspec.backends.llamacppctx import llama

    L = llama()
    p = L.llama_model_quantize_default_params()
    p.ftype, p.nthread, p.allow_requantize = FTYPES[kind], 2, True
    if L.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(p)) != 0:
        raise SystemExit(f"llama_model_quantize failed for {kind}")
    return dst


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common(ap, repeats=3, pair=False)
    ap.add_argument("--types", default="f16,q8_0,q4_0", help="the draft's file types (f32, f16, q8_0, q4_0)")
    ap.add_argument("--gammas", default="4,auto")
    ap.add_argument("--temperature", type=float, default=0.0)
    args = ap.parse_args()
    setup(args)
    import torch

    from exactspec import SpeculativeGenerator, load_pair
    from exactspec.backends.llamacpp import LlamaCppLM
    from exactspec.engine.baseline import target_alone_loop
    from exactspec.speed.stats import GenerationStats

    target, draft16, tok = load_pair("stdlib", backend="llamacpp", threads=args.threads)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="draft-types-"))  # removed at the end (atexit)
    atexit.register(shutil.rmtree, tmp, True)
    drafts = {}
    for kind in args.types.split(","):
        if kind not in FTYPES:
            raise SystemExit(f"--types: unknown file type {kind!r} (one of {', '.join(FTYPES)})")
        drafts[kind] = draft16 if kind == "f16" else LlamaCppLM(
            str(quantize(pathlib.Path(draft16.gguf_path), tmp / f"draft-{kind}.gguf", kind)),
            threads=args.threads, generation_config=draft16.generation_config)
    inputs = [torch.tensor([tok.encode(p)]) for p in prompts_of(args, "stdlib", tok)]
    greedy = args.temperature == 0
    sampling = dict(do_sample=False) if greedy else dict(do_sample=True, temperature=args.temperature, top_k=0)
    gammas = [g if g == "auto" else int(g) for g in args.gammas.split(",")]
    systems = ["loop"] + [f"{k} γ={g}" for g in gammas for k in drafts]
    gens = {s: SpeculativeGenerator(target, drafts[s.split()[0]]) for s in systems[1:]}
    stats: dict = {s: [] for s in systems[1:]}
    differ = {s: 0 for s in systems[1:]}  # greedy outputs (prompt x round) unlike the loop's in the same round
    ref: list = []

    def run(system, seed):
        outs, t0 = [], time.perf_counter()
        for i, ids in enumerate(inputs):
            if system == "loop":
                seq = target_alone_loop(target, ids, torch.ones_like(ids), max_new_tokens=args.max_new_tokens,
                                        temperature=args.temperature, seed=seed + i)
                outs.append(seq[0].tolist())
                continue
            auto = system.endswith("auto")
            o = gens[system].generate(ids, max_new_tokens=args.max_new_tokens,
                                      gamma="auto" if auto else int(system.split("=")[1]),
                                      seed=None if auto else seed + i, eos_token_id=[], **sampling)
            stats[system].append(o.stats)
            outs.append(o.sequences[0, ids.shape[1]:].tolist())
        dt = time.perf_counter() - t0
        if system == "loop":
            ref[:] = outs
        elif greedy and seed:  # (not in the warm-up, seed 0)
            differ[system] += sum(o != r for o, r in zip(outs, ref))
        return dt, outs

    def progress(rep, times):
        print(f"round {rep + 1}/{args.repeats}: " + ", ".join(f"{s} {times[s][-1]:.2f}s" for s in systems),
              file=sys.stderr, flush=True)

    times, _ = rounds(systems, run, stats, args.repeats, progress=progress)
    per_rep = {s: [t0 / t for t, t0 in zip(times[s], times["loop"])] for s in systems}
    result = {"prompts": args.prompts or "held-out", "n_prompts": len(inputs), "max_new_tokens": args.max_new_tokens,
              "temperature": args.temperature, "repeats": args.repeats, "threads": args.threads,
              "speedup_vs_loop": {s: round(statistics.median(v), 3) for s, v in per_rep.items()},
              "speedup_vs_loop_per_repeat": per_rep,
              "tokens_per_target_call": {s: round(GenerationStats.merge(v).tokens_per_target_call, 3)
                                         for s, v in stats.items()},
              "plain_steps": {s: GenerationStats.merge(v).plain_steps for s, v in stats.items()},
              "greedy_outputs_unlike_the_loop": differ if greedy else None}
    dump(result, args.out)


if __name__ == "__main__":
    main()
