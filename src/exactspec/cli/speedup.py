"""`exactspec speedup`: is speculation worth it for this pair, and with which gamma?

Thin: parses arguments, calls exactspec.speed.speedup / exactspec.speed.costmodel, and formats the result.
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
    p.add_argument("--tree", action="store_true",
                   help="token trees: the best tree per node budget (Sequoia's DP) beside the best chain")
    p.add_argument("--max-nodes", type=integer(1, 64), default=16,
                   help="largest tree node budget with --tree (default 16)")
    p.add_argument("--rank-acceptance", metavar="A0,A1,..[;A0,A1,..]",
                   help="with --tree: acceptance per sibling rank (given the lower ranks were rejected), one "
                        "';'-separated row per depth (default: the alpha(s) for rank 0, --side-acceptance after)")
    p.add_argument("--side-acceptance", type=real(0, 1), default=0.3,
                   help="with --tree and no --rank-acceptance: acceptance of ranks >= 1 (default 0.3)")
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
    from exactspec.speed import speedup as sp

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
    from exactspec.speed.costmodel import CostModel

    alpha = None if (args.tree and args.rank_acceptance) else _alpha(args)
    if args.plot:
        check_out_file("--plot", args.plot)
    if args.costs is not None:
        try:
            cost = CostModel.load(args.costs)
        except ValueError as exc:  # missing, empty or malformed file: the message names the path
            raise ValueError(f"--costs: {exc}") from None
    else:
        cost = 0.0 if args.cost is None else args.cost
    if args.tree:
        return _run_tree(args, cost)
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
    from exactspec.speed.costmodel import CostModel

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


def _rank_acceptance(args) -> list[list[float]]:
    if args.rank_acceptance:
        try:
            rows = [[float(v) for v in row.split(",")] for row in args.rank_acceptance.split(";") if row.strip()]
        except ValueError as exc:
            raise ValueError(f"--rank-acceptance must be comma-separated numbers, rows split by ';': {exc}") from exc
        if not rows:
            raise ValueError("--rank-acceptance is empty")
        return rows
    if not 0.0 <= args.side_acceptance <= 1.0:
        raise ValueError(f"--side-acceptance must lie in [0, 1], got {args.side_acceptance}")
    alpha = _alpha(args)
    return [[a, args.side_acceptance] for a in (alpha if isinstance(alpha, list) else [alpha])]


def compute_tree(acceptance, cost, max_nodes: int) -> dict:
    """The best tree per node budget beside the best chain of at most as many tokens (plain data)."""
    from exactspec.speed import speedup as sp
    from exactspec.speed.treemath import best_trees

    if max_nodes < 1:
        raise ValueError(f"--max-nodes must be >= 1, got {max_nodes}")
    plans = best_trees(acceptance, cost, max_nodes, max_depth=min(max_nodes, 16), max_branch=min(max_nodes, 6))
    chain_alpha = [row[0] for row in acceptance]
    rows = []
    for n, plan in enumerate(plans, start=1):
        g, s = sp.optimal_gamma(chain_alpha, cost, n)
        rows.append({"nodes": n, "tree": plan.label, "parents": list(plan.parents), "tree_nodes": plan.n_nodes,
                     "expected_tokens": plan.expected_tokens, "speedup": plan.speedup,
                     "chain_gamma": g, "chain_speedup": s})
    return {"acceptance": acceptance, "cost": cost if isinstance(cost, float) else cost.to_dict(), "rows": rows}


def _run_tree(args, cost) -> int:
    from rich.console import Console
    from rich.table import Table

    res = compute_tree(_rank_acceptance(args), cost, args.max_nodes)
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    table = Table(title="Token trees (Sequoia DP) vs chains; acceptance per depth: "
                        + " | ".join(",".join(f"{a:g}" for a in row) for row in res["acceptance"]))
    for name in ("n", "best tree", "nodes", "tok/step", "speedup", "chain", "speedup", "ratio"):
        table.add_column(name, justify="right", no_wrap=True)
    for r in res["rows"]:
        table.add_row(str(r["nodes"]), r["tree"], str(r["tree_nodes"]), f"{r['expected_tokens']:.3f}",
                      f"{r['speedup']:.3f}x", f"gamma={r['chain_gamma']}", f"{r['chain_speedup']:.3f}x",
                      f"{r['speedup'] / r['chain_speedup']:.3f}")
    console = Console()
    console.print(table)
    console.print("best tree: children per node, breadth first, depths split by '/'; n: node budget; "
                  "chain: the best chain of at most n tokens; ratio: tree speedup / chain speedup.")
    return 0
