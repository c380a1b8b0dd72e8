"""`exactspec audit URL --target MODEL`: is a running vLLM or llama.cpp server's speculative decoding exact?

Samples token ids from the server over its HTTP API (a token-id prompt in, the sampled ids out, many requests in
flight with their settings mixed), computes the engine's own law at every sampled position by running MODEL
locally (float64), and tests every token's probability-integral transform for uniformity.

Verdicts (docs/audit.md):
  not exact     the tests reject at --alpha (default 0.001, Bonferroni over the pooled test, one per output
                position and one per sampling setting), or a token the law makes impossible was sampled.
                An exact engine is called "not exact" with probability at most --alpha.
  exact         no rejection, and the sample was large enough: a deviation of KS distance --tolerance
                (default 0.03) in the tokens' PIT law would have been detected with probability >= 0.95.
  inconclusive  no rejection, but the sample was too small to promise that (or, greedy, the only
                differences are near ties of under 0.05 logits).
At --temperature 0 the engine's tokens are compared with the target's argmax after the engine's own prefix
(greedy_equal), and the first difference is shown with its logit margin.

With --control URL (the same model, speculation off) the verdict is about speculation: the two engines' PIT
values are compared by a two-sample KS test, so a deviation both share (serving precision) is not flagged. Two
samples see less than one (about 0.04 at 19,200 tokens a side): give --tolerance 0.04 with a control.
With --draft MODEL, the acceptance the engine's rule leaves (greedy drafts keep x with p(x); llama.cpp keeps a
draft while it matches the target's sample) is set beside exactspec's best exact rule on the same texts, and
beside the engine's counters (/metrics). Exit status: 0 exact, 1 not exact, 3 inconclusive, 2 bad input or an
unusable server, 130 Ctrl-C (the report of what was sampled is still printed).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from exactspec.cli import SEED, check_in_file, integer, real

STATUS = {"exact": 0, "not exact": 1, "inconclusive": 3}


def _floats(option: str, lo: float, hi: float):
    def parse(text: str) -> list[float]:
        try:
            vals = [float(v) for v in text.split(",") if v.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got {text!r}") from None
        if not vals or any(not lo <= v <= hi for v in vals):
            raise argparse.ArgumentTypeError(f"each value must be in [{lo:g}, {hi:g}], got {text!r}")
        return vals
    return parse


def register(subparsers) -> None:
    p = subparsers.add_parser("audit", help="check that a running vLLM / llama.cpp server's speculative decoding "
                              "samples the target's law", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("url", metavar="URL", help="the server's base address, http://host:port")
    p.add_argument("--target", required=True, metavar="MODEL",
                   help="the weights the server serves: a Hugging Face folder, a .gguf file, or a shipped pair's "
                        "name (stdlib, smollm2: its target), run locally to compute the law")
    p.add_argument("--engine", choices=("vllm", "llamacpp"), help="the engine (default: detected from its pages)")
    p.add_argument("--draft", metavar="MODEL", help="the draft the server runs (a path, or the pair's name): adds "
                                                    "the acceptance its rule leaves beside exactspec's best")
    p.add_argument("--prompts", metavar="FILE", help="prompts, in the formats plan reads (default: a small mixed "
                                                     "set of code and prose)")
    p.add_argument("--temperature", type=_floats("--temperature", 0.0, 100.0), default=[1.0], metavar="T[,T...]",
                   help="sampling temperature; several, comma-separated, are mixed across concurrent requests "
                        "(default 1; 0 = greedy: token-for-token check)")
    p.add_argument("--top-p", type=real(0.0, 1.0), default=1.0, help="as the engine defines it (default 1: off)")
    p.add_argument("--top-k", type=integer(0), default=0, help="as the engine defines it (default 0: off)")
    p.add_argument("--min-p", type=real(0.0, 1.0), default=0.0, help="as the engine defines it (default 0: off)")
    p.add_argument("--repetition-penalty", type=real(0.01, 100.0), default=1.0,
                   help="vLLM: over prompt and output; llama.cpp: over the last 64 tokens (default 1: off)")
    p.add_argument("--samples", type=integer(1), default=600, help="samples per prompt (default 600)")
    p.add_argument("--max-tokens", type=integer(1, 256), default=8, help="tokens per sample (default 8)")
    p.add_argument("--seed", type=SEED, default=0, help="seeds the test's own randomness (default 0)")
    p.add_argument("--request-seeds", action="store_true",
                   help="send each request a seed (--seed + its index): reproducible samples where the engine "
                        "honours seeds; the default sends none, the path most users take")
    p.add_argument("--alpha", type=real(1e-12, 0.5), default=0.001, help="false-alarm rate (default 0.001)")
    p.add_argument("--tolerance", type=real(1e-4, 1.0), default=0.03,
                   help="the KS distance 'exact' must detect with probability 0.95 (default 0.03)")
    p.add_argument("--concurrency", type=integer(1, 256), default=8, help="requests in flight (default 8)")
    p.add_argument("--control", metavar="URL", help="the same model with speculation off, audited the same way")
    p.add_argument("--gamma", type=integer(1, 64), help="draft length the server uses (default: from its "
                                                         "counters, else 4)")
    p.add_argument("--draft-method", choices=("greedy", "probabilistic"), default="greedy",
                   help="vLLM's draft_sample_method (default greedy, vLLM's default; llama.cpp drafts greedily)")
    p.add_argument("--draft-cost", type=real(0.0, 10.0), help="the draft's cost per token over the target's "
                                                              "(default: their parameter counts' ratio)")
    p.add_argument("--json", action="store_true", help="print the JSON report (docs/audit.md)")
    p.add_argument("--out", metavar="DIR", help="write audit.json, audit.md, audit.png, samples.jsonl and the "
                                                "progress log here")
    p.set_defaults(func=run)


def run(args) -> int:
    from exactspec.audit.laws import Settings
    from exactspec.audit.run import AuditConfig, audit
    from exactspec.cli.progress import INTERRUPTED, Progress, interrupted

    prompts = _prompts(args.prompts)
    if args.out and os.path.exists(args.out) and not os.path.isdir(args.out):
        raise ValueError(f"--out {args.out!r} is a file, expected a directory")
    if args.engine == "llamacpp" and args.draft_method == "probabilistic":
        raise ValueError("--draft-method probabilistic: llama.cpp's server drafts greedily")
    settings = [Settings(t, args.top_k, args.top_p, args.min_p, args.repetition_penalty) for t in args.temperature]
    cfg = AuditConfig(url=args.url, target=args.target, engine=args.engine, draft=args.draft, prompts=prompts,
                      settings=settings, samples=args.samples, max_tokens=args.max_tokens, seed=args.seed,
                      request_seeds=args.request_seeds, alpha=args.alpha, tolerance=args.tolerance,
                      concurrency=args.concurrency, control=args.control, gamma=args.gamma,
                      draft_method=args.draft_method, draft_cost=args.draft_cost)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    log = os.path.join(args.out, "audit.log") if args.out else None
    with Progress("audit", log=log) as progress:
        try:
            report = audit(cfg, progress)
        except KeyboardInterrupt:  # before sampling, or while the law of what came back was being computed
            return interrupted("audit", "no report: nothing was sampled yet, or the test had not finished", progress)
        progress.stop_bar()
    for note in report.get("notes", []):
        print(f"note: {note}", file=sys.stderr)
    _emit(report, args)
    if report["partial"]:
        return interrupted("audit", f"reported the {report['samples']} samples that came back (of "
                                    f"{report['samples_asked']})")
    return STATUS[report["verdict"]] if report["verdict"] in STATUS else INTERRUPTED


def _prompts(path: str | None) -> list[str]:
    if path is None:
        from importlib.resources import files

        return json.loads(files("exactspec.audit").joinpath("prompts.json").read_text(encoding="utf-8"))
    from exactspec.cli.plan import read_prompts

    check_in_file("--prompts", path)
    return read_prompts(path)


def _emit(report: dict, args) -> None:
    from exactspec.audit.report import markdown, public, write

    if args.out:
        paths = write(report, args.out)
        print(f"wrote {', '.join(paths)}", file=sys.stderr)
    if args.json:
        print(json.dumps(public(report), indent=2))
    else:
        from rich.console import Console
        from rich.markdown import Markdown

        Console().print(Markdown(markdown(report)))
