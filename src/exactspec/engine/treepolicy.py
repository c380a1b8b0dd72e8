"""Which tree: the decisions of ``tree="auto"`` (the engine loop in :mod:`exactspec.engine.trees` asks them).

- Before a run, :func:`auto_runs_tree`: draft trees, or run ``gamma="auto"``'s chain? Trees must have
  achieved ``TREE_MARGIN`` more than the chain, each priced from counts as its loop ran.
- During a tree run, :class:`TreePlanner`: Sequoia's dynamic program
  (:func:`exactspec.speed.treemath.optimal_tree`) on the measured acceptance per (depth, sibling rank) and a cost
  model fixed for the run, re-planned every ``AUTO_REPLAN_EVERY`` target calls.
- After a run, :func:`learn_from_trees` / :func:`learn_from_chain`: the (depth, rank) table, the tree
  and what each loop achieved, carried to the next run of the generator; both priced with gamma="auto"'s prices.

Every decision reads counts and cost models fixed before the run, so a seeded run on a fresh generator
reproduces.
"""
from __future__ import annotations

from exactspec.speed.prediction import predict_tree
from exactspec.speed.treemath import optimal_tree

__all__ = ["TreePlanner", "auto_runs_tree", "learn_from_chain", "learn_from_trees", "planner_for"]

SIDE_PRIOR = 0.3  # acceptance of a sibling of rank >= 1 before any was measured
AUTO_MAX_NODES, AUTO_MAX_DEPTH, AUTO_MAX_BRANCH, AUTO_REPLAN_EVERY = 16, 8, 4, 4
# tree="auto" runs a tree only when the best tree beats the best chain by this much: the tree step's 4-D
# masks, slot moves and rank-by-rank walk cost more per step than the chain's, and what the cost model
# does not price must not turn into a loss
TREE_MARGIN = 0.05
CHAIN_WEIGHT = 8.0  # pseudo-observations a chain run's rank-0 count is weighed against the table's rate


class TreePlanner:
    """``tree="auto"``: the DP's tree for the smoothed acceptance per (depth, rank), re-planned every
    ``AUTO_REPLAN_EVERY`` target calls. `prior [depth][rank]` rates from earlier runs, or None."""

    def __init__(self, cost_fn, max_nodes: int = AUTO_MAX_NODES, prior=None):
        self.cost_fn, self.max_nodes, self.prior = cost_fn, max_nodes, prior
        self.plan, self.planned_at = None, -1

    def next_plan(self, stats):
        if self.plan is None or stats.target_calls - self.planned_at >= AUTO_REPLAN_EVERY:
            acc = stats.smoothed_rank_acceptance(AUTO_MAX_DEPTH, prior=self.prior)
            self.tree = optimal_tree(acc, self.cost_fn(stats), self.max_nodes, max_depth=AUTO_MAX_DEPTH,
                                     max_branch=AUTO_MAX_BRANCH)
            self.plan, self.planned_at = ("static", list(self.tree.parents)), stats.target_calls
        return self.plan


def auto_runs_tree(gen, batch_size: int, key: tuple) -> bool:
    """Whether a ``tree="auto"`` run of generator `gen` drafts trees (else it runs the ``gamma="auto"``
    chain, with its early stops and plain steps), decided before the run from counts and cost models fixed
    before it, so that a seeded run on a fresh generator reproduces.

    The first run of a sampling setting explores: it runs trees and measures acceptance per (depth, rank).
    Later runs compare what each loop is worth, priced from their counts with the run's fixed prices:
    - trees: the speedup the tree runs achieved (:func:`exactspec.speed.prediction.predict_tree` of their counts;
      the positional model's prediction over-credits side branches);
    - the chain: the better of the dynamic program's best chain on the table (rank 0 kept current by chain
      runs, :func:`learn_from_chain`) and what the chain achieved, which stops early where a fixed chain
      cannot: whole chain runs of ``tree="auto"``, priced from their counts as the tree runs are; and at least the
      target alone (1.0), since ``gamma="auto"`` takes plain steps where drafting does not pay.
    A tree must win by ``TREE_MARGIN``."""
    table = gen._tree_priors.get(key)
    if table is None:
        return True
    chain_cost = gen._cost_model(batch_size).monotone()
    chain = optimal_tree(table, chain_cost, AUTO_MAX_DEPTH, max_depth=AUTO_MAX_DEPTH, max_branch=1).speedup
    achieved = gen._tree_speedup.get(("chain", key, batch_size))  # whole chain runs of tree="auto"
    if achieved is not None:
        chain = max(chain, achieved)
    # gamma="auto"'s chain takes plain steps where no draft pays: it is worth the target alone at least (a
    # tree worth 0.70x the target alone beat a chain the program priced at 0.6x, and ran at 0.63x on llama.cpp)
    chain = max(chain, 1.0)
    tree = gen._tree_speedup.get((key, batch_size))
    if tree is None:  # no tree run at this batch size yet: the program's prediction
        tree_cost = gen._cost_model(batch_size).monotone()
        tree = optimal_tree(table, tree_cost, AUTO_MAX_NODES, max_depth=AUTO_MAX_DEPTH,
                            max_branch=AUTO_MAX_BRANCH).speedup
    return tree >= chain * (1.0 + TREE_MARGIN)


def learn_from_chain(gen, key: tuple, stats, batch_size: int) -> None:
    """After a ``tree="auto"`` run that drafted a chain: what the whole run achieved (priced from its counts,
    as the tree runs are) and its per-depth acceptance, which updates rank 0 of the table (each depth's
    rate shrunk towards the table's with ``CHAIN_WEIGHT`` pseudo-observations)."""
    table = gen._tree_priors.get(key)
    if table is None:
        return
    _remember(gen, ("chain", key, batch_size), predict_tree(stats, gen._cost_model(batch_size)))
    table = [list(row) for row in table]
    for d, row in enumerate(table):
        if d < len(stats.position_drafted) and stats.position_drafted[d]:
            a, n = stats.position_accepted[d], stats.position_drafted[d]
            row[0] = (a + CHAIN_WEIGHT * row[0]) / (n + CHAIN_WEIGHT)
    gen._tree_priors[key] = table


def _remember(gen, slot: tuple, worth: float | None) -> None:
    """What a loop achieved, for auto_runs_tree: an average that halves the weight of older runs."""
    if worth is not None:
        old = gen._tree_speedup.get(slot)
        gen._tree_speedup[slot] = worth if old is None else 0.5 * (old + worth)


def planner_for(gen, batch_size: int, key: tuple) -> TreePlanner:
    """The planner of a tree run of `gen`: gamma="auto"'s prices, fixed for the run, made monotone in k (a noisy
    table where verifying 4 tokens measured dearer than 5 otherwise steers the plan to odd depths); rank 0
    from earlier runs."""
    cm = gen._cost_model(batch_size).monotone()
    prior = gen._tree_priors.get(key)
    chain = gen._drafting.get(key)
    if prior is None and chain is not None and chain.model.observations > 0:
        # first tree run after chain runs: their acceptance for rank 0
        prior = [[chain.model.mean(), SIDE_PRIOR]] * AUTO_MAX_DEPTH
    return TreePlanner(lambda stats: cm, prior=prior)


def learn_from_trees(gen, key: tuple, stats, batch_size: int, planner: TreePlanner) -> None:
    """After a ``tree="auto"`` run that drafted trees: its (depth, rank) table, the tree loop priced as it
    ran (between runs only), and what the run achieved."""
    if not stats.tree_nodes:
        return
    gen._tree_priors[key] = stats.smoothed_rank_acceptance(AUTO_MAX_DEPTH, prior=planner.prior)
    _remember(gen, (key, batch_size), predict_tree(stats, gen._cost_model(batch_size)))
