"""verify_logits (lazy, row-by-row probabilities for the token rule) makes exactly the decisions verify
makes on the full probabilities from the same sampling transform, with the same generator. For "block"
and "greedy", which verify_logits hands to verify, the check is against paths that do not go through
verify: the target law by enumeration (chi-square of 10^5 block outputs, mean kept tokens against the
numpy reference) and a plain-Python greedy walk."""
import hashlib

import pytest
import torch

from exactspec import probs_from_logits, sample_from_probs, verify, verify_logits
from exactspec.verification import exact
from exactspec.speed.acceptance import expected_accepted_block
from test_sampled_rules_match_target_distribution import (P_MIN, Table, chi2_p, expected_vector,
                                                          extend_and_count)


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


@pytest.mark.parametrize("kw", [{}, {"temperature": 0.7, "top_k": 20}, {"top_p": 0.9, "min_p": 0.01}])
@pytest.mark.parametrize("ragged", [False, True])
def test_greedy_keeps_the_argmax_prefix_of_the_logits(kw, ragged):
    """Greedy from logits against a plain-Python walk over the raw logits' argmax (which no transform
    changes)."""
    tl, dl, tokens = inputs(**kw)
    L = torch.randint(0, 5, (16,), generator=torch.Generator().manual_seed(1)) if ragged else \
        torch.full((16,), 4)
    v = verify_logits(tl, dl, tokens, method="greedy", draft_lengths=L if ragged else None, **kw)
    for b in range(16):
        best = [max(range(50), key=lambda y: float(tl[b, i, y])) for i in range(5)]
        n = 0
        while n < int(L[b]) and int(tokens[b, n]) == best[n]:
            n += 1
        assert (int(v.accepted[b]), int(v.next_token[b])) == (n, best[n])


def _logit_dist(V, seed, **kw):
    """Prefix-dependent logits (deterministic per prefix) and their law under the sampling transform."""
    def logits(prefix):
        h = int(hashlib.sha256(repr((seed, prefix)).encode()).hexdigest()[:8], 16)
        return torch.randn(V, generator=torch.Generator().manual_seed(h), dtype=torch.float64)
    return logits, lambda prefix: probs_from_logits(logits(prefix), **kw).double()


@pytest.mark.parametrize("kw", [{}, {"temperature": 0.8, "top_k": 3}])
def test_block_from_logits_outputs_the_target_law(kw):
    N, V, K = 100_000, 4, 2
    g = torch.Generator().manual_seed(5)
    (p_logits, p_dist), (q_logits, q_dist) = _logit_dist(V, 41, **kw), _logit_dist(V, 42, **kw)
    tl_tab, dl_tab = Table(p_logits, V, K), Table(q_logits, V, K)
    ptab = Table(p_dist, V, K + 1)
    x = torch.zeros(N, K, dtype=torch.long)
    for i in range(K):
        x[:, i] = sample_from_probs(probs_from_logits(dl_tab(x[:, :i]), **kw), g)
    tl = torch.stack([tl_tab(x[:, :i]) for i in range(K + 1)], 1)  # [N, K+1, V] logits
    dl = torch.stack([dl_tab(x[:, :i]) for i in range(K)], 1)  # [N, K, V]
    v = verify_logits(tl, dl, x, method="block", generator=g, **kw)
    emitted = torch.cat([x, torch.zeros(N, 1, dtype=torch.long)], 1)
    emitted[torch.arange(N), v.accepted] = v.next_token
    counts = extend_and_count(emitted, v.accepted + 1, ptab, K + 1, g)
    assert chi2_p(counts, expected_vector(p_dist, V, K + 1)) > P_MIN
    mean, se = v.accepted.double().mean(), v.accepted.double().std() / N ** 0.5
    assert abs(float(mean) - expected_accepted_block(p_dist, q_dist, K)) < 5 * float(se)


def test_token_outside_draft_transform_is_rejected():
    tl, dl, tokens = inputs(top_k=1)
    verify_logits(tl, dl, tokens, top_k=1)  # consistent transform: fine
    probs = probs_from_logits(dl, top_k=1)
    tokens[0, 0] = (probs[0, 0].argmax() + 1) % 50  # not in the top-1 set the draft sampled from
    with pytest.raises(ValueError, match="draft_logits"):
        verify_logits(tl, dl, tokens, top_k=1)
    with pytest.raises(ValueError, match="method"):
        verify_logits(tl, dl, tokens, method="fast")
