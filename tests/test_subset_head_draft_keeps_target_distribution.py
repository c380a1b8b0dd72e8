"""A draft whose head covers only part of the vocabulary (FR-Spec, as the shipped smollm2 draft) is exact.

Its logits are -inf outside the subset, so q = 0 there and it never proposes those tokens; the target still
reaches them through the residual max(0, p - q) = p. Tiny random models from configs (V = 8, subset of 5):
the first three sampled tokens match the target's enumerated joint law (token and block rules, chi-square),
tokens outside the subset do appear, greedy output equals the target's, and the shipped format (everything
but the borrowed embedding) round-trips.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from _spec_models import left_padded, target_greedy, tiny_lm
from exactspec import SpeculativeGenerator
from exactspec.pairs.smollm2 import SubsetHead, build_draft, draft_state, load_draft
from test_sampling_speculative_matches_target_distribution import exact_joint, pvalues

SUBSET = [0, 2, 3, 5, 6]
OUTSIDE = [1, 4, 7]


def _pair(seed=0):
    target = tiny_lm("llama", vocab=8, seed=seed, init=0.5, dtype=torch.float32, attn="sdpa", hidden=16, layers=2)
    draft = build_draft(target, SUBSET, num_layers=1)  # layer 0 and the head copied from the target
    return target, draft


def test_subset_head_gives_minus_inf_outside_and_the_target_head_inside():
    target, draft = _pair()
    ids = torch.tensor([[3, 1, 4, 1]])
    with torch.no_grad():
        q = draft(ids).logits  # [1, 4, V]
    assert torch.isinf(q[..., OUTSIDE]).all() and (q[..., OUTSIDE] < 0).all()
    assert torch.isfinite(q[..., SUBSET]).all()
    assert isinstance(draft.lm_head, SubsetHead)
    assert draft.model.embed_tokens is target.model.embed_tokens  # borrowed, not copied


@pytest.mark.parametrize("method", ["token", "block"])
def test_sampled_tokens_follow_the_target_law_with_a_subset_draft(method):
    target, draft = _pair()
    prompts = [[3, 1, 4]] * 4000 + [[6, 2, 7, 5, 1]] * 4000
    ids, mask = left_padded(prompts)
    out = SpeculativeGenerator(target, draft).generate(ids, mask, max_new_tokens=3, gamma=3, method=method,
                                                       do_sample=True, seed=7, eos_token_id=[], pad_token_id=0)
    new = out.sequences[:, ids.shape[1]:].numpy()
    assert 0 < out.stats.accepted_tokens < out.stats.drafted_tokens
    assert np.isin(new, OUTSIDE).any(), "tokens the draft cannot propose must still come from the residual"
    for i, prompt in enumerate(([3, 1, 4], [6, 2, 7, 5, 1])):
        joint = exact_joint(target, prompt, {})
        for stat, p in pvalues(new[i * 4000:(i + 1) * 4000], joint).items():
            assert p > 1e-3, f"{method} {prompt} {stat}: chi-square p = {p:.2e}"


def test_greedy_with_a_subset_draft_equals_target_generate():
    target, draft = _pair(seed=3)
    prompts = [[3, 1, 4, 1, 5], [2, 7]]
    ids, mask = left_padded(prompts)
    out = SpeculativeGenerator(target, draft).generate(ids, mask, max_new_tokens=12, gamma=3, do_sample=False,
                                                       eos_token_id=[], pad_token_id=0)
    for row, prompt in enumerate(prompts):
        assert out.sequences[row, ids.shape[1]:].tolist() == target_greedy(target, prompt, 12)


def test_shipped_draft_format_round_trips(tmp_path):
    import json

    from safetensors.torch import save_file

    target, draft = _pair()
    with torch.no_grad():
        for p in draft.model.layers.parameters():
            p.add_(0.1)  # not the target's copy any more
    save_file({k: v.contiguous() for k, v in draft_state(draft).items()}, tmp_path / "draft.safetensors")
    (tmp_path / "draft.json").write_text(json.dumps({"num_layers": 1}))
    again = load_draft(target, tmp_path)
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        assert torch.equal(draft(ids).logits, again(ids).logits)
    assert "model.embed_tokens.weight" not in draft_state(draft)
