"""A feature draft (EAGLE-style, exactspec.pairs.featuredraft) is fed exactly the target's features and stays exact.

Tiny random Llama models from configs. The plumbing is checked against a teacher-forced reference: every
step's first draft token is what the draft gives, with no cache, on the pairs (f_j, x_{j+1}) of the target's
features over the emitted text, and its second token what it gives fed its own guess of the next feature
(so the cache rollback, the pending pairs, plain steps and positions are all right). Output: greedy equal to
`target.generate` (ragged batch, fixed and auto gamma, lean and transformers forward), sampled first three
tokens by the target's enumerated joint law (token and block rules, chi-square).
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from _spec_models import left_padded, tiny_lm
from exactspec import SpeculativeGenerator
from exactspec.pairs.featuredraft import FeatureDraft, load_feature_draft, save_feature_draft
from exactspec.engine.featuredrafter import FeatureDrafter
from exactspec.engine.policy import FixedPolicy
from test_sampling_speculative_matches_target_distribution import exact_joint, pvalues

SUBSET = list(range(12))  # of V = 16: the head's frequent-token subset (q = 0 outside)


def _pair(seed=0, vocab=16):
    target = tiny_lm("llama", vocab=vocab, seed=seed, init=0.5, dtype=torch.float64, attn="sdpa", hidden=16)
    torch.manual_seed(seed + 1)
    draft = FeatureDraft(target, SUBSET[: min(12, vocab)], num_layers=1)
    with torch.no_grad():  # an untrained draft's fc is an identity on the feature: perturb it so q varies
        for p in draft.fc.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return target, draft


class _Recording(FeatureDrafter):
    """Keeps every proposal's tokens (and the rows they were for) for the teacher-forced comparison."""

    def __init__(self, model, log):
        super().__init__(model)
        self.log = log

    def propose(self, caps, spec, policy=None):
        d = super().propose(caps, spec, policy)
        self.log.append(d.tokens.clone())
        return d


class _Alternating(FixedPolicy):
    """Plain steps and 2-token drafts in turn (so pending pairs queue up across unproposed plain steps)."""

    def __init__(self):
        super().__init__(2)
        self.n = 0

    def next_lengths(self, left):
        self.n += 1
        return left.clamp(min=0, max=0 if self.n % 3 else 2)


def _reference(target, draft, seq):
    """Teacher-forced draft over a whole sequence `[N]`: the argmax for every position t >= 2 of its first
    draft token (pairs up to t - 2, all fed the target's features) and of a second one (the pair t - 1 fed the
    draft's own guess of f_{t-1} and its first token)."""
    with torch.no_grad():
        f = target.model(input_ids=seq[None]).last_hidden_state[0]  # [N, H]
        first, second = {}, {}
        for t in range(2, len(seq)):
            h = draft(seq[None, 1:t], f[None, :t - 1])[0]  # pairs (f_j, x_{j+1}), j < t - 1
            d1 = int(draft.head(h[-1]).argmax())
            first[t] = d1
            h2 = draft(torch.cat([seq[1:t], torch.tensor([d1])])[None], torch.cat([f[:t - 1], h[-1:]])[None])[0]
            second[t + 1] = int(draft.head(h2[-1]).argmax())
    return first, second


@pytest.mark.parametrize("lean", ["1", "0"])
@pytest.mark.parametrize("policy", ["fixed3", "alternating"])
def test_every_drafted_token_is_the_teacher_forced_drafts_own(monkeypatch, lean, policy):
    monkeypatch.setenv("EXACTSPEC_LEAN_DRAFT", lean)
    target, draft = _pair()
    prompts = [[3, 1, 4, 1, 5], [2, 7], [9, 9, 8, 9, 9, 9, 1]]
    ids, mask = left_padded(prompts)
    log: list = []
    gen = SpeculativeGenerator(target, drafter=_Recording(draft, log))
    if policy == "alternating":
        monkeypatch.setattr(gen, "_policy", lambda *a: _Alternating())
    stream = gen.stream(ids, mask, max_new_tokens=14, gamma=3, eos_token_id=[], pad_token_id=0)
    emitted = [0] * len(prompts)
    rows_left = list(range(len(prompts)))
    checked = 0
    steps = list(stream)
    seqs = stream.output.sequences
    refs = [_reference(target, draft, torch.tensor(p + seqs[i, ids.shape[1]:].tolist())) for i, p in enumerate(prompts)]
    proposals = iter(log)
    for step in steps:
        if step.gamma:
            tokens = next(proposals)  # [B_active, K]
            for j, r in enumerate(step.rows):
                t = len(prompts[r]) + emitted[r]  # the sequence position the first draft token is for
                first, second = refs[r]
                assert int(tokens[j, 0]) == first[t], f"row {r} position {t}: first draft token"
                if tokens.shape[1] > 1:
                    assert int(tokens[j, 1]) == second[t + 1], f"row {r} position {t + 1}: second draft token"
                checked += 1
        for r, toks in zip(step.rows, step.tokens):
            emitted[r] += len(toks)
        rows_left = [r for r, done in zip(step.rows, step.finished) if not done]
    assert not rows_left and checked >= 8
    want = target.generate(ids, attention_mask=mask, max_new_tokens=14, do_sample=False, pad_token_id=0,
                           eos_token_id=None)
    assert torch.equal(seqs, want)


@pytest.mark.parametrize("gamma", [1, 4, "auto"])
def test_greedy_with_a_feature_draft_equals_target_generate(gamma):
    target, draft = _pair(seed=3)
    ids, mask = left_padded([[3, 1, 4, 1, 5], [2, 7], [5]])
    out = SpeculativeGenerator(target, draft).generate(ids, mask, max_new_tokens=20, gamma=gamma,
                                                       eos_token_id=[], pad_token_id=0)
    want = target.generate(ids, attention_mask=mask, max_new_tokens=20, do_sample=False, pad_token_id=0,
                           eos_token_id=None)
    assert torch.equal(out.sequences, want)


@pytest.mark.parametrize("method", ["token", "block"])
def test_sampled_tokens_follow_the_target_law_with_a_feature_draft(method):
    target, draft = _pair(seed=1, vocab=8)
    prompts = [[3, 1, 4]] * 3000 + [[6, 2, 7, 5, 1]] * 3000
    ids, mask = left_padded(prompts)
    out = SpeculativeGenerator(target, draft).generate(ids, mask, max_new_tokens=3, gamma=3, method=method,
                                                       do_sample=True, seed=11, eos_token_id=[], pad_token_id=0)
    new = out.sequences[:, ids.shape[1]:].numpy()
    assert 0 < out.stats.accepted_tokens < out.stats.drafted_tokens
    for i, prompt in enumerate(([3, 1, 4], [6, 2, 7, 5, 1])):
        joint = exact_joint(target, prompt, {})
        for stat, p in pvalues(new[i * 3000:(i + 1) * 3000], joint).items():
            assert p > 1e-3, f"{method} {prompt} {stat}: chi-square p = {p:.2e}"


def test_a_feature_draft_round_trips_and_refuses_trees(tmp_path):
    target, draft = _pair()
    save_feature_draft(draft, tmp_path)
    back = load_feature_draft(target, tmp_path)
    seq = torch.tensor([[3, 1, 4, 1, 5, 9]])
    f = torch.randn(1, 6, 16, dtype=torch.float64)
    with torch.no_grad():  # saved in fp16: equal to fp16 rounding
        assert torch.allclose(back(seq, f), draft(seq, f), atol=5e-2)
    assert back.lm.model.embed_tokens is target.model.embed_tokens
    with pytest.raises(ValueError, match="tree"):
        SpeculativeGenerator(target, draft).generate(seq, max_new_tokens=4, tree=(2, 1))
    with pytest.raises(TypeError, match="FeatureDraft"):
        FeatureDrafter(target)
