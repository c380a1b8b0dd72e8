"""`exactspec speedup`: is speculation worth it for this pair, and with which gamma?

Thin: parses arguments, calls exactspec.speedup / exactspec.costmodel, and formats the result.
"""
from __future__ import annotations

import json
import math

from exactspec.cli import check_out_file, integer, real

GAMMA_MAX_LIMIT = 1024  # rows of the table


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "speedup",
        help="expected tokens per step and walltime speedup over gamma",
        description="Tabulate expected tokens per target call, walltime speedup and ops factor for "
                    "gamma = 1..gamma-max, mark the best gamma and state the limit over all gamma.",
    )
    alpha = p.add_mutually_exclusive_group()
    alpha.add_argument("--alpha", type=real(0, 1), help="i.i.d. acceptance rate in [0, 1]")
    alpha.add_argument("--alpha-per-position", metavar="A1,A2,...",
                       help="per-position acceptance rates (comma-separated, each in [0, 1]; instead of "
                            "--alpha; the last rate repeats beyond the list)")
    cost = p.add_mutually_exclusive_group()
    cost.add_argument("--cost", type=real(0), default=None,
                      help="draft/target time ratio c = T_draft/T_target (default 0: free draft, an upper bound)")
    cost.add_argument("--costs", metavar="FILE.json", help="measured CostModel (to_dict JSON) instead of --cost")
    p.add_argument("--gamma-max", type=integer(1, GAMMA_MAX_LIMIT), default=16,
                   help="largest gamma tabulated (default 16)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--plot", metavar="OUT.png", help="write a PNG of speedup against gamma")
    p.set_defaults(func=run)


def _alpha(args) -> float | list[float]:
    if args.alpha_per_position:
        parse = real(0, 1)
        try:
            rates = [parse(s) for s in args.alpha_per_position.split(",") if s.strip()]
        except Exception as exc:  # argparse.ArgumentTypeError: one rate is not a number in [0, 1]
            raise ValueError(f"--alpha-per-position: {exc}") from None
        if not rates:
            raise ValueError("--alpha-per-position is empty")
        return rates
    if args.alpha_per_position is not None:
        raise ValueError("--alpha-per-position is empty")
    if args.alpha is None:
        raise ValueError("give --alpha or --alpha-per-position")
    return args.alpha


def compute(alpha, cost, gamma_max: int) -> dict:
    """Everything the command prints, as plain data (also the --json payload, less formatting)."""
    from exactspec import speedup as sp

    if gamma_max < 1:
        raise ValueError(f"--gamma-max must be >= 1, got {gamma_max}")
    ops_cost = cost if isinstance(cost, float) else cost.cost_ratio
    rows = [{"gamma": g,
             "expected_tokens": sp.expected_tokens(alpha, g),
             "speedup": sp.walltime_speedup(alpha, g, cost),
             "ops_factor": sp.ops_factor(alpha, g, ops_cost)} for g in range(1, gamma_max + 1)]
    best_g, best_s = sp.optimal_gamma(alpha, cost, gamma_max)
    return {
        "alpha": alpha,
        "cost": cost if isinstance(cost, float) else cost.to_dict(),
        "rows": rows,
        "optimal_gamma": best_g,
        "optimal_speedup": best_s,
        "limit": sp.speedup_limit(alpha, cost),
        "helps": sp.speculation_helps(alpha, cost),
    }


def run(args) -> int:
    from exactspec.costmodel import CostModel

    alpha = _alpha(args)
    if args.plot:
        check_out_file("--plot", args.plot)
    if args.costs is not None:
        try:
            cost = CostModel.load(args.costs)
        except ValueError as exc:  # missing, empty or malformed file: the message names the path
            raise ValueError(f"--costs: {exc}") from None
    else:
        cost = 0.0 if args.cost is None else args.cost
    res = compute(alpha, cost, args.gamma_max)
    if args.plot:
        _plot(res, args.plot)
    if args.json:
        out = {k: res[k] for k in ("alpha", "cost", "rows", "optimal_gamma", "optimal_speedup", "limit")}
        if math.isinf(out["limit"]):
            out["limit"] = None  # JSON has no infinity; null = unbounded
        print(json.dumps(out, indent=2))
        return 0
    _print_table(res, args)
    return 0


def _fmt_alpha(alpha) -> str:
    return ", ".join(f"{a:g}" for a in alpha) if isinstance(alpha, list) else f"{alpha:g}"


def _print_table(res: dict, args) -> None:
    from rich.console import Console
    from rich.table import Table

    cost = res["cost"]
    cost_txt = (f"c = {cost:g}" if isinstance(cost, float)
                else f"measured CostModel ({args.costs}), c = T_draft/T_target(1) = "
                     f"{cost['t_draft'] / _t1(cost):.3g}")
    table = Table(title=f"Speculative decoding, alpha = {_fmt_alpha(res['alpha'])}, {cost_txt}")
    for name in ("gamma", "tokens/step", "speedup", "ops factor", ""):
        table.add_column(name, justify="right")
    for r in res["rows"]:
        best = r["gamma"] == res["optimal_gamma"]
        style = "bold green" if best and res["helps"] else None
        table.add_row(str(r["gamma"]), f"{r['expected_tokens']:.3f}", f"{r['speedup']:.3f}x",
                      f"{r['ops_factor']:.3f}x", "<- best" if best else "", style=style)
    console = Console()
    console.print(table)
    limit = res["limit"]
    lim_txt = "unbounded" if math.isinf(limit) else f"{limit:.3f}x"
    horizon = "" if isinstance(cost, float) else " (gamma <= 256; measured times extrapolated beyond the table)"
    if res["optimal_speedup"] > 1.0:
        console.print(f"Best gamma in 1..{args.gamma_max}: {res['optimal_gamma']} "
                      f"-> {res['optimal_speedup']:.3f}x expected speedup.")
    else:
        console.print(f"[bold red]No gamma gives a speedup[/]: the best, gamma = {res['optimal_gamma']}, "
                      f"is {res['optimal_speedup']:.3f}x (< 1). Decode without speculation.")
        if isinstance(cost, float):
            console.print("With a scalar cost, speculation helps iff the first acceptance rate exceeds c.")
    console.print(f"Limit over all gamma{horizon}: {lim_txt}.")
    if isinstance(cost, float) and cost == 0.0 and args.cost is None:
        console.print("(cost c = 0 assumed: a free draft, so these speedups are upper bounds.)")


def _t1(cost_dict: dict) -> float:
    from exactspec.costmodel import CostModel

    return CostModel.from_dict(cost_dict).t_target(1)


def _plot(res: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    gammas = [r["gamma"] for r in res["rows"]]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(gammas, [r["speedup"] for r in res["rows"]], marker="o", label="expected speedup")
    if math.isfinite(res["limit"]):
        ax.axhline(res["limit"], color="tab:red", linestyle="--", label=f"limit {res['limit']:.2f}x")
    ax.axhline(1.0, color="gray", linewidth=0.8)
    ax.scatter([res["optimal_gamma"]], [res["optimal_speedup"]], color="tab:green", zorder=3,
               label=f"best gamma = {res['optimal_gamma']}")
    ax.set_xlabel("gamma (drafted tokens per step)")
    ax.set_ylabel("walltime speedup")
    ax.set_title(f"alpha = {_fmt_alpha(res['alpha'])}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
