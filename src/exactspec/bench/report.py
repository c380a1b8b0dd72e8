"""Render a benchmark report (the dict `exactspec.bench.bench.run_bench` returns) as Markdown, JSON and PNG plots."""
from __future__ import annotations

import json
import pathlib


def _fmt(x, spec: str = ".2f") -> str:
    return "—" if x is None else format(x, spec)


def _base(report: dict) -> str:
    """The column of speedups over the baseline, named by what the baseline is."""
    name = report.get("baseline", "target (HF generate)")
    return "target (HF)" if name == "target (HF generate)" else name


def bench_markdown(report: dict) -> str:
    """The benchmark table as Markdown (the same numbers as bench.json)."""
    cfg = report["config"]
    cm = report.get("cost_model")
    part = report.get("partial")
    head = [f"**Partial**: interrupted after {part['timed_calls_done']} of "
            f"{'?' if part['timed_calls_planned'] is None else part['timed_calls_planned']} timed calls "
            f"({part['repeats_done']} of {part['repeats_planned']} repeats complete); rows from {part['rows_from']}.",
            ""] if part else []
    if not report["rows"]:
        return "\n".join(head) + "\n"
    lines = head + [
        f"max_new_tokens={cfg['max_new_tokens']}, temperature={cfg['temperature']}, top_p={cfg.get('top_p', 1.0)}, batch_size={cfg['batch_size']}, "
        f"prompts={cfg['num_prompts']}, repeats={cfg['repeats']} (median), threads={report['threads']}; "
        f"cost model: t_draft={cm['t_draft'] * 1e3:.2f} ms, T_target(1)={_t(cm, 1)}, T_target(5)={_t(cm, 5)}, "
        f"c={report['cost_ratio']:.3f}",
        "",
        f"| system | tokens/s | × {_base(report)} | × target (our loop) | × HF assisted | acceptance | accepted/step "
        "(w/o bonus) | tokens/step (with bonus) | predicted × (loop-calibrated) | predicted × (forwards only) "
        "| per-position acceptance |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in report["rows"]:
        pos = ", ".join(_fmt(a) for a in r["per_position_acceptance"]) or "—"
        lines.append(
            f"| {r['system']} | {r['tokens_per_second']:.1f} | {r['speedup_vs_target']:.2f} | "
            f"{_fmt(r['speedup_vs_exactspec_loop'])} | {_fmt(r['speedup_vs_assisted'])} | "
            f"{_fmt(r['acceptance_rate'])} | {_fmt(r['mean_accepted_per_step'])} | "
            f"{_fmt(r['mean_tokens_per_step'])} | {_fmt(r['predicted_speedup'])} | "
            f"{_fmt(r.get('predicted_speedup_forwards'))} | {pos} |")
    split = [(r["system"], r.get("gamma"), r["ms_per_step"]) for r in report["rows"] if r.get("ms_per_step")]
    if split:
        gamma = report["config"]["gamma"]
        gamma_n = gamma if isinstance(gamma, int) else 4  # the fixed-γ systems' γ (the bench's default)
        lines += ["", "Time per target call inside the loop (ms): draft / target / verification + bookkeeping. "
                  f"Bare forwards price a step at γ·t_draft + T_target(γ+1) = {_priced_step(cm, gamma_n)}; "
                  "each system calibrated on its own untimed calls of the loop prices it at "
                  "γ·t_draft + t_draft_cold + T_target(γ+1) + t_overhead (the first draft call of a step is the "
                  "cold one; T_target shifted to our plain loop's step):", ""]
        cal = report.get("calibrated_cost_models", {})
        lines += [f"- {name}: {m['draft']:.2f} / {m['target']:.2f} / {m['verify']:.2f}; priced "
                  f"{_priced_step(cal.get(name), g)}" for name, g, m in split]
    summary = report.get("summary") or {}
    if "auto_vs_best_fixed" in summary:
        lines += ["", f"Best fixed γ (token rule): γ={summary['best_fixed_gamma']} at "
                  f"{summary['best_fixed_speedup_vs_target']:.2f}× target; γ=auto at "
                  f"{summary['auto_speedup_vs_target']:.2f}× target = {summary['auto_vs_best_fixed']:.2f}× the best "
                  "fixed γ."]
    checked = [r for r in report["rows"] if r.get("greedy_equals_target_generate") is not None]
    if checked:
        differ = [r["system"] for r in checked if not r["greedy_equals_target_generate"]]
        n_cmp = min(r["greedy_tokens_compared"] for r in checked)
        ref = "target-alone `generate`" if report.get("baseline", "target (HF generate)") == "target (HF generate)" \
            else "our target-alone loop on the same backend"
        gaps = [(r["system"], r["greedy_first_divergence"]) for r in checked if r.get("greedy_first_divergence")]
        gap_note = "".join(f" {name} first differs at prompt {g['prompt'] + 1}, new token {g['position'] + 1}, "
                           f"where the target's logits of the two tokens are {g['logit_gap']:.2g} apart."
                           for name, g in gaps if g.get("logit_gap") is not None)
        lines += ["", f"Greedy output equal to {ref}, token for token on every prompt (last "
                  f"repeat, each row up to its first EOS: {n_cmp} tokens per system): " + ("every system." if not differ else "every system but " + ", ".join(differ) +
                                 " (fp32 near-ties between a batched verification pass and one-token decoding "
                                 "can flip an argmax; see the JSON)." + gap_note)]
    for note in report.get("notes", []):
        lines += ["", f"Note: {note}."]
    errors = report.get("prediction_errors") or {}
    if errors:
        worst = max(errors, key=lambda k: abs(errors[k]))
        inside = sum(abs(e) <= 0.10 for e in errors.values())
        lines += ["", f"Measured ÷ predicted (loop-calibrated, both × our loop; the median over repeats of each repeat's "
                  f"ratio): {inside} of {len(errors)} systems "
                  f"within ±10%; worst {errors[worst]:+.0%} ({worst})."]
    lines += ["", "Predicted × (loop-calibrated): per-position acceptance measured here, priced by untimed "
              "calibration calls, each made just before the timed call it prices (the speculative loop's draft "
              "step and per-step overhead), against plain decoding as our target-alone loop's timed call of "
              "that repeat ran it (the baseline is measured, not predicted), end to end with both prefills; "
              "one prediction per repeat, median; at batch size > 1 each prompt batch's own steps are priced "
              "(it waits for its slowest row, each call as wide as its longest row; "
              "exactspec.speed.prediction.predict_batch). Compare it with the '× target (our loop)' column. "
              "Every × column is the median over repeats of the ratio within a repeat (the systems of a repeat "
              "ran interleaved). Predicted × (forwards only): the paper's per-step analysis with bare "
              "forward passes (CostModel.measure), no loop overhead, no prefill."]
    return "\n".join(lines) + "\n"


def _priced_step(cm: dict | None, gamma) -> str:
    from exactspec.speed.costmodel import CostModel

    if cm is None:
        return "—"
    if not isinstance(gamma, int):
        return "— (γ=auto)" if gamma == "auto" else "—"
    model = CostModel.from_dict(cm)
    cold = f" + {model.t_draft_cold * 1e3:.2f}" if model.t_draft_cold else ""
    over = f" + {model.t_overhead * 1e3:.2f}" if model.t_overhead else ""
    return (f"{gamma}·{model.t_draft * 1e3:.2f}{cold} + {model.t_target(gamma + 1) * 1e3:.2f}{over} = "
            f"{model.step_time(gamma) * 1e3:.2f} ms")


def _t(cm: dict, k: int) -> str:
    from exactspec.speed.costmodel import CostModel

    return f"{CostModel.from_dict(cm).t_target(k) * 1e3:.2f} ms"


def write_bench(report: dict, out: str | pathlib.Path) -> list[pathlib.Path]:
    """Write bench.json, bench.md and the PNG plots into `out` (a partial report with no rows: no plots);
    return the paths written."""
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "bench.json", out / "bench.md"]
    for path, text in zip(paths, (json.dumps(report, indent=1), bench_markdown(report))):
        tmp = path.with_name(path.name + ".tmp")  # a second Ctrl-C while writing leaves the old file whole
        tmp.write_text(text)
        tmp.replace(path)
    rows = report["rows"]
    if not rows:  # a partial report of nothing timed: no plot to draw
        return paths
    import matplotlib  # after the JSON and Markdown are on disk: the import takes a second

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4))
    ax.barh([r["system"] for r in rows], [r["speedup_vs_target"] for r in rows], color="tab:blue")
    ax.axvline(1.0, color="k", lw=1)
    ax.set_xlabel(f"speedup vs {report.get('baseline', 'target alone (HF generate)')}, tokens/s ratio")
    ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(out / "speedup.png", dpi=120)
    paths.append(out / "speedup.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    for r in rows:
        pos = [a for a in r["per_position_acceptance"] if a is not None]
        if pos:
            ax.plot(range(1, len(pos) + 1), pos, marker="o", label=r["system"])
    ax.set_xlabel("draft position i")
    ax.set_ylabel("P(accept i | accepted < i)")
    ax.set_ylim(0, 1.05)
    if ax.get_lines():  # a partial report may have no system that drafted yet
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "acceptance.png", dpi=120)
    paths.append(out / "acceptance.png")

    fig, ax = plt.subplots(figsize=(5, 5))
    pts = [(r["predicted_speedup"], r["speedup_vs_exactspec_loop"], r["system"]) for r in rows
           if r["predicted_speedup"] is not None and r["speedup_vs_exactspec_loop"] is not None]
    for pred, meas, name in pts:
        ax.scatter(pred, meas)
        ax.annotate(name, (pred, meas), fontsize=7)
    hi = max([1.0] + [max(p, m) for p, m, _ in pts]) * 1.1
    ax.plot([0, hi], [0, hi], "k--", lw=1, label="measured = predicted")
    ax.fill_between([0, hi], [0, 0.9 * hi], [0, 1.1 * hi], color="gray", alpha=0.2, label="±10%")
    ax.set_xlabel("predicted speedup (cost model)")
    ax.set_ylabel("measured speedup (vs our target-alone loop)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "predicted_vs_measured.png", dpi=120)
    paths.append(out / "predicted_vs_measured.png")
    plt.close("all")
    return paths
