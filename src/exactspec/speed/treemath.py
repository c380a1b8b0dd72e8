"""Token trees in numbers: expected tokens per target call, and the best tree for a cost model.

Acceptance model (Sequoia's positional acceptance, per depth): ``acceptance[d][r]`` is the probability that
the sibling of rank r at depth d + 1 is accepted, given its parent was reached and the siblings of rank
< r were rejected (the multi-round rule tries siblings in rank order). The probability that rank r is the
one accepted is then ``u(d, r) = a[d][r] * prod_{s<r} (1 - a[d][s])``, and a node lies on the accepted
path with the product of ``u`` along its path. So

    E[tokens per target call] = 1 + sum over nodes v of prod_{w on the path to v} u(depth(w), rank(w)).

``acceptance`` may be a scalar (every depth and rank), a 1-d array over ranks (every depth), or a 2-d
array ``[depth, rank]``; depths past the last row repeat the last row, ranks past the last column repeat
the last column. A chain of gamma tokens is the tree ``(1,) * gamma``; with a 1-column acceptance this
is :func:`exactspec.speed.speedup.expected_tokens` exactly.

A step with a tree of n nodes and depth D costs, priced by :meth:`CostModel.step_time`, D draft calls
(the draft expands a whole depth's frontier in one forward) and one target call over n + 1 tokens; with a
scalar cost ratio c it costs ``D c + 1`` target steps (the paper's model, verification width free).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["TreePlan", "shape_parents", "expected_tokens_tree", "optimal_tree", "best_trees", "tree_label",
           "tree_depths"]


@dataclass
class TreePlan:
    """A tree shape and its prediction. ``parents``: node parent ids in breadth-first order (-1 = child
    of the root); ``expected_tokens`` per target call; ``speedup`` over plain decoding; ``step_cost`` in
    units of one plain decoding step."""

    parents: tuple[int, ...]
    expected_tokens: float
    speedup: float
    step_cost: float

    @property
    def n_nodes(self) -> int:
        return len(self.parents)

    @property
    def depth(self) -> int:
        return max(tree_depths(self.parents), default=0)

    @property
    def is_chain(self) -> bool:
        return all(p == i - 1 for i, p in enumerate(self.parents))

    @property
    def label(self) -> str:
        return tree_label(self.parents)


def _check_shape(shape) -> tuple[int, ...]:
    if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
        raise ValueError(f"shape must be a tuple of branching factors >= 1, got {shape!r}")
    out = tuple(shape)
    if not out or any(isinstance(b, bool) or not isinstance(b, (int, np.integer)) or b < 1 for b in out):
        raise ValueError(f"shape must be a non-empty tuple of integers >= 1, got {shape!r}")
    return tuple(int(b) for b in out)


def shape_parents(shape) -> list[int]:
    """Parent ids (breadth-first) of the static tree with branching ``shape[d]`` at depth d + 1:
    ``(3, 2, 1, 1)`` is the root's 3 children, each with 2, then 1, then 1 (3 + 6 + 6 + 6 = 21 nodes)."""
    parents, frontier = [], [-1]
    for b in _check_shape(shape):
        nxt = []
        for u in frontier:
            for _ in range(b):
                nxt.append(len(parents))
                parents.append(u)
        frontier = nxt
    return parents


def tree_depths(parents) -> list[int]:
    d = []
    for i, p in enumerate(parents):
        if not -1 <= p < i:
            raise ValueError(f"parents must satisfy -1 <= parents[i] < i, got {list(parents)!r}")
        d.append(1 if p < 0 else d[p] + 1)
    return d


def tree_ranks(parents) -> list[int]:
    seen: dict[int, int] = {}
    out = []
    for p in parents:
        out.append(seen.get(p, 0))
        seen[p] = out[-1] + 1
    return out


def tree_label(parents) -> str:
    """Children per node, breadth first, depths separated by '/': the chain of 3 is "1/1/1", (2, 1) is "2/1,1"."""
    parents = list(parents)
    depths = tree_depths(parents)
    kids = [0] * (len(parents) + 1)
    for p in parents:
        kids[p + 1] += 1
    levels: list[list[str]] = [[str(kids[0])]] if parents else []
    for i, d in enumerate(depths):
        if d < max(depths):
            while len(levels) <= d:
                levels.append([])
            levels[d].append(str(kids[i + 1]))
    return "/".join(",".join(level) for level in levels)


def _acceptance(acceptance) -> np.ndarray:
    a = np.asarray(acceptance.detach().cpu() if hasattr(acceptance, "detach") else acceptance, dtype=np.float64)
    if a.ndim == 0:
        a = a.reshape(1, 1)
    elif a.ndim == 1:
        a = a.reshape(1, -1)
    if a.ndim != 2 or a.size == 0:
        raise ValueError(f"acceptance must be a scalar, [rank] or [depth, rank] array, got shape {a.shape}")
    if np.isnan(a).any() or (a < 0).any() or (a > 1).any():
        raise ValueError(f"acceptance must lie in [0, 1], got {acceptance!r}")
    return a


def _u_table(a: np.ndarray, depth: int, ranks: int) -> np.ndarray:
    """u[d, r]: probability that rank r is THE accepted child at depth d + 1, shape [depth, ranks]."""
    rows = np.minimum(np.arange(depth), a.shape[0] - 1)
    cols = np.minimum(np.arange(ranks), a.shape[1] - 1)
    cond = a[rows][:, cols]
    reject_before = np.cumprod(np.concatenate([np.ones((depth, 1)), 1.0 - cond[:, :-1]], 1), 1)
    return cond * reject_before


def expected_tokens_tree(shape, acceptance) -> float:
    """Expected tokens per target call of a tree (accepted nodes + the corrected/bonus token).

    ``shape``: a tuple of branching factors per depth (``(3, 2, 1, 1)``), or a :class:`TreePlan` / an
    object with ``.parents``. ``acceptance``: see the module docstring.
    """
    parents = list(shape.parents) if hasattr(shape, "parents") else shape_parents(shape)
    return _expected_parents(parents, _acceptance(acceptance))


def expected_tokens_parents(parents, acceptance) -> float:
    """:func:`expected_tokens_tree` for a tree given by its parent ids (topological order)."""
    return _expected_parents(list(parents), _acceptance(acceptance))


def _expected_parents(parents: list[int], a: np.ndarray) -> float:
    depths, ranks = tree_depths(parents), tree_ranks(parents)
    if not parents:
        return 1.0
    u = _u_table(a, max(depths), max(ranks) + 1)
    reach = []
    for i, p in enumerate(parents):
        reach.append(u[depths[i] - 1, ranks[i]] * (1.0 if p < 0 else reach[p]))
    return 1.0 + float(sum(reach))


def _step_units(cost, depth: int, n_nodes: int) -> float:
    """A step's time in plain decoding steps: CostModel.step_time(depth draft calls, n + 1 verified)."""
    if hasattr(cost, "step_time"):
        return cost.step_time(depth, width=n_nodes + 1) / cost.t_target(1)
    c = float(cost)
    if not np.isfinite(c) or c < 0:
        raise ValueError(f"cost must be a non-negative number or a CostModel, got {cost!r}")
    return depth * c + 1.0


def _dp(u: np.ndarray, depth: int, m: int, ranks: int):
    """Best expected accepted nodes below a node at each depth with at most j nodes (j = 0..m).

    f[d][j] for a node at depth d (0 = root); choice[d][r][j] = nodes given to the rank-r child's subtree
    (0 = no child of rank r or later) when j nodes are left for ranks r, r+1, ...
    """
    f = [None] * (depth + 1)
    f[depth] = np.zeros(m + 1)
    choice = [None] * depth
    jj = np.arange(m + 1)[:, None]
    kk = np.arange(1, m + 1)[None, :]
    valid = kk <= jj  # [m+1, m]
    for d in range(depth - 1, -1, -1):
        g = np.zeros(m + 1)  # ranks past the last: nothing
        ch = np.zeros((ranks, m + 1), dtype=np.int64)
        for r in range(ranks - 1, -1, -1):
            h = u[d, r] * (1.0 + f[d + 1][kk - 1])  # [1, m]: child subtree of k nodes
            rest = np.where(valid, g[np.clip(jj - kk, 0, m)], -np.inf)
            val = np.where(valid, h + rest, -np.inf)
            best_k = val.argmax(1)
            best = val[np.arange(m + 1), best_k]
            take = best > 0.0 + 1e-15  # a child of zero value is never worth a node
            ch[r] = np.where(take, best_k + 1, 0)
            g = np.where(take, best, 0.0)
        f[d], choice[d] = g, ch
    return f, choice


def _rebuild(choice, depth: int, m: int) -> list[int]:
    """Parent ids (breadth first) of the DP's tree with m nodes."""
    nodes = []  # (parent, depth, budget) in breadth-first order

    def children(parent_id, d, budget):
        out, r = [], 0
        while d < depth and budget > 0 and r < choice[d].shape[0]:
            k = int(choice[d][r][budget])
            if k == 0:
                break
            out.append((parent_id, d + 1, k - 1))
            budget -= k
            r += 1
        return out

    frontier = children(-1, 0, m)
    while frontier:
        nxt = []
        for parent_id, d, budget in frontier:
            nodes.append(parent_id)
            nxt.extend(children(len(nodes) - 1, d, budget))
        frontier = nxt
    return nodes


def best_trees(acceptance, cost, max_nodes: int, max_depth: int | None = None,
               max_branch: int | None = None) -> list[TreePlan]:
    """For each node budget n = 1..max_nodes, the tree of at most n nodes with the highest predicted
    speedup (Sequoia's dynamic program over trees, per depth limit; ties go to fewer nodes)."""
    if isinstance(max_nodes, bool) or not isinstance(max_nodes, (int, np.integer)) or max_nodes < 1:
        raise ValueError(f"max_nodes must be an integer >= 1, got {max_nodes!r}")
    a = _acceptance(acceptance)
    m = int(max_nodes)
    depth_max = m if max_depth is None else max(1, min(int(max_depth), m))
    ranks = m if max_branch is None else max(1, min(int(max_branch), m))
    u = _u_table(a, depth_max, ranks)
    cands = []  # (speedup, n, depth limit, E)
    tables = {}
    for dl in range(1, depth_max + 1):
        f, choice = _dp(u, dl, m, ranks)
        tables[dl] = choice
        for n in range(1, m + 1):
            e = 1.0 + float(f[0][n])
            cands.append((e / _step_units(cost, dl, n), n, dl, e))
    out, best = [], None
    for n in range(1, m + 1):
        for c in cands:
            if c[1] == n and (best is None or c[0] > best[0] * (1 + 1e-12)):
                best = c
        s, bn, dl, e = best
        parents = _rebuild(tables[dl], dl, bn)
        d = max(tree_depths(parents), default=0)
        out.append(TreePlan(tuple(parents), e, e / _step_units(cost, d, len(parents)),
                            _step_units(cost, d, len(parents))))
    return out


def optimal_tree(acceptance, cost_model, max_nodes: int = 16, max_depth: int | None = None,
                 max_branch: int | None = None) -> TreePlan:
    """The tree of at most ``max_nodes`` nodes with the highest predicted speedup under ``cost_model``
    (a CostModel, or a draft/target cost ratio c). A chain when branching does not pay."""
    return best_trees(acceptance, cost_model, max_nodes, max_depth, max_branch)[-1]
