"""Export the shipped smollm2 draft to GGUF, and measure it on llama.cpp against the same draft in torch.

The draft (`src/exactspec/pairs/smollm2_pair/draft.safetensors`, 2 layers, a head over 8,192 of 49,152 tokens)
borrows the target's token embedding; `exactspec.pairs.gguf.export_smollm2_draft` writes it as a Llama GGUF
with the target file's Q8_0 embedding copied byte for byte, the target file's tokenizer, and a full output
matrix: zero rows outside the subset (a GGUF Llama head has no bias, so it cannot say -inf) and the subset's
ids under `exactspec.draft.token_ids`. `exactspec.pairs.smollm2.SubsetLlamaCppLM` puts the -inf back on
llama.cpp's logits, so the GGUF draft proposes what the torch draft proposes (up to rounding), and the zero
rows cost only head arithmetic. Run on its own, without that mask (another program), the file's draft gives
those tokens logit 0: a draft that proposes them rarely, still a valid draft.

    python training/export_smollm2_draft_gguf.py OUT.gguf [--layers q8_0] [--head q4_0]
    python training/export_smollm2_draft_gguf.py --measure [--prompts 4] [--threads 2] [--out results.json]

--measure runs the target (Q4_1 as it ships, llama.cpp) alone and with each draft (torch; GGUF at several
types), greedy and T=1, gamma 4 and "auto", on the pair's held-out prompts through the chat template;
per prompt the systems interleave (order alternating), each once untimed and once timed; 64 new tokens, EOS
off. Printed: tokens/s per prompt, then medians, the draft's acceptance at gamma 4 (accepted / drafted) and
the seconds of one draft call (draft_time / draft_calls).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time

import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))


def measure(args) -> dict:
    from exactspec import SpeculativeGenerator
    from exactspec.engine.baseline import target_alone_loop
    from exactspec.pairs.load import chat_prompt, pair_prompts, smollm2_on_llamacpp

    torch.set_num_threads(args.threads)
    target, torch_draft, tok = smollm2_on_llamacpp(args.threads, draft="torch")
    drafts = {"torch": torch_draft}
    for kind in args.variants.split(","):
        layers, head = kind.split("/")
        drafts[f"gguf {kind}"] = smollm2_on_llamacpp(args.threads, draft="gguf", layers=layers, head=head)[1]
    n = args.max_new_tokens
    modes = {"greedy": dict(do_sample=False), "T=1": dict(do_sample=True, temperature=1.0, top_k=0)}
    systems = {"target alone": None}
    for d in drafts:
        for mode in modes:
            for gamma in (4, "auto"):
                systems[f"{d} g{gamma} {mode}"] = (SpeculativeGenerator(target, drafts[d]), mode, gamma)
    records = []
    for i, prompt in enumerate(pair_prompts("smollm2")[:args.prompts]):
        ids = tok(chat_prompt(tok, prompt), return_tensors="pt").input_ids
        rec = {}
        for name in (list(systems) if i % 2 == 0 else list(reversed(systems))):
            if systems[name] is None:
                def run():
                    return target_alone_loop(target, ids, torch.ones_like(ids), max_new_tokens=n, temperature=0,
                                             seed=i)
            else:
                gen, mode, gamma = systems[name]

                def run(gen=gen, mode=mode, gamma=gamma):
                    return gen.generate(ids, max_new_tokens=n, eos_token_id=[], gamma=gamma, **modes[mode],
                                        generator=torch.Generator().manual_seed(1000 + i))
            run()  # untimed: gamma="auto" learns its costs, contexts are allocated
            t0 = time.perf_counter()
            out = run()
            rec[name] = {"tokens_per_s": n / (time.perf_counter() - t0)}
            if systems[name] is not None:
                st = out.stats
                rec[name] |= {"accepted": st.accepted_tokens, "drafted": st.drafted_tokens,
                              "draft_call_s": st.draft_time / max(st.draft_calls, 1)}
        records.append(rec)
        print(f"prompt {i + 1} ({ids.shape[1]} tokens): " +
              ", ".join(f"{k} {v['tokens_per_s']:.0f}" for k, v in rec.items()), flush=True)
    summary = {}
    for name in systems:
        row = {"tokens_per_s": statistics.median(r[name]["tokens_per_s"] for r in records),
               "vs target alone": statistics.median(r[name]["tokens_per_s"] / r["target alone"]["tokens_per_s"]
                                                    for r in records)}
        if systems[name] is not None:
            row["acceptance"] = (sum(r[name]["accepted"] for r in records) /
                                 max(sum(r[name]["drafted"] for r in records), 1))
            row["draft_call_ms"] = 1e3 * statistics.median(r[name]["draft_call_s"] for r in records)
        summary[name] = row
        print(f"{name:28s} " + "  ".join(f"{k} {v:.3g}" for k, v in row.items()), flush=True)
    return {"args": vars(args), "records": records, "summary": summary}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", nargs="?", help="where to write the GGUF draft (export mode)")
    ap.add_argument("--layers", default="q8_0", help="type of the layers' matrices: f32, f16, q8_0, q4_0")
    ap.add_argument("--head", default="q4_0", help="type of the output matrix: f32, f16, q8_0, q4_0")
    ap.add_argument("--measure", action="store_true", help="measure the drafts instead of exporting one")
    ap.add_argument("--variants", default="f16/q8_0,f16/f16,q8_0/q4_0", help="GGUF types to measure, layers/head")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json-out", dest="json_out", help="write --measure's records here")
    args = ap.parse_args()
    if args.measure:
        result = measure(args)
        if args.json_out:
            pathlib.Path(args.json_out).write_text(json.dumps(result, indent=1))
        return 0
    if not args.out:
        ap.error("give OUT.gguf, or --measure")
    from exactspec.pairs.gguf import export_smollm2_draft

    path = export_smollm2_draft(args.out, layers=args.layers, head=args.head)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
