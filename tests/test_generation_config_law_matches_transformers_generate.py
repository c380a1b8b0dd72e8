"""p at every verified position is exactly what `target.generate()` samples from there.

Settings come from the target's `generation_config` (repetition_penalty + no_repeat_ngram_size +
temperature + top-p, do_sample=True) as `generate` resolves them; explicit arguments override. The
reference is transformers itself: `generate(prefix, max_new_tokens=1, output_scores=True)` on each
prefix alone. Exact enumeration per position (1e-6), then the first two sampled tokens of many rows
against the enumerated law (seeded chi-square) for a draft model and prompt lookup, token and block rules.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy import stats

from _spec_models import left_padded, noisy_copy, tiny_lm
from exactspec import SpeculativeGenerator
from exactspec.engine.hfconfig import Prefixes, SamplingConfig, SamplingSpec

SETTINGS = dict(do_sample=True, temperature=0.8, top_p=0.9, repetition_penalty=1.8, no_repeat_ngram_size=2)


def _target(vocab, **gen):
    model = tiny_lm("llama", vocab=vocab, seed=0, init=0.5, dtype=torch.float32, attn="sdpa", hidden=16, layers=1)
    for k, v in gen.items():
        setattr(model.generation_config, k, v)
    return model


@torch.no_grad()
def generate_law(model, prefix, **kw) -> torch.Tensor:
    """[V] the distribution `model.generate` samples its next token from after `prefix` (its own scores)."""
    out = model.generate(input_ids=torch.tensor([prefix]), max_new_tokens=1, min_new_tokens=0, output_scores=True,
                         return_dict_in_generate=True, pad_token_id=0, eos_token_id=None, **kw)
    return torch.softmax(out.scores[0][0].double(), -1)


@pytest.mark.parametrize("overrides", [{}, dict(repetition_penalty=1.0, top_p=1.0, temperature=1.3, min_p=0.05)])
def test_target_law_at_each_position_equals_generate_scores(overrides):
    target = _target(32, **SETTINGS)
    prompts, generated = [[3, 1, 4, 1, 5, 9, 2], [2, 7, 1, 8]], [[6, 5], []]
    drafts, lengths = torch.tensor([[6, 1, 4], [1, 8, 0]]), torch.tensor([3, 2])
    ids, mask = left_padded(prompts)
    out = torch.zeros(2, 4, dtype=torch.long)
    out[0, :2] = torch.tensor(generated[0])
    prefixes = [[p + g + drafts[b, :j].tolist() for j in range(4)] for b, (p, g) in enumerate(zip(prompts, generated))]
    with torch.no_grad():
        logits = torch.stack([torch.stack([target(input_ids=torch.tensor([x])).logits[0, -1] for x in row])
                              for row in prefixes])  # [B, K+1, V]
    config = SamplingConfig.from_model(target, **overrides)
    assert config.do_sample and config.top_k == 50  # from the config, and transformers' default top_k
    spec = SamplingSpec(config, torch.Generator(), 32, target, max_new_tokens=8)
    law = spec.target_law(logits, drafts, lengths, Prefixes(ids, mask, out, torch.tensor([2, 0]), torch.arange(2)))
    banned = 0
    for b in range(2):
        for j in range(int(lengths[b]) + 1):
            ref = generate_law(target, prefixes[b][j], **overrides)
            assert torch.allclose(law[b, j].double(), ref, atol=1e-6), (b, j)
            banned += int(((ref == 0) & (torch.softmax(logits[b, j], -1) > 1e-3)).sum())
    assert banned > 0  # the processors changed the law: a test that ignores them would fail


def test_do_sample_false_in_config_gives_greedy_equal_to_generate_with_its_processors():
    target = _target(64, do_sample=False, repetition_penalty=1.5, no_repeat_ngram_size=3, min_new_tokens=6,
                     eos_token_id=[7, 11])
    draft = noisy_copy(target, 0.2)
    prompts = [[3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8]]
    out = SpeculativeGenerator(target, draft).generate(*left_padded(prompts), max_new_tokens=20, gamma=3)
    for row, p in zip(out.sequences.tolist(), prompts):
        ref = target.generate(input_ids=torch.tensor([p]), max_new_tokens=20, pad_token_id=0)[0, len(p):].tolist()
        new = row[len(row) - 20:][:len(ref)]
        assert new == ref


def test_explicit_arguments_override_the_config():
    target = _target(16, **SETTINGS)
    c = SamplingConfig.from_model(target, do_sample=False, top_p=0.5, repetition_penalty=1.0)
    assert (c.do_sample, c.top_p, c.repetition_penalty, c.temperature, c.no_repeat_ngram_size) == \
        (False, 0.5, 1.0, 0.8, 2)
    assert SamplingConfig.from_model(target, temperature=0).greedy  # exactspec's convention: 0 is greedy
    with pytest.raises(ValueError, match="repetiton_penalty"):
        SamplingConfig.from_model(target, repetiton_penalty=1.2)
    for setting, value in (("num_beams", 2), ("guidance_scale", 1.5), ("encoder_repetition_penalty", 1.2)):
        with pytest.raises(ValueError, match=setting):  # never silently ignored
            SamplingConfig.from_model(target, **{setting: value})
    with pytest.raises(ValueError, match="top_p"):
        SamplingConfig(top_p=1.5)
    with pytest.raises(ValueError, match="bad_words_ids"):  # checked when the run starts, not mid-stream
        SamplingSpec(SamplingConfig.from_model(target, bad_words_ids=[[3, 70]]), torch.Generator(), 16, target, 4)
    with pytest.raises(ValueError, match="repetition_penalty"):
        SamplingConfig.from_model(target, repetition_penalty=-1.0)


# ----------------------------------------------------------------------------- sampled (chi-square)
V, ROWS = 8, 4000
PROMPTS = [[3, 1, 4, 1], [2, 7, 2, 7, 5, 2]]


def exact_pair_law(model, prompt) -> np.ndarray:
    """[V, V] joint law of the first two new tokens, each step from generate's own scores."""
    first = generate_law(model, prompt)
    joint = np.zeros((V, V))
    for x in range(V):
        if first[x] > 0:
            joint[x] = first[x].item() * generate_law(model, prompt + [x]).numpy()
    return joint


@pytest.mark.parametrize("drafter,method", [("model", "token"), ("model", "block"), ("lookup", "token"),
                                            ("lookup", "block")])
def test_first_two_sampled_tokens_follow_generate_law(drafter, method):
    # Prompt lookup proposes exactly the token that repeats an earlier n-gram, which a 2-gram ban always
    # rejects; a 3-gram ban lets its first drafts through (and still bans its second ones).
    target = _target(V, **{**SETTINGS, "no_repeat_ngram_size": 2 if drafter == "model" else 3})
    gen = SpeculativeGenerator(target, noisy_copy(target, 0.5)) if drafter == "model" else \
        SpeculativeGenerator(target, drafter="prompt_lookup")
    prompts = [p for p in PROMPTS for _ in range(ROWS)]
    ids, mask = left_padded(prompts)
    out = gen.generate(ids, mask, max_new_tokens=2, gamma=2, method=method, seed=2024, eos_token_id=[])
    assert out.stats.drafted_tokens > out.stats.accepted_tokens > 0  # both branches of the rule ran
    new = out.sequences[:, -2:].numpy()
    for i, prompt in enumerate(PROMPTS):
        joint = exact_pair_law(target, prompt)
        s = new[i * ROWS:(i + 1) * ROWS]
        flat = s[:, 0] * V + s[:, 1]
        assert joint.reshape(-1)[flat].min() > 0, "a token generate() never samples was generated"
        obs = np.bincount(flat, minlength=V * V).astype(float)
        exp = joint.reshape(-1) * ROWS
        big = exp >= 5
        obs_b, exp_b = np.append(obs[big], obs[~big].sum()), np.append(exp[big], exp[~big].sum())
        keep = exp_b > 0
        p = stats.chisquare(obs_b[keep], exp_b[keep] * obs_b[keep].sum() / exp_b[keep].sum()).pvalue
        assert p > 1e-3, f"prompt {prompt}: chi-square p = {p:.2e}"


def test_default_gamma_auto_samples_generate_law_whatever_the_config_filters(monkeypatch, tmp_path):
    # issue 49: gamma="auto" priced its first run at a batch size by running the loop on a random text of its
    # own, through the target's generation_config; a 2-gram ban with a 10-token vocabulary filtered out every
    # token there and the user's call failed. Its law must be generate()'s, with the default gamma.
    monkeypatch.setenv("EXACTSPEC_CACHE", str(tmp_path))  # no stored profile: each batch size is priced here
    v, rows = 10, 2000
    target = _target(v, do_sample=True, no_repeat_ngram_size=2, repetition_penalty=1.4, top_p=0.85)
    prompt = [3, 1, 4, 1, 5]
    gen = SpeculativeGenerator(target, noisy_copy(target, 0.5))
    gen.generate(torch.tensor([prompt] * 8), max_new_tokens=2, seed=50)  # the first call at a batch size prices it
    out = gen.generate(torch.tensor([prompt] * rows), max_new_tokens=2, seed=50, eos_token_id=[])
    first = generate_law(target, prompt)
    joint = np.stack([first[x].item() * generate_law(target, prompt + [x]).numpy() if first[x] > 0
                      else np.zeros(v) for x in range(v)]).reshape(-1)
    new = out.sequences[:, -2:].numpy()
    flat = new[:, 0] * v + new[:, 1]
    assert joint[flat].min() > 0, "a token generate() never samples was generated"
    obs, exp = np.bincount(flat, minlength=v * v).astype(float), joint * rows
    big = exp >= 5
    obs_b, exp_b = np.append(obs[big], obs[~big].sum()), np.append(exp[big], exp[~big].sum())
    keep = exp_b > 0
    p = stats.chisquare(obs_b[keep], exp_b[keep] * obs_b[keep].sum() / exp_b[keep].sum()).pvalue
    assert p > 1e-3, f"chi-square p = {p:.2e}"
