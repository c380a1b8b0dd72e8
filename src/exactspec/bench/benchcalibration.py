"""The bench's loop-calibrated predictions: what each exactspec system's measured acceptance predicts, priced
by untimed calibration calls of the loop made beside the timed ones.

Each timed call of an exactspec system follows its own untimed call, back to back: that call's statistics
price the system's draft step, target calls and per-step overhead. Plain decoding, the baseline every
speedup is a ratio to, is priced by our target-alone loop's timed call of the same repeat (measured, not
predicted: an untimed call of it beside the timed one differed from it by up to 10% at batch 4, a noise
that only blurred what is predicted, the speculative run's time; without that system in the bench, an
untimed call of the loop stands in). This VM's speed drifts by up to 25% within a bench; a calibration pass
made apart from the timed calls (r10: one pass over all systems before each repeat) was priced at another
speed than the calls it priced, and the held-out predictions came out 12-17% low. Each repeat is predicted
from its own calls (:func:`calibrated` of that repeat), and the report gives their median and measured ÷
predicted per system.
"""
from __future__ import annotations

import statistics
import time

import torch

from exactspec.engine.baseline import target_alone_loop
from exactspec.speed.prediction import predict_batch
from exactspec.verification.sampling import probs_from_logits, sample_from_probs
from exactspec.speed.stats import GenerationStats

__all__ = ["plain_calibration_call", "calibrated", "predictions_by_repeat",
           "predicted_speedup", "prediction_errors", "median"]


def predicted_speedup(system, runs: list, cost_model, prefill: dict | None = None,
                      batch_size: int = 1) -> float | None:
    """:func:`exactspec.speed.prediction.predict` for one system (`runs`: its GenerationStats, one per prompt
    batch): per step with the bare-forwards `cost_model` (a model-free drafter's draft priced free), or end
    to end with `prefill` ({"plain": s, name: s per call, "n_tokens": per row}), `cost_model` then being
    that system's calibrated model, used as is; a chain at batch size > 1 end to end prices each prompt
    batch's own steps (:func:`exactspec.speed.prediction.predict_batch`)."""
    from exactspec.speed.prediction import predict, predict_tree

    stats = GenerationStats.merge(runs)
    if system.tree is not None:  # as predict's: none for a run that drafted nothing (tree="auto" may not)
        return predict_tree(stats, cost_model, prefill, system.name) if any(stats.position_drafted) else None
    if prefill is None:
        cm = cost_model.without_draft() if system.drafter == "prompt_lookup" else cost_model
        return predict(stats, cm)
    if batch_size > 1:  # batch by batch, each its slowest row's steps
        return predict_batch(runs, cost_model, n_tokens=prefill["n_tokens"], prefill_plain=prefill["plain"],
                             prefill_spec=prefill[system.name])
    return predict(stats, cost_model, n_tokens=prefill["n_tokens"], prefill_plain=prefill["plain"],
                   prefill_spec=prefill[system.name])


def plain_calibration_call(target, ids, mask, cfg, seed: int, cal: dict, timed: float | None = None,
                           timings: dict | None = None) -> None:
    """Plain decoding's price into the repeat's calibration record `cal`: the seconds of a call of our
    target-alone loop (whole call, and prefill). The timed call's (`timed` seconds, its `timings`) when the
    bench runs that loop; otherwise one untimed call made here. The exactspec systems' untimed calls, each
    just before its timed one, add their run statistics, which price the draft step and the per-step
    overhead inside the loop (block verification costs more than the token rule, prompt lookup drafts in
    Python)."""
    if timed is None:
        timings = {}
        t0 = time.perf_counter()
        target_alone_loop(target, ids, mask, max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature,
                          top_p=cfg.top_p, seed=seed, timings=timings)
        timed = time.perf_counter() - t0
    cal["plain"] += timed
    cal["plain_prefill"] += timings["prefill"]
    cal["calls"] += 1


def calibrated(passes: list[dict], systems: dict, cfg, cost_model) -> tuple[dict, dict]:
    """Per exactspec system, the cost model re-priced on that system's untimed calibration calls in `passes`
    together (one record per repeat, see :func:`plain_calibration_call`), and the prefill seconds per call
    of plain decoding and of that system."""
    names = list(passes[0]["stats"])
    if not names:
        return {}, {}
    n, calls = cfg.max_new_tokens, sum(p["calls"] for p in passes)
    plain_s, plain_prefill = sum(p["plain"] for p in passes), sum(p["plain_prefill"] for p in passes)
    # One decoding step of plain decoding (the batch's step when batch_size > 1); the prefill gives the
    # first token, so a call of n tokens takes n - 1 steps.
    plain_time = (plain_s - plain_prefill) / (calls * (n - 1)) if n > 1 else None
    costs, prefill = {}, {"plain": plain_prefill / calls, "n_tokens": n}
    for name in names:
        stats = [st for p in passes for st in p["stats"][name]]
        base = cost_model.without_draft() if systems[name].drafter == "prompt_lookup" else cost_model
        costs[name] = base.calibrate(stats, plain_time=plain_time)
        prefill[name] = sum(s.prefill_time for s in stats) / len(stats)
    return costs, prefill


def predictions_by_repeat(results: dict, systems: dict, cfg,
                           by_repeat: list[tuple[dict, dict]]) -> dict[str, list]:
    """Per exactspec system, one loop-calibrated prediction per repeat: that repeat's timed acceptance priced
    by that repeat's calibration calls (`by_repeat`: :func:`calibrated` of each repeat; None for a repeat
    that drafted nothing)."""
    out: dict[str, list] = {}
    for r, (costs, prefill) in enumerate(by_repeat):
        for name, cm in costs.items():
            stats = results[name].stats_by_repeat.get(r)
            out.setdefault(name, []).append(
                predicted_speedup(systems[name], stats, cm, prefill, cfg.batch_size) if stats else None)
    return out


def median(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def prediction_errors(rows: list[dict]) -> dict[str, float]:
    """Per exactspec system, measured ÷ loop-calibrated prediction − 1 (both against our target-alone loop):
    the median over repeats of each repeat's measured ÷ that repeat's prediction, paired as every × of the
    bench is (a ratio of the two medians pairs one repeat's measurement with another's prediction: r15's
    block γ=4 at batch 4 read +15% where its repeats were +1, +2 and +15%). Without per-repeat figures, the
    ratio of the medians."""
    out = {}
    for r in rows:
        if not (r["predicted_speedup"] and r["speedup_vs_exactspec_loop"]):
            continue
        paired = [m / p for m, p in zip(r.get("speedup_vs_exactspec_loop_by_repeat") or [],
                                        r.get("predicted_speedup_by_repeat") or []) if m and p]
        out[r["system"]] = (statistics.median(paired) if paired else
                            r["speedup_vs_exactspec_loop"] / r["predicted_speedup"]) - 1
    return out
