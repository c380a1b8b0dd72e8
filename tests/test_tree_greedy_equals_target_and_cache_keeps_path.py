"""Greedy tree speculation reproduces target.generate token for token (static, dynamic and auto trees,
Llama and Qwen2, one row and a ragged batch of three, EOS), and after a side branch is accepted both KV
caches hold exactly what a fresh forward over the accepted text computes."""
from __future__ import annotations

import pytest
import torch

from _spec_models import left_padded, noisy_copy, target_greedy, tiny_lm
from exactspec import CostModel, SpeculativeGenerator
from exactspec.backends.cache import SlotCache
from exactspec.engine.drafters import DraftModelDrafter, SamplingSpec
from exactspec.speed.treemath import shape_parents
from exactspec.engine.trees import TreeStepper

PROMPTS = [[3, 1, 4, 1, 5], [9, 2, 6], [5, 3, 5, 8, 9, 7, 9, 3]]


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("tree", [(3, 2, 1, 1), 7, "auto"])
def test_greedy_tree_speculation_equals_target_generate(arch, tree):
    target = tiny_lm(arch, attn="sdpa", dtype=torch.float32)
    gen = SpeculativeGenerator(target, noisy_copy(target, 0.15), cost_model=CostModel(0.1, {1: 1.0, 17: 1.4}))
    want = [target_greedy(target, p, 14) for p in PROMPTS]
    ids, mask = left_padded(PROMPTS)
    out = gen.generate(ids, mask, max_new_tokens=14, do_sample=False, tree=tree, eos_token_id=[])
    assert [r[ids.shape[1]:] for r in out.sequences.tolist()] == want
    one = gen.generate(torch.tensor([PROMPTS[2]]), max_new_tokens=14, do_sample=False, tree=tree, eos_token_id=[])
    assert one.sequences[0, len(PROMPTS[2]):].tolist() == want[2]
    s = out.stats
    assert s.tree_nodes > 0 and s.accepted_tokens > 0 and sum(s.accepted_depths) == s.row_steps
    assert s.tokens_per_target_call == s.new_tokens / s.target_calls


def test_greedy_tree_stops_at_eos_like_target_generate():
    target = tiny_lm("llama", attn="eager")
    gen = SpeculativeGenerator(target, noisy_copy(target, 0.15))
    free = [target_greedy(target, p, 12) for p in PROMPTS]
    eos = free[0][4]
    ids, mask = left_padded(PROMPTS)
    out = gen.generate(ids, mask, max_new_tokens=12, do_sample=False, tree=(2, 2, 1), eos_token_id=eos, pad_token_id=0)
    for row, p in zip(out.sequences.tolist(), PROMPTS):
        want = target_greedy(target, p, 12, eos=eos)
        assert row[ids.shape[1]:ids.shape[1] + len(want)] == want


def _keys(cache: SlotCache, row: int, layer: int) -> torch.Tensor:
    return cache.cache.layers[layer].keys[row][:, cache.mask[row].bool()]  # [H, real slots, Dh]


def _fresh_keys(model, tokens: list[int], layer: int) -> torch.Tensor:
    return model(input_ids=torch.tensor([tokens]), use_cache=True).cache.layers[layer].keys[0]


@torch.no_grad()
def test_kv_caches_after_a_side_branch_equal_recomputation():
    # sdpa in float64 computes in float64 (eager softmaxes in fp32, ~1e-7 apart whenever the slot layout
    # differs), so a moved entry must equal the recomputed one to rounding.
    target = tiny_lm("llama", attn="sdpa")
    draft = noisy_copy(target, 0.5)
    spec = SamplingSpec(greedy=True, temperature=0.0, top_k=0, top_p=1.0, generator=torch.Generator(),
                        vocab_size=64)
    prompts = PROMPTS[:2]
    ids, mask = left_padded(prompts)
    tc = SlotCache(target)
    tc.forward(ids[:, :-1], mask[:, :-1].bool(), logits_to_keep=1)
    dr = DraftModelDrafter(draft)
    dr.start(ids, mask)
    stepper, pending, seqs = TreeStepper(tc, dr, spec), ids[:, -1], [list(p) for p in prompts]
    side = 0
    for _ in range(8):
        emitted, n, nxt, tree, path, _ = stepper.step(pending, ("static", shape_parents((3, 2, 1))), 3)
        side += int(((tree.rank.gather(1, path.clamp(min=0)) > 0) & (path >= 0)).sum())
        stepper.commit(n, nxt)
        for b in range(len(seqs)):
            seqs[b] += emitted[b, :int(n[b]) + 1].tolist()
        pending = nxt
        for b, seq in enumerate(seqs):  # target: all but the pending token; draft: all but its pending ones
            held = int(dr.pending_valid[b].sum())
            for layer in range(2):
                assert torch.allclose(_keys(tc, b, layer), _fresh_keys(target, seq[:-1], layer), atol=1e-10)
                assert torch.allclose(_keys(dr.state, b, layer), _fresh_keys(draft, seq[:-held], layer), atol=1e-10)
    assert side > 0, "no side branch was accepted: the test proved nothing"
