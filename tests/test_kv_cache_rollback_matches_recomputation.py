"""The hole-masked batch KV cache gives the same logits as recomputing each row from scratch.

After every forward / keep / row selection, each row's logits equal a no-cache forward over that row's
real tokens alone, the cache holds exactly the slots the design says (cropped to the longest kept run,
holes masked), and compaction removes slots no row uses. Also checks what the draft-model drafter keeps.
"""
from __future__ import annotations

import pytest
import torch

from _spec_models import ARCHS, tiny_lm
from exactspec.backends.cache import SlotCache, left_pack
from exactspec.engine.drafters import DraftModelDrafter, SamplingSpec


def _reference_logits(model, tokens: list[int]) -> torch.Tensor:
    return model(input_ids=torch.tensor([tokens])).logits[0]


@pytest.mark.parametrize("arch,dtype,attn,lean", [(a, torch.float64, "eager", False) for a in ARCHS]
                         + [("llama", torch.float32, "sdpa", False)]
                         + [(a, torch.float64, "sdpa", True) for a in ("llama", "qwen2")])
@torch.inference_mode()
def test_cache_rollback_and_compaction_match_recomputation(arch, dtype, attn, lean):
    """`lean`: the draft's own forward (exactspec.backends.leanforward) on the same cache, as drafts run."""
    model = tiny_lm(arch, seed=3, dtype=dtype, attn=attn)
    # float64 models still take their rotary angles from a float32 product (transformers), whose last bit can
    # depend on the CPU kernel chosen for a shape; a real cache error shows up at O(1e-2) and above
    tol = 1e-5 if dtype == torch.float64 else 1e-4
    g = torch.Generator().manual_seed(0)
    prompts = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14]]
    width = 5
    ids = torch.zeros(3, width, dtype=torch.long)
    valid = torch.zeros(3, width, dtype=torch.bool)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        valid[i, width - len(p):] = True
    rows = [list(p) for p in prompts]
    sc = SlotCache(model)
    if lean:
        sc.use_lean()
        assert sc.lean is not None
    logits = sc.forward(ids, valid)
    for i, p in enumerate(prompts):
        torch.testing.assert_close(logits[i, width - len(p):], _reference_logits(model, p), atol=tol, rtol=0)
    for step, keep_counts in enumerate([[3, 1, 0], [1, 4, 2], [0, 0, 1]]):
        new = torch.randint(3, 60, (len(rows), 4), generator=g)
        before = sc.length
        logits = sc.forward(new, torch.ones_like(new, dtype=torch.bool))
        for i, r in enumerate(rows):
            ref = _reference_logits(model, r + new[i].tolist())[-4:]
            torch.testing.assert_close(logits[i], ref, atol=tol, rtol=0)
        sc.keep(before, torch.tensor(keep_counts[: len(rows)]))
        assert sc.length == before + max(keep_counts[: len(rows)])  # cropped to the longest kept run
        assert sc.cache.get_seq_length() == sc.length
        for i, r in enumerate(rows):
            r += new[i, : keep_counts[i]].tolist()
        assert sc.n_real.tolist() == [len(r) for r in rows]
        if step == 1:  # row 1 finishes: drop it, and compact slots no remaining row uses
            sc.select_rows(torch.tensor([0, 2]))
            rows = [rows[0], rows[2]]
            assert bool(sc.mask.bool().any(0).all())
            assert sc.cache.get_seq_length() == sc.length
    probe = torch.tensor([[20], [21]])
    logits = sc.forward(probe, torch.ones_like(probe, dtype=torch.bool))
    for i, r in enumerate(rows):
        torch.testing.assert_close(logits[i, -1], _reference_logits(model, r + [20 + i])[-1], atol=tol, rtol=0)


def test_left_pack_moves_valid_entries_right_in_order():
    tokens = torch.tensor([[1, 2, 3], [4, 5, 6]])
    valid = torch.tensor([[True, False, True], [False, False, True]])
    packed, pv = left_pack(tokens, valid, pad_id=0)
    assert packed.tolist() == [[1, 3], [0, 6]]
    assert pv.tolist() == [[True, True], [False, True]]


@torch.inference_mode()
def test_draft_model_drafter_rolls_back_to_accepted_prefix():
    """After update(accepted), the draft's cache + pending tokens are exactly the emitted sequence.
    (sdpa: the draft runs its lean forward, and transformers' eager attention softmaxes in fp32.)"""
    model = tiny_lm("llama", seed=4, attn="sdpa")
    drafter = DraftModelDrafter(model)
    ids = torch.tensor([[0, 5, 6, 7], [8, 9, 10, 11]])
    mask = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
    hist = [[5, 6, 7], [8, 9, 10, 11]]
    drafter.start(ids, mask)
    spec = SamplingSpec(greedy=False, temperature=1.0, top_k=0, top_p=1.0,
                        generator=torch.Generator().manual_seed(0), vocab_size=64)
    for accepted in ([3, 1], [0, 3], [2, 2]):
        k = torch.tensor([3, 3])
        draft = drafter.propose(k, spec)
        prefix_len = drafter.state.length
        acc = torch.tensor(accepted)
        nxt = torch.tensor([30, 31])
        drafter.update(acc, nxt, draft)
        for i in range(2):
            hist[i] += draft.tokens[i, : accepted[i]].tolist() + [int(nxt[i])]
        # cached real tokens + pending == emitted history, for every row
        assert (drafter.state.n_real + drafter.pending_valid.sum(1)).tolist() == [len(h) for h in hist]
        assert drafter.state.length <= prefix_len  # keeping never grows the cache
        # and the next draft distribution equals a from-scratch forward over the history
        logits = drafter.state.forward(drafter.pending, drafter.pending_valid, logits_to_keep=1)[:, -1]
        for i in range(2):
            torch.testing.assert_close(logits[i], _reference_logits(model, hist[i])[-1], atol=1e-10, rtol=0)
        probe = drafter.state.length - drafter.pending.shape[1]
        drafter.state.keep(probe, torch.zeros(2, dtype=torch.long))  # undo the probe
