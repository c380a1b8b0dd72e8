"""Tree speculation is exact: sampled output has the target's law, greedy output is target.generate's.

Chi-square of the first three new tokens against the enumerated joint law (V = 8, as in
test_sampling_speculative_matches_target_distribution), for static and dynamic trees, T = 1 and T = 0.7
with top-k. With top_k smaller than a node's branching the draft's q has fewer tokens than the node has
children, so trailing siblings are empty (the tree is ragged per row) and several branches carry the
same tokens (siblings of different parents collide); the multi-round rule must still be exact. Each
case uses max_new_tokens=3 with a deeper tree, so the depth cut at the tokens left is exercised too.
"""
from __future__ import annotations

import pytest
import torch

from _spec_models import left_padded, tiny_lm
from exactspec import SpeculativeGenerator
from test_sampling_speculative_matches_target_distribution import PROMPTS, chi2_pvalue, exact_joint, late_pair_pvalue

ROWS = 4000


def _lm(seed):
    return tiny_lm("llama", vocab=8, seed=seed, init=0.5, dtype=torch.float32, attn="sdpa", hidden=16, layers=1)


CASES = {
    "static-T1": dict(tree=(3, 2, 1), transform={}),
    "static-T0.7-topk": dict(tree=(3, 2, 1), transform=dict(temperature=0.7, top_k=3)),
    "static-siblings-beyond-topk": dict(tree=(4, 3), transform=dict(top_k=2)),
    "dynamic-T1": dict(tree=6, transform={}),
    "dynamic-T0.7-topk": dict(tree=6, transform=dict(temperature=0.7, top_k=2)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_tree_sampling_matches_exact_target_distribution(case):
    c = CASES[case]
    target, draft = _lm(0), _lm(1)
    gen = SpeculativeGenerator(target, draft)
    prompts = [p for p in PROMPTS for _ in range(ROWS)]
    ids, mask = left_padded(prompts)
    t = c["transform"]
    out = gen.generate(ids, mask, max_new_tokens=3, tree=c["tree"], seed=4321, eos_token_id=[], pad_token_id=0,
                       do_sample=True, temperature=t.get("temperature", 1.0), top_k=t.get("top_k", 0))
    new = out.sequences[:, ids.shape[1]:].numpy()
    s = out.stats
    assert s.tree_nodes > 0 and 0 < s.accepted_tokens
    assert any(len(row) > 1 and row[1] > 0 for row in s.rank_accepted)  # a side branch was accepted
    for i, prompt in enumerate(PROMPTS):
        samples = new[i * ROWS:(i + 1) * ROWS]
        joint = exact_joint(target, prompt, t)
        flat = samples[:, 0] * 64 + samples[:, 1] * 8 + samples[:, 2]
        assert joint.reshape(-1)[flat].min() > 0, "a token of probability 0 was generated"
        p = chi2_pvalue(samples, joint)
        assert p > 1e-3, f"{case} prompt {prompt}: chi-square p = {p:.2e}"


def test_chi_square_detects_the_wrong_residuals_for_siblings(monkeypatch):
    """Verifying without-replacement siblings as if they were i.i.d. draws (the wrong residual) must fail
    the same test: it has the power to see a tree-specific error."""
    import exactspec.engine.trees as trees

    real = trees.verify_candidates
    monkeypatch.setattr(trees, "verify_candidates", lambda *a, **k: real(*a, **{**k, "scheme": "iid"}))
    target, draft = _lm(0), _lm(1)
    ids, mask = left_padded([PROMPTS[0]] * ROWS)
    out = SpeculativeGenerator(target, draft).generate(ids, mask, max_new_tokens=3, tree=(4, 3), seed=4321,
                                                        eos_token_id=[], pad_token_id=0, do_sample=True, top_k=0)
    samples = out.sequences[:, ids.shape[1]:].numpy()
    assert chi2_pvalue(samples, exact_joint(target, PROMPTS[0], {})) < 1e-6


def test_tokens_after_several_tree_steps_keep_the_target_distribution():
    """Six new tokens with a small dynamic tree take several steps: side branches accepted, caches moved
    into place, ragged depths, rows leaving the batch; the joint law of the 5th and 6th tokens still
    matches the enumerated target."""
    target, draft = _lm(0), _lm(1)
    ids, mask = left_padded([PROMPTS[0]] * 3000 + [PROMPTS[1]] * 3000)
    out = SpeculativeGenerator(target, draft).generate(ids, mask, max_new_tokens=6, tree=4, seed=77,
                                                       eos_token_id=[], pad_token_id=0, do_sample=True, top_k=0)
    new = out.sequences[:, ids.shape[1]:].numpy()
    assert out.stats.target_calls >= 3
    for i, prompt in enumerate(PROMPTS):
        p = late_pair_pvalue(target, prompt, new[i * 3000:(i + 1) * 3000])
        assert p > 1e-3, f"prompt {prompt}: chi-square p = {p:.2e}"
