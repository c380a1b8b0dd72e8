"""Tree speculation vs chains on the demo pair: tokens per target call and tokens/s, interleaved medians.

    PYTHONPATH=src python benchmarks/tree_speed.py [--temperature 1] [--prompts 4] [--repeats 3] [--new 64]
        [--systems chain4,chainauto,tree3211,dyn12,auto]   (chainN, treeABC: branching per depth, dynN, auto,
        chainauto, treechainN: the chain through the tree step)

Systems run round-robin (A B C ... A B C ...) on the same prompts, batch 1; the machine is shared and noisy,
so compare ratios to the chain within this run, not absolute numbers across runs.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from exactspec import SpeculativeGenerator, load_demo_pair
from exactspec.pairs.stdlib import demo_prompts


def _parse(name: str) -> dict:
    """chainN -> gamma=N; treeABC -> tree=(A, B, C) (one digit per depth); dynN -> tree=N."""
    for prefix, make in (("chain", lambda x: dict(gamma=int(x))), ("tree", lambda x: dict(tree=tuple(map(int, x)))),
                         ("dyn", lambda x: dict(tree=int(x)))):
        if name.startswith(prefix) and name[len(prefix):].isdigit():
            return make(name[len(prefix):])
    raise SystemExit(f"--systems: unknown system {name!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--offset", type=int, default=0, help="first prompt index (another prompt set)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--new", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--systems", default="chain4,chainauto,tree3211,dyn12,auto")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    target, draft, tok = load_demo_pair()
    prompts = demo_prompts()[args.offset:args.offset + args.prompts]
    encoded = [tok(p, return_tensors="pt")["input_ids"] for p in prompts]
    gen = SpeculativeGenerator(target, draft)
    # named systems; any other chainN / treeABC / dynN name is parsed (_parse)
    allsys = {"chainauto": dict(gamma="auto"), "auto": dict(tree="auto"),
              "treechain2": dict(tree=(1, 1)), "treechain4": dict(tree=(1, 1, 1, 1))}
    systems = {k: allsys.get(k) or _parse(k) for k in args.systems.split(",")}
    sample = args.temperature > 0
    kw = dict(max_new_tokens=args.new, do_sample=sample, temperature=args.temperature or 1.0, eos_token_id=[])
    for name, extra in systems.items():  # warm-up (and auto's cost model measurement), untimed
        gen.generate(encoded[0], **kw, **extra, seed=0)
    res = {k: {"tps": [], "tpc": [], "ms": []} for k in systems}
    for rep in range(args.repeats):
        for name, extra in systems.items():
            toks = calls = 0
            parts = [0.0, 0.0, 0.0]
            t0 = time.perf_counter()
            for i, ids in enumerate(encoded):
                out = gen.generate(ids, **kw, **extra, seed=1000 * rep + i)
                toks += out.stats.new_tokens
                calls += out.stats.target_calls
                st = out.stats
                parts = [parts[0] + st.draft_time, parts[1] + st.target_time, parts[2] + st.verify_time]
            res[name]["ms"].append([1000 * x / calls for x in parts])
            res[name]["tps"].append(toks / (time.perf_counter() - t0))
            res[name]["tpc"].append(toks / calls)
    base = statistics.median(res["chain4"]["tps"]) if "chain4" in res else None
    rows = {}
    for name, r in res.items():
        tps, tpc = statistics.median(r["tps"]), statistics.median(r["tpc"])
        rows[name] = dict(tokens_per_s=round(tps, 1), tokens_per_target_call=round(tpc, 3),
                          vs_chain4=round(tps / base, 3) if base else None)
        ms = [statistics.median(m[j] for m in r["ms"]) for j in range(3)]
        rows[name]["ms_per_call"] = [round(x, 2) for x in ms]
        print(f"{name:10s} tok/s {tps:7.1f}  tok/call {tpc:5.2f}  vs chain4 {tps / base if base else 0:5.3f}"
              f"  ms/call draft {ms[0]:.2f} target {ms[1]:.2f} verify {ms[2]:.2f}")
    print(json.dumps({"temperature": args.temperature, "results": rows}))


if __name__ == "__main__":
    main()
