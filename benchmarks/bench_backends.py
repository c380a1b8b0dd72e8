"""The same pair on two runtimes: exactspec on transformers (today's backend) and on llama.cpp, each beside the
target alone on the same runtime, interleaved per prompt, on the held-out and an unseen prompt set.

Systems (batch 1, EOS off, `--max-new-tokens` per prompt):
  tf loop         our target-alone loop on transformers (lean forward)
  tf auto         exactspec gamma="auto" on transformers
  ll loop         our target-alone loop on llama.cpp (the same backend's plain decoding through our seam)
  ll auto         exactspec gamma="auto" on llama.cpp (target and draft GGUF files)
  ll gN           exactspec at a fixed gamma N on llama.cpp (--gammas)
A line per prompt (tokens/s of each system), then medians of per-prompt ratios. The timed call of every
exactspec system follows an untimed one (gamma="auto" learns between runs, as a long-lived generator does).

    .venv/bin/python benchmarks/bench_backends.py --pair stdlib --temperature 0 --prompts 6 --out /tmp/bb.json
    .venv/bin/python benchmarks/bench_backends.py --pair smollm2 --temperature 0 --prompts 4
"""
from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time

import torch


def _prompts(pair: str, n: int, unseen_file: str | None):
    from exactspec.pairs.load import pair_prompts

    here = pathlib.Path(__file__).parent / "prompts"
    path = pathlib.Path(unseen_file) if unseen_file else here / ("unseen_code.json" if pair == "stdlib"
                                                                  else "unseen_chat.json")
    data = json.loads(path.read_text())
    data = data["prompts"] if isinstance(data, dict) else data
    unseen = [p["text"] if isinstance(p, dict) else p for p in data]
    return {"held-out": pair_prompts(pair)[:n], "unseen": unseen[:n]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pair", default="stdlib")
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--unseen", help="unseen prompt file (default: benchmarks/prompts/unseen_code.json / _chat)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--gammas", default="", help="fixed draft lengths on llama.cpp, e.g. 2,4")
    ap.add_argument("--no-transformers", action="store_true", help="llama.cpp systems only")
    ap.add_argument("--out", help="write the per-prompt records as JSON here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from transformers.utils import logging as hf_logging

    from exactspec import SpeculativeGenerator
    from exactspec.engine.baseline import target_alone_loop
    from exactspec.pairs.load import chat_prompt, is_chat, load_pair

    hf_logging.disable_progress_bar()
    sets = _prompts(args.pair, args.prompts, args.unseen)
    greedy = args.temperature == 0
    kw = dict(max_new_tokens=args.max_new_tokens, do_sample=not greedy, temperature=args.temperature, top_k=0,
              eos_token_id=[])
    lt, ld, tok = load_pair(args.pair, backend="llamacpp", threads=args.threads)
    print(f"llama.cpp: {lt!r} + {ld!r}", file=sys.stderr, flush=True)
    systems = {}

    def loop(target):
        return lambda ids, seed: target_alone_loop(target, ids, torch.ones_like(ids), max_new_tokens=args.max_new_tokens,
                                                   temperature=args.temperature, seed=seed)

    def spec(gen, gamma):
        def run(ids, seed):
            gen.generate(ids, **kw, gamma=gamma, generator=torch.Generator().manual_seed(seed - 1))  # untimed
            return gen.generate(ids, **kw, gamma=gamma, generator=torch.Generator().manual_seed(seed))
        return run

    if not args.no_transformers:
        tt, td, _ = load_pair(args.pair)
        systems["tf loop"] = (loop(tt), False)
        systems["tf auto"] = (spec(SpeculativeGenerator(tt, td), "auto"), True)
    systems["ll loop"] = (loop(lt), False)
    lgen = SpeculativeGenerator(lt, ld)
    systems["ll auto"] = (spec(lgen, "auto"), True)
    for g in [int(x) for x in args.gammas.split(",") if x]:
        systems[f"ll g{g}"] = (spec(lgen, g), True)
    chat = is_chat(args.pair)
    records = {}
    for set_name, prompts in sets.items():
        recs = records[set_name] = []
        for i, p in enumerate(prompts):
            text = chat_prompt(tok, p) if chat else p
            ids = tok(text, return_tensors="pt").input_ids
            tps = {}
            names = list(systems) if i % 2 == 0 else list(reversed(systems))  # alternate the order
            for name in names:
                run, timed_twice = systems[name]
                if timed_twice:  # its run() makes an untimed call first; the timed call's own clock
                    out = run(ids, 1000 + i)  # (prefill included; a first run's cost model excluded)
                    tps[name] = args.max_new_tokens / out.stats.total_time
                else:
                    run(ids, 1000 + i)  # warm
                    t0 = time.perf_counter()
                    run(ids, 1000 + i)
                    tps[name] = args.max_new_tokens / (time.perf_counter() - t0)
            recs.append(tps)
            print(f"{set_name} prompt {i + 1}/{len(prompts)}: " +
                  ", ".join(f"{k} {v:.0f}" for k, v in tps.items()) + " tokens/s", flush=True)
    summary = {}
    for set_name, recs in records.items():
        med = {k: statistics.median(r[k] for r in recs) for k in recs[0]}
        ratio = lambda a, b: statistics.median(r[a] / r[b] for r in recs)  # noqa: E731
        s = summary[set_name] = {"tokens_per_second": med, "ll auto / ll loop": ratio("ll auto", "ll loop")}
        if "tf auto" in med:
            s["ll auto / tf auto"] = ratio("ll auto", "tf auto")
            s["ll loop / tf loop"] = ratio("ll loop", "tf loop")
            s["tf auto / tf loop"] = ratio("tf auto", "tf loop")
        print(f"{set_name}: " + ", ".join(f"{k} {v:.2f}" for k, v in s.items() if k != "tokens_per_second"),
              flush=True)
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps({"args": vars(args), "records": records, "summary": summary},
                                                     indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
