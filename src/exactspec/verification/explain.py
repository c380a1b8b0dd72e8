"""Library side of `exactspec explain`: the manual verification of one position, as on a whiteboard.

For target p and draft q over the same labels: acceptance probability min(1, p/q), residual
max(0, p - q) with mass Z and normalised form, acceptance rate sum min(p, q), and for every token the check

    P(output = x) = q(x) min(1, p(x)/q(x))  +  P(reject) * residual(x) / Z  =  p(x),
                    [via acceptance]           [via rejection], P(reject) = sum_y q(y)(1 - min(1, p(y)/q(y)))

Pure Python floats (no torch): the command must start fast.
"""
from __future__ import annotations

import math
import numbers

__all__ = ["parse_distribution", "explain_position", "render"]

_TOL = 1e-6


def parse_distribution(text: str, name: str, normalize: bool = False) -> list[float]:
    """Parse "0.4,0.3,..." into floats; ``name`` (e.g. "--target") is used in error messages."""
    try:
        vals = [float(s) for s in text.split(",") if s.strip()]
    except ValueError as exc:
        raise ValueError(f"{name} must be comma-separated numbers ({exc})") from None
    if not vals:
        raise ValueError(f"{name} is empty")
    if any(not math.isfinite(v) for v in vals):
        raise ValueError(f"{name} contains NaN or inf")
    if any(v < 0 for v in vals):
        raise ValueError(f"{name} has negative probabilities: not a distribution")
    total = sum(vals)
    if normalize:
        if total <= 0:
            raise ValueError(f"{name} sums to 0: cannot --normalize")
        return [v / total for v in vals]
    if abs(total - 1.0) > _TOL:
        raise ValueError(f"{name} sums to {total:.6g}, not 1: not a distribution (pass --normalize to rescale)")
    return vals


def explain_position(target: list[float], draft: list[float], labels: list[str] | None = None) -> dict:
    """All the quantities of one verification position (the `--json` payload).

    ``accept_prob[x]`` is ``None`` where q(x) = 0 (the token is never drafted; min(1, p/q) undefined).
    ``residual`` is the unnormalised max(0, p - q); ``residual_mass`` is Z = sum of it.
    """
    p, q = _dist(target, "target"), _dist(draft, "draft")
    if len(p) != len(q):
        raise ValueError(f"--target has {len(p)} entries but --draft has {len(q)}")
    labels = list(labels) if labels is not None else [str(i) for i in range(len(p))]
    if len(labels) != len(p):
        raise ValueError(f"--labels has {len(labels)} entries, expected {len(p)}")
    accept = [min(1.0, pi / qi) if qi > 0 else None for pi, qi in zip(p, q)]
    res = [max(0.0, pi - qi) for pi, qi in zip(p, q)]
    z = sum(res)
    rate = sum(min(pi, qi) for pi, qi in zip(p, q))
    reject = sum(qi * (1.0 - a) for qi, a in zip(q, accept) if a is not None)
    via_accept = [qi * a if a is not None else 0.0 for qi, a in zip(q, accept)]
    # With Z = 0 (p = q) nothing is ever rejected, so the rejection path carries no mass.
    via_reject = [reject * r / z if z > 0 else 0.0 for r in res]
    return {
        "labels": labels,
        "target": p,
        "draft": q,
        "accept_prob": accept,
        "residual": res,
        "residual_mass": z,
        "acceptance_rate": rate,
        "via_accept": via_accept,
        "via_reject": via_reject,
        "output": [a + r for a, r in zip(via_accept, via_reject)],
    }


def _dist(x, name: str) -> list[float]:
    """A probability vector of plain numbers (no str / bool coercion): finite, >= 0, summing to 1."""
    if isinstance(x, (str, bytes)) or not hasattr(x, "__iter__"):
        raise TypeError(f"{name} must be a list of probabilities, got {x!r}")
    vals = list(x)
    if any(isinstance(v, bool) or not isinstance(v, numbers.Real) for v in vals):
        raise TypeError(f"{name} must contain numbers only, got {x!r}")
    vals = [float(v) for v in vals]
    if not vals or any(not math.isfinite(v) or v < 0 for v in vals) or abs(sum(vals) - 1.0) > _TOL:
        raise ValueError(f"{name} must be a non-empty probability vector (finite, >= 0, summing to 1), got {x!r}")
    return vals


def _f(x) -> str:
    return "—" if x is None else f"{x:.4f}".rstrip("0").rstrip(".") if x != 0 else "0"


def render(result: dict, console=None) -> None:
    """Print the whiteboard derivation with rich tables."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    r = result
    z, rate = r["residual_mass"], r["acceptance_rate"]
    t1 = Table(title="Step 1: accept the drafted token x with probability min(1, p(x)/q(x))")
    for col in ("token", "p(x) target", "q(x) draft", "min(1, p/q)", "max(0, p - q)", "residual / Z"):
        t1.add_column(col, justify="right")
    for i, lab in enumerate(r["labels"]):
        norm = r["residual"][i] / z if z > 0 else None
        t1.add_row(lab, _f(r["target"][i]), _f(r["draft"][i]), _f(r["accept_prob"][i]),
                   _f(r["residual"][i]), _f(norm))
    console.print(t1)
    console.print(f"acceptance rate  sum_x min(p, q) = {_f(rate)}")
    console.print(f"residual mass  Z = sum_x max(0, p - q) = {_f(z)}  (= 1 - acceptance rate = P(reject))")
    if z <= 0:
        console.print("Z = 0: p = q, every drafted token is accepted and the residual is never used.")
    if any(a is None and p > 0 for a, p in zip(r["accept_prob"], r["target"])):
        console.print("— : q(x) = 0, x is never drafted; it can only be emitted via the residual.")
    reject = sum(q * (1 - a) for q, a in zip(r["draft"], r["accept_prob"]) if a is not None)
    console.print("P(output = x) = q(x) min(1, p(x)/q(x))  [via acceptance]\n"
                  "              + P(reject) residual(x)/Z    [via rejection]\n"
                  f"P(reject) = sum_y q(y) (1 - min(1, p(y)/q(y))) = {_f(reject)}", markup=False)
    t2 = Table(title="Step 2: every token comes out with its target probability")
    for col in ("token", "via acceptance", "via rejection", "output", "p(x)", "ok"):
        t2.add_column(col, justify="right")
    for i, lab in enumerate(r["labels"]):
        norm = r["residual"][i] / z if z > 0 else 0.0
        ok = abs(r["output"][i] - r["target"][i]) <= 1e-9
        t2.add_row(lab, f"{_f(r['draft'][i])} x {_f(r['accept_prob'][i])} = {_f(r['via_accept'][i])}",
                   f"{_f(reject)} x {_f(norm)} = {_f(r['via_reject'][i])}",
                   _f(r["output"][i]), _f(r["target"][i]), "yes" if ok else "NO")
    console.print(t2)
