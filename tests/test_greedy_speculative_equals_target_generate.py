"""Greedy speculative decoding reproduces the target's own greedy `generate` token for token.

float64 removes argmax ties. The reference is `target.generate(do_sample=False)` on each prompt alone
(unpadded): with eager attention in float64, transformers' own left-padded forward turns fully masked
padding rows into NaN, which our slot cache avoids, so the batched reference would be the broken one.
Covers B = 1 and B = 4 (different prompt lengths, left padded), token and block rules on one-hot
distributions, a draft model (a noisy copy of the target, so it is sometimes rejected) and prompt lookup,
on Llama, GPT-2 and Qwen2.
"""
from __future__ import annotations

import copy

import pytest
import torch

from _spec_models import ARCHS, left_padded, noisy_copy, target_greedy, tiny_lm
from exactspec import SpeculativeGenerator

N_NEW = 24
PROMPTS = [
    [5, 9, 13, 5, 9, 13, 5],  # repetitive: gives prompt lookup something to find
    [7, 8, 11],
    [20, 21, 22, 23, 20, 21, 22, 23, 20, 30],
    [40, 41, 40],
]

_cache: dict = {}


def _pair(arch):
    if arch not in _cache:
        target = tiny_lm(arch, seed=0)
        draft = noisy_copy(target, 0.05, seed=1)
        refs = [target_greedy(target, p, N_NEW) for p in PROMPTS]
        _cache[arch] = (target, draft, refs)
    return _cache[arch]


@pytest.mark.parametrize("method", ["token", "block"])
@pytest.mark.parametrize("drafter", ["model", "prompt_lookup"])
@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_equals_target_generate(arch, drafter, method):
    target, draft, refs = _pair(arch)
    gen = SpeculativeGenerator(target, draft) if drafter == "model" else \
        SpeculativeGenerator(target, drafter="prompt_lookup")
    drafted = accepted = 0
    for prompts, expected in ((PROMPTS, refs), (PROMPTS[:1], refs[:1])):  # B = 4, then B = 1
        ids, mask = left_padded(prompts)
        out = gen.generate(ids, mask, max_new_tokens=N_NEW, do_sample=False, method=method, gamma=4,
                           eos_token_id=[], pad_token_id=0)
        assert out.sequences.shape == (len(prompts), ids.shape[1] + N_NEW)
        assert torch.equal(out.sequences[:, : ids.shape[1]], ids)
        assert out.sequences[:, ids.shape[1]:].tolist() == expected
        drafted += out.stats.drafted_tokens
        accepted += out.stats.accepted_tokens
    # The test must be able to fail: drafts were both accepted and rejected.
    assert 0 < accepted < drafted


def test_greedy_flag_variants_agree():
    """do_sample=False, temperature=0 and method="greedy" are the same greedy decoding."""
    target, draft, refs = _pair("llama")
    gen = SpeculativeGenerator(target, draft)
    ids, mask = left_padded(PROMPTS)
    kw = dict(max_new_tokens=N_NEW, eos_token_id=[], pad_token_id=0)
    outs = [gen.generate(ids, mask, do_sample=False, **kw).sequences,
            gen.generate(ids, mask, temperature=0.0, **kw).sequences,
            gen.generate(ids, mask, method="greedy", **kw).sequences]
    for o in outs:
        assert o[:, ids.shape[1]:].tolist() == refs


@pytest.mark.parametrize("draft_dtype", [torch.float32, torch.bfloat16])
def test_greedy_with_a_lower_precision_draft_equals_target_generate(draft_dtype):
    """The draft may run in another dtype than the (float64) target: only its proposals change."""
    target, draft, refs = _pair("llama")
    gen = SpeculativeGenerator(target, copy.deepcopy(draft).to(draft_dtype))
    ids, mask = left_padded(PROMPTS)
    out = gen.generate(ids, mask, max_new_tokens=N_NEW, do_sample=False, gamma=4, eos_token_id=[], pad_token_id=0)
    assert out.sequences[:, ids.shape[1]:].tolist() == refs
    assert 0 < out.stats.accepted_tokens < out.stats.drafted_tokens
