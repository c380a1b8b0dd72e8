"""tree="auto" never pays for trees that do not pay: after its first (exploring) run, each run drafts a tree
only when the best tree beats the best chain by TREE_MARGIN on the measured (depth, rank) table; otherwise
it is the gamma="auto" chain (early stops, plain steps), whose per-depth acceptance keeps the table's rank 0
current. Either way greedy output is target.generate's."""
from __future__ import annotations

import torch

from _spec_models import left_padded, noisy_copy, target_greedy, tiny_lm
from exactspec import CostModel, SpeculativeGenerator
from exactspec.engine.treepolicy import TREE_MARGIN, auto_runs_tree

PROMPTS = [[3, 1, 4, 1, 5], [9, 2, 6], [5, 3, 5, 8, 9, 7, 9, 3]]
KW = dict(max_new_tokens=14, do_sample=False, tree="auto", eos_token_id=[])
CHEAP_WIDTH = CostModel(0.02, {1: 1.0, 17: 1.0})  # verifying 17 tokens costs what 1 does: width is free


def _setup(cost=CHEAP_WIDTH):
    target = tiny_lm("llama", attn="sdpa", dtype=torch.float32)
    gen = SpeculativeGenerator(target, noisy_copy(target, 0.15), cost_model=cost, calibrate=False)
    return target, gen


def _table(rank0: float, side: float) -> list[list[float]]:
    return [[rank0, side, side, side] for _ in range(8)]


def test_first_run_explores_with_trees_then_a_chain_runs_when_trees_do_not_pay():
    target, gen = _setup()
    ids, mask = left_padded(PROMPTS)
    want = [target_greedy(target, p, 14) for p in PROMPTS]
    first = gen.generate(ids, mask, **KW)
    assert first.stats.tree_nodes > 0 and first.stats.tree_history  # no table yet: it explores
    (key,) = gen._tree_priors
    assert gen._tree_speedup[(key, 3)] > 0  # what the tree run achieved, priced from its counts
    gen._tree_speedup[(key, 3)] = 0.5  # trees measured slower than the target alone
    before = [row[0] for row in gen._tree_priors[key]]
    assert not auto_runs_tree(gen, 3, key)
    out = gen.generate(ids, mask, **KW)
    s = out.stats
    assert s.tree_nodes == 0 and not s.tree_history and s.draft_calls > 0  # the chain loop drafted
    assert [r[ids.shape[1]:] for r in out.sequences.tolist()] == want
    # what the whole chain run achieved, priced from its counts like a tree run, is what trees must beat
    from exactspec.speed.prediction import predict_tree
    assert gen._tree_speedup[("chain", key, 3)] == predict_tree(s, gen._cost_model(3)) > 0
    # the chain's per-depth counts moved rank 0 towards what it measured, and left the siblings alone
    table = gen._tree_priors[key]
    moved = 0
    for d, row in enumerate(table):
        if d < len(s.position_drafted) and s.position_drafted[d]:
            rate = s.position_accepted[d] / s.position_drafted[d]
            assert abs(row[0] - rate) < abs(before[d] - rate) or rate == before[d]
            moved += row[0] != before[d]
        else:
            assert row[0] == before[d]
    assert moved > 0


def test_a_tree_runs_when_it_beats_what_the_chain_achieves_by_the_margin():
    _, gen = _setup()
    ids, mask = left_padded(PROMPTS)
    gen.generate(ids, mask, **KW)  # explores: the table and the trees' measured worth
    (key,) = gen._tree_priors
    achieved = 1.4  # what whole chain runs of tree="auto" achieved, priced from their counts
    gen._tree_speedup[("chain", key, 3)] = achieved
    gen._tree_priors[key] = _table(0.05, 0.0)  # the program's best chain is worth less than what the chain achieved
    for tree_worth, runs in ((achieved * (1 + TREE_MARGIN / 2), False), (achieved * (1 + 2 * TREE_MARGIN), True)):
        gen._tree_speedup[(key, 3)] = tree_worth
        assert auto_runs_tree(gen, 3, key) == runs
    out = gen.generate(ids, mask, **KW)
    assert out.stats.tree_nodes > 0
    # no tree run at a batch size yet: the program's tree against its chain (a dear width loses)
    _, dear = _setup(CostModel(0.02, {1: 1.0, 17: 17.0}))
    dear._tree_priors[key] = _table(0.5, 0.3)
    assert not auto_runs_tree(dear, 3, key)
    dear._cost_model = lambda b: CHEAP_WIDTH  # width free, side ranks good: the tree is predicted to win
    dear._tree_priors[key] = _table(0.3, 0.9)
    assert auto_runs_tree(dear, 3, key)


def test_the_margin_is_what_separates_tree_from_chain():
    """Between 'tree predicted better' and 'tree predicted better by TREE_MARGIN' the chain runs."""
    from exactspec.speed.treemath import optimal_tree

    _, gen = _setup(CostModel(0.02, {1: 1.0, 2: 1.02, 17: 1.35}))
    key = ("k",)
    seen = set()
    for side in [i / 40 for i in range(41)]:
        gen._tree_priors[key] = _table(0.5, side)
        cm = gen._cost_model(1).monotone()
        tree = optimal_tree(gen._tree_priors[key], cm, 16, max_depth=8, max_branch=4)
        chain = optimal_tree(gen._tree_priors[key], cm, 8, max_depth=8, max_branch=1)
        gain = tree.speedup / chain.speedup - 1.0
        runs = auto_runs_tree(gen, 1, key)
        assert runs == (not tree.is_chain and gain >= TREE_MARGIN)
        seen.add("chain is best" if tree.is_chain else "tree" if runs else "tree within the margin")
    assert seen == {"chain is best", "tree within the margin", "tree"}  # the sweep crosses all three


def test_trees_slower_than_the_target_alone_give_way_to_the_chain_however_low_it_is_priced():
    """The chain tree="auto" falls back to is gamma="auto"'s, which takes plain steps where drafting does not
    pay: it is worth the target alone at least. Trees measured at 0.70x against a chain the program priced at
    0.2x ran at 0.63x the target alone on llama.cpp (r4); now the chain runs."""
    from exactspec.speed.treemath import optimal_tree

    _, gen = _setup(CostModel(0.02, {1: 1.0, 17: 17.0}))  # width as dear as sequential steps
    key = ("k",)
    gen._tree_priors[key] = _table(0.2, 0.2)
    chain = optimal_tree(gen._tree_priors[key], gen._cost_model(3).monotone(), 8, max_depth=8, max_branch=1)
    assert chain.speedup < 0.7 / (1 + TREE_MARGIN)
    gen._tree_speedup[(key, 3)] = 0.7
    assert not auto_runs_tree(gen, 3, key)
    gen._tree_speedup[(key, 3)] = 1.0 + 2 * TREE_MARGIN  # trees that beat the target alone by the margin run
    assert auto_runs_tree(gen, 3, key)
