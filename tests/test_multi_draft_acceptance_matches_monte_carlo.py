"""multi_draft_acceptance (the numpy reference) is exact: it matches the acceptance rate of the running
multi-candidate rule, verify_candidates, on 10^5 seeded draws of each scheme, and the closed forms where
they exist; and verify_candidates' emitted token is distributed as p (chi-square)."""
import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from exactspec import multi_draft_acceptance, sample_from_probs, verify_candidates


def draw_candidates(q, n, scheme, N, g):
    """[N, n] candidates as each scheme draws them from q [V]."""
    V = q.shape[0]
    if scheme == "deterministic":  # top-n, ties to the lower id
        return torch.argsort(-q, stable=True)[:n].expand(N, n).clone()
    if scheme == "iid":
        return sample_from_probs(q.expand(N, n, V), g)
    rem, out = q.expand(N, V).clone(), torch.zeros(N, n, dtype=torch.long)
    for s in range(n):
        out[:, s] = sample_from_probs(rem, g)
        rem[torch.arange(N), out[:, s]] = 0.0
    return out


def run_verify_candidates(p, q, n, scheme, N, seed):
    """(fraction of rows that accepted a candidate, emitted-token counts [V]) from verify_candidates."""
    g = torch.Generator().manual_seed(seed)
    V = p.numel()
    cands = draw_candidates(q, n, scheme, N, g)
    acc, nxt = verify_candidates(p.expand(N, V), None if scheme == "deterministic" else q.expand(N, V), cands,
                                 scheme=scheme, generator=g)
    return (acc >= 0).double().mean().item(), torch.bincount(nxt, minlength=V).double()


CASES = [
    (np.array([0.5, 0.3, 0.15, 0.05]), np.array([0.1, 0.2, 0.3, 0.4])),
    (np.array([0.7, 0.1, 0.1, 0.1]), np.array([0.25, 0.25, 0.25, 0.25])),
    (np.array([0.05, 0.05, 0.3, 0.6]), np.array([0.6, 0.3, 0.05, 0.05])),
]


@pytest.mark.parametrize("scheme", ["iid", "without_replacement", "deterministic"])
@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("n", [1, 2, 3])
def test_matches_verify_candidates_and_output_is_p(scheme, case, n):
    p, q = CASES[case]
    N = 100_000
    p_acc, counts = run_verify_candidates(torch.tensor(p), torch.tensor(q), n, scheme, N, seed=case * 10 + n)
    exact = multi_draft_acceptance(p, q, n, scheme)
    assert p_acc == pytest.approx(exact, abs=5 * (exact * (1 - exact) / N) ** 0.5 + 1e-12)
    assert chisquare(counts.numpy(), p * N).pvalue > 1e-3  # each scheme is exact: output ~ p


def test_closed_forms():
    p, q = CASES[0]
    alpha = np.minimum(p, q).sum()
    for scheme in ("iid", "without_replacement"):
        assert multi_draft_acceptance(p, q, 1, scheme) == pytest.approx(alpha)
    # deterministic: accepting x_s with prob R_s(x_s) telescopes to the p-mass of the top-n tokens of q
    for n in range(1, 5):
        top = np.argsort(-q, kind="stable")[:n]
        assert multi_draft_acceptance(p, q, n, "deterministic") == pytest.approx(p[top].sum())
    # iid: each rejection happens with prob TV(R_s, q)
    R, reject = p.copy(), 1.0
    for _ in range(3):
        reject *= 1 - np.minimum(R, q).sum()
        R = np.maximum(R - q, 0)
        R = R / R.sum()
    assert multi_draft_acceptance(p, q, 3, "iid") == pytest.approx(1 - reject)


def test_more_candidates_never_hurt():
    rng = np.random.default_rng(0)
    for _ in range(20):
        p, q = rng.dirichlet(np.ones(5)), rng.dirichlet(np.ones(5))
        for scheme in ("iid", "without_replacement", "deterministic"):
            vals = [multi_draft_acceptance(p, q, n, scheme) for n in range(1, 5)]
            assert all(b >= a - 1e-12 for a, b in zip(vals, vals[1:]))
            assert vals[-1] <= 1 + 1e-12
        # drawing without replacement accepts at least as often as i.i.d. draws (on these seeded instances)
        assert multi_draft_acceptance(p, q, 3, "without_replacement") >= \
            multi_draft_acceptance(p, q, 3, "iid") - 1e-12


def test_bad_input():
    p = np.array([0.5, 0.5])
    with pytest.raises(ValueError, match="scheme"):
        multi_draft_acceptance(p, p, 2, "tree")
    with pytest.raises(ValueError, match="n"):
        multi_draft_acceptance(p, p, 0)
    with pytest.raises(ValueError, match="same size"):
        multi_draft_acceptance(p, np.array([0.2, 0.3, 0.5]), 1)
