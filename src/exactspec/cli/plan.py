"""`exactspec plan`: plan a deployment offline, or read a vLLM or llama.cpp server's speculative-decoding counters.

Offline: the target writes continuations of your prompts, one teacher-forced pass of target and draft
measures the acceptance (exactspec.deploy.offline), and the cost (a profile from `exactspec profile`, or the
paper's scalar c) prices every gamma (exactspec.deploy.plan). `--engine vllm|llamacpp|sglang` replays that
engine's own drafting and verification rule instead and prints only its config (exactspec.deploy.engineplan).
Live: `--metrics URL|FILE` (alias `--vllm-metrics`; exactspec.deploy.enginemetrics).
"""
from __future__ import annotations

import math
import time

from exactspec.cli import integer, pair, real
from exactspec.cli.backend import add_backend, backend_for
from exactspec.cli.plancosts import batch_sizes as _batch_sizes, costs as _costs, engine_costs as _engine_costs
from exactspec.cli.planview import emit as _emit

ENGINES = ("exactspec", "vllm", "llamacpp", "sglang")


def register(subparsers) -> None:
    p = subparsers.add_parser("plan", help="plan gamma, speedup and engine configs; or read an engine's metrics",
                              description=__doc__)
    src = p.add_argument_group("offline")
    src.add_argument("--target", metavar="PATH", help="target model (local path or local HF cache)")
    src.add_argument("--pair", type=pair, metavar="NAME",
                     help="a shipped pair instead of --target/--draft: stdlib (alias demo) or smollm2")
    src.add_argument("--draft", metavar="PATH", help="draft model sharing the target's tokenizer")
    src.add_argument("--prompt-lookup", action="store_true", help="plan n-gram prompt lookup (no draft model)")
    src.add_argument("--ngram", type=int, default=3, help="longest n-gram prompt lookup matches (default 3)")
    src.add_argument("--prompts", metavar="FILE",
                     help="prompts: blank-line-separated text blocks, a JSON list, JSONL with a 'prompt' field, "
                          "or Spec-Bench's question.jsonl (first turn; acceptance reported per 'category')")
    src.add_argument("--max-new-tokens", type=int, default=64)
    src.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    src.add_argument("--top-k", type=int, default=0)
    src.add_argument("--top-p", type=float, default=1.0)
    src.add_argument("--seed", type=int, default=0)
    add_backend(src)
    src.add_argument("--threads", type=int, default=None, help="threads of llama.cpp (default: every core)")
    eng = p.add_argument_group("engine")
    eng.add_argument("--engine", choices=ENGINES, default="exactspec",
                     help="plan with this engine's own drafting and verification rule and print only its config "
                          "(default exactspec: exactspec's rules and every config)")
    eng.add_argument("--draft-sample-method", choices=("greedy", "probabilistic"),
                     help="vLLM's draft_sample_method to plan (default: both, the better one recommended)")
    eng.add_argument("--spec-draft-n-min", type=integer(0), metavar="N",
                     help="llama.cpp: drafts shorter than N are dropped (default 0, the server's)")
    eng.add_argument("--spec-draft-p-min", type=real(0, 1), metavar="P",
                     help="llama.cpp: drafting stops below this top-10 draft probability (default 0, the server's)")
    eng.add_argument("--audit", metavar="FILE", help="an `exactspec audit --json` report: its verdict beside the config")
    eng.add_argument("--engine-url", action="append", metavar="URL",
                     help="a running --engine server, repeatable: one with speculation off and speculative ones at two "
                          "draft lengths or more (same target); requests at batch 1, timed by the server's own clock, "
                          "price a step as a + b*gamma (+ e*gamma^2 with three gammas or more), so rows give the "
                          "engine's own tokens/s and speedup (docs/engines.md)")
    eng.add_argument("--engine-load", metavar="C[,C...]",
                     help="with --engine-url: also time the servers at these concurrencies (e.g. 4,16) and predict "
                          "each gamma's throughput there over the engine's plain throughput (rows' load)")
    eng.add_argument("--engine-profile", metavar="FILE",
                     help="with --engine-url: store the engine's measured costs here; alone: price with them")
    eng.add_argument("--context", type=integer(1), default=4096, metavar="N",
                     help="tokens per slot for the draft's KV-cache estimate (default 4096)")
    live = p.add_argument_group("live (vLLM or llama.cpp's server)")
    live.add_argument("--metrics", metavar="URL|FILE",
                      help="the server's /metrics URL, or a saved scrape (vllm:spec_decode_* or llamacpp:spec_decode_*)")
    live.add_argument("--vllm-metrics", metavar="URL|FILE", help="alias of --metrics")
    live.add_argument("--model-name", help="the model to read when the server has several")
    live.add_argument("--watch", type=float, metavar="SECONDS", help="poll and report each interval's rates")
    live.add_argument("--count", type=int, help="with --watch: stop after this many intervals (default: never)")
    cost = p.add_argument_group("cost")
    cost.add_argument("--profile", metavar="FILE", help="cost profile from `exactspec profile`")
    cost.add_argument("--cost", type=float, metavar="C", help="the paper's model: a step costs gamma*C + 1 target steps")
    cost.add_argument("--batch-sizes", metavar="1,8,32", help="batch sizes to plan for (default: the profile's, else 1)")
    p.add_argument("--max-gamma", type=int, default=8, help="largest gamma considered (default 8)")
    p.add_argument("--tree-nodes", type=int, default=16,
                   help="plan token trees of at most N nodes too (draft model only; 0 = no trees; default 16)")
    p.add_argument("--json", action="store_true", help="print JSON (with --watch: one object per interval)")
    p.set_defaults(func=run)


def run(args) -> int:
    if args.max_gamma < 1:
        raise ValueError(f"--max-gamma must be >= 1, got {args.max_gamma}")
    if args.tree_nodes < 0:
        raise ValueError(f"--tree-nodes must be >= 0, got {args.tree_nodes}")
    if args.cost is not None and args.profile:
        raise ValueError("give --cost or --profile, not both")
    if args.cost is not None and (math.isnan(args.cost) or args.cost < 0 or math.isinf(args.cost)):
        raise ValueError(f"--cost must be a finite number >= 0, got {args.cost}")
    sizes = _batch_sizes(args.batch_sizes)
    if args.metrics and args.vllm_metrics:
        raise ValueError("give --metrics or its alias --vllm-metrics, not both")
    args.metrics_option = "--vllm-metrics" if args.vllm_metrics else "--metrics"
    args.metrics = args.metrics or args.vllm_metrics
    if args.draft_sample_method and args.engine != "vllm":
        raise ValueError("--draft-sample-method is vLLM's: give --engine vllm")
    for opt in ("spec_draft_n_min", "spec_draft_p_min"):
        if getattr(args, opt) is not None and args.engine != "llamacpp":
            raise ValueError(f"--{opt.replace('_', '-')} is llama.cpp's: give --engine llamacpp")
    if (args.engine_url or args.engine_profile) and (args.engine == "exactspec" or args.metrics or
                                                     args.cost is not None or args.profile):
        raise ValueError("--engine-url / --engine-profile price an engine's plan: give --engine vllm|llamacpp|sglang, "
                         "and no --cost, --profile or --metrics")
    if args.engine_load is not None:
        from exactspec.audit.engineload import parse_loads

        parse_loads(args.engine_load)  # a bad list fails before any model loads
        if not args.engine_url:
            raise ValueError("--engine-load times servers: give --engine-url too")
    if args.engine_profile and not args.engine_url:
        from exactspec.audit.enginecosts import load

        load(args.engine_profile)  # a bad file fails before any model loads
    audit = _audit(args.audit) if args.audit else None  # read before any model loads or a server is scraped
    if args.metrics:
        offline = [f for f in ("target", "pair", "draft", "prompts") if getattr(args, f)] + \
            (["prompt_lookup"] if args.prompt_lookup else []) + (["engine"] if args.engine != "exactspec" else [])
        if offline:
            raise ValueError(f"{args.metrics_option} reads a server; it takes no --{offline[0].replace('_', '-')}")
        return _live(args, sizes, audit)
    if args.watch is not None or args.model_name:
        raise ValueError("--watch and --model-name need --metrics (alias --vllm-metrics)")
    return _offline(args, sizes, audit)


def _audit(path: str) -> dict:
    from exactspec.deploy.engineplan import read_audit

    return read_audit(path)


def _with_audit(out: dict, audit: dict | None, engine: str | None, temperature: float | None) -> dict:
    from exactspec.deploy.engineplan import with_audit

    return with_audit(out, audit, engine, temperature)


# ------------------------------------------------------------------------------------------ offline
def _offline(args, sizes, audit=None) -> int:
    from exactspec.cli.progress import Progress
    from exactspec.deploy.plan import engine_configs, plan_offline
    from exactspec.pairs.load import chat_prompt, is_chat

    target_path, draft_path = _paths(args)
    if not args.prompts:
        raise ValueError("--prompts FILE is required (the prompts your deployment will serve)")
    from exactspec.deploy.prompts import read_prompt_file

    prompts = read_prompt_file(args.prompts)
    categories = prompts.categories
    if args.max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    given = _costs(args, sizes) if args.cost is not None or args.profile else None  # read before any model loads
    with Progress("plan") as progress:
        progress.phase("loading the models")
        target, draft, tok = _load(target_path, None if args.prompt_lookup else draft_path, args.pair,
                                   backend_for(args, target_path), args.threads)
        if args.pair and is_chat(args.pair):  # a chat pair serves user messages: render them as its template does
            prompts = [chat_prompt(tok, p) for p in prompts]
        acc, stopped = _acceptance(args, target, draft, tok, prompts, progress)
        if acc is None:
            from exactspec.cli.progress import interrupted

            return interrupted("plan", f"no prompt measured yet (of {len(prompts)}); nothing to plan", progress)
        profile = None
        if args.engine_url or args.engine_profile:
            profile, costs, notes = _engine_costs(args, [tok(p)["input_ids"] for p in prompts], progress)
            stopped_costs = bool(profile.get("interrupted"))
        else:
            costs, notes, stopped_costs = given or _costs(args, sizes, target, draft, progress, measure=not stopped)
    drafter = "prompt_lookup" if args.prompt_lookup else "draft_model"
    if args.engine == "exactspec":
        out = plan_offline(acc, costs, lambda g: engine_configs(g, drafter=drafter, target=target_path,
                                                                 draft=draft_path, ngram=args.ngram, method="token"),
                           tree_nodes=args.tree_nodes)
    else:
        from exactspec.deploy.engineplan import plan_engine

        t_eng, d_eng = _engine_paths(args, target_path, draft_path)
        out = plan_engine(acc, args.engine, costs, _settings(args), draft_method=args.draft_sample_method,
                          target=t_eng, draft=d_eng)
        draft_path = d_eng if d_eng and d_eng.endswith(".gguf") else draft_path
        if profile is not None:
            from exactspec.audit.enginecosts import annotate

            out = annotate(out, profile) | {"pricing": "the engine's own costs, measured live"}
    out = {"engine": args.engine} | out
    _details(args, out, acc, costs, categories, draft, draft_path)
    out["measured"] = {"prompts": len(acc.texts), "tokens_written": acc.tokens, "temperature": args.temperature,
                       "top_k": args.top_k, "top_p": args.top_p, "drafter": drafter, "target": target_path,
                       "draft": draft_path}
    out["notes"] = notes + ["acceptance measured offline: the target wrote the texts, one teacher-forced pass "
                            "of each model scored them, and the speculative loop was replayed over them in "
                            "expectation (exactspec.deploy.offline)"] + out.get("notes", [])
    if "tree" in out:
        out["notes"].append("trees: acceptance per (depth, sibling rank) from the same pass, weighted where a "
                            "chain's steps reach (exactspec.deploy.offlinetrees); vLLM and SGLang run chains here: "
                            "the tree applies to exactspec (tree='auto')")
    if args.pair == "smollm2" and not args.prompt_lookup:
        out["notes"].append("the smollm2 draft is exactspec's own format (2 layers that borrow the target's "
                            "embedding, a head over 8,192 tokens): exactspec loads it with "
                            "exactspec.load_pair('smollm2'), and transformers' assisted generation runs it once "
                            "loaded; vLLM and SGLang cannot load this format (a plain Llama head has no -inf "
                            "rows), so their configs above name its folder only as a placeholder")
    if stopped or stopped_costs:
        out["partial"] = {"interrupted": True, "prompts_measured": len(acc.texts), "prompts_planned": len(prompts),
                          "batch_sizes_costed": [b for b, c in costs if c is not None],
                          "batch_sizes_planned": sizes or [1]}
        if profile is not None and profile.get("interrupted"):
            out["partial"]["engine_requests_timed"] = [m["requests"] for m in profile["measured"]]
    out = _with_audit(out, audit, None if args.engine == "exactspec" else args.engine, args.temperature)
    _emit(out, args.json)
    if "partial" in out:
        from exactspec.cli.progress import interrupted

        part = out["partial"]
        return interrupted("plan", f"printed the plan of what was measured (partial: {part['prompts_measured']} of "
                                   f"{part['prompts_planned']} prompts; costed batch sizes "
                                   f"{part['batch_sizes_costed'] or 'none'} of {part['batch_sizes_planned']})")
    return 0


ACCEPTANCE_BATCH = 8  # prompts per measure_acceptance call: its own batch size, so the chunks change nothing


def _acceptance(args, target, draft, tok, prompts, progress):
    """measure_acceptance over the prompts, 8 at a time (each chunk seeded as one call over all of them seeds
    it: the same texts and figures), a progress line per chunk; Ctrl-C keeps the chunks done.
    (OfflineAcceptance of those chunks or None, whether it was interrupted)."""
    from exactspec.deploy.offline import OfflineAcceptance, measure_acceptance
    from exactspec.engine.treepolicy import AUTO_MAX_BRANCH  # sibling ranks to measure: tree="auto" branches at most so

    kw = dict(draft=draft, prompt_lookup=args.prompt_lookup, max_new_tokens=args.max_new_tokens,
              temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, max_gamma=args.max_gamma,
              ngram=args.ngram, batch_size=ACCEPTANCE_BATCH,
              tree_ranks=0 if args.prompt_lookup or not args.tree_nodes or args.engine != "exactspec" else AUTO_MAX_BRANCH)
    if args.engine != "exactspec":
        from exactspec.deploy.enginerules import RowTerms

        kw["row_terms"] = RowTerms(_settings(args), draft=draft, max_gamma=args.max_gamma,
                                   llamacpp=args.engine == "llamacpp")
    parts, stopped = [], False
    progress.start(len(prompts), "measuring acceptance (the target writes; one teacher-forced pass scores)")
    try:
        for i in range(0, len(prompts), ACCEPTANCE_BATCH):
            chunk = prompts[i:i + ACCEPTANCE_BATCH]
            parts.append(measure_acceptance(target, tok, chunk, seed=args.seed + i, **kw))
            progress.unit(f"prompts {i + 1}-{i + len(chunk)}" if len(chunk) > 1 else f"prompt {i + 1}", i + len(chunk))
    except KeyboardInterrupt:
        stopped = True
    if not parts:
        return None, stopped
    return OfflineAcceptance(parts[0].greedy, parts[0].drafter, parts[0].max_gamma,
                             [r for a in parts for r in a.rows], [t for a in parts for t in a.texts]), stopped


def _settings(args):
    from exactspec.deploy.enginerules import EngineSettings

    return EngineSettings(n_min=args.spec_draft_n_min or 0, p_min=args.spec_draft_p_min or 0.0, ngram=args.ngram,
                          temperature=args.temperature)


def _engine_paths(args, target_path, draft_path) -> tuple[str | None, str | None]:
    """The files the engine loads: llama.cpp's server takes GGUF files (a shipped pair's, converted into the
    cache on first use; another path only if it is one: else a placeholder)."""
    if args.engine != "llamacpp":
        return target_path, draft_path
    if args.pair:
        from exactspec.pairs import gguf
        from exactspec.pairs.load import pair_name

        if pair_name(args.pair) == "smollm2":
            return target_path, (None if args.prompt_lookup else str(gguf.smollm2_draft_gguf()))
        return tuple(str(p) for p in gguf.stdlib_gguf("f16"))
    return tuple(p if p and p.endswith(".gguf") else None for p in (target_path, draft_path))


def _details(args, out, acc, costs, categories, draft, draft_path) -> None:
    from exactspec.deploy.engineplan import add_details

    add_details(out, acc, costs, categories, engine=args.engine, settings=_settings(args), context=args.context,
                draft=draft_path if draft_path and draft_path.endswith(".gguf") else draft)


def pair_paths(name: str) -> tuple[str, str]:
    """Where a shipped pair's target and draft live (what the emitted engine configs name)."""
    from exactspec.pairs.load import pair_name

    if pair_name(name) == "smollm2":
        from exactspec.pairs import smollm2

        return str(smollm2.gguf_path()), str(smollm2.PAIR_DIR)
    from exactspec.pairs.stdlib import PAIR_DIR

    return str(PAIR_DIR / "target"), str(PAIR_DIR / "draft")


def _paths(args) -> tuple[str, str | None]:
    if args.pair and (args.target or args.draft):
        raise ValueError("--pair replaces --target/--draft; give one or the other")
    if args.pair:
        return pair_paths(args.pair)
    if not args.target:
        raise ValueError("give --target PATH (with --draft PATH or --prompt-lookup), or --pair demo")
    if args.prompt_lookup and args.draft:
        raise ValueError("--prompt-lookup and --draft exclude each other")
    if not args.prompt_lookup and not args.draft:
        raise ValueError("--target needs --draft PATH or --prompt-lookup")
    return args.target, args.draft


def _load(target_path, draft_path, pair=None, backend="transformers", threads=None):
    from transformers.utils import logging as hf_logging

    from exactspec.cli.backend import load_on_backend

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    if pair:  # a shipped pair hides its conversion's tqdm bar itself, and says on stderr when it rebuilds its cache
        target, draft, tok = load_on_backend(backend, pair, None, None, threads=threads)
        return target, (draft if draft_path else None), tok
    return load_on_backend(backend, None, target_path, draft_path, threads=threads)


def read_prompts(path: str) -> list[str]:
    """Prompts from a JSON list (strings or {"prompt"|"text": ...}), JSONL (or Spec-Bench's question.jsonl), or
    blank-line-separated text (:func:`exactspec.deploy.prompts.read_prompt_file`)."""
    from exactspec.deploy.prompts import read_prompt_file

    return list(read_prompt_file(path))


# --------------------------------------------------------------------------------------------- live
def _live(args, sizes, audit=None) -> int:
    from exactspec.deploy.enginemetrics import parse_spec_counters, read_metrics, summarize
    from exactspec.deploy.plan import plan_from_counters

    costs, notes, _ = _costs(args, sizes)

    def scrape():
        return parse_spec_counters(read_metrics(args.metrics, option=args.metrics_option), args.model_name)

    def report(counters, extra):
        summary = summarize(counters)
        if summary["per_position_acceptance"]:
            out = plan_from_counters(summary, costs, args.max_gamma)
        else:
            out = summary | {"recommended_gamma": None, "predicted_speedup": None, "rows": [], "by_batch_size": [],
                             "notes": ["no drafts with per-position counters in this window"]} | (
                {"llamacpp": None} if counters.engine == "llamacpp" else {"vllm": None, "sglang": None, "hf": None})
        out["notes"] = notes + out.get("notes", [])
        return _with_audit(out | extra, audit, counters.engine, None)

    first = scrape()
    if args.watch is None:
        _emit(report(first, {"window": "since the server started"}), args.json)
        return 0
    if not (args.watch > 0 and math.isfinite(args.watch)):
        raise ValueError(f"--watch must be a positive number of seconds, got {args.watch}")
    if args.count is not None and args.count < 1:
        raise ValueError(f"--count must be >= 1, got {args.count}")
    prev, i = first, 0
    try:
        while args.count is None or i < args.count:
            time.sleep(args.watch)
            cur = scrape()
            delta = cur.minus(prev)  # raises on a restart (counters going backwards)
            i += 1
            _emit(report(delta, {"window": f"interval {i} ({args.watch:g} s)", "interval": i}), args.json,
                  compact=True)
            prev = cur
    except KeyboardInterrupt:
        pass
    return 0
