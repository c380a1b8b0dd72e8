"""Sliding-window models (Mistral; Qwen2 with use_sliding_window; Gemma 2 and 3) decode exactly: greedy
speculative output equals `target.generate` on each prompt alone, well past the window (4 tokens), with
left padding, ragged acceptance and cache holes. Each case first checks that the window changes the
model's own output (a generator that ignored it would fail)."""
from __future__ import annotations

import pytest
import torch
from transformers import (Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig, MistralConfig,
                          MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM)

from _spec_models import left_padded, noisy_copy
from exactspec import SpeculativeGenerator

N_NEW = 16
PROMPTS = [[3, 1, 4, 1, 5, 9, 2, 6, 5, 3], [2, 7, 1]]
CASES = {  # (config class, model class, attention, initializer range, extra config)
    "mistral-sdpa": (MistralConfig, MistralForCausalLM, "sdpa", 0.5, {}),
    "qwen2-mixed-eager": (Qwen2Config, Qwen2ForCausalLM, "eager", 0.5, dict(use_sliding_window=True,
                                                                             max_window_layers=1)),
    "gemma2-eager": (Gemma2Config, Gemma2ForCausalLM, "eager", 0.02, dict(head_dim=8)),
    "gemma3-mixed-sdpa": (Gemma3TextConfig, Gemma3ForCausalLM, "sdpa", 0.04,
                          dict(head_dim=8, layer_types=["sliding_attention", "full_attention"])),
}


def _model(case, window):
    cfg_cls, model_cls, attn, init, extra = CASES[case]
    torch.manual_seed(0)  # same weights whatever the window
    cfg = cfg_cls(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=128, initializer_range=init, pad_token_id=0,
                  bos_token_id=None, eos_token_id=None, sliding_window=window, attn_implementation=attn, **extra)
    return model_cls(cfg).double().eval()


def _reference(model, prompt):
    out = model.generate(input_ids=torch.tensor([prompt]), do_sample=False, max_new_tokens=N_NEW, pad_token_id=0)
    return out[0, len(prompt):].tolist()


@pytest.mark.parametrize("case", list(CASES))
def test_greedy_speculative_equals_generate_past_the_window(case):
    target = _model(case, window=4)
    assert _reference(target, PROMPTS[0]) != _reference(_model(case, window=1000), PROMPTS[0])
    gen = SpeculativeGenerator(target, noisy_copy(target, 0.1))
    # auto: the cost model measures (and crops) a sliding model's cache too (a draft as large as the target
    # need not draft at all then); gamma=3: holes and rollbacks
    for gamma in (["auto", 3] if case == "mistral-sdpa" else [3]):
        out = gen.generate(*left_padded(PROMPTS), max_new_tokens=N_NEW, gamma=gamma, eos_token_id=[],
                           pad_token_id=0)
        for row, prompt in zip(out.sequences.tolist(), PROMPTS):
            assert row[-N_NEW:] == _reference(target, prompt), gamma
    assert 0 < out.stats.accepted_tokens < out.stats.drafted_tokens  # holes and rollbacks happened


def test_a_window_layout_the_cache_cannot_roll_back_is_a_clear_error():
    cfg = Gemma3TextConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=8, sliding_window=4,
                           use_bidirectional_attention=True, pad_token_id=0)
    target = Gemma3ForCausalLM(cfg).eval()
    with pytest.raises(ValueError, match="rolled back"):
        SpeculativeGenerator(target, drafter="prompt_lookup").generate(torch.tensor([[3, 1, 4]]), max_new_tokens=2)
