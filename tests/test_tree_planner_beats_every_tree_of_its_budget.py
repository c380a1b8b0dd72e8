"""Tree math: expected tokens of a tree (chains agree with the closed form, a simulation agrees with the
formula) and Sequoia's dynamic program finds a tree at least as good as every tree of its node budget,
checked by enumerating all trees of up to 6 nodes."""
from __future__ import annotations

import numpy as np
import pytest

from exactspec import CostModel, expected_tokens
from exactspec.speed.treemath import (best_trees, expected_tokens_parents, expected_tokens_tree, optimal_tree,
                                shape_parents, tree_depths)


def all_trees(n: int):
    """Every tree of n nodes as topological parent ids (parents[i] in -1..i-1)."""
    if n == 0:
        yield []
        return
    for t in all_trees(n - 1):
        for p in range(-1, n - 1):
            yield t + [p]


COST = CostModel(0.0014, {1: 0.0112, 2: 0.013, 5: 0.0165, 8: 0.0171, 16: 0.0195})


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("cost", [0.0, 0.1, COST], ids=["free", "c=0.1", "measured"])
def test_dp_tree_beats_or_equals_every_tree_of_its_budget(seed, cost):
    acc = np.random.default_rng(seed).uniform(0.05, 0.95, size=(3, 3))
    plans = best_trees(acc, cost, 6)
    for n in range(1, 7):
        plan = plans[n - 1]
        assert plan.n_nodes <= n
        assert abs(plan.expected_tokens - expected_tokens_parents(plan.parents, acc)) < 1e-12
        best = -1.0
        for size in range(1, n + 1):
            for t in all_trees(size):
                e = expected_tokens_parents(t, acc)
                d = max(tree_depths(t))
                step = (COST.step_time(d, width=size + 1) / COST.t_target(1)) if cost is COST else d * cost + 1
                best = max(best, e / step)
        assert plan.speedup >= best - 1e-12
        assert plan.speedup <= best + 1e-12  # and it is one of the enumerated trees


def test_chain_tree_equals_chain_formula_and_trees_add_side_branches():
    assert abs(expected_tokens_tree((1, 1, 1, 1), 0.8) - expected_tokens(0.8, 4)) < 1e-12
    per_depth = [[0.9], [0.7], [0.5]]
    assert abs(expected_tokens_tree((1, 1, 1), per_depth) - expected_tokens([0.9, 0.7, 0.5], 3)) < 1e-12
    assert expected_tokens_tree((2, 1, 1), [[0.6, 0.5]]) > expected_tokens_tree((1, 1, 1), [[0.6, 0.5]])
    assert len(shape_parents((3, 2, 1, 1))) == 21


def test_expected_tokens_tree_matches_simulation():
    acc = np.array([[0.6, 0.4, 0.3], [0.5, 0.2, 0.2]])
    parents = shape_parents((3, 2))
    rng = np.random.default_rng(0)
    kids = {}
    for i, p in enumerate(parents):
        kids.setdefault(p, []).append(i)
    depths = tree_depths(parents)
    total, n = 0, 40000
    for _ in range(n):
        node, got = -1, 1
        while node in kids:
            nxt = None
            for r, c in enumerate(kids[node]):
                if rng.random() < acc[min(depths[c] - 1, 1), min(r, 2)]:
                    nxt = c
                    break
            if nxt is None:
                break
            node, got = nxt, got + 1
        total += got
    assert abs(total / n - expected_tokens_tree((3, 2), acc)) < 0.02


def test_optimal_tree_is_a_chain_when_only_first_choices_are_accepted():
    plan = optimal_tree([[0.8, 0.0]], COST, 8)
    assert plan.is_chain


@pytest.mark.parametrize("bad", [(), (0, 1), "3,2", (2.5,)])
def test_bad_shapes_raise_valueerror(bad):
    with pytest.raises(ValueError, match="shape"):
        expected_tokens_tree(bad, 0.5)
