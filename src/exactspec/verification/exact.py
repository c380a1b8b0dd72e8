"""Exact enumeration of each verification rule's output distribution (float64, small V and K).

Distributions are prefix-dependent callables ``dist(prefix: tuple[int, ...]) -> Tensor [V]`` (float64).
Every draft (with its probability under the drafter), every outcome of the rule's coins (with the
probabilities the rule's *own* formula functions give), the number of tokens kept (by the rule's own
keep-count function) and every final token (from the rule's own residual, zero-mass fallback included)
is enumerated; the result is the exact distribution of the emitted tokens. The formula functions are
looked up on :mod:`exactspec.verification.rules` and :mod:`exactspec.verification.candidates` at call time, the very functions
``verify``, ``verify_logits``, ``verify_candidates`` and ``verify_tree`` call: what is proved here is
the code that runs (and a test that patches a formula there changes both).

Because rules emit a variable number of tokens, emitted prefixes are continued by sampling from the
target up to a common length ``n_tokens`` (what later decoding steps do when the rule is correct); the
rule is exact iff that joint equals the target's own joint of ``n_tokens`` tokens.
"""
from __future__ import annotations

import functools
import itertools
from collections import defaultdict
from typing import Callable

import torch

from exactspec.verification import candidates, rules
from exactspec.verification.candidates import SCHEMES, TokenTree

Dist = Callable[[tuple], torch.Tensor]

__all__ = [
    "target_distribution", "rule_distribution", "expected_accepted", "candidates_distribution",
    "candidates_accept_prob", "tree_distribution", "max_abs_diff",
]


def _residual_dist(p: torch.Tensor, q: torch.Tensor, weight=1.0) -> torch.Tensor:
    # The rules' own residual, with their fallback to p where it has ~zero mass, normalised.
    r = rules.residual_or_p(p, q, weight)
    return r / r.sum()


def _extend(emitted: dict, p_dist: Dist, n_tokens: int) -> dict:
    """Continue every emitted prefix with target samples up to ``n_tokens`` tokens (exactly)."""
    out = defaultdict(float)
    stack = [(seq, pr) for seq, pr in emitted.items() if pr > 0]
    while stack:
        seq, pr = stack.pop()
        if len(seq) >= n_tokens:
            out[seq[:n_tokens]] += pr
            continue
        p = p_dist(seq)
        for y in range(p.shape[0]):
            if p[y] > 0:
                stack.append((seq + (y,), pr * float(p[y])))
    return dict(out)


def target_distribution(p_dist: Dist, n_tokens: int) -> dict:
    """The target's own joint distribution of its first ``n_tokens`` tokens."""
    return _extend({(): 1.0}, p_dist, n_tokens)


def _drafts(q_dist: Dist, K: int, stop=None):
    """Every draft x_1..x_L with its probability prod q_{i-1}(x_i): L = K, or the first length at which
    ``stop(prefix, q)`` (given the prefix and the draft's distribution there, never the next token) is true."""
    def rec(prefix, pr):
        if len(prefix) == K:
            yield prefix, pr
            return
        q = q_dist(prefix)
        if stop is not None and stop(prefix, q):
            yield prefix, pr
            return
        for x in range(q.shape[0]):
            if q[x] > 0:
                yield from rec(prefix + (x,), pr * float(q[x]))
    yield from rec((), 1.0)


@functools.lru_cache(maxsize=None)
def _coin_patterns(K: int) -> torch.Tensor:
    return torch.tensor(list(itertools.product([False, True], repeat=K)), dtype=torch.bool).reshape(2 ** K, K)


def _keep_law(coin_probs: torch.Tensor, keep_count) -> torch.Tensor:  # [K] -> [K+1]
    """P(n tokens kept), n = 0..K: every pattern of the K independent coins (coin i succeeds with
    ``coin_probs[i]``, as ``u < a`` with u uniform does), counted by the rule's own ``keep_count``."""
    K = coin_probs.shape[0]
    ok = _coin_patterns(K)  # [2^K, K]
    pr = torch.where(ok, coin_probs, 1.0 - coin_probs).prod(-1)  # [2^K]
    return torch.zeros(K + 1, dtype=coin_probs.dtype).index_add_(0, keep_count(ok), pr)


def _outcomes(p_dist: Dist, q_dist: Dist, x: tuple, method: str):
    """For one draft: list of (n_kept, probability, distribution of the next token [V])."""
    K = len(x)
    P = torch.stack([p_dist(x[:i]) for i in range(K + 1)])  # [K+1, V]
    Q = torch.stack([q_dist(x[:i]) for i in range(K)]) if K else P[:0]  # [K, V]
    idx = torch.tensor(x, dtype=torch.long)
    p_x, q_x = P[torch.arange(K), idx], Q[torch.arange(K), idx]
    if method == "token":
        law = _keep_law(rules.token_accept_prob(p_x, q_x), rules.token_keep_count)
        weight = [1.0] * K
    elif method == "block":
        w = rules.block_weights(p_x, q_x)  # [K+1]
        z, _ = rules.block_masses(P[1:K], Q[1:K], w[1:K])  # [K-1]
        law = _keep_law(rules.block_accept_probs(w, z), rules.block_keep_count)
        weight = w
    else:
        raise ValueError(f"method must be 'token' or 'block' for enumeration, got {method!r}")
    return [(n, float(law[n]), P[K] if n == K else _residual_dist(P[n], Q[n], weight[n]))
            for n in range(K + 1)]


def rule_distribution(p_dist: Dist, q_dist: Dist, K: int, method: str, n_tokens: int | None = None,
                      stop=None) -> dict:
    """Exact distribution of the first ``n_tokens`` (default K+1) output tokens of one verification step
    (drafting K tokens from q, verifying with ``method``), continued by the target. ``stop(prefix, q)``:
    a drafting policy that may end the draft early, as gamma="auto" does (see :mod:`exactspec.engine.policy`)."""
    emitted = defaultdict(float)
    for x, qx in _drafts(q_dist, K, stop):
        for n, pr, nxt in _outcomes(p_dist, q_dist, x, method):
            for y in range(nxt.shape[0]):
                emitted[x[:n] + (y,)] += qx * pr * float(nxt[y])
    return _extend(emitted, p_dist, n_tokens or K + 1)


def expected_accepted(p_dist: Dist, q_dist: Dist, K: int, method: str) -> float:
    """Exact E[number of draft tokens kept] in one step of ``method`` ("token" or "block")."""
    return sum(qx * n * pr for x, qx in _drafts(q_dist, K)
               for n, pr, _ in _outcomes(p_dist, q_dist, x, method))


# ----------------------------------------------------------------------------- candidates and trees
def _candidate_draws(q: torch.Tensor, n: int, scheme: str):
    """Every candidate tuple of length n with its probability under ``scheme``."""
    V = q.shape[0]
    if scheme == "deterministic":
        order = sorted(range(V), key=lambda y: (-float(q[y]), y))  # top-n, documented tie order
        yield tuple(order[:n]), 1.0
        return
    for c in itertools.product(range(V), repeat=n):
        pr = 1.0
        for s in range(n):
            prev = torch.tensor(c[:s], dtype=torch.long)
            qs = candidates.candidate_draft_dist(q, prev, torch.tensor(c[s]), scheme)
            pr *= float(qs[c[s]]) if torch.isfinite(qs).all() else 0.0
            if pr == 0:
                break
        if pr > 0:
            yield c, pr


def _mrrs_outcomes(p: torch.Tensor, q: torch.Tensor, c: tuple, scheme: str):
    """For fixed candidates: list of (accepted index or -1, probability, final residual or None)."""
    R, out, reach = p, [], 1.0
    for s, x in enumerate(c):
        prev = torch.tensor(c[:s], dtype=torch.long)
        qs = candidates.candidate_draft_dist(q, prev, torch.tensor(x), scheme)
        a = float(candidates.mrrs_accept_prob(R[x], qs[x]))
        out.append((s, reach * a, None))
        reach *= 1 - a
        R = candidates.mrrs_residual(R, qs)
    out.append((-1, reach, R))
    return out


def candidates_distribution(p: torch.Tensor, q: torch.Tensor, n: int, scheme: str) -> torch.Tensor:
    """Exact distribution [V] of the token emitted by multi-round rejection sampling over n candidates."""
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
    out = torch.zeros_like(p)
    for c, pc in _candidate_draws(q, n, scheme):
        for s, pr, R in _mrrs_outcomes(p, q, c, scheme):
            if s >= 0:
                out[c[s]] += pc * pr
            else:
                out += pc * pr * R
    return out


def candidates_accept_prob(p: torch.Tensor, q: torch.Tensor, n: int, scheme: str) -> float:
    """Exact P(one of the n candidates is accepted) under multi-round rejection sampling."""
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
    return sum(pc * pr for c, pc in _candidate_draws(q, n, scheme)
               for s, pr, _ in _mrrs_outcomes(p, q, c, scheme) if s >= 0)


def tree_distribution(p_dist: Dist, q_dist: Dist, parents: list, scheme: str, n_tokens: int | None = None):
    """Exact output distribution of :func:`exactspec.verify_tree` on a tree of the given shape whose
    sibling tokens are drawn from ``q_dist(node prefix)`` under ``scheme``; continued to ``n_tokens``
    (default depth + 1) tokens by the target."""
    tree = TokenTree(parents, [0] * len(parents))
    kids = tree.children()
    emitted = defaultdict(float)

    def assignments(pending, toks, pr):
        # pending: nodes whose children still need tokens, with their prefixes
        if not pending:
            yield dict(toks), pr
            return
        (u, prefix), rest = pending[0], pending[1:]
        ch = kids[u + 1]
        if not ch:
            yield from assignments(rest, toks, pr)
            return
        for c, pc in _candidate_draws(q_dist(prefix), len(ch), scheme):
            new = dict(toks)
            new.update(zip(ch, c))
            yield from assignments(rest + [(i, prefix + (t,)) for i, t in zip(ch, c)], new, pr * pc)

    def walk(u, prefix, toks, pr):
        ch = kids[u + 1]
        p = p_dist(prefix)
        if not ch:
            for y in range(p.shape[0]):
                emitted[prefix + (y,)] += pr * float(p[y])
            return
        c = tuple(toks[i] for i in ch)
        for s, ps, R in _mrrs_outcomes(p, q_dist(prefix), c, scheme):
            if s >= 0:
                walk(ch[s], prefix + (c[s],), toks, pr * ps)
            else:
                for y in range(R.shape[0]):
                    emitted[prefix + (y,)] += pr * ps * float(R[y])

    for toks, pa in assignments([(-1, ())], {}, 1.0):
        walk(-1, (), toks, pa)
    return _extend(emitted, p_dist, n_tokens or tree.depth() + 1)


def max_abs_diff(a: dict, b: dict) -> float:
    """Largest |a[s] - b[s]| over the union of keys (missing = 0)."""
    return max(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))
