"""The arithmetic of speculative decoding: tokens per step, wall-clock speedup, and its limits.

Notation (Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding"):

- ``alpha``: acceptance rate, the probability that a drafted token is accepted, = 1 - TV(p, q).
- ``gamma``: number of tokens drafted per step; the target verifies ``gamma + 1`` positions at once.
- ``cost``:  either a float ``c = T_draft / T_target`` (the paper's model, where verifying ``gamma + 1``
  tokens costs as much as one), or a :class:`~exactspec.speed.costmodel.CostModel` holding measured
  ``T_target(k)``, which on real hardware grows with ``k``.

``alpha`` conventions, shared by every function here:

- a float (or 0-d array) is an i.i.d. rate: every drafted position is accepted with probability ``alpha``;
- a sequence / 1-d array ``[a_1, ..., a_L]`` gives per-position rates: position ``i`` is accepted with
  probability ``a_i`` given that positions ``< i`` were. If ``L > gamma`` the first ``gamma`` are used; if
  ``L < gamma`` the LAST rate is repeated for positions ``L+1..gamma`` (so ``[a]`` equals the i.i.d. ``a``);
- arrays with more dimensions batch over the leading ones (the last axis is the position axis); to batch
  i.i.d. rates, pass shape ``[..., 1]``.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from exactspec.verification.checks import ArgumentTypeError, check_int, check_real, flatten

__all__ = [
    "acceptance_rate",
    "expected_tokens",
    "walltime_speedup",
    "end_to_end_speedup",
    "batch_steps",
    "ops_factor",
    "optimal_gamma",
    "speedup_limit",
    "speculation_helps",
    "expected_tokens_tree",
    "optimal_tree",
]

# Horizon used for the supremum over gamma when the cost is a measured CostModel: beyond the measured
# table T_target(k) is only extrapolated, so a sup over an infinite range would be an artefact.
COSTMODEL_HORIZON = 256
# Largest gamma scanned element by element (optimal_gamma's max_gamma, a CostModel horizon): 2**20 floats.
MAX_SCAN = 1 << 20
# Beyond this many positions past the given rates, E(gamma) uses the geometric closed form of the tail
# (walltime_speedup(.8, 10**15, .1) must not allocate 10**15 floats).
_CLOSED_FORM_AFTER = 1 << 16


# ----------------------------------------------------------------------------------------- validation
def _to_numpy(x: Any, name: str) -> np.ndarray:
    """Numbers (Python, numpy or torch; nested lists of them) as float64, with nothing coerced: strings,
    bools, None, complex numbers and objects are a TypeError naming ``name``."""
    if hasattr(x, "detach"):  # torch tensor, without importing torch
        if x.dtype.is_complex or str(x.dtype) == "torch.bool":
            raise ArgumentTypeError(f"{name} must hold real numbers, got a {x.dtype} tensor")
        x = x.detach().cpu().double().numpy()
    if isinstance(x, np.ndarray):
        arr = x
    else:
        flat = flatten(x)
        bad = [v for v in flat if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.number))
               or isinstance(v, (complex, np.complexfloating))]
        if bad:
            raise ArgumentTypeError(f"{name} must be a number or an array of numbers, got {_show(x)}")
        try:
            arr = np.asarray(x, dtype=np.float64)
        except (TypeError, ValueError) as exc:  # ragged nesting
            raise ValueError(f"{name} must be a number or a rectangular array of numbers, got {_show(x)}") from exc
    if arr.dtype.kind not in "iuf":
        raise ArgumentTypeError(f"{name} must hold real numbers, got an array of dtype {arr.dtype}")
    return arr.astype(np.float64, copy=False)


def _show(x) -> str:
    s = repr(x)
    return s if len(s) <= 80 else s[:77] + "..."


def _check_alpha(alpha: Any, name: str = "alpha") -> np.ndarray:
    """Return alpha as float64 array with a trailing position axis: shape [..., L], L >= 1."""
    arr = _to_numpy(alpha, name)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.shape[-1] == 0:
        raise ValueError(f"{name} must not be empty")
    if np.isnan(arr).any():
        raise ValueError(f"{name} must not be NaN, got {_show(alpha)}")
    if (arr < 0).any() or (arr > 1).any():
        raise ValueError(f"{name} must lie in [0, 1], got {alpha!r}")
    return arr


def _check_gamma(gamma: Any, name: str = "gamma") -> int:
    return check_int(name, gamma, min=0)


def _check_cost(cost: Any, name: str = "cost"):
    """A finite number >= 0 (as a float), or a CostModel."""
    from exactspec.speed.costmodel import CostModel

    if isinstance(cost, CostModel):
        return cost
    if isinstance(cost, (int, float, np.number)) and not isinstance(cost, (bool, np.bool_)):
        return check_real(name, cost, min=0.0)
    raise ArgumentTypeError(f"{name} must be a number >= 0 or a CostModel, got {_show(cost)}")


def _out(x: np.ndarray):
    """0-d results come back as Python floats, batched ones as numpy arrays."""
    return float(x) if np.ndim(x) == 0 else x


def _positions(alpha: np.ndarray, gamma: int) -> np.ndarray:
    """Per-position rates for positions 1..gamma, shape [..., gamma] (last rate repeated if short)."""
    L = alpha.shape[-1]
    if gamma <= L:
        return alpha[..., :gamma]
    tail = np.repeat(alpha[..., -1:], gamma - L, axis=-1)
    return np.concatenate([alpha, tail], axis=-1)


# ------------------------------------------------------------------------------------------- formulas
def acceptance_rate(p, q):
    """alpha = sum_x min(p(x), q(x)) = 1 - TV(p, q), over the last dimension.

    p, q: target and draft probabilities, broadcastable, [..., V] (torch tensors or numpy arrays).
    Returns [...] of the input's kind (a torch tensor for torch inputs, else numpy / float).
    """
    if hasattr(p, "detach") or hasattr(q, "detach"):
        import torch

        for name, x in (("p", p), ("q", q)):
            if hasattr(x, "detach") and not x.is_floating_point():
                raise ArgumentTypeError(f"{name} must be a floating-point tensor, got {x.dtype}")
        p_t = p if hasattr(p, "detach") else torch.as_tensor(_to_numpy(p, "p"))
        q_t = torch.as_tensor(q if hasattr(q, "detach") else _to_numpy(q, "q"), dtype=p_t.dtype,
                              device=p_t.device)
        tol = 2e-2 if p_t.dtype in (torch.float16, torch.bfloat16) else 1e-3
        _check_dists(p_t.double().cpu().numpy(), q_t.double().cpu().numpy(), tol)
        return torch.minimum(p_t, q_t).sum(dim=-1)  # [...]
    p_a, q_a = _to_numpy(p, "p"), _to_numpy(q, "q")
    _check_dists(p_a, q_a, 1e-3)
    return _out(np.minimum(p_a, q_a).sum(axis=-1))


def _check_dists(p: np.ndarray, q: np.ndarray, tol: float) -> None:
    """p and q: broadcastable [..., V] rows that are probability distributions (finite, >= 0, sum 1)."""
    try:
        np.broadcast_shapes(p.shape, q.shape)
    except ValueError:
        raise ValueError(f"p and q must be broadcastable [..., V], got shapes {p.shape} and {q.shape}") from None
    for name, x in (("p", p), ("q", q)):
        if x.ndim == 0 or x.shape[-1] == 0:
            raise ValueError(f"{name} must have a non-empty last (vocabulary) dimension, got shape {x.shape}")
        if not np.isfinite(x).all() or (x < 0).any():
            raise ValueError(f"{name} must be finite and non-negative, got {_show(x.tolist())}")
        sums = x.sum(-1)
        if (np.abs(sums - 1.0) > tol).any():
            raise ValueError(f"{name} rows must sum to 1, got sums {_show(np.atleast_1d(sums).tolist())}")


def _expected_tokens_array(alpha: np.ndarray, gamma: int) -> np.ndarray:
    # E = 1 + sum_{i<=gamma} prod_{j<=i} a_j. Summing the products (instead of the closed form
    # (1 - a^(g+1))/(1 - a)) avoids the 0/0 at a = 1 and cancellation just below it.
    if gamma == 0:
        return np.ones(alpha.shape[:-1])
    L = alpha.shape[-1]
    if gamma <= L + _CLOSED_FORM_AFTER:
        return 1.0 + np.cumprod(_positions(alpha, gamma), axis=-1).sum(axis=-1)
    # The last rate t repeats for the m = gamma - L positions after the given ones: their terms are
    # P_L t^j, j = 1..m, a geometric sum t (1 - t^m) / (1 - t) (m at t = 1), computed with expm1.
    head = np.cumprod(alpha, axis=-1)  # [..., L]
    P, t, m = head[..., -1], alpha[..., -1], float(gamma - L)
    with np.errstate(divide="ignore", invalid="ignore"):
        geo = np.where(t >= 1.0, m, t * -np.expm1(m * np.log(t)) / (1.0 - t))
    return 1.0 + head.sum(axis=-1) + P * geo


def expected_tokens(alpha, gamma: int):
    """Expected tokens produced per target call: (1 - alpha^(gamma+1)) / (1 - alpha) (-> gamma + 1 at alpha = 1).

    For per-position rates a_1..a_L: E = 1 + sum_{i=1..gamma} prod_{j<=i} a_j (see module docstring for
    L != gamma). ``gamma = 0`` gives 1 (plain decoding). Returns a float, or an array of shape alpha.shape[:-1].
    """
    return _out(_expected_tokens_array(_check_alpha(alpha), _check_gamma(gamma)))


def _step_cost(cost, gamma: int, in_loop: bool | None = None):
    """Time of one speculative step in units of one plain decoding step (T_target(1)).

    A CostModel prices it with its one formula, :meth:`CostModel.step_time`, whose per-step loop overhead
    belongs to steps of the speculative loop (`in_loop`, by default gamma > 0: gamma = 0 alone means plain
    decoding, which runs no such loop).
    """
    if isinstance(cost, float):
        return gamma * cost + 1.0
    loop = gamma > 0 if in_loop is None else in_loop
    return (cost.step_time(gamma) - (0.0 if loop else cost.overhead(gamma))) / cost.t_target(1)


def walltime_speedup(alpha, gamma: int, cost):
    """Expected wall-clock speedup over plain decoding.

    Scalar ``cost = c``: (1 - alpha^(gamma+1)) / ((1 - alpha)(gamma c + 1))  (Leviathan et al., Thm 3.8).
    ``CostModel``: E * T_target(1) / (gamma * t_draft + T_target(gamma + 1) + t_overhead), with measured
    T_target(k) (t_overhead is 0 unless the model was calibrated on a run). ``gamma = 0`` is plain decoding (speedup 1 with either cost). Float, or array of shape alpha.shape[:-1].
    """
    a = _check_alpha(alpha)
    g = _check_gamma(gamma)
    c = _check_cost(cost)
    return _out(_expected_tokens_array(a, g) / _step_cost(c, g))


def mixed_length_speedup(alpha, length_counts, cost, *, by_length: bool = False) -> float:
    """Expected speedup when steps draft different lengths: ``length_counts[k]`` steps drafted k tokens.

    What a run actually does: near ``max_new_tokens`` a step drafts fewer tokens, and a model-free drafter
    drafts nothing when it finds no match. With weights w_k = length_counts[k] / sum(length_counts):
    E = sum_k w_k E(alpha_1..alpha_k) tokens per step, at a mean step time of
    sum_k w_k (k t_draft + T_target(k + 1) + t_overhead), so the speedup is E * T_target(1) / that time.
    ``alpha``: scalar or per-position rates (as in :func:`expected_tokens`; leading axes batch), or with
    ``by_length=True`` a ``[lengths, positions]`` table with a row per drafted length (row k for the steps
    that drafted k, the last row repeating: a policy that drafts long when its draft is confident accepts
    more in its long steps, which one pooled row would average away); ``cost``: c or a CostModel.
    """
    tokens, time = _mixed_step(_by_length(alpha, by_length), length_counts, _check_cost(cost), by_length)
    return _out(tokens / time)


def _by_length(alpha, by_length: bool) -> np.ndarray:
    """`alpha` checked; with ``by_length`` it must be a ``[lengths, positions]`` table."""
    a = _check_alpha(alpha)
    if by_length and a.ndim != 2:
        raise ValueError(f"alpha: with by_length=True it must be a [lengths, positions] table, got shape {a.shape}")
    return a


def _for_length(a: np.ndarray, k: int, by_length: bool) -> np.ndarray:
    """The per-position rates of steps that drafted k tokens: row k of a ``by_length`` table (the last row
    repeats), else `a` itself for every length."""
    return a[min(k, a.shape[0] - 1)] if by_length else a


def _mixed_step(a: np.ndarray, length_counts, c, by_length: bool = False):
    """(expected tokens per step, mean step time in units of T_target(1)) over the drafted lengths."""
    counts = _to_numpy(length_counts, "length_counts")
    if counts.ndim != 1 or counts.size == 0 or (counts < 0).any() or not np.isfinite(counts).all() \
            or counts.sum() <= 0:
        raise ValueError(f"length_counts must be a non-empty list of counts >= 0 with a positive sum, "
                         f"got {length_counts!r}")
    w = counts / counts.sum()
    tokens = sum(wk * _expected_tokens_array(_for_length(a, k, by_length), k) for k, wk in enumerate(w) if wk > 0)
    # A step that drafted nothing (no lookup match) is still a step of the loop, overhead included.
    time = sum(wk * _step_cost(c, k, in_loop=True) for k, wk in enumerate(w) if wk > 0)
    return tokens, time


def end_to_end_speedup(alpha, length_counts, cost, n_tokens: int, prefill_plain: float = 0.0,
                       prefill_spec: float = 0.0, batch_size: int = 1, *, by_length: bool = False) -> float:
    """Expected speedup of a whole generation of ``n_tokens`` tokens, prefills included.

    Plain decoding takes ``prefill_plain + (n_tokens - 1) * T_target(1)`` seconds (the first token comes
    with the prefill's logits); speculative decoding ``prefill_spec + (n_tokens / E) * step`` with E and
    the mean step time as in :func:`mixed_length_speedup` (``prefill_spec`` covers the target's and the
    draft's prefill; the first token comes from a step). For
    short generations the prefills are a visible share of the time, which the per-step speedup ignores.
    ``cost`` must be a CostModel (seconds, at that batch size); prefills are seconds per generation call.
    ``batch_size`` > 1: a batch runs until its slowest row has its tokens, so the n_tokens / E steps of
    one row become the expected maximum over the rows (:func:`batch_steps`). ``by_length``: as in
    :func:`mixed_length_speedup`.
    """
    a = _by_length(alpha, by_length)
    c = _check_cost(cost)
    if isinstance(c, float):
        raise ValueError("end_to_end_speedup needs a CostModel (seconds), not a cost ratio")
    check_int("n_tokens", n_tokens, min=1)
    prefill_plain = check_real("prefill_plain", prefill_plain, min=0.0)
    prefill_spec = check_real("prefill_spec", prefill_spec, min=0.0)
    tokens, time = _mixed_step(a, length_counts, c, by_length)
    t1 = c.t_target(1)
    steps = n_tokens / tokens if batch_size == 1 else \
        batch_steps(a, length_counts, n_tokens, batch_size, by_length=by_length)
    return _out((prefill_plain + (n_tokens - 1) * t1) / (prefill_spec + steps * time * t1))


def batch_steps(alpha, length_counts, n_tokens: int, batch_size: int, sims: int = 2000, seed: int = 0, *,
                by_length: bool = False) -> float:
    """Expected speculative steps until every row of a batch has ``n_tokens`` tokens: the slowest row sets
    the pace. Simulated (numpy, seeded): each step a row drafts k tokens with probability
    ``length_counts[k] / sum``, keeps them while position i is accepted with probability alpha_i (of its
    length's row with ``by_length``, as in :func:`mixed_length_speedup`), and emits the kept ones plus one;
    the result is the mean over ``sims`` batches of the most steps any row took."""
    a = _by_length(alpha, by_length)  # (a by_length table is checked 2-d there)
    if not by_length and a.ndim != 1:
        raise ValueError(f"alpha must be a scalar or a 1-d sequence here, got shape {a.shape}")
    for name, v in (("n_tokens", n_tokens), ("batch_size", batch_size), ("sims", sims)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    counts = np.asarray(length_counts, dtype=float)
    w = counts / counts.sum()
    kmax = len(w) - 1
    rates = _positions(a, max(kmax, 1))  # [kmax], or [lengths, kmax]: a row per drafted length
    if by_length:
        rates = rates[np.minimum(np.arange(kmax + 1), rates.shape[0] - 1)]  # [kmax + 1, kmax]
    rng = np.random.default_rng(seed)
    done = np.zeros((sims, batch_size))
    steps = np.zeros((sims, batch_size))
    while (done < n_tokens).any():
        live = done < n_tokens
        k = rng.choice(kmax + 1, size=done.shape, p=w)  # [sims, B] drafted this step
        ok = rng.random(done.shape + (max(kmax, 1),)) < (rates[k] if by_length else rates)  # [sims, B, kmax]
        kept = np.cumprod(ok, axis=-1)[..., :max(kmax, 1)]
        kept = (kept * (np.arange(1, max(kmax, 1) + 1) <= k[..., None])).sum(-1)
        done += live * (kept + 1)
        steps += live
    return float(steps.max(axis=1).mean())


def ops_factor(alpha, gamma: int, ops_cost: float):
    """Expected increase in arithmetic operations (Leviathan et al., Thm 3.11).

    (1 - alpha)(gamma * c_hat + gamma + 1) / (1 - alpha^(gamma+1)) = (gamma c_hat + gamma + 1) / E, where
    ``ops_cost = c_hat`` is the draft's operations per token relative to the target's.
    """
    a = _check_alpha(alpha)
    g = _check_gamma(gamma)
    c_hat = check_real("ops_cost", ops_cost, min=0.0)
    return _out((g * c_hat + g + 1.0) / _expected_tokens_array(a, g))


# ---------------------------------------------------------------------------------------- optimising
def _check_single(alpha) -> np.ndarray:
    a = _check_alpha(alpha)
    if a.ndim != 1:
        raise ValueError(f"alpha must be a scalar or a 1-d sequence here, got shape {a.shape}")
    return a


def _speedups(a: np.ndarray, cost, gmax: int) -> np.ndarray:
    """Speedup for gamma = 1..gmax (vectorised for a scalar cost), shape [gmax]."""
    E = 1.0 + np.cumsum(np.cumprod(_positions(a, gmax)))  # [gmax], E(gamma) for gamma = 1..gmax
    if isinstance(cost, float):
        return E / (np.arange(1, gmax + 1) * cost + 1.0)
    return np.array([E[g - 1] / _step_cost(cost, g) for g in range(1, gmax + 1)])


def optimal_gamma(alpha, cost, max_gamma: int = 64) -> tuple[int, float]:
    """The draft length in 1..max_gamma with the highest expected speedup, and that speedup.

    Always returns some gamma >= 1, even when speculation does not pay: compare the returned speedup with
    1 (or call :func:`speculation_helps`) to decide whether to speculate at all (gamma = 0). Ties (within a
    relative 1e-12) go to the smallest gamma. ``alpha``: scalar or per-position sequence; ``cost``: float or CostModel.
    """
    a = _check_single(alpha)
    c = _check_cost(cost)
    gmax = check_int("max_gamma", max_gamma, min=1, max=MAX_SCAN)
    s = _speedups(a, c, gmax)
    # Smallest gamma within rounding of the maximum: with c = 0 and E saturated in float64, later gammas
    # "win" by an ulp, and drafting 40 tokens for a 1e-16 gain is not an optimum anyone wants.
    best = int(np.argmax(s >= s.max() * (1.0 - 1e-12)))
    return best + 1, float(s[best])


def speedup_limit(alpha, cost, horizon: int | None = None) -> float:
    """Supremum over gamma >= 1 of the expected speedup.

    Scalar cost c, exact: with c = 0 it is E(gamma -> inf) (= 1/(1 - alpha) for i.i.d. alpha, inf at
    alpha = 1); with c > 0 and a tail rate < 1 the speedup E(gamma)/(gamma c + 1) is quasi-concave in gamma
    (concave over affine) once the per-position rates are repeating, so the maximum is attained at a finite
    gamma and found by scanning until it turns down; with tail rate 1 the sup is max(scan, P/c), where P is
    the probability all given positions are accepted (the i.i.d. value 1/c is approached, not attained).
    CostModel: the maximum over gamma = 1..horizon (default ``COSTMODEL_HORIZON`` = 256), since T_target(k)
    beyond the measured table is only an extrapolation. The limit may be < 1: then no gamma helps.
    """
    a = _check_single(alpha)
    c = _check_cost(cost)
    if not isinstance(c, float):
        h = COSTMODEL_HORIZON if horizon is None else check_int("horizon", horizon, min=1, max=MAX_SCAN)
        return optimal_gamma(a, c, h)[1]
    L = a.shape[-1]
    tail = float(a[-1])
    P = float(np.prod(a))  # probability that all L given positions are accepted
    if c == 0.0:
        E_L = float(_expected_tokens_array(a, L))
        if P == 0.0 or tail == 0.0:
            return E_L  # no further position can ever be accepted
        return math.inf if tail == 1.0 else E_L + P * tail / (1.0 - tail)
    g = max(L + 1, 64)
    while True:
        s = _speedups(a, c, g)
        if tail == 1.0 and P > 0.0:
            # Linear-over-linear tail: monotone, so the sup is the scan or the asymptote P/c.
            return float(max(s.max(), P / c))
        # Past position L the curve is quasi-concave: once it decreases at the end, the max is in hand.
        if s[-1] < s[-2] or P == 0.0 or tail == 0.0 or g >= 1 << 24:
            return float(s.max())
        g *= 2


def speculation_helps(alpha, cost, horizon: int | None = None) -> bool:
    """Whether some gamma >= 1 gives an expected speedup > 1.

    Scalar cost: exactly ``alpha_1 > c`` (alpha_1 = the first position's rate). At gamma = 1 the speedup is
    (1 + alpha)/(1 + c) > 1 iff alpha > c; and when alpha_1 <= c no longer draft helps either, because every
    term prod_{j<=i} a_j <= a_1 <= c, so E(gamma) <= 1 + gamma c. CostModel: checked numerically over
    gamma = 1..horizon, since T_target(k) > T_target(1) changes the condition (gamma = 1 needs
    alpha > c + (T(2) - T(1))/T(1)).
    """
    a = _check_single(alpha)
    c = _check_cost(cost)
    if isinstance(c, float):
        return bool(a[0] > c)
    return speedup_limit(a, c, horizon) > 1.0


# Token trees (Sequoia): their math lives in exactspec.speed.treemath; exported here beside the chain formulas.
from exactspec.speed.treemath import expected_tokens_tree, optimal_tree  # noqa: E402
