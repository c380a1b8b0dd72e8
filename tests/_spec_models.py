"""Tiny random-weight causal LMs for the speculative-decoding tests (built from configs, no downloads).

Random models give near-uniform next-token distributions; `init` (initializer_range) is raised so they
are peaked, and drafts are noisy copies of the target so that they agree often but not always.
"""
from __future__ import annotations

import copy

import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

ARCHS = ("llama", "gpt2", "qwen2")


def tiny_lm(arch: str = "llama", *, vocab: int = 64, seed: int = 0, init: float = 0.5, dtype=torch.float64,
            attn: str = "eager", hidden: int = 32, layers: int = 2, max_pos: int = 128):
    torch.manual_seed(seed)
    common = dict(vocab_size=vocab, initializer_range=init, attn_implementation=attn,
                  pad_token_id=0, bos_token_id=None, eos_token_id=None)
    if arch == "llama":
        cfg = LlamaConfig(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_pos, **common)
        model = LlamaForCausalLM(cfg)
    elif arch == "qwen2":
        cfg = Qwen2Config(hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_pos, **common)
        model = Qwen2ForCausalLM(cfg)
    elif arch == "gpt2":
        cfg = GPT2Config(n_embd=hidden, n_layer=layers, n_head=4, n_positions=max_pos, **common)
        model = GPT2LMHeadModel(cfg)
    else:
        raise ValueError(arch)
    return model.to(dtype).eval()


def noisy_copy(model, scale: float, seed: int = 1):
    """A draft: the target's weights plus Gaussian noise of `scale` times each tensor's std."""
    draft = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in draft.parameters():
            if p.numel() > 1:
                p.add_(torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype) * scale * p.std())
    return draft


def left_padded(prompts: list[list[int]], pad: int = 0):
    """(input_ids [B, P], attention_mask [B, P]) with left padding."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    return ids, mask


def target_greedy(model, prompt: list[int], n: int, eos=None) -> list[int]:
    """The target's own `generate(do_sample=False)` on one unpadded prompt: the new tokens."""
    out = model.generate(input_ids=torch.tensor([prompt]), do_sample=False, max_new_tokens=n,
                         min_new_tokens=0, eos_token_id=eos, pad_token_id=0)
    return out[0, len(prompt):].tolist()
