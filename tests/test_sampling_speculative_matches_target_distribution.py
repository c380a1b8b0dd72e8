"""Sampled speculative output is distributed exactly as the target's own sampling.

A V = 8 (or 12) target lets us enumerate the exact joint distribution of the first three new tokens by
running the target on every prefix, with the same transform (temperature / top-k / top-p) via
`probs_from_logits`. Thousands of copies of two prompts of different lengths (left padded, in one
batch) are generated speculatively and compared with a seeded chi-square test; tokens the transform
gives probability 0 must never appear. A power check shows the test rejects the draft's distribution.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from scipy import stats

from _spec_models import left_padded, tiny_lm
from exactspec import SpeculativeGenerator
from exactspec.sampling import probs_from_logits

N_NEW = 3
PROMPTS = [[3, 1, 4], [6, 2, 7, 5, 1]]
ROWS_PER_PROMPT = 6000


def _lm(vocab, seed):
    return tiny_lm("llama", vocab=vocab, seed=seed, init=0.5, dtype=torch.float32, attn="sdpa",
                   hidden=16, layers=1)


@torch.inference_mode()
def exact_joint(model, prompt, transform, n_new: int = N_NEW) -> np.ndarray:
    """P(x1, .., x_n | prompt) as an array [V] * n, enumerated from the model itself."""
    v = model.get_output_embeddings().weight.shape[0]
    joint = np.ones([1] * 0)
    prefixes = [list(prompt)]
    for depth in range(n_new):
        logits = model(input_ids=torch.tensor(prefixes)).logits[:, -1]  # [V**depth, V]
        p = probs_from_logits(logits.double(), **transform).double().numpy()
        joint = (joint.reshape(-1, 1) * p).reshape([v] * (depth + 1))
        prefixes = [list(prompt) + list(t) for t in itertools.product(range(v), repeat=depth + 1)]
    return joint


def chi2_pvalue(samples: np.ndarray, joint: np.ndarray) -> float:
    """Chi-square goodness of fit of samples [N, 3] to joint [V, V, V]; cells with expected < 5 merged."""
    v = joint.shape[0]
    flat = samples[:, 0] * v * v + samples[:, 1] * v + samples[:, 2]
    obs = np.bincount(flat, minlength=v ** 3).astype(float)
    exp = joint.reshape(-1) * len(samples)
    big = exp >= 5
    obs_b = np.append(obs[big], obs[~big].sum())
    exp_b = np.append(exp[big], exp[~big].sum())
    keep = exp_b > 0
    exp_b = exp_b[keep] * obs_b[keep].sum() / exp_b[keep].sum()
    return float(stats.chisquare(obs_b[keep], exp_b).pvalue)


CASES = {
    "token-plain": dict(method="token", transform={}, vt=8, vd=8),
    "block-plain": dict(method="block", transform={}, vt=8, vd=8),
    "token-filters": dict(method="token", transform=dict(temperature=0.7, top_k=5, top_p=0.9), vt=8, vd=8),
    "block-filters": dict(method="block", transform=dict(temperature=1.3, top_k=6, top_p=0.85), vt=8, vd=8),
    "token-draft-head-larger": dict(method="token", transform={}, vt=8, vd=12),
    "block-target-head-larger": dict(method="block", transform=dict(top_p=0.95), vt=12, vd=8),
    "token-prompt-lookup": dict(method="token", transform=dict(temperature=0.8), vt=8, vd=None),
    # A bf16 draft under an fp32 target: q comes from coarser logits, but verification reads the very
    # q the tokens were drawn from, so the output is still exactly the target's.
    "token-bf16-draft": dict(method="token", transform=dict(temperature=0.9), vt=8, vd=8, draft_dtype=torch.bfloat16),
}


@pytest.mark.parametrize("case", list(CASES))
def test_speculative_sampling_matches_exact_target_distribution(case):
    c = CASES[case]
    target = _lm(c["vt"], seed=0)
    gen = SpeculativeGenerator(target, _lm(c["vd"], seed=1).to(c.get("draft_dtype", torch.float32))) if c["vd"] else \
        SpeculativeGenerator(target, drafter="prompt_lookup")
    prompts = [p for p in PROMPTS for _ in range(ROWS_PER_PROMPT)]
    if c["vd"] is None:  # prompt lookup: fewer rows (python n-gram search), repetitive prompts
        prompts = [[3, 1, 4, 3, 1, 4, 3, 1]] * 3000 + [[6, 2, 6, 2, 6]] * 3000
    ids, mask = left_padded(prompts)
    t = c["transform"]
    out = gen.generate(ids, mask, max_new_tokens=N_NEW, method=c["method"], gamma=3, seed=1234, do_sample=True,
                       eos_token_id=[], pad_token_id=0, temperature=t.get("temperature", 1.0),
                       top_k=t.get("top_k", 0), top_p=t.get("top_p", 1.0))
    new = out.sequences[:, ids.shape[1]:].numpy()
    assert new.shape == (len(prompts), N_NEW)
    s = out.stats
    assert 0 < s.accepted_tokens < s.drafted_tokens  # both branches of the rule were exercised
    start = 0
    for prompt in dict.fromkeys(map(tuple, prompts)):
        n = sum(1 for p in prompts if tuple(p) == prompt)
        samples, start = new[start:start + n], start + n
        joint = exact_joint(target, prompt, t)
        flat = samples[:, 0] * joint.shape[0] ** 2 + samples[:, 1] * joint.shape[0] + samples[:, 2]
        assert joint.reshape(-1)[flat].min() > 0, "a token of probability 0 was generated"
        p = chi2_pvalue(samples, joint)
        assert p > 1e-3, f"{case} prompt {prompt}: chi-square p = {p:.2e}"


def test_chi_square_has_power_against_the_draft_distribution():
    """The same test run against the draft's own distribution must fail: it can detect inexactness."""
    target, draft = _lm(8, seed=0), _lm(8, seed=1)
    ids, mask = left_padded([PROMPTS[0]] * ROWS_PER_PROMPT)
    out = SpeculativeGenerator(target, draft).generate(ids, mask, max_new_tokens=N_NEW, gamma=3, seed=7, do_sample=True,
                                                       eos_token_id=[], pad_token_id=0)
    samples = out.sequences[:, ids.shape[1]:].numpy()
    assert chi2_pvalue(samples, exact_joint(target, PROMPTS[0], {})) > 1e-3
    assert chi2_pvalue(samples, exact_joint(draft, PROMPTS[0], {})) < 1e-6


@pytest.mark.parametrize("method", ["token", "block"])
def test_tokens_after_several_steps_keep_the_target_distribution(method):
    """Six new tokens with gamma=2 take several steps with ragged acceptance, cache holes and rows leaving
    the batch; the joint law of the 5th and 6th tokens still matches the enumerated target."""
    target, draft = _lm(8, seed=0), _lm(8, seed=1)
    ids, mask = left_padded([PROMPTS[0]] * 3000 + [PROMPTS[1]] * 3000)
    out = SpeculativeGenerator(target, draft).generate(ids, mask, max_new_tokens=6, gamma=2, method=method,
                                                       do_sample=True, seed=99, eos_token_id=[], pad_token_id=0)
    new = out.sequences[:, ids.shape[1]:].numpy()
    assert out.stats.target_calls >= 3
    for i, prompt in enumerate(PROMPTS):
        pair_law = exact_joint(target, prompt, {}, n_new=6).sum(axis=(0, 1, 2, 3))  # [V, V]: (x5, x6)
        samples = new[i * 3000:(i + 1) * 3000, 4:6]
        obs = np.bincount(samples[:, 0] * 8 + samples[:, 1], minlength=64).astype(float)
        exp = pair_law.reshape(-1) * len(samples)
        big = exp >= 5
        obs_b, exp_b = np.append(obs[big], obs[~big].sum()), np.append(exp[big], exp[~big].sum())
        p = float(stats.chisquare(obs_b, exp_b * obs_b.sum() / exp_b.sum()).pvalue)
        assert p > 1e-3, f"{method} prompt {prompt}: chi-square p = {p:.2e}"
