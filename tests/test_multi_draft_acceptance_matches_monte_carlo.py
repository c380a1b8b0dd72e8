"""multi_draft_acceptance is exact: it matches a seeded Monte Carlo of each multi-round rejection scheme,
the closed forms where they exist, and the simulated output of every scheme is distributed as p."""
import numpy as np
import pytest
import torch

from exactspec import multi_draft_acceptance


def simulate(p, q, n, scheme, N, seed):
    """Vectorised multi-round rejection sampling; returns (P(some candidate accepted), output histogram)."""
    g = torch.Generator().manual_seed(seed)
    V = p.numel()
    R = p.expand(N, V).clone()  # [N, V] residual
    qs = q.expand(N, V).clone()  # [N, V] proposal for the current candidate
    done = torch.zeros(N, dtype=torch.bool)
    out = torch.full((N,), -1, dtype=torch.long)
    order = torch.argsort(-q, stable=True)
    for s in range(n):
        active = ~done & (qs.sum(1) > 0)
        if scheme == "deterministic":
            x = order[s].expand(N).clone()
            prop = torch.nn.functional.one_hot(x, V).double()
        else:
            safe = torch.where(active[:, None], qs, torch.ones_like(qs))
            x = torch.multinomial(safe, 1, generator=g).squeeze(1)
            prop = qs
        r, pr = R.gather(1, x[:, None]).squeeze(1), prop.gather(1, x[:, None]).squeeze(1)
        acc = active & (torch.rand(N, generator=g, dtype=torch.float64) < (r / pr).clamp(max=1))
        out[acc] = x[acc]
        done |= acc
        rej = active & ~acc
        newR = (R - prop).clamp(min=0)
        newR = newR / newR.sum(1, keepdim=True).clamp(min=1e-300)
        R[rej] = newR[rej]
        if scheme == "without_replacement":
            nq = qs.clone()
            nq[torch.arange(N), x] = 0
            nq = nq / nq.sum(1, keepdim=True).clamp(min=1e-300)
            qs[rej] = nq[rej]
    p_acc = done.double().mean().item()
    rest = ~done  # all rejected: the token comes from the final residual
    out[rest] = torch.multinomial(R[rest], 1, generator=g).squeeze(1)
    return p_acc, torch.bincount(out, minlength=V).double() / N


CASES = [
    (np.array([0.5, 0.3, 0.15, 0.05]), np.array([0.1, 0.2, 0.3, 0.4])),
    (np.array([0.7, 0.1, 0.1, 0.1]), np.array([0.25, 0.25, 0.25, 0.25])),
    (np.array([0.05, 0.05, 0.3, 0.6]), np.array([0.6, 0.3, 0.05, 0.05])),
]


@pytest.mark.parametrize("scheme", ["iid", "without_replacement", "deterministic"])
@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("n", [1, 2, 3])
def test_matches_monte_carlo_and_preserves_p(scheme, case, n):
    p, q = CASES[case]
    N = 100_000
    p_acc, hist = simulate(torch.tensor(p), torch.tensor(q), n, scheme, N, seed=case * 10 + n)
    exact = multi_draft_acceptance(p, q, n, scheme)
    assert p_acc == pytest.approx(exact, abs=5 * 0.5 / N ** 0.5)
    assert hist.numpy() == pytest.approx(p, abs=0.01)  # each scheme is exact: output ~ p


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
