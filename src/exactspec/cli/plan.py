"""`exactspec plan`: plan a deployment offline, or read a vLLM server's live speculative-decoding counters.

Offline: the target writes continuations of your prompts, one teacher-forced pass of target and draft
measures the acceptance (exactspec.deploy.offline), and the cost (a profile from `exactspec profile`, or the
paper's scalar c) prices every gamma (exactspec.deploy.plan). Live: `--vllm-metrics URL|FILE` (exactspec.deploy.enginemetrics).
"""
from __future__ import annotations

import json
import math
import time

from exactspec.cli import pair
from exactspec.cli.backend import add_backend, backend_for



def register(subparsers) -> None:
    p = subparsers.add_parser("plan", help="plan gamma, speedup and vLLM/SGLang configs; or read vLLM's metrics",
                              description=__doc__)
    src = p.add_argument_group("offline")
    src.add_argument("--target", metavar="PATH", help="target model (local path or local HF cache)")
    src.add_argument("--pair", type=pair, metavar="NAME",
                     help="a shipped pair instead of --target/--draft: stdlib (alias demo) or smollm2")
    src.add_argument("--draft", metavar="PATH", help="draft model sharing the target's tokenizer")
    src.add_argument("--prompt-lookup", action="store_true", help="plan n-gram prompt lookup (no draft model)")
    src.add_argument("--ngram", type=int, default=3, help="longest n-gram prompt lookup matches (default 3)")
    src.add_argument("--prompts", metavar="FILE",
                     help="prompts: blank-line-separated text blocks, a JSON list, or JSONL with a 'prompt' field")
    src.add_argument("--max-new-tokens", type=int, default=64)
    src.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    src.add_argument("--top-k", type=int, default=0)
    src.add_argument("--top-p", type=float, default=1.0)
    src.add_argument("--seed", type=int, default=0)
    add_backend(src)
    src.add_argument("--threads", type=int, default=None, help="threads of llama.cpp (default: every core)")
    live = p.add_argument_group("live (vLLM)")
    live.add_argument("--vllm-metrics", metavar="URL|FILE", help="vLLM's /metrics URL, or a saved scrape")
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
    if args.vllm_metrics:
        offline = [f for f in ("target", "pair", "draft", "prompts") if getattr(args, f)] + \
            (["prompt_lookup"] if args.prompt_lookup else [])
        if offline:
            raise ValueError(f"--vllm-metrics reads a server; it takes no --{offline[0].replace('_', '-')}")
        return _live(args, sizes)
    if args.watch is not None or args.model_name:
        raise ValueError("--watch and --model-name need --vllm-metrics")
    return _offline(args, sizes)


# ------------------------------------------------------------------------------------------ offline
def _offline(args, sizes) -> int:
    from exactspec.cli.progress import Progress
    from exactspec.deploy.plan import engine_configs, plan_offline
    from exactspec.pairs.load import chat_prompt, is_chat

    target_path, draft_path = _paths(args)
    if not args.prompts:
        raise ValueError("--prompts FILE is required (the prompts your deployment will serve)")
    prompts = read_prompts(args.prompts)
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
        costs, notes, stopped_costs = given or _costs(args, sizes, target, draft, progress, measure=not stopped)
    drafter = "prompt_lookup" if args.prompt_lookup else "draft_model"
    method = "token"
    out = plan_offline(acc, costs, lambda g: engine_configs(g, drafter=drafter, target=target_path,
                                                             draft=draft_path, ngram=args.ngram, method=method),
                       tree_nodes=args.tree_nodes)
    out["measured"] = {"prompts": len(acc.texts), "tokens_written": acc.tokens, "temperature": args.temperature,
                       "top_k": args.top_k, "top_p": args.top_p, "drafter": drafter, "target": target_path,
                       "draft": draft_path}
    out["notes"] = notes + ["acceptance measured offline: the target wrote the texts, one teacher-forced pass "
                            "of each model scored them, and the speculative loop was replayed over them in "
                            "expectation (exactspec.deploy.offline)"]
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
              tree_ranks=0 if args.prompt_lookup or not args.tree_nodes else AUTO_MAX_BRANCH)
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
    """Prompts from a JSON list (strings or {"prompt"|"text": ...}), JSONL, or blank-line-separated text."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise ValueError(f"cannot read --prompts {path!r}: {exc.strerror or exc}") from None

    def field(item):
        if isinstance(item, str):
            return item
        if isinstance(item, dict) and isinstance(item.get("prompt", item.get("text")), str):
            return item.get("prompt", item.get("text"))
        raise ValueError(f"--prompts {path!r}: each entry must be a string or have a 'prompt' field")

    stripped = text.strip()
    if path.endswith(".jsonl"):
        prompts = [field(json.loads(line)) for line in stripped.splitlines() if line.strip()]
    elif path.endswith(".json"):
        data = json.loads(stripped)
        data = data.get("prompts", data) if isinstance(data, dict) else data
        if not isinstance(data, list):
            raise ValueError(f"--prompts {path!r}: expected a JSON list of prompts")
        prompts = [field(x) for x in data]
    else:
        prompts = [b.strip("\n") for b in text.split("\n\n") if b.strip()]
    if not prompts or not all(prompts):
        raise ValueError(f"--prompts {path!r} has no (or empty) prompts")
    return prompts


def _batch_sizes(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        sizes = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ValueError(f"--batch-sizes must be comma-separated integers >= 1, got {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise ValueError(f"--batch-sizes must be comma-separated integers >= 1, got {text!r}")
    return list(dict.fromkeys(sizes))


def _costs(args, sizes, target=None, draft=None, progress=None, measure=True) -> tuple[list, list[str], bool]:
    """[(batch size, cost)], notes, and whether Ctrl-C stopped the measuring. Offline without a cost: measured
    here (bare forwards), one batch size at a time; after a Ctrl-C (`measure` False), or for the batch sizes a
    Ctrl-C left unmeasured, none (acceptance only)."""
    from exactspec.deploy.costprofile import CostProfile

    lookup = bool(getattr(args, "prompt_lookup", False))
    if args.cost is not None:
        return [(b, float(args.cost)) for b in sizes or [1]], [
            f"cost: the paper's model, a step drafting gamma tokens costs gamma*{args.cost:g} + 1 target steps"], False
    if args.profile:
        prof = CostProfile.load(args.profile)
        picked = [(b, prof.cost(b)) for b in sizes or prof.batch_sizes]
        note = f"cost: profile {args.profile}" + (" (calibrated on exactspec's loop)"
                                                  if prof.metadata.get("calibrated") else " (bare forward passes)")
        if prof.metadata.get("partial"):
            note += " (a partial profile: its measuring was interrupted)"
        return [(b, cm.without_draft() if lookup else cm) for b, cm in picked], [note], False
    if target is None or not measure:
        return [(b, None) for b in sizes or [1]], [
            "no --cost or --profile: acceptance only, no gamma recommended" if target is None else
            "cost not measured (interrupted): acceptance only, no gamma recommended"], False
    measured, stopped = {}, False
    if progress is not None:
        progress.start(len(sizes or [1]), "measuring the cost per batch size (bare forward passes)")
    try:
        for b in sizes or [1]:
            measured[b] = CostProfile.measure(target, draft, batch_sizes=[b], repeats=3).cost(b)
            if progress is not None:
                progress.unit(f"batch size {b}")
    except KeyboardInterrupt:
        stopped = True
    note = "cost: measured on this machine now (bare forward passes); pass --profile from the deployment machine"
    if stopped:
        note += f"; interrupted: batch sizes {[b for b in sizes or [1] if b not in measured]} not costed"
    # A plan mixes no measured and unmeasured batch sizes: the costed ones, else none (acceptance only).
    costs = [(b, measured[b]) for b in sizes or [1] if b in measured] or [(b, None) for b in sizes or [1]]
    return costs, [note], stopped


# --------------------------------------------------------------------------------------------- live
def _live(args, sizes) -> int:
    from exactspec.deploy.enginemetrics import parse_spec_counters, read_metrics, summarize
    from exactspec.deploy.plan import plan_from_counters

    costs, notes, _ = _costs(args, sizes)

    def scrape():
        return parse_spec_counters(read_metrics(args.vllm_metrics), args.model_name)

    def report(counters, extra):
        summary = summarize(counters)
        if summary["per_position_acceptance"]:
            out = plan_from_counters(summary, costs, args.max_gamma)
        else:
            out = summary | {"recommended_gamma": None, "predicted_speedup": None, "rows": [], "vllm": None,
                             "sglang": None, "hf": None, "by_batch_size": [], "notes": [
                                 "no drafts with per-position counters in this window"]}
        out["notes"] = notes + out.get("notes", [])
        return out | extra

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


# ------------------------------------------------------------------------------------------- output
def _emit(out: dict, as_json: bool, compact: bool = False) -> None:
    if as_json:
        print(json.dumps(out, indent=None if compact else 2), flush=True)
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    fmt = (lambda v: "-" if v is None else f"{v:.3f}")
    part = out.get("partial")
    if part:
        console.print(f"[bold]partial[/] (interrupted): acceptance from {part['prompts_measured']} of "
                      f"{part['prompts_planned']} prompts; costed batch sizes {part['batch_sizes_costed'] or 'none'} "
                      f"of {part['batch_sizes_planned']}")
    pp = " ".join(f"{a:.2f}" for a in out.get("per_position_acceptance") or []) or "-"
    head = f"[bold]{out.get('window', 'offline plan')}[/]: " if "window" in out else ""
    console.print(f"{head}per-position acceptance {pp}; acceptance rate {fmt(out.get('acceptance_rate'))}; "
                  f"mean acceptance length {fmt(out.get('mean_acceptance_length'))}"
                  + (f"; gamma in use {out['gamma_in_use']:.2f}" if out.get("gamma_in_use") else ""))
    if out.get("recommended_gamma") is not None:
        for entry in out["by_batch_size"]:
            lim = entry["limit"]
            console.print(f"batch {entry['batch_size']}: best gamma {entry['recommended_gamma']} -> "
                          f"{entry['predicted_speedup']:.3f}x predicted (limit over all gamma "
                          f"{'unbounded' if lim is None else f'{lim:.3f}x'})")
    blk = out.get("block")
    if blk and blk.get("recommended_gamma") is not None:
        console.print(f"block verification (exactspec): best gamma {blk['recommended_gamma']} -> "
                      f"{blk['predicted_speedup']:.3f}x predicted; per-position acceptance "
                      + " ".join(f"{a:.2f}" for a in blk["per_position_acceptance"]))
    tree = (out.get("tree") or {}).get("best")
    if tree:
        console.print(f"token tree (exactspec, tree='auto'): best {tree['tree']} ({tree['nodes']} nodes) -> "
                      f"{tree['expected_tokens']:.2f} tokens/call, {tree['predicted_speedup']:.3f}x predicted"
                      f" ({out['tree']['vs_best_chain']:.2f}x the best chain)")
    if not compact and out.get("rows"):
        table = Table(title=f"batch size {out['batch_size']}")
        for col in ("gamma", "tokens/step", "predicted speedup"):
            table.add_column(col, justify="right")
        for r in out["rows"]:
            s = r["predicted_speedup"]
            table.add_row(str(r["gamma"]), f"{r['expected_tokens']:.3f}", "-" if s is None else f"{s:.3f}x",
                          style="bold green" if r["gamma"] == out["recommended_gamma"] else None)
        console.print(table)
    if out.get("vllm"):
        console.print(f"vLLM speculative_config: {json.dumps(out['vllm'])}")
        if not compact:
            console.print(f"SGLang: {' '.join(out['sglang'])}")
            console.print(f"transformers generate(**{json.dumps(out['hf'])})")
            console.print(f"exactspec: {json.dumps(out['exactspec'])}")
    for note in out.get("notes", []):
        console.print(f"[dim]note: {note}[/]")
