"""verify_logits (lazy, row-by-row probabilities for the token rule) makes exactly the decisions verify
makes on the full probabilities from the same sampling transform, with the same generator."""
import pytest
import torch

from exactspec import probs_from_logits, sample_from_probs, verify, verify_logits


def inputs(B=16, K=4, V=50, seed=0, **kw):
    g = torch.Generator().manual_seed(seed)
    dl = torch.randn(B, K, V, generator=g) * 2
    tl = torch.cat([dl, torch.randn(B, 1, V, generator=g)], 1) + torch.randn(B, K + 1, V, generator=g)
    tokens = sample_from_probs(probs_from_logits(dl, **kw), g)
    return tl, dl, tokens


@pytest.mark.parametrize("kw", [{}, {"temperature": 0.7, "top_k": 20}, {"top_p": 0.9, "min_p": 0.01}])
@pytest.mark.parametrize("ragged", [False, True])
def test_same_decisions_as_verify(kw, ragged):
    tl, dl, tokens = inputs(**kw)
    L = torch.randint(0, 5, (16,), generator=torch.Generator().manual_seed(1)) if ragged else None
    for seed in range(5):
        a = verify(probs_from_logits(tl, **kw), probs_from_logits(dl, **kw), tokens, draft_lengths=L,
                   generator=torch.Generator().manual_seed(seed))
        b = verify_logits(tl, dl, tokens, draft_lengths=L, generator=torch.Generator().manual_seed(seed),
                          **kw)
        assert torch.equal(a.accepted, b.accepted)
        assert torch.equal(a.next_token, b.next_token)
        # positions up to the first rejection carry the same acceptance probabilities
        read = torch.arange(4)[None] <= a.accepted[:, None]
        read &= torch.arange(4)[None] < (L if L is not None else torch.full((16,), 4))[:, None]
        assert torch.allclose(a.accept_probs[read], b.accept_probs[read])


@pytest.mark.parametrize("method", ["block", "greedy"])
def test_other_methods_delegate_to_verify(method):
    tl, dl, tokens = inputs()
    a = verify(probs_from_logits(tl), probs_from_logits(dl), tokens, method=method,
               generator=torch.Generator().manual_seed(3))
    b = verify_logits(tl, dl, tokens, method=method, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a.accepted, b.accepted) and torch.equal(a.next_token, b.next_token)


def test_token_outside_draft_transform_is_rejected():
    tl, dl, tokens = inputs(top_k=1)
    verify_logits(tl, dl, tokens, top_k=1)  # consistent transform: fine
    probs = probs_from_logits(dl, top_k=1)
    tokens[0, 0] = (probs[0, 0].argmax() + 1) % 50  # not in the top-1 set the draft sampled from
    with pytest.raises(ValueError, match="draft_logits"):
        verify_logits(tl, dl, tokens, top_k=1)
    with pytest.raises(ValueError, match="method"):
        verify_logits(tl, dl, tokens, method="fast")
