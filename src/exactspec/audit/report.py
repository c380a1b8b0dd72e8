"""An audit's report: the JSON (documented in docs/audit.md, read by checks), a Markdown page, a plot, raw samples."""
from __future__ import annotations

import json
import pathlib

import numpy as np


def public(report: dict) -> dict:
    """The JSON report: everything but the arrays kept for the plot and the two-sample test."""
    return {k: v for k, v in report.items() if not k.startswith("_")}


def markdown(r: dict) -> str:
    lines = [f"# exactspec audit: {r['verdict']}", "",
             f"{r['engine']} at {r['url']} (serving {r.get('served_model') or '?'}), against --target {r['target']}; "
             f"settings {', '.join(r['settings'])}; {r['samples']} samples over {r['prompts']} prompts "
             f"({r['samples_asked']} asked{', interrupted' if r['partial'] else ''}), "
             f"{r['max_tokens']} tokens each.", ""]
    if r.get("greedy_equal") is not None:
        lines.append(f"- greedy: the engine's tokens {'equal' if r['greedy_equal'] else 'differ from'} the target's "
                     f"argmax ({r['tokens_tested']} tokens; {r.get('greedy_mismatch_count', 0)} sequences differ)")
        for m in r.get("greedy_mismatches", [])[:5]:
            lines.append(f"  - prompt {m['prompt']} sample {m['sample']} position {m['position']}: engine "
                         f"{m['engine_token']} {m.get('engine_text', '')!r}, target {m['target_token']} "
                         f"{m.get('target_text', '')!r} (margin {m['margin']:.4f} logits)")
    else:
        lines += [f"- p-value {r['p_value']:.3g} (Bonferroni over {r['tests']} KS tests of the tokens' PIT values), "
                  f"α = {r['alpha']:g}; {r['tokens_tested']} tokens; impossible tokens {r['impossible_tokens']}",
                  f"- detects with probability ≥ {r['power']:g} a KS distance of {r['detectable_ks_distance']:.4f} "
                  f"(tolerance {r['tolerance']:g})", "", "| position | tokens | KS | p |", "|---:|---:|---:|---:|"]
        for w in sorted(r["worst_positions"], key=lambda w: w["position"]):
            lines.append(f"| {w['position']} | {w['tokens']} | {w['ks']:.4f} | {w['p_value']:.3g} |")
        lines += ["", "Tokens furthest from their expected counts:", "",
                  "| prompt | position | token | text | observed | expected | residual |",
                  "|---:|---:|---:|---|---:|---:|---:|"]
        for w in r["worst_tokens"]:
            text = repr(w.get("text", ""))[1:-1].replace("|", "\\|")
            lines.append(f"| {w['prompt']} | {w['position']} | {w['token']} | `{text}` | {w['observed']} "
                         f"| {w['expected']:.1f} | {w['residual']:+.1f} |")
    c = r.get("control")
    if c:
        lines += ["", f"Control {c['url']} (speculation off): {c['verdict']} (p {_p(c['p_value'])}); "
                      f"two-sample p {_p(c.get('two_sample_p'))}; engine against the law alone: {c['law_verdict']}."]
    a = r.get("acceptance")
    if a and "engine_rule_expected" in a:
        e, b = a["engine_rule_expected"], a["best_exact"]
        lines += ["", f"Acceptance at γ = {a['gamma']}: the engine's rule ({a['engine_rule']} drafts) "
                      f"{e['tokens_per_step']:.2f} tokens per step, exactspec's best exact rule ({b['rule']} drafts) "
                      f"{b['tokens_per_step']:.2f} (× {a['tokens_per_step_gain']:.2f}); speedups at draft cost "
                      f"{a['draft_cost']:.3f}: {e['predicted_speedup']:.2f}× and {b['predicted_speedup']:.2f}×."]
    if a and a.get("engine"):
        g = a["engine"]
        expected = f" (its rule predicts {a['counters_expected']:.3f} on these requests)" \
            if a.get("counters_expected") is not None else ""
        lines += ["", f"The engine's counters during the audit: {g['num_drafts']:.0f} drafts, acceptance rate "
                      f"{_f(g['acceptance_rate'])}, mean acceptance length "
                      f"{_f(g['mean_acceptance_length'])}{expected}, "
                      f"per position {', '.join(f'{x:.3f}' for x in g['per_position_acceptance'])}."]
    return "\n".join(lines) + "\n"


def _p(v) -> str:
    return "-" if v is None else f"{v:.3g}"


def _f(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def write(r: dict, out: str) -> list[str]:
    """audit.json, audit.md, audit.png (T > 0) and samples.jsonl under ``out``; the paths written."""
    samples = r.get("_sampled")
    d = pathlib.Path(out)
    d.mkdir(parents=True, exist_ok=True)
    paths = [d / "audit.json", d / "audit.md"]
    paths[0].write_text(json.dumps(public(r), indent=2) + "\n", encoding="utf-8")
    paths[1].write_text(markdown(r), encoding="utf-8")
    if "_values" in r:
        paths.append(d / "audit.png")
        plot(r, paths[-1])
    if samples is not None:
        paths.append(d / "samples.jsonl")
        with open(paths[-1], "w", encoding="utf-8") as fh:
            for job, toks in zip(samples.jobs, samples.tokens):
                fh.write(json.dumps({"prompt": job.prompt + 1, "sample": job.sample + 1, "setting": job.setting,
                                     "seed": job.seed, "tokens": toks}) + "\n")
    return [str(p) for p in paths]


def plot(r: dict, path) -> None:
    """Each output position's PIT values as their empirical CDF minus the uniform's (flat at 0 when exact; the KS
    statistic is its largest excursion), with the pooled test's rejection band, and each position's p-value."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from exactspec.audit.stats import ks_critical

    vals, pos = r["_values"], r["_positions"]
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4))
    grid = np.linspace(0, 1, 201)
    ecdf = lambda v: np.searchsorted(np.sort(v), grid, side="right") / max(len(v), 1) - grid  # noqa: E731
    each = r["alpha"] / max(r["tests"], 1)
    ks = sorted(np.unique(pos))
    for k in ks:
        ax.plot(grid, ecdf(vals[pos == k]), label=f"position {k + 1}", lw=0.8, alpha=0.7)
    band = ks_critical(each, max(len(vals), 1))
    ax.axhspan(-band, band, color="0.85", label="all tokens: rejection band")
    ax.plot(grid, ecdf(vals), color="k", lw=2, label="all tokens")
    one = ks_critical(each, max(len(vals) // max(len(ks), 1), 1))
    ax.axhline(one, color="0.4", ls=":", lw=1, label="one position: rejection band")
    ax.axhline(-one, color="0.4", ls=":", lw=1)
    ax.set(xlabel="PIT value (likeliest tokens first)", ylabel="empirical CDF − uniform",
           title=f"{r['engine']}: {r['verdict']}")
    ax.legend(fontsize=7)
    wp = sorted(r["worst_positions"], key=lambda w: w["position"])
    bx.bar([w["position"] for w in wp], [-np.log10(max(w["p_value"], 1e-300)) for w in wp])
    bx.axhline(-np.log10(r["alpha"] / max(r["tests"], 1)), color="r", ls="--", lw=1, label="α / tests")
    bx.set(xlabel="output position", ylabel="−log10 p", title="KS per position")
    bx.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
