"""The draft's lean forward (exactspec.leanforward) computes what transformers' forward computes, and the
growing cache layer holds what transformers' DynamicLayer holds.

A draft's numbers never decide exactness (verification corrects any q the tokens were drawn from), but they
decide acceptance, so the lean forward must be the same function: logits equal to transformers' to float64
rounding on tiny Llama and Qwen2 models (grouped-query attention; Qwen2's q/k/v biases), for chain steps,
left padding, holes and token trees; a weight edited in place is seen; models it does not know, and
EXACTSPEC_LEAN_DRAFT=0, take transformers' forward.
"""
from __future__ import annotations

import pytest
import torch
from transformers.cache_utils import DynamicLayer

from _spec_models import tiny_lm
from exactspec.cache import GrowingLayer, SlotCache
from exactspec.leanforward import lean_forward_for


def _pair(model):
    """Two slot caches on one model: transformers' forward and the lean one."""
    hf, lean = SlotCache(model), SlotCache(model)
    lean.use_lean()
    assert lean.lean is not None and hf.lean is None
    return hf, lean


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@torch.inference_mode()
def test_lean_forward_equals_transformers_through_padding_holes_and_trees(arch):
    model = tiny_lm(arch, seed=5, attn="sdpa")
    hf, lean = _pair(model)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 60, (3, 6), generator=g)
    valid = torch.ones(3, 6, dtype=torch.bool)
    valid[1, :2] = valid[2, :4] = False  # left padding
    steps = [(ids, valid)]
    for _ in range(3):
        steps.append((torch.randint(1, 60, (3, 3), generator=g), torch.ones(3, 3, dtype=torch.bool)))
    for n, (tok, ok) in enumerate(steps):
        a, b = hf.forward(tok, ok), lean.forward(tok, ok)
        real = ok[:, :, None].expand_as(a)  # padding queries are never read
        torch.testing.assert_close(b[real], a[real], atol=1e-10, rtol=0)
        keep = torch.rand(3, tok.shape[1], generator=g) < 0.5  # holes in some rows, a crop in others
        for sc in (hf, lean):
            sc.rollback(keep)
    assert torch.equal(hf.mask, lean.mask)
    # a tree: root 2 children, the first with 2 children; nodes see the cache and their ancestors
    parents = [-1, -1, 0, 0]
    s, total = len(parents), hf.length + len(parents)
    attend = hf.mask.bool()[:, None, :].expand(3, s, hf.length)
    anc = torch.zeros(s, s, dtype=torch.bool)
    for i, p in enumerate(parents):
        while p >= 0:
            anc[i, p], p = True, parents[p]
    attend = torch.cat([attend, anc[None].expand(3, s, s)], 2)
    assert attend.shape[-1] == total
    tok = torch.randint(1, 60, (3, s), generator=g)
    depth = torch.tensor([0, 0, 1, 1])
    pos = hf.n_real[:, None] + depth[None]
    ok = torch.ones(3, s, dtype=torch.bool)
    torch.testing.assert_close(lean.forward_tree(tok, ok, pos, attend), hf.forward_tree(tok, ok, pos, attend),
                               atol=1e-10, rtol=0)


@torch.inference_mode()
def test_lean_forward_sees_weights_edited_in_place():
    model = tiny_lm("llama", seed=6, attn="sdpa")
    ids = torch.tensor([[3, 4, 5, 6]])
    ok = torch.ones_like(ids, dtype=torch.bool)
    _, lean = _pair(model)
    lean.forward(ids, ok)  # fuses the weights once
    with torch.no_grad():
        model.model.layers[0].self_attn.k_proj.weight.mul_(1.5)
        model.model.layers[1].mlp.up_proj.weight.add_(0.1)
    hf, lean = _pair(model)
    torch.testing.assert_close(lean.forward(ids, ok), hf.forward(ids, ok), atol=1e-10, rtol=0)


def test_models_the_lean_forward_does_not_know_take_transformers(monkeypatch):
    assert lean_forward_for(tiny_lm("gpt2"), None) is None
    llama = tiny_lm("llama")
    assert lean_forward_for(llama, None) is not None
    assert lean_forward_for(llama, 16) is None  # sliding windows: the slot cache's own masks
    monkeypatch.setenv("EXACTSPEC_LEAN_DRAFT", "0")
    assert lean_forward_for(llama, None) is None


@torch.inference_mode()
def test_growing_layer_holds_what_dynamic_layer_holds_and_appends_in_place():
    g = torch.Generator().manual_seed(1)
    grow, ref = GrowingLayer(), DynamicLayer()

    def both(fn):
        fn(grow), fn(ref)
        torch.testing.assert_close(grow.keys, ref.keys, atol=0, rtol=0)
        torch.testing.assert_close(grow.values, ref.values, atol=0, rtol=0)

    def append(s, rows=3):
        k, v = torch.randn(rows, 2, s, 4, generator=g), torch.randn(rows, 2, s, 4, generator=g)
        return lambda layer: layer.update(k, v)

    both(append(5))
    both(append(1))
    ptr = grow.keys.data_ptr()
    for _ in range(20):  # appends and crops within capacity never move the prefix
        both(append(3))
        both(lambda layer: layer.crop(-2))
    assert grow.keys.data_ptr() == ptr and grow.get_seq_length() == ref.get_seq_length() == 26
    both(lambda layer: layer.batch_select_indices(torch.tensor([0, 2])))  # rewritten outside: copied once
    both(append(2, rows=2))
    both(lambda layer: layer.crop(-100))
    both(append(4, rows=2))
    assert grow.get_seq_length() == 4
