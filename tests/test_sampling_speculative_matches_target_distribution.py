"""Sampled speculative output is distributed exactly as the target's own sampling.

A V = 8 (or 12) target lets us enumerate the exact joint distribution of the first three new tokens by
running the target on every prefix, with the same transform (temperature / top-k / top-p) via
`probs_from_logits`. Thousands of copies of two prompts of different lengths (left padded, in one
batch) are generated speculatively and compared with seeded chi-square tests (the joint of the three
tokens and each token's marginal); tokens the transform gives probability 0 must never appear.

Power: the "plain" cases use a draft that agrees with the target often (a noisy copy, ~1 of 2 drafts
kept) and prompts and row counts chosen, by enumerating the faulty rules' laws, so that the same test
fails when the engine runs a subtly wrong rule (acceptance 5% too high, residual p - 0.9q; see
_faults.py); test_engine_chi_square_fails_on_subtle_faults runs exactly that. The other cases cover
features (filters, vocab sizes, prompt lookup, a bf16 draft) with fewer rows and less power.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from scipy import stats

import _faults
from _spec_models import left_padded, noisy_copy, tiny_lm
from exactspec import SpeculativeGenerator
from exactspec.verification.sampling import probs_from_logits

N_NEW = 3
PROMPTS = [[3, 1, 4], [6, 2, 7, 5, 1]]
ROWS_PER_PROMPT = 6000
# Powered cases: with this draft, per-row noncentralities of the faulty laws on prompt [6, 1, 7] are
# >= 0.005 (first-token marginal, df 7), so 12000 rows give lambda >= 60: p << 1e-3 under each fault.
POWER_PROMPTS = [[6, 1, 7], [7, 4, 1, 3]]
POWER_ROWS = 12000


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


def pvalues(samples: np.ndarray, joint: np.ndarray) -> dict:
    """Chi-square p-values of samples [N, 3] against joint [V, V, V]: the joint and each token's marginal."""
    out = {"joint": chi2_pvalue(samples, joint)}
    for pos in range(3):
        law = joint.sum(axis=tuple(a for a in range(3) if a != pos))
        obs = np.bincount(samples[:, pos], minlength=law.shape[0]).astype(float)
        keep = law > 0
        exp = law[keep] * obs[keep].sum() / law[keep].sum()
        out[f"token {pos + 1}"] = float(stats.chisquare(obs[keep], exp).pvalue)
    return out


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


def late_pair_pvalue(target, prompt, new: np.ndarray) -> float:
    """Chi-square of the 5th and 6th new tokens of rows `new [N, >= 6]` (V = 8) against the target's own
    enumerated joint law of that pair."""
    pair_law = exact_joint(target, prompt, {}, n_new=6).sum(axis=(0, 1, 2, 3))  # [V, V]: (x5, x6)
    samples = new[:, 4:6]
    obs = np.bincount(samples[:, 0] * 8 + samples[:, 1], minlength=64).astype(float)
    exp = pair_law.reshape(-1) * len(samples)
    big = exp >= 5
    obs_b, exp_b = np.append(obs[big], obs[~big].sum()), np.append(exp[big], exp[~big].sum())
    return float(stats.chisquare(obs_b, exp_b * obs_b.sum() / exp_b.sum()).pvalue)


CASES = {
    "token-plain": dict(method="token", transform={}, vt=8, vd="noisy", prompts=POWER_PROMPTS,
                        rows=POWER_ROWS),
    "block-plain": dict(method="block", transform={}, vt=8, vd="noisy", prompts=POWER_PROMPTS,
                        rows=POWER_ROWS),
    "token-filters": dict(method="token", transform=dict(temperature=0.7, top_k=5, top_p=0.9), vt=8, vd=8),
    "block-filters": dict(method="block", transform=dict(temperature=1.3, top_k=6, top_p=0.85), vt=8, vd=8),
    "token-draft-head-larger": dict(method="token", transform={}, vt=8, vd=12),
    "block-target-head-larger": dict(method="block", transform=dict(top_p=0.95), vt=12, vd=8),
    "token-prompt-lookup": dict(method="token", transform=dict(temperature=0.8), vt=8, vd=None),
    # A bf16 draft under an fp32 target: q comes from coarser logits, but verification reads the very
    # q the tokens were drawn from, so the output is still exactly the target's.
    "token-bf16-draft": dict(method="token", transform=dict(temperature=0.9), vt=8, vd=8, draft_dtype=torch.bfloat16),
}


def run_case(case: str) -> dict:
    """Generate the case's rows speculatively; {(prompt, statistic): chi-square p-value}."""
    c = CASES[case]
    target = _lm(c["vt"], seed=0)
    if c["vd"] is None:
        gen = SpeculativeGenerator(target, drafter="prompt_lookup")
    else:
        draft = noisy_copy(target, 0.5, seed=1) if c["vd"] == "noisy" else _lm(c["vd"], seed=1)
        gen = SpeculativeGenerator(target, draft.to(c.get("draft_dtype", torch.float32)))
    prompts = [p for p in c.get("prompts", PROMPTS) for _ in range(c.get("rows", ROWS_PER_PROMPT))]
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
    start, result = 0, {}
    for prompt in dict.fromkeys(map(tuple, prompts)):
        n = sum(1 for p in prompts if tuple(p) == prompt)
        samples, start = new[start:start + n], start + n
        joint = exact_joint(target, prompt, t)
        flat = samples[:, 0] * joint.shape[0] ** 2 + samples[:, 1] * joint.shape[0] + samples[:, 2]
        assert joint.reshape(-1)[flat].min() > 0, "a token of probability 0 was generated"
        result.update({(prompt, k): v for k, v in pvalues(samples, joint).items()})
    return result


@pytest.mark.parametrize("case", list(CASES))
def test_speculative_sampling_matches_exact_target_distribution(case):
    for (prompt, stat), p in run_case(case).items():
        assert p > 1e-3, f"{case} prompt {prompt}, {stat}: chi-square p = {p:.2e}"


@pytest.mark.parametrize("fault", list(_faults.FAULTS))
@pytest.mark.parametrize("case", ["token-plain", "block-plain"])
def test_engine_chi_square_fails_on_subtle_faults(monkeypatch, case, fault):
    """Power: the engine runs verify, whose formula functions are patched with a subtle fault; the very
    test above (same models, prompts, rows, seed) must then fail."""
    _faults.apply(monkeypatch, fault)
    worst = min(run_case(case).items(), key=lambda kv: kv[1])
    assert worst[1] < 1e-3, f"{case} under {fault}: smallest p = {worst[1]:.2e} at {worst[0]}"


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
        p = late_pair_pvalue(target, prompt, new[i * 3000:(i + 1) * 3000])
        assert p > 1e-3, f"{method} prompt {prompt}: chi-square p = {p:.2e}"
