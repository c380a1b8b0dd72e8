"""The report of a benchmark's measurements: a row per system (tokens/s, paired speedups, acceptance,
predictions), the summary of the gamma sweep, and the greedy equality check; from
:func:`exactspec.bench.bench.run_bench`'s records, whole or partial (:mod:`exactspec.bench.benchpartial`)."""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import torch

from exactspec.bench.benchcalibration import (calibrated, median, predicted_speedup, prediction_errors,
                                              predictions_by_repeat)
from exactspec.speed.stats import GenerationStats

BASELINE = "target (HF generate)"
LOOP = "target (exactspec loop)"


@dataclass
class SystemResult:
    name: str
    times: list[float] = field(default_factory=list)  # seconds per repeat (all prompt batches)
    tokens: list[int] = field(default_factory=list)  # new tokens per repeat
    stats_by_repeat: dict = field(default_factory=dict)  # repeat -> exactspec GenerationStats per call

    @property
    def stats(self) -> list:
        """The last repeat's GenerationStats, one per call (what the report's acceptance figures read)."""
        return self.stats_by_repeat[max(self.stats_by_repeat)] if self.stats_by_repeat else []

    @property
    def tokens_per_second(self) -> float:
        return statistics.median(n / t for n, t in zip(self.tokens, self.times))

    def ratios_to(self, other: "SystemResult") -> list[float]:
        """This system's tokens/s over `other`'s, repeat by repeat (the two were timed interleaved)."""
        return [(n / t) / (n0 / t0) for n, t, n0, t0 in zip(self.tokens, self.times, other.tokens, other.times)]

    def speedup_over(self, other: "SystemResult") -> float:
        """The median of :meth:`ratios_to`: a repeat's systems ran side by side, prompt batch by prompt batch,
        so a ratio within one repeat cancels the machine's drift between repeats, which a ratio of two
        medians taken from different repeats does not."""
        return statistics.median(self.ratios_to(other))


def feature_draft(draft) -> bool:
    """Whether `draft` is a feature draft (EAGLE-style: chains only, no HF assisted generation)."""
    from exactspec.pairs.featuredraft import FeatureDraft

    return isinstance(draft, FeatureDraft)


def cal_ok(passes: list, systems: dict) -> bool:
    """Whether the calibration records can price every exactspec system: plain decoding timed at least once
    per repeat, and each system's own untimed calls there (a partial repeat may have neither yet)."""
    spec = [k for k, s in systems.items() if s.kind == "exactspec"]
    return bool(passes) and (not spec or all(p["calls"] > 0 and all(p["stats"].get(k) for k in spec)
                                             for p in passes))


def finish_report(results: dict, systems: dict, passes: list, cfg, cost_model, draft, equal, compared,
                  partial: bool = False) -> dict:
    """The report of `passes` (one calibration record per repeat) and the timed `results` of the same repeats:
    calibrated predictions per repeat, rows, and the greedy equality check (a partial report: None for a system
    none of whose tokens were compared)."""
    if cal_ok(passes, systems):
        loop_costs, prefill = calibrated(passes, systems, cfg, cost_model)
        by_repeat = [calibrated([cal], systems, cfg, cost_model) for cal in passes]
    else:  # a partial repeat that timed no plain decoding yet: nothing to calibrate a prediction with
        loop_costs, prefill, by_repeat = {}, {}, []
    report = _report(results, systems, cfg, cost_model, loop_costs, prefill,
                     predictions_by_repeat(results, systems, cfg, by_repeat))
    if feature_draft(draft):
        report["notes"].append("a feature draft (EAGLE-style) drafts chains only, and HF assisted generation "
                               "cannot run it")
    report["calibrated_by_repeat"] = [{"cost_models": {k: cm.to_dict() for k, cm in costs.items()},
                                       "prefill_seconds": pre} for costs, pre in by_repeat]
    for row in report["rows"]:
        checked = equal is not None and (not partial or compared[row["system"]] > 0)
        row["greedy_equals_target_generate"] = equal[row["system"]] if checked else None
        row["greedy_tokens_compared"] = compared[row["system"]] if checked else None
    return report


def baseline_name(systems: dict) -> str:
    """What every speedup is a ratio to: transformers' generate, else (a model on another backend) that
    runtime's own plain decoding (llama.cpp's binary, a "peer" with no draft length), else our loop."""
    if BASELINE in systems:
        return BASELINE
    plain = [k for k, s in systems.items() if s.kind == "peer" and s.gamma is None]
    return plain[0] if plain else next(iter(systems))


def _report(results: dict[str, SystemResult], systems: dict, cfg, cost_model,
            loop_costs: dict, prefill: dict, predicted: dict[str, list]) -> dict:
    base = results[baseline_name(systems)]
    loop = results.get(LOOP)
    assisted = next((results[k] for k, s in systems.items() if s.kind == "assisted"), None)
    rows = []
    for name, res in results.items():
        system = systems[name]
        tps = res.tokens_per_second
        st = GenerationStats.merge(res.stats) if res.stats else None
        rows.append({
            "system": name,
            "kind": system.kind,
            "gamma": system.gamma,
            "method": system.method,
            "drafter": system.drafter,
            "tokens_per_second": tps,
            "speedup_vs_target": res.speedup_over(base),
            "speedup_vs_exactspec_loop": res.speedup_over(loop) if loop else None,
            "speedup_vs_assisted": res.speedup_over(assisted) if assisted else None,
            "acceptance_rate": st.acceptance_rate if st else None,
            "mean_accepted_per_step": st.mean_accepted_per_step if st else None,
            "mean_tokens_per_step": st.mean_tokens_per_step if st else None,
            "tokens_per_target_call": st.tokens_per_target_call if st else None,
            "per_position_acceptance": [a / d if d else None for a, d in
                                        zip(st.position_accepted, st.position_drafted)] if st else [],
            "length_counts": st.length_counts if st else [],
            "alphas_by_length": st.alphas_by_length() if st else [],  # what the prediction reads
            # Loop-calibrated: the median over repeats of each repeat's prediction (its own calibration calls).
            "predicted_speedup": median(predicted.get(name, [])),
            "predicted_speedup_by_repeat": predicted.get(name),
            "speedup_vs_exactspec_loop_by_repeat": res.ratios_to(loop) if loop and st else None,
            "predicted_speedup_forwards": predicted_speedup(system, res.stats, cost_model) if st else None,
            "plain_steps": st.plain_steps if st else None,
            # tree systems: steps that drafted a tree (tree="auto" runs gamma="auto"'s chain when trees do not pay)
            "tree_steps": len(st.tree_history) if st and system.tree is not None else None,
            "early_stops": st.early_stops if st else None,
            # Where a step's time goes inside the loop (ms per target call): what the cost model prices
            # (draft and target forwards) against what it does not (sampling, verification, bookkeeping).
            "ms_per_step": {part: 1e3 * getattr(st, f"{part}_time") / st.target_calls
                            for part in ("draft", "target", "verify")} if st and st.target_calls else None,
            "times": res.times,
            "tokens": res.tokens,
        })
    return {
        "config": {k: v for k, v in vars(cfg).items() if k != "prompts"} | {"num_prompts": len(cfg.prompts)},
        "threads": torch.get_num_threads(),
        "cost_model": cost_model.to_dict(),
        "cost_ratio": cost_model.cost_ratio,
        "calibrated_cost_models": {name: cm.to_dict() for name, cm in loop_costs.items()},
        "calibrated_prefill_seconds": prefill,
        "baseline": baseline_name(systems),
        "rows": rows,
        "summary": _summary(rows),
        "prediction_errors": prediction_errors(rows),
        "notes": ["HF assisted generation supports batch size 1 only"] if cfg.batch_size > 1 else [],
    }


def _summary(rows: list[dict]) -> dict:
    """The best fixed gamma of the draft model's token rule beside gamma="auto" (tokens/s ratios)."""
    chain = [r for r in rows if r["kind"] == "exactspec" and r["drafter"] == "model" and r["method"] == "token"]
    fixed = [r for r in chain if isinstance(r["gamma"], int)]
    auto = next((r for r in chain if r["gamma"] == "auto"), None)
    if not fixed:
        return {}
    best = max(fixed, key=lambda r: r["speedup_vs_target"])
    out = {"best_fixed_gamma": best["gamma"], "best_fixed_speedup_vs_target": best["speedup_vs_target"]}
    if auto is not None:
        out |= {"auto_speedup_vs_target": auto["speedup_vs_target"],
                "auto_vs_best_fixed": auto["speedup_vs_target"] / best["speedup_vs_target"]}
    return out
