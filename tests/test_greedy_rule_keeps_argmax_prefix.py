"""Greedy verification keeps draft tokens exactly while they equal the target argmax (lowest id among
ties) and then emits the argmax at the first mismatch, or at the bonus position."""
import torch

from exactspec import verify


def onehotish(argmaxes, V=6, tie_with=None):
    """Rows whose argmax is given; optionally tie the max with a higher id."""
    rows = torch.full((len(argmaxes), V), 0.5 / (V - 1), dtype=torch.float32)
    for i, a in enumerate(argmaxes):
        rows[i, a] = 0.5
        if tie_with is not None and tie_with[i] is not None:
            rows[i, tie_with[i]] = 0.5
    return rows / rows.sum(-1, keepdim=True)


def test_greedy_accepts_matching_prefix_and_emits_argmax():
    # target argmax per position: 3, 1, 4, 0 (K = 3, bonus argmax 0)
    tp = onehotish([3, 1, 4, 0])[None].repeat(4, 1, 1)
    drafts = torch.tensor([[3, 1, 4], [3, 1, 2], [3, 5, 4], [2, 1, 4]])
    v = verify(tp, None, drafts, method="greedy")
    assert v.accepted.tolist() == [3, 2, 1, 0]
    assert v.next_token.tolist() == [0, 4, 1, 3]
    assert v.accept_probs.tolist()[1] == [1.0, 1.0, 0.0]


def test_greedy_ties_go_to_lowest_id():
    tp = onehotish([2, 5], tie_with=[4, 1])[None]  # position 0: ids 2 and 4 tie; position 1: 1 and 5
    v = verify(tp, None, torch.tensor([[4]]), method="greedy")
    assert (v.accepted.item(), v.next_token.item()) == (0, 2)
    v = verify(tp, None, torch.tensor([[2]]), method="greedy")
    assert (v.accepted.item(), v.next_token.item()) == (1, 1)


def test_greedy_ignores_draft_probs_and_respects_draft_lengths():
    tp = onehotish([3, 1, 4, 0])[None].repeat(3, 1, 1)
    drafts = torch.tensor([[3, 1, 4], [3, 1, 4], [3, 1, -7]])  # -7 is padding past the length
    dp = torch.softmax(torch.randn(3, 3, 6, generator=torch.Generator().manual_seed(0)), -1)
    v = verify(tp, dp, drafts, method="greedy", draft_lengths=torch.tensor([0, 1, 2]))
    assert v.accepted.tolist() == [0, 1, 2]
    assert v.next_token.tolist() == [3, 1, 4]


def test_greedy_is_deterministic_under_any_generator():
    tp = torch.softmax(torch.randn(8, 5, 7, generator=torch.Generator().manual_seed(1)), -1)
    drafts = tp[:, :4].argmax(-1)
    drafts[::2, 2] = (drafts[::2, 2] + 1) % 7
    a = verify(tp, None, drafts, method="greedy", generator=torch.Generator().manual_seed(1))
    b = verify(tp, None, drafts, method="greedy", generator=torch.Generator().manual_seed(2))
    assert torch.equal(a.accepted, b.accepted) and torch.equal(a.next_token, b.next_token)
    assert a.accepted.tolist() == [2, 4] * 4


def test_greedy_on_logits_equals_greedy_on_probabilities():
    # The decoding loop passes target logits to the greedy rule (it reads only the argmax): any logits,
    # including negative ones and exact ties (lowest id wins on both sides), give the probabilities' verdict.
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(16, 5, 9, generator=g) * 3 - 2
    logits[::3, :, 4] = logits[::3].amax(-1)  # ties between id 4 and the previous maximum
    drafts = logits[:, :4].argmax(-1)
    drafts[1::2, 1] = (drafts[1::2, 1] + 2) % 9
    lengths = torch.randint(0, 5, (16,), generator=g)
    a = verify(logits, None, drafts, method="greedy", draft_lengths=lengths)
    b = verify(torch.softmax(logits, -1), None, drafts, method="greedy", draft_lengths=lengths)
    assert torch.equal(a.accepted, b.accepted) and torch.equal(a.next_token, b.next_token)
    assert a.accepted.tolist() != [0] * 16  # not vacuous: some drafts are kept
