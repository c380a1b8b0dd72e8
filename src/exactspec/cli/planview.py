"""What `exactspec plan` prints: JSON, or a few lines and a table (rich)."""
from __future__ import annotations

import json


def emit(out: dict, as_json: bool, compact: bool = False) -> None:
    """The plan as JSON, or as text and a table of the rows (``compact``: one interval of --watch)."""
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
        engine = out.get("engine")
        title = f"batch size {out['batch_size']}" + (f", {engine}'s rule ({out['rule']})" if out.get("rule") else "")
        table = Table(title=title)
        spread = any("speedup_spread" in r for r in out["rows"])  # an engine's own costs: each speedup's spread
        for col in ("gamma", "tokens/step", "predicted speedup") + (("±", "") if spread else ()):
            table.add_column(col, justify="right")
        for r in out["rows"]:
            s = r["predicted_speedup"]
            extra = ()
            if spread:  # a row without a speedup has no spread either
                extra = ((f"{r['speedup_spread']:.0%}", "extrapolated" if r["extrapolated"] else "")
                         if "speedup_spread" in r else ("", ""))
            table.add_row(str(r["gamma"]), f"{r['expected_tokens']:.3f}", "-" if s is None else f"{s:.3f}x", *extra,
                          style="bold green" if r["gamma"] == out["recommended_gamma"] else None)
        console.print(table)
    if out.get("recommendation"):  # an engine priced by its own costs: which γ, or "do not speculate" and why
        console.print(f"[bold]{out['recommendation']}[/]")
    _configs(console, out, compact)
    if not compact:
        _extras(console, out)
    for note in out.get("notes", []):
        console.print(f"[dim]note: {note}[/]")


def _configs(console, out: dict, compact: bool) -> None:
    """Each config the plan holds, the audit's verdict beside it."""
    audit = out.get("audit")
    verdict = "" if not audit else ("  [bold red]audit: NOT EXACT[/]" if audit["verdict"] == "not exact"
                                    else f"  audit: {audit['verdict']}")
    if out.get("vllm"):
        console.print(f"vLLM speculative_config: {json.dumps(out['vllm'])}{verdict}")
    if out.get("llamacpp"):
        console.print(f"llama-server {' '.join(out['llamacpp'])}{verdict}")
    if out.get("sglang") and (not compact or "vllm" not in out):
        console.print(f"SGLang: {' '.join(out['sglang'])}{verdict if not out.get('vllm') else ''}")
    if not compact and out.get("hf"):
        console.print(f"transformers generate(**{json.dumps(out['hf'])})")
    if not compact and out.get("exactspec"):
        console.print(f"exactspec: {json.dumps(out['exactspec'])}")


def _extras(console, out: dict) -> None:
    """The per-category table, the vLLM methods compared, and the draft's memory."""
    from rich.table import Table

    for method, m in (out.get("methods") or {}).items():
        sp = m["predicted_speedup"]
        console.print(f"draft_sample_method {method}: best gamma {m['recommended_gamma']} -> "
                      + ("-" if sp is None else f"{sp:.3f}x") + f", mean acceptance length "
                      f"{m['mean_acceptance_length']:.3f}")
    mem = out.get("draft_memory")
    if mem:
        console.print(f"draft memory: weights {mem['weights_bytes'] / 2**20:.1f} MiB + KV cache "
                      f"{mem['kv_bytes_per_token'] / 1024:.1f} KiB/token x {mem['context']} tokens x {mem['slots']} "
                      f"slot(s) = {mem['total_bytes'] / 2**20:.1f} MiB")
    cats = out.get("by_category")
    if cats:
        table = Table(title="by category")
        for col in ("category", "prompts", "best gamma", "tokens/step", "predicted speedup"):
            table.add_column(col, justify="right")
        for c in cats:
            sp = c["predicted_speedup"]
            table.add_row(str(c["category"]), str(c["prompts"]), str(c["recommended_gamma"] or "-"),
                          f"{c['expected_tokens']:.3f}", "-" if sp is None else f"{sp:.3f}x")
        console.print(table)
