"""Token trees planned offline: acceptance per (depth, sibling rank) from the same teacher-forced pass.

At each written position t, the target's p_t and the draft's q_t give, for siblings tried in rank order by
the multi-round rule (:mod:`exactspec.verification.candidates`; the engine's greedy children are the draft's top-b,
sampled children are drawn from q without replacement, Sequoia),

- ``num_r(t)``: P(the rank-r sibling is THE accepted one), and ``den_r(t)``: P(every sibling of rank < r
  was rejected).

Greedy: the target's token is the written x_t, so rank r is accepted iff x_t is the draft's r-th most
likely token (num and den are 0/1). Sampled: an expectation over the siblings' draws, estimated with
``draws`` seeded draws per position (Gumbel top-k, which is sampling without replacement); each round's
acceptance probability given the draws is exact, from the candidates module's own formula functions.

Depth: ``acceptance[d][r] = sum_t W_d(t) num_r(t) / sum_t W_d(t) den_r(t)``, where ``W_d(t)`` is the chain
replay's probability that a step reaches depth d + 1 at position t (:meth:`OfflineAcceptance.replay` with
``weights``). Rank 0 then equals the chain's own conditional rate at that depth, and sibling ranks are
weighed where steps get to. What this leaves out: a tree reaches deep positions through side branches
too, at contexts a chain would have reached by rejection and restart; the acceptance table is Sequoia's
positional model (a sibling's chance depends on its depth and rank only), which
:func:`exactspec.speed.treemath.best_trees` then optimises against the cost model.
"""
from __future__ import annotations

import numpy as np
import torch

from exactspec.verification import candidates

__all__ = ["rank_terms", "tree_acceptance", "plan_trees"]


def rank_terms(p: torch.Tensor, q: torch.Tensor, x: torch.Tensor, ranks: int, *, greedy: bool,
               q_logits: torch.Tensor | None = None, generator: torch.Generator | None = None,
               draws: int = 16, chunk: int = 1 << 22) -> tuple[np.ndarray, np.ndarray]:
    """``(num [n, ranks], den [n, ranks])`` at every written position (see the module docstring).

    ``p``, ``q``: ``[n, V]`` the sampling laws (float64); ``x [n]`` the written tokens; greedy ranks come
    from ``q_logits [n, V]`` (the draft's raw preference, as its top-b children are chosen)."""
    n = x.shape[0]
    if greedy:
        scores = q_logits if q_logits is not None else q
        rank = (scores > scores.gather(1, x[:, None])).sum(1)  # [n] how many tokens the draft prefers to x_t
        r = torch.arange(ranks)[None, :]
        return (rank[:, None] == r).double().numpy(), (rank[:, None] >= r).double().numpy()
    num, den = np.zeros((n, ranks)), np.zeros((n, ranks))
    step = max(1, chunk // (q.shape[1] * draws))
    for i in range(0, n, step):
        nm, dn = _sampled_terms(p[i:i + step], q[i:i + step], ranks, draws, generator)
        num[i:i + step], den[i:i + step] = nm, dn
    return num, den


def _sampled_terms(p, q, ranks: int, draws: int, generator):
    c, V = q.shape
    u = torch.rand((c, draws, V), generator=generator, dtype=torch.float64).clamp(min=1e-300)
    keys = q.log()[:, None, :] - torch.log(-torch.log(u))  # [c, M, V] Gumbel keys; q = 0 -> -inf
    sib = keys.topk(min(ranks, V), dim=-1).indices  # [c, M, R] siblings in draw order (without replacement)
    qq = q[:, None, :].expand(c, draws, V)
    R = p[:, None, :].expand(c, draws, V)  # the running residual, initially p
    alive = torch.ones(c, draws, dtype=torch.float64)  # P(every earlier sibling rejected)
    num, den = np.zeros((c, ranks)), np.zeros((c, ranks))
    for r in range(sib.shape[-1]):
        xr = sib[..., r]  # [c, M]
        exists = qq.gather(-1, xr[..., None])[..., 0] > 0  # past q's support there is no such sibling
        qs = candidates.candidate_draft_dist(qq, sib[..., :r], xr, "without_replacement")
        a = candidates.mrrs_accept_prob(R.gather(-1, xr[..., None])[..., 0], qs.gather(-1, xr[..., None])[..., 0])
        a = torch.where(exists, a, torch.zeros_like(a))
        den[:, r] = alive.mean(1).numpy()
        num[:, r] = (alive * a).mean(1).numpy()
        alive = alive * (1.0 - a)
        R = torch.where(exists[..., None], candidates.mrrs_residual(R, torch.nan_to_num(qs)), R)
    return num, den


def tree_acceptance(acc, depth: int) -> np.ndarray:
    """``[depth, ranks]`` acceptance table of an :class:`~exactspec.deploy.offline.OfflineAcceptance` measured with
    ``tree_ranks`` (see the module docstring); positions never reached at a depth repeat the row above."""
    if not acc.rows or acc.rows[0].rank_num is None:
        raise ValueError("this measurement has no tree statistics: measure with tree_ranks >= 1")
    depth = max(1, min(int(depth), acc.max_gamma))
    weights: list = []
    acc.replay(depth, "token", weights=weights)  # [n, depth] per row: P(a step reaches depth d+1 at t)
    ranks = acc.rows[0].rank_num.shape[1]
    num, den = np.zeros((depth, ranks)), np.zeros((depth, ranks))
    for row, w in zip(acc.rows, weights):
        num += w.T @ row.rank_num
        den += w.T @ row.rank_den
    table = np.divide(num, den, out=np.full_like(num, np.nan), where=den > 1e-12)
    for d in range(depth):  # nothing measured: repeat the depth above (or 0 at the root)
        fill = table[d - 1] if d else np.zeros(ranks)
        table[d] = np.where(np.isnan(table[d]), fill, table[d])
    return np.clip(table, 0.0, 1.0)


def plan_trees(acc, costs: list[tuple[int, object]], max_nodes: int = 16) -> dict:
    """The best tree of at most ``max_nodes`` nodes per batch size for the measured table
    (:func:`exactspec.speed.treemath.best_trees`, with the depth and branching limits of the engine's
    ``tree="auto"``), its predicted speedup; ``exactspec`` config ``tree="auto"`` (the engine re-plans the
    same program online from its own counts)."""
    from exactspec.engine.treepolicy import AUTO_MAX_BRANCH, AUTO_MAX_DEPTH
    from exactspec.speed.treemath import best_trees

    table = tree_acceptance(acc, min(AUTO_MAX_DEPTH, max_nodes, acc.max_gamma))
    branch = min(AUTO_MAX_BRANCH, table.shape[1])  # ranks past those measured would repeat the last one
    by_batch = []
    for batch, cost in costs:
        entry = {"batch_size": batch, "best": None}
        if cost is not None:
            priced = cost.monotone() if hasattr(cost, "monotone") else cost  # as the engine's tree="auto"
            plans = best_trees(table, priced, max_nodes, max_depth=table.shape[0], max_branch=branch)
            best = plans[-1]
            entry["best"] = {"tree": best.label, "parents": list(best.parents), "nodes": best.n_nodes,
                             "depth": best.depth, "is_chain": best.is_chain,
                             "expected_tokens": best.expected_tokens, "predicted_speedup": best.speedup}
            entry["by_budget"] = [{"max_nodes": i + 1, "tree": t.label, "expected_tokens": t.expected_tokens,
                                   "predicted_speedup": t.speedup} for i, t in enumerate(plans)]
        by_batch.append(entry)
    head = by_batch[0]
    return {"acceptance": table.tolist(), "best": head["best"], "by_budget": head.get("by_budget"),
            "by_batch_size": by_batch, "exactspec": {"tree": "auto"}}
