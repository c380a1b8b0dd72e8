"""A residual of (numerically) zero mass, max(w p - q, 0) ~ 0, cannot be normalised; the rules then sample
p itself. 10^5 draws from the emitter verify runs after every rejection (token: w = 1, block: w < 1)
follow p (chi-square), in batches that mix such rows with ordinary residual rows and bonus rows, each of
which keeps its own law."""
import pytest
import torch
from scipy.stats import chisquare

from exactspec.verification.candidates import mrrs_residual
from exactspec.verification.rules import _emit, residual_is_empty, residual_or_p

N = 100_000
P_MIN = 1e-3
p = torch.tensor([0.3, 0.05, 0.25, 0.15, 0.2, 0.05])
q_far = torch.tensor([0.1, 0.3, 0.1, 0.3, 0.1, 0.1])  # an ordinary residual: max(p - q, 0) has mass 0.35


def chi2_p(tokens: torch.Tensor, law: torch.Tensor) -> float:
    counts = torch.bincount(tokens, minlength=law.numel()).double().numpy()
    law = law.double().numpy()
    law = law / law.sum()
    assert counts[law == 0].sum() == 0  # never a token outside the law's support
    return float(chisquare(counts[law > 0], law[law > 0] * counts.sum()).pvalue)


def emit(p_rows, q_rows, weight, use_q, seed):
    """The emitter verify calls: position 0 of [B, 1, V] inputs; returns the next token [B]."""
    zero = torch.zeros(p_rows.shape[0], dtype=torch.long)
    return _emit(p_rows[:, None], q_rows[:, None], zero, weight, use_q, torch.Generator().manual_seed(seed),
                 "rule")


@pytest.mark.parametrize("kind", ["p == q (token)", "w p <= q != p (block, w = 0.1)", "mass below 16 eps"])
def test_zero_mass_rows_sample_p(kind):
    rows = p.expand(N, 6).clone()
    weight = None
    if kind == "p == q (token)":
        q = rows.clone()
    elif kind.startswith("w p"):
        # max(0.1 p - q, 0) = 0 everywhere although q != p: a fallback to q (or anything else) shows
        q, weight = q_far.expand(N, 6).clone(), torch.full((N,), 0.1)
        assert bool((0.1 * p <= q_far).all())
    else:  # p - q is a rounding-level difference: one ulp (~4e-9), below 16 eps of fp32
        q = rows.clone()
        q[:, 1] = torch.nextafter(q[:, 1], torch.zeros(()))
        assert bool(residual_is_empty(torch.clamp(rows - q, min=0).sum(-1)).all())
        assert float(torch.clamp(rows - q, min=0).sum(-1).max()) > 0
    out = emit(rows, q, weight, torch.ones(N, dtype=torch.bool), seed=1)
    assert chi2_p(out, p) > P_MIN


def test_mixed_batch_keeps_each_rows_law():
    """Thirds of one batch: zero-mass rejections (-> p), ordinary rejections (-> norm(max(p - q, 0))) and
    bonus rows (-> p); the fallback must touch only the rows that need it."""
    third = N // 3
    q = torch.cat([p.expand(third, 6), q_far.expand(third, 6), q_far.expand(third, 6)])
    use_q = torch.cat([torch.ones(2 * third, dtype=torch.bool), torch.zeros(third, dtype=torch.bool)])
    out = emit(p.expand(3 * third, 6).clone(), q, None, use_q, seed=2)
    assert chi2_p(out[:third], p) > P_MIN
    assert chi2_p(out[third:2 * third], torch.clamp(p - q_far, min=0)) > P_MIN
    assert chi2_p(out[2 * third:], p) > P_MIN
    # and a chi-square that can tell the laws apart: the ordinary residual's rows are not p
    assert chi2_p(out[third:2 * third], p) < 1e-10


def test_fallback_is_the_shared_formula():
    """The same function serves exact.py, verify_logits and the multi-candidate rule: p where the mass is
    ~0, the plain residual elsewhere, row by row, never NaN."""
    both = torch.stack([p, p])
    r = residual_or_p(both, torch.stack([p, q_far]))
    assert torch.equal(r[0], p) and torch.allclose(r[1], torch.clamp(p - q_far, min=0))
    assert torch.equal(mrrs_residual(p[None], p[None])[0], p / p.sum())
    assert not bool(torch.isnan(r).any())
