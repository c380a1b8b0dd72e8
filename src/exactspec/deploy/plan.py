"""Planning a deployment: from per-position acceptance and a cost, the best gamma per batch size, the
predicted speedup, and ready-to-use configurations for vLLM, SGLang, transformers and exactspec.

The acceptance comes either from :mod:`exactspec.deploy.offline` (measured offline) or from a serving engine's
counters (:mod:`exactspec.deploy.enginemetrics`); both hand over a *curve*: ``curve(gamma) -> (alpha, length_counts)``,
the per-position acceptance the loop would see at that gamma and how many steps draft each length.
Every speedup is :func:`exactspec.speed.speedup.mixed_length_speedup` of that curve with the cost (a scalar c,
the paper's model, or a measured :class:`~exactspec.speed.costmodel.CostModel`); nothing here prices a step itself.
"""
from __future__ import annotations

import math
from typing import Callable

from exactspec.speed.speedup import expected_tokens, mixed_length_speedup, speedup_limit

__all__ = ["plan_rows", "best_row", "engine_configs", "build_plan", "plan_replays"]

Curve = Callable[[int], tuple]


def plan_rows(curve: Curve, cost, max_gamma: int, extra: Callable[[int], dict] | None = None) -> list[dict]:
    """``{gamma, expected_tokens, predicted_speedup}`` for gamma = 1..max_gamma (plus ``extra(gamma)``).

    expected_tokens: tokens per target call, ``sum_k w_k E(alpha, k)`` over the drafted lengths' shares w_k.
    """
    rows = []
    for g in range(1, max_gamma + 1):
        alpha, counts = curve(g)
        total = float(sum(counts))
        tokens = sum(c / total * expected_tokens(alpha, k) for k, c in enumerate(counts) if c > 0)
        row = {"gamma": g, "expected_tokens": float(tokens),
               "predicted_speedup": None if cost is None else float(mixed_length_speedup(alpha, counts, cost))}
        rows.append(row | (extra(g) if extra else {}))
    return rows


def best_row(rows: list[dict]) -> dict | None:
    """The row with the highest predicted speedup (ties, within 1e-12 relative, to the smallest gamma)."""
    if not rows or rows[0]["predicted_speedup"] is None:
        return None
    top = max(r["predicted_speedup"] for r in rows)
    return next(r for r in rows if r["predicted_speedup"] >= top * (1.0 - 1e-12))


def engine_configs(gamma: int, *, drafter: str = "draft_model", target: str | None = None,
                   draft: str | None = None, ngram: int = 3, method: str = "token") -> dict:
    """Configurations that deploy ``gamma`` draft tokens per step.

    vLLM: ``speculative_config`` (``LLM(..., speculative_config=...)`` or ``vllm serve --speculative-config
    '<json>'``); SGLang: ``launch_server`` flags (STANDALONE draft model, or NGRAM); transformers:
    ``generate`` kwargs; exactspec: ``SpeculativeGenerator`` + ``generate`` kwargs.
    ``target``/``draft``: model paths or hub ids as the engine should load them (None: fill in yourself).
    """
    draft_ref = draft or "<draft model>"
    if drafter == "prompt_lookup":
        vllm = {"method": "ngram", "num_speculative_tokens": gamma, "prompt_lookup_max": ngram,
                "prompt_lookup_min": 1}
        sglang = ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", str(gamma + 1)]
        hf = {"prompt_lookup_num_tokens": gamma, "max_matching_ngram_size": ngram}
        ours = {"drafter": "prompt_lookup", "gamma": gamma, "method": method}
    else:
        vllm = {"method": "draft_model", "model": draft_ref, "num_speculative_tokens": gamma}
        # SGLang's small-draft-model mode drafts a chain: top-k 1, gamma steps, gamma + 1 verified tokens.
        sglang = ["--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", draft_ref,
                  "--speculative-num-steps", str(gamma), "--speculative-eagle-topk", "1",
                  "--speculative-num-draft-tokens", str(gamma + 1)]
        hf = {"assistant_model": draft_ref, "num_assistant_tokens": gamma,
              "num_assistant_tokens_schedule": "constant", "assistant_confidence_threshold": 0.0}
        ours = {"draft": draft_ref, "gamma": gamma, "method": method}
    if target:
        sglang = ["--model-path", target] + sglang
    return {"vllm": vllm, "sglang": sglang, "hf": hf, "exactspec": ours}


def _json_float(x: float | None):
    return None if x is None or not math.isfinite(x) else float(x)


def build_plan(curve: Curve, costs: list[tuple[int, object]], max_gamma: int, *, limit_alpha,
               configs: Callable[[int], dict], extra: Callable[[int], dict] | None = None) -> dict:
    """The plan: per batch size (``costs``: ``[(batch_size, cost or None)]``, first = the headline), the rows,
    best gamma, predicted speedup, limit over all gamma (``speedup_limit`` of ``limit_alpha``, the last rate
    repeated beyond it) and configs; the headline batch size's values at the top level."""
    if isinstance(max_gamma, bool) or not isinstance(max_gamma, int) or max_gamma < 1:
        raise ValueError(f"max_gamma must be an integer >= 1, got {max_gamma!r}")
    by_batch = []
    for batch, cost in costs:
        rows = plan_rows(curve, cost, max_gamma, extra)
        best = best_row(rows)
        gamma = best["gamma"] if best else None
        entry = {"batch_size": batch, "recommended_gamma": gamma,
                 "predicted_speedup": best["predicted_speedup"] if best else None,
                 "speculation_helps": (best["predicted_speedup"] > 1.0) if best else None,
                 # sup over gamma of the curve's rates (the last one repeated); never below a row it
                 # contains, since each row is priced with its own gamma's rates
                 "limit": _json_float(max(speedup_limit(limit_alpha, cost), best["predicted_speedup"]))
                 if cost is not None else None,
                 "cost": cost if isinstance(cost, float) or cost is None else cost.to_dict(),
                 "rows": rows}
        if gamma is not None:
            entry.update(configs(gamma))
        by_batch.append(entry)
    head = by_batch[0]
    top = {k: head.get(k) for k in ("recommended_gamma", "predicted_speedup", "speculation_helps", "limit",
                                    "rows", "vllm", "sglang", "hf", "exactspec")}
    top |= {k: head[k] for k in ("llamacpp",) if k in head}  # an engine plan's config for llama.cpp's server
    return top | {"batch_size": head["batch_size"], "by_batch_size": by_batch}


def plan_offline(acc, costs: list[tuple[int, object]], configs: Callable[[int], dict], tree_nodes: int = 16) -> dict:
    """The plan from an :class:`~exactspec.deploy.offline.OfflineAcceptance`: at each gamma the loop's own
    per-position acceptance and drafted lengths (``acc.replay(gamma)``), so the prediction prices what
    ``generate`` would do on the written texts. Sampled with a draft model, block verification is planned
    too (``block``); measured with ``tree_ranks``, so are token trees of at most ``tree_nodes`` nodes (``tree``,
    :mod:`exactspec.deploy.offlinetrees`). exactspec's config takes whichever predicts most; the engines' configs
    stay chains verified by the token rule, which is what they run."""
    out = plan_replays(acc, "token", costs, configs)
    if acc.block_differs:
        block = plan_replays(acc, "block", costs, lambda g: {
            "exactspec": configs(g)["exactspec"] | {"method": "block"}})
        out["block"] = {k: block[k] for k in ("per_position_acceptance", "acceptance_rate",
                                              "mean_acceptance_length", "recommended_gamma",
                                              "predicted_speedup", "rows", "exactspec")} | {
            "by_batch_size": [{k: e.get(k) for k in ("batch_size", "recommended_gamma", "predicted_speedup",
                                                    "exactspec")} for e in block["by_batch_size"]]}
        for mine, theirs in zip(out["by_batch_size"], block["by_batch_size"]):
            mine["block"] = {k: theirs[k] for k in ("recommended_gamma", "predicted_speedup")}
            if (theirs["predicted_speedup"] or 0.0) > (mine["predicted_speedup"] or 0.0):
                mine["exactspec"] = theirs["exactspec"]
    if acc.rows and acc.rows[0].rank_num is not None:
        out["tree"] = _plan_tree(acc, out, costs, configs, tree_nodes)
    out["exactspec"] = out["by_batch_size"][0].get("exactspec")  # the top level is the first batch size
    return out


def _plan_tree(acc, out: dict, costs, configs, tree_nodes: int) -> dict:
    """The tree section; exactspec's config takes ``tree="auto"`` where a tree beats every chain (token
    rule and block verification) at that batch size."""
    from exactspec.deploy.offlinetrees import plan_trees

    tree = plan_trees(acc, costs, tree_nodes)
    for mine, theirs in zip(out["by_batch_size"], tree["by_batch_size"]):
        best, chain = theirs["best"], mine.get("predicted_speedup")
        if best is None or chain is None:
            continue
        theirs["vs_best_chain"] = best["predicted_speedup"] / chain
        mine["tree"] = best | {"vs_best_chain": theirs["vs_best_chain"]}  # beside that batch size's best gamma
        rival = max(chain, (mine.get("block") or {}).get("predicted_speedup") or 0.0)
        if not best["is_chain"] and best["predicted_speedup"] > rival:
            ours = configs(mine["recommended_gamma"])["exactspec"]
            mine["exactspec"] = {k: v for k, v in ours.items() if k != "gamma"} | {"tree": "auto"}
    tree["vs_best_chain"] = tree["by_batch_size"][0].get("vs_best_chain")
    return tree


def plan_replays(acc, method: str, costs, configs, replays: dict | None = None, engine_tokens: bool = False) -> dict:
    """The plan of one rule's replays (``{gamma: Replay}``; default: ``acc.replay(gamma, method)``). With
    ``engine_tokens`` a row's ``expected_tokens`` is an engine's tokens per step as its counters give it,
    1 + accepted / drafts (steps that drafted nothing left out)."""
    replays = replays or {g: acc.replay(g, method) for g in range(1, acc.max_gamma + 1)}

    def curve(g):
        r = replays[g]
        return r.per_position_acceptance or [0.0], r.length_counts

    def extra(g):
        r = replays[g]
        return {"per_position_acceptance": r.per_position_acceptance, "acceptance_rate": r.acceptance_rate,
                "mean_acceptance_length": r.mean_acceptance_length,
                "length_counts": [float(c) for c in r.length_counts]} | (
                    {"expected_tokens": r.mean_acceptance_length} if engine_tokens else {})

    full = replays[acc.max_gamma].per_position_acceptance or [0.0]
    out = build_plan(curve, costs, acc.max_gamma, limit_alpha=full, configs=configs, extra=extra)
    at = replays[out["recommended_gamma"] or acc.max_gamma]
    return out | {"per_position_acceptance": full, "acceptance_rate": at.acceptance_rate,
                  "mean_acceptance_length": at.mean_acceptance_length}


def plan_from_counters(summary: dict, costs: list[tuple[int, object]], max_gamma: int) -> dict:
    """The plan from an engine's counters (:func:`exactspec.deploy.enginemetrics.summarize`): rates beyond the
    observed positions are extrapolated conservatively (:func:`~exactspec.deploy.enginemetrics.extrapolate`).
    llama.cpp's counters get llama.cpp's flag only; vLLM's, vLLM's and the other configs as before."""
    from exactspec.deploy.enginemetrics import extrapolate

    cond = summary["per_position_acceptance"]
    top_gamma = max(max_gamma, len(cond))

    def curve(g):
        return extrapolate(cond, g)[0], [0] * g + [1]

    def configs(g):
        if summary.get("engine") == "llamacpp":
            return {"llamacpp": ["--spec-draft-n-max", str(g)]}
        return {"vllm": {"num_speculative_tokens": g},
                "sglang": ["--speculative-num-steps", str(g), "--speculative-eagle-topk", "1",
                           "--speculative-num-draft-tokens", str(g + 1)],
                "hf": {"num_assistant_tokens": g, "num_assistant_tokens_schedule": "constant"},
                "exactspec": {"gamma": g}}

    out = build_plan(curve, costs, top_gamma, limit_alpha=extrapolate(cond, top_gamma)[0], configs=configs)
    if summary.get("engine") == "llamacpp":  # llama.cpp's counters: llama.cpp's flag only
        out = {k: v for k, v in out.items() if k not in ("vllm", "sglang", "hf", "exactspec")}
    notes = []
    note = extrapolate(cond, top_gamma)[1]
    if note:
        notes.append(note)
    rec = out["recommended_gamma"]
    if rec is not None and rec > len(cond):
        notes.append(f"the recommended gamma {rec} lies beyond the {len(cond)} observed positions: it rests "
                     "on the extrapolation")
    in_use = summary.get("gamma_in_use")
    if in_use and costs[0][1] is not None:
        g = max(1, min(top_gamma, round(in_use)))
        out["predicted_speedup_in_use"] = out["rows"][g - 1]["predicted_speedup"]
    return summary | out | {"notes": notes}
