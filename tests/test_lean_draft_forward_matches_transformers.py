"""The draft's lean forward (exactspec.backends.leanforward) computes what transformers' forward computes, and the
growing cache layer holds what transformers' DynamicLayer holds.

A draft's numbers never decide exactness (verification corrects any q the tokens were drawn from), but they
decide acceptance, so the lean forward must be the same function: logits equal to transformers' to float64
rounding on tiny Llama and Qwen2 models (grouped-query attention with and without sdpa's enable_gqa; random
q/k/v biases, and Llama's attention_bias with an o bias and its own head_dim), for chain steps, left
padding, holes and token trees; weights edited between runs are seen; models it does not know, and
EXACTSPEC_LEAN_DRAFT=0, take transformers' forward.
"""
from __future__ import annotations

import pytest
import torch
from transformers.cache_utils import DynamicLayer

from _spec_models import tiny_lm
from exactspec.backends.cache import GrowingLayer, SlotCache
from exactspec.backends.leanforward import lean_forward_for


def _pair(model):
    """Two slot caches on one model: transformers' forward and the lean one."""
    hf, lean = SlotCache(model), SlotCache(model)
    lean.use_lean()
    assert lean.lean is not None and hf.lean is None
    return hf, lean


def _biased_llama(seed: int = 7):
    """A tiny Llama with attention_bias (q, k, v and o biases) and a head_dim apart from hidden / heads."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, attention_bias=True,
                      max_position_embeddings=128, initializer_range=0.5, attn_implementation="sdpa",
                      pad_token_id=0, bos_token_id=None, eos_token_id=None)
    return LlamaForCausalLM(cfg).to(torch.float64).eval()


def _random_biases(model, seed: int = 0):
    """transformers initialises biases to zero, where a bias dropped or misplaced would go unseen."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model


@pytest.mark.parametrize("arch,gqa", [("llama", True), ("qwen2", True), ("biased llama", True),
                                      ("llama", False)])
@torch.inference_mode()
def test_lean_forward_equals_transformers_through_padding_holes_and_trees(arch, gqa, monkeypatch):
    """`gqa=False`: sdpa without enable_gqa (torch < 2.5), the KV heads repeated instead."""
    import exactspec.backends.leanforward

    monkeypatch.setattr(exactspec.backends.leanforward, "_GQA", gqa)
    model = _biased_llama() if arch == "biased llama" else tiny_lm(arch, seed=5, attn="sdpa")
    _random_biases(model)
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
        start = hf.length - tok.shape[1]
        counts = (torch.rand(3, generator=g) * (ok.sum(1) + 1)).long()  # ragged: holes in some rows, a crop in others
        for sc in (hf, lean):
            sc.keep(start, counts)
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


def test_lean_forward_sees_weights_edited_between_runs():
    model = tiny_lm("llama", seed=6, attn="sdpa")
    ids = torch.tensor([[3, 4, 5, 6]])
    ok = torch.ones_like(ids, dtype=torch.bool)
    with torch.inference_mode():
        _, lean = _pair(model)
        before = lean.forward(ids, ok)
    with torch.no_grad():  # in place, through .data (no version bump), and a Parameter replaced outright
        model.model.layers[0].self_attn.k_proj.weight.mul_(1.5)
        model.model.layers[1].mlp.up_proj.weight.data.add_(0.1)
        layer = model.model.layers[1].self_attn.q_proj
        layer.weight = torch.nn.Parameter(layer.weight * 0.5)
    with torch.inference_mode():
        hf, lean = _pair(model)
        after = lean.forward(ids, ok)
        torch.testing.assert_close(after, hf.forward(ids, ok), atol=1e-10, rtol=0)
    assert not torch.allclose(after, before)
    # the fused copies are ordinary tensors: a later run with autograd on can use the model
    model.model.layers[0].self_attn.k_proj.weight.requires_grad_(True)
    _, lean = _pair(model)
    lean.forward(ids, ok).sum().backward()


def test_models_the_lean_forward_does_not_know_take_transformers(monkeypatch):
    assert lean_forward_for(tiny_lm("gpt2"), None) is None
    llama = tiny_lm("llama")
    assert lean_forward_for(llama, None) is not None
    assert lean_forward_for(llama, 16) is None  # sliding windows: the slot cache's own masks

    class Quantised(torch.nn.Linear):  # a projection with its own forward (bitsandbytes, GPTQ, LoRA ...)
        pass

    odd = tiny_lm("llama")
    old = odd.model.layers[1].mlp.down_proj
    odd.model.layers[1].mlp.down_proj = Quantised(old.in_features, old.out_features, bias=False)
    assert lean_forward_for(odd, None) is None
    hooked = tiny_lm("llama")
    hooked.model.layers[0]._hf_hook = object()  # accelerate's device maps and offloading
    assert lean_forward_for(hooked, None) is None
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


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@torch.inference_mode()
def test_a_half_precision_draft_drafting_for_several_rows_computes_in_fp32(dtype):
    """Several rows: the forward computes in fp32 on fp32 copies of the half-precision weights, so it equals
    transformers' forward of the model cast to fp32 (to fp32 rounding); one row keeps the model's dtype."""
    import copy

    model = tiny_lm("llama", seed=8, attn="sdpa", dtype=torch.float32).to(dtype)
    assert lean_forward_for(model, None, rows=1).dtype is None
    lean = SlotCache(model)
    lean.use_lean(rows=3)
    assert lean.lean.dtype == torch.float32
    hf = SlotCache(copy.deepcopy(model).float())
    g = torch.Generator().manual_seed(1)
    ids, valid = torch.randint(1, 60, (3, 5), generator=g), torch.ones(3, 5, dtype=torch.bool)
    valid[2, :2] = False
    for tok, ok in [(ids, valid), (torch.randint(1, 60, (3, 1), generator=g), torch.ones(3, 1, dtype=torch.bool))]:
        a, b = hf.forward(tok, ok), lean.forward(tok, ok)
        assert b.dtype == torch.float32
        real = ok[:, :, None].expand_as(a)
        torch.testing.assert_close(b[real], a[real], atol=1e-4, rtol=1e-4)
    # a head of its own (not a plain Linear: a token subset, say) keeps the model's dtype
    odd = tiny_lm("llama", seed=8, attn="sdpa", dtype=torch.float32).to(dtype)
    odd.lm_head = torch.nn.Sequential(odd.lm_head)
    assert lean_forward_for(odd, None, rows=3).dtype is None


def test_a_half_precision_draft_on_a_ragged_batch_stays_exact():
    from exactspec import SpeculativeGenerator

    import copy

    target = tiny_lm("llama", seed=0, attn="sdpa", dtype=torch.float32)
    draft = copy.deepcopy(target).to(torch.float16)  # the target in half precision: it agrees with it mostly
    ids = torch.randint(1, 60, (3, 6), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    mask[1, :2] = mask[2, :4] = 0
    out = SpeculativeGenerator(target, draft).generate(ids, mask, max_new_tokens=12, gamma=3, do_sample=False,
                                                       eos_token_id=[])
    ref = target.generate(ids, attention_mask=mask, max_new_tokens=12, do_sample=False, pad_token_id=0)
    assert torch.equal(out.sequences, ref)
    assert out.stats.accepted_tokens > out.stats.drafted_tokens / 2
