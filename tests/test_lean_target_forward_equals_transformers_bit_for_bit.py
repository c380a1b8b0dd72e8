"""The target's lean forward (exactspec.backends.leanforward, ``use_lean(target=True)``) gives transformers' logits
bit for bit, so the engine's target is the same function it was through transformers' forward.

The target's p defines what the engine samples and what greedy decoding picks, so here equality is exact
(``torch.equal``), not to a tolerance: through left padding, holes left by rollbacks, chain steps of several
widths, token trees' 4-D masks, fp32, fp64 and bf16, Llama (grouped-query attention), Qwen2 (q/k/v biases) and a
Llama with attention_bias and its own head_dim. Whole runs then match token for token with the lean forward
on and off (``EXACTSPEC_LEAN_TARGET=0``), sampled ones under a seed included. Models it does not know, eager
attention and the switch take transformers' forward; no weight of the target is copied.
"""
from __future__ import annotations

import pytest
import torch

from _spec_models import noisy_copy, tiny_lm
from exactspec import SpeculativeGenerator
from exactspec.engine.baseline import target_alone_loop
from exactspec.backends.cache import SlotCache
from exactspec.backends.leanforward import lean_forward_for
from test_lean_draft_forward_matches_transformers import _biased_llama, _random_biases


def _model(arch: str, dtype):
    model = _biased_llama() if arch == "biased llama" else tiny_lm(arch, seed=5, attn="sdpa")
    return _random_biases(model.to(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("arch", ["llama", "qwen2", "biased llama"])
@torch.inference_mode()
def test_target_logits_equal_transformers_through_padding_holes_widths_and_trees(arch, dtype):
    model = _model(arch, dtype)
    hf, lean = SlotCache(model), SlotCache(model)
    lean.use_lean(3, target=True)
    assert lean.lean is not None and hf.lean is None
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 60, (3, 7), generator=g)
    valid = torch.ones(3, 7, dtype=torch.bool)
    valid[1, :2] = valid[2, :5] = False  # left padding
    steps = [(ids, valid)] + [(torch.randint(1, 60, (3, k), generator=g), torch.ones(3, k, dtype=torch.bool))
                              for k in (3, 1, 5, 1, 2)]
    for tok, ok in steps:
        a, b = hf.forward(tok, ok), lean.forward(tok, ok)
        real = ok[:, :, None].expand_as(a)  # a padding query's output is never read
        assert torch.equal(b[real], a[real])
        start = hf.length - tok.shape[1]
        counts = (torch.rand(3, generator=g) * (ok.sum(1) + 1)).long()  # ragged: holes in some rows, a crop in others
        for sc in (hf, lean):
            sc.keep(start, counts)
    assert torch.equal(hf.mask, lean.mask)
    # a token tree: the root's 2 children, the first with 2 children; each node sees the cache and its ancestors
    parents, depth = [-1, -1, 0, 0], torch.tensor([1, 1, 2, 2])
    anc = torch.eye(4, dtype=torch.bool)
    anc[2, 0] = anc[3, 0] = True
    attend = torch.cat([hf.mask.bool()[:, None, :].expand(3, 4, hf.length), anc[None].expand(3, 4, 4)], 2)
    tok, ok = torch.randint(1, 60, (3, len(parents)), generator=g), torch.ones(3, 4, dtype=torch.bool)
    pos = hf.n_real[:, None] + depth - 1
    assert torch.equal(lean.forward_tree(tok, ok, pos, attend), hf.forward_tree(tok, ok, pos, attend))
    # one row, nothing padded: transformers' own causal paths (no mask at a single token, is_causal at a prefill)
    hf, lean = SlotCache(model), SlotCache(model)
    lean.use_lean(1, target=True)
    ids = torch.randint(1, 60, (1, 9), generator=g)
    for tok in (ids, ids[:, :1], ids[:, :4]):
        ok = torch.ones_like(tok, dtype=torch.bool)
        assert torch.equal(lean.forward(tok, ok, logits_to_keep=1), hf.forward(tok, ok, logits_to_keep=1))


def test_the_target_forward_copies_no_weight_and_falls_back_where_it_must(monkeypatch):
    llama = tiny_lm("llama", seed=1, attn="sdpa")
    lean = lean_forward_for(llama, None, rows=4, target=True)
    assert lean is not None and not lean.fuse and lean.dtype is None
    for refs, layer in zip(lean.layers, llama.model.layers):  # the modules' own tensors, no copies
        assert refs.q is layer.self_attn.q_proj.weight and refs.down is layer.mlp.down_proj.weight
        assert refs.attn is layer.self_attn
    assert lean_forward_for(tiny_lm("llama", seed=1, attn="eager"), None, target=True) is None
    assert lean_forward_for(tiny_lm("gpt2", seed=1, attn="sdpa"), None, target=True) is None
    assert lean_forward_for(llama, 16, target=True) is None  # sliding windows
    from accelerate.hooks import ModelHook, add_hook_to_module

    hooked = tiny_lm("llama", seed=1, attn="sdpa")
    add_hook_to_module(hooked.model.layers[1].mlp, ModelHook())  # as accelerate's device maps and offloading do
    assert lean_forward_for(hooked, None, target=True) is None and lean_forward_for(hooked, None) is None
    monkeypatch.setenv("EXACTSPEC_LEAN_TARGET", "0")
    assert lean_forward_for(llama, None, target=True) is None
    assert lean_forward_for(llama, None) is not None  # the draft's switch is its own


def _runs(target, draft, ids, mask, monkeypatch, **kw):
    """The same run with the target's lean forward on, then off; the lean target must have run (and only)
    when on."""
    import exactspec.backends.leanforward as lf

    calls, unfused = [0], lf.LeanForward._unfused

    def counted(self, *a, **k):
        calls[0] += 1
        return unfused(self, *a, **k)

    monkeypatch.setattr(lf.LeanForward, "_unfused", counted)
    outs = []
    for switch in ("1", "0"):
        monkeypatch.setenv("EXACTSPEC_LEAN_TARGET", switch)
        before = calls[0]
        outs.append(SpeculativeGenerator(target, draft).generate(ids, mask, max_new_tokens=12, **kw))
        assert (calls[0] > before) == (switch == "1")
    return outs


@pytest.mark.parametrize("kw", [dict(gamma=3), dict(gamma="auto"), dict(tree=(2, 1)),
                                dict(gamma=3, do_sample=True, temperature=1.0, seed=11),
                                dict(tree=(2, 1), do_sample=True, temperature=0.8, top_k=20, seed=5)],
                         ids=["greedy", "greedy auto", "greedy tree", "sampled", "sampled tree"])
def test_whole_runs_match_token_for_token_with_the_lean_target_on_and_off(kw, monkeypatch):
    target = tiny_lm("llama", seed=3, attn="sdpa", dtype=torch.float32)
    draft = noisy_copy(target, 0.3)
    ids = torch.tensor([[0, 0, 5, 9, 2], [4, 8, 15, 16, 23], [0, 0, 0, 7, 7]])
    mask = (torch.arange(5)[None] >= torch.tensor([[2], [0], [3]])).long()
    on, off = _runs(target, draft, ids, mask, monkeypatch, **kw)
    assert torch.equal(on.sequences, off.sequences)
    if not kw.get("do_sample"):
        with torch.inference_mode():
            ref = target.generate(ids, attention_mask=mask, max_new_tokens=12, min_new_tokens=12, do_sample=False,
                                  pad_token_id=0)
        assert torch.equal(on.sequences, ref)


def test_the_target_alone_loop_decodes_as_transformers_generate():
    target = tiny_lm("qwen2", seed=4, attn="sdpa", dtype=torch.float32)
    ids = torch.tensor([[0, 3, 5, 9], [4, 8, 15, 16]])
    mask = (ids > 0).long()
    mask[1, 0] = 1
    with torch.inference_mode():
        ours = target_alone_loop(target, ids, mask, max_new_tokens=10, temperature=0.0, seed=0)
        ref = target.generate(ids, attention_mask=mask, max_new_tokens=10, min_new_tokens=10, do_sample=False,
                              pad_token_id=0)
    assert torch.equal(ours, ref[:, ids.shape[1]:])
