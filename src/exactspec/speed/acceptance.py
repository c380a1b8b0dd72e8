"""Exact acceptance quantities for explicit small distributions, by enumeration.

These are independent reference implementations (not the verifiers used for generation): they enumerate
every draft sequence / candidate set, so they are exponential in the draft length and meant for small V.

Distributions are given as one of
- a callable ``dist(prefix: tuple[int, ...]) -> [V]`` (torch tensor, numpy array or list), prefix-dependent;
- a dict ``{prefix_tuple: [V]}``;
- a list of nested tables ``[t_0, t_1, ...]`` where ``t_i`` has shape ``[V]*i + [V]``:
  ``t_i[x_1, ..., x_i]`` is the next-token distribution after the prefix ``(x_1, ..., x_i)``;
- a single ``[V]`` vector: the same (context-free) distribution at every position.

Positions: ``p_i = p(. | x_1..x_i)`` is the distribution of the (i+1)-th drafted token.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from exactspec.verification.checks import check_choice, check_int

__all__ = [
    "expected_accepted_token_rule",
    "expected_accepted_block",
    "multi_draft_acceptance",
    "MULTI_DRAFT_SCHEMES",
]

MULTI_DRAFT_SCHEMES = ("iid", "without_replacement", "deterministic")
_EPS = 1e-12
# Enumeration budget: more candidate sequences than this is minutes of work, refused up front.
MAX_SEQUENCES = 10**7


def _vec(x: Any, name: str) -> np.ndarray:
    from exactspec.speed.speedup import _to_numpy  # numbers only: no str / bool / None coercion

    v = _to_numpy(x, name)
    if v.ndim != 1 or v.size == 0:
        raise ValueError(f"{name} must give a 1-d probability vector, got shape {v.shape}")
    if np.isnan(v).any() or (v < 0).any() or abs(v.sum() - 1.0) > 1e-6:
        raise ValueError(f"{name} must give probabilities (non-negative, summing to 1), got {v}")
    return v


def _as_dist_fn(d: Any, name: str) -> Callable[[tuple], np.ndarray]:
    if callable(d):
        return lambda prefix: _vec(d(prefix), name)
    if isinstance(d, dict):
        def from_dict(prefix):
            if prefix not in d:
                raise ValueError(f"{name} has no distribution for prefix {prefix!r}")
            return _vec(d[prefix], name)
        return from_dict
    if isinstance(d, (list, tuple)) and d and np.ndim(_np(d[0], name)) == 1 and np.ndim(_np(d[-1], name)) >= 1:
        tables = [_np(t, name) for t in d]
        if all(t.ndim == i + 1 for i, t in enumerate(tables)):
            def from_tables(prefix):
                if len(prefix) >= len(tables):
                    raise ValueError(f"{name} has tables for prefixes shorter than {len(tables)} only")
                return _vec(tables[len(prefix)][tuple(prefix)], name)
            return from_tables
    v = _vec(_np(d, name), name)  # context-free
    return lambda prefix: v


def _np(x, name: str = "p"):
    from exactspec.speed.speedup import _to_numpy  # numbers only: no str / bool / None coercion

    return _to_numpy(x, name)


def _check_K(K: Any) -> int:
    return check_int("K (draft length)", K, min=1)


def _root_dists(p, q, length: int, what: str):
    """(pf, qf) for p and q, checked at the empty prefix: same vocabulary, and an enumeration of at most
    MAX_SEQUENCES sequences (estimated from the support at the root) for ``length`` positions."""
    pf, qf = _as_dist_fn(p, "p"), _as_dist_fn(q, "q")
    p0, q0 = pf(()), qf(())
    if p0.shape != q0.shape:
        raise ValueError(f"p and q must have the same vocabulary size, got {p0.size} and {q0.size}")
    support = int(max((q0 > 0).sum(), (p0 > 0).sum()))
    if support > 1 and length * np.log10(support) > np.log10(MAX_SEQUENCES):
        raise ValueError(f"{what}={length} with {support} possible tokens per position would enumerate up to "
                         f"{support}**{length} sequences (limit {MAX_SEQUENCES:.0e}); this exact reference is "
                         "for small vocabularies and draft lengths")
    return pf, qf


def expected_accepted_token_rule(p, q, K: int) -> float:
    """E[number of accepted draft tokens] under the token-by-token rule, K drafted tokens.

    Token i is kept with prob min(1, p_{i-1}(x_i)/q_{i-1}(x_i)); the first rejection stops the step. So
    E = sum_{i=1..K} P(first i kept), P(first i kept) = sum_{x_1..x_i} prod_j min(p_{j-1}(x_j), q_{j-1}(x_j)).
    Excludes the bonus/correction token (tokens per step = this + 1).
    """
    K = _check_K(K)
    pf, qf = _root_dists(p, q, K, "K")

    def walk(prefix: tuple, mass: float) -> float:
        # mass = P(x_1..x_i drafted and all kept)
        if len(prefix) == K:
            return 0.0
        m = np.minimum(pf(prefix), qf(prefix)) * mass  # [V]
        total = 0.0
        for x in np.nonzero(m > 0)[0]:
            total += m[x] + walk(prefix + (int(x),), m[x])
        return total

    return float(walk((), 1.0))


def _block_tau_mean(h: list[float]) -> float:
    """E[tau] where tau = last i in 0..K whose coin (prob h_i, h_0 = 1) succeeds."""
    total, survive = 0.0, 1.0  # survive = prod_{j>i} (1 - h_j), built from the end
    for i in range(len(h) - 1, 0, -1):
        total += i * h[i] * survive
        survive *= 1.0 - h[i]
    return total


def expected_accepted_block(p, q, K: int) -> float:
    """E[number of accepted draft tokens] under block verification (Sun et al. 2024), K drafted tokens.

    w_0 = 1, w_i = min(1, w_{i-1} p_{i-1}(x_i)/q_{i-1}(x_i)); for i < K h_i = Z_i/(Z_i + 1 - w_i) with
    Z_i = sum_y max(w_i p_i(y) - q_i(y), 0) (h_i = 1 if the denominator is 0), h_K = w_K; tau = the last i
    whose coin succeeds, and E = sum_x q(x_1..x_K) sum_tau tau h_tau prod_{j>tau}(1 - h_j).
    Excludes the bonus/correction token. Always >= :func:`expected_accepted_token_rule`.
    """
    K = _check_K(K)
    pf, qf = _root_dists(p, q, K, "K")

    def walk(prefix: tuple, mass: float, w: float, h: list[float]) -> float:
        i = len(prefix)
        if i == K:
            return mass * _block_tau_mean(h + [w])
        qi, pi = qf(prefix), pf(prefix)  # [V], [V]
        if i > 0:
            Z = float(np.maximum(w * pi - qi, 0.0).sum())
            den = Z + 1.0 - w
            h = h + [1.0 if den <= _EPS else Z / den]
        total = 0.0
        for x in np.nonzero(qi > 0)[0]:
            w_next = min(1.0, w * pi[x] / qi[x])
            total += walk(prefix + (int(x),), mass * qi[x], w_next, h)
        return total

    return float(walk((), 1.0, 1.0, [1.0]))


# ---------------------------------------------------------------------------------------- multi-draft
def _norm(r: np.ndarray) -> np.ndarray | None:
    s = r.sum()
    return r / s if s > _EPS else None


def multi_draft_acceptance(p, q, n: int, scheme: str = "iid") -> float:
    """P(one of n candidates is accepted) at a single position, multi-round rejection sampling (SpecInfer).

    R_1 = p. Candidate s is accepted with prob min(1, R_s(x_s)/q_s(x_s)); if rejected,
    R_{s+1} = norm(max(R_s - q_s, 0)). Schemes:
    - "iid": x_s i.i.d. from q, q_s = q;
    - "without_replacement": x_s from q with x_1..x_{s-1} removed, q_s = that renormalised q;
    - "deterministic": x_s = the s-th most likely token under q (ties: lower index), q_s one-hot, so x_s is
      accepted with prob R_s(x_s) and then R_{s+1} = norm(R_s with x_s zeroed).
    p, q: [V]. Exact, enumerating candidate sequences (V^n for "iid"/"without_replacement").
    With n = 1 every scheme except "deterministic" gives sum_x min(p, q).
    """
    pv, qv = _vec(_np(p, "p"), "p"), _vec(_np(q, "q"), "q")
    if pv.shape != qv.shape:
        raise ValueError(f"p and q must have the same size, got {pv.shape} and {qv.shape}")
    n = check_int("n (number of candidates)", n, min=1)
    check_choice("scheme", scheme, MULTI_DRAFT_SCHEMES)
    if scheme != "deterministic":
        _root_dists(pv, qv, n, "n")

    if scheme == "deterministic":
        order = np.argsort(-qv, kind="stable")[: int(n)]
        reject, R = 1.0, pv
        for x in order:
            if R is None:
                break
            reject *= 1.0 - R[x]
            r = R.copy()
            r[x] = 0.0
            R = _norm(r)
        return float(1.0 - reject)

    def walk(R: np.ndarray, qs: np.ndarray, s: int) -> float:
        # P(accept at candidate s or later | reached candidate s with residual R and proposal qs)
        if s > n:
            return 0.0
        total = 0.0
        for x in np.nonzero(qs > 0)[0]:
            a = min(1.0, R[x] / qs[x])
            total += qs[x] * a
            if a < 1.0:
                R_next = _norm(np.maximum(R - qs, 0.0))
                if R_next is None:
                    continue  # R <= qs everywhere means R == qs: acceptance was certain
                if scheme == "iid":
                    q_next = qv
                else:
                    q_next = qs.copy()
                    q_next[x] = 0.0
                    q_next = _norm(q_next)
                    if q_next is None:
                        continue  # the draft support is exhausted: no more candidates
                total += qs[x] * (1.0 - a) * walk(R_next, q_next, s + 1)
        return total

    return float(min(1.0, walk(pv, qv, 1)))
