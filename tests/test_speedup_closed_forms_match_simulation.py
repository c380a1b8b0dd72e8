"""The closed forms of speedup.py agree with independent computation: seeded simulation of i.i.d. (and
per-position) acceptances, and direct enumeration/brute force over gamma."""
import math

import numpy as np
import pytest
import torch

from exactspec import (acceptance_rate, expected_tokens, ops_factor, optimal_gamma, speculation_helps,
                       speedup_limit, walltime_speedup)


def simulate_tokens(rates, gamma, n, seed):
    """Mean tokens per step: draft gamma tokens, stop at the first rejection, +1 bonus/correction token."""
    g = torch.Generator().manual_seed(seed)
    rates = list(rates) + [rates[-1]] * max(0, gamma - len(rates))
    u = torch.rand(n, gamma, generator=g, dtype=torch.float64)
    acc = u < torch.tensor(rates[:gamma], dtype=torch.float64)  # [n, gamma]
    accepted = acc.to(torch.int64).cumprod(dim=1).sum(dim=1)  # leading run of acceptances
    return (accepted + 1).double().mean().item()


@pytest.mark.parametrize("alpha,gamma", [(0.0, 3), (0.5, 1), (0.8, 4), (0.95, 10), (1.0, 5)])
def test_expected_tokens_matches_simulation(alpha, gamma):
    n = 200_000
    sim = simulate_tokens([alpha], gamma, n, seed=1)
    # standard error of a variable bounded in [1, gamma+1]
    assert abs(expected_tokens(alpha, gamma) - sim) < 5 * (gamma / 2) / math.sqrt(n) + 1e-12


def test_per_position_matches_simulation_and_repeats_last_rate():
    rates = [0.9, 0.6, 0.3]
    for gamma in (2, 3, 6):
        sim = simulate_tokens(rates, gamma, 200_000, seed=2)
        assert abs(expected_tokens(rates, gamma) - sim) < 0.02
    assert expected_tokens([0.7], 6) == pytest.approx(expected_tokens(0.7, 6))
    assert expected_tokens([0.9, 0.5, 0.1], 2) == pytest.approx(1 + 0.9 + 0.9 * 0.5)  # longer: first gamma


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.75, 0.999999, 1.0])
@pytest.mark.parametrize("gamma", [0, 1, 7, 40])
def test_expected_tokens_is_geometric_sum(alpha, gamma):
    direct = sum(alpha ** i for i in range(gamma + 1))  # enumeration of P(first i accepted)
    assert expected_tokens(alpha, gamma) == pytest.approx(direct, rel=1e-12)
    if alpha < 1:
        assert expected_tokens(alpha, gamma) == pytest.approx((1 - alpha ** (gamma + 1)) / (1 - alpha), rel=1e-9)


def test_speedup_and_ops_factor_formulas():
    for a, g, c in [(0.8, 4, 0.1), (0.5, 2, 0.05), (0.9, 8, 0.3), (0.6, 0, 0.2)]:
        E = sum(a ** i for i in range(g + 1))
        assert walltime_speedup(a, g, c) == pytest.approx(E / (g * c + 1))
        assert ops_factor(a, g, c) == pytest.approx((g * c + g + 1) / E)
    assert walltime_speedup(0.8, 0, 0.5) == 1.0  # gamma = 0 is plain decoding


def test_batched_inputs():
    a = np.array([[0.2], [0.8], [1.0]])  # [B, 1]: batched i.i.d. rates
    out = expected_tokens(a, 3)
    assert out.shape == (3,)
    assert out == pytest.approx([expected_tokens(x, 3) for x in (0.2, 0.8, 1.0)])
    assert walltime_speedup(torch.tensor([0.9, 0.5]), 2, 0.1) == pytest.approx(
        walltime_speedup([0.9, 0.5], 2, 0.1))  # a 1-d tensor is a per-position sequence


def test_acceptance_rate_is_one_minus_tv():
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(4, 5, 11, generator=g, dtype=torch.float64), -1)
    q = torch.softmax(torch.randn(4, 5, 11, generator=g, dtype=torch.float64), -1)
    a = acceptance_rate(p, q)
    assert a.shape == (4, 5)
    tv = 0.5 * (p - q).abs().sum(-1)
    torch.testing.assert_close(a, 1 - tv)
    assert acceptance_rate(p[0, 0].numpy(), q[0, 0].numpy()) == pytest.approx(1 - tv[0, 0].item())
    # and it is the simulated acceptance frequency of min(1, p/q) with x ~ q
    x = torch.multinomial(q[0, 0], 200_000, replacement=True, generator=g)
    keep = torch.rand(200_000, generator=g, dtype=torch.float64) < (p[0, 0][x] / q[0, 0][x]).clamp(max=1)
    assert keep.double().mean().item() == pytest.approx(a[0, 0].item(), abs=0.01)


@pytest.mark.parametrize("alpha", [0.0, 0.2, 0.6, 0.8, 0.95, 1.0])
@pytest.mark.parametrize("cost", [0.0, 0.01, 0.1, 0.5, 1.0, 2.0])
def test_optimal_gamma_and_limit_by_brute_force(alpha, cost):
    brute = [walltime_speedup(alpha, g, cost) for g in range(1, 4001)]
    g_best, s_best = optimal_gamma(alpha, cost, max_gamma=64)
    assert s_best == pytest.approx(max(brute[:64]))
    assert brute[g_best - 1] == pytest.approx(s_best, rel=1e-12)
    assert all(b < s_best * (1 - 1e-13) for b in brute[:g_best - 1])  # smallest gamma among ties
    lim = speedup_limit(alpha, cost)
    if cost == 0.0:
        assert lim == (math.inf if alpha == 1 else pytest.approx(1 / (1 - alpha)))
    elif alpha == 1.0 and cost < 1:
        assert lim == pytest.approx(1 / cost)  # approached as gamma -> inf, never attained
        assert max(brute) < lim
    else:
        assert lim == pytest.approx(max(brute))
    assert speculation_helps(alpha, cost) == (max(brute) > 1 + 1e-12)


def test_speculation_helps_iff_alpha_exceeds_cost():
    # alpha <= c: E(gamma) = 1 + a + .. + a^gamma <= 1 + gamma c, so no gamma helps, not just gamma = 1.
    rng = np.random.default_rng(0)
    for _ in range(300):
        a, c = rng.uniform(0, 1), rng.uniform(0, 1.2)
        best = max(walltime_speedup(a, g, c) for g in range(1, 200))
        assert speculation_helps(a, c) == (a > c) == (best > 1)
    assert not speculation_helps(0.5, 0.5) and walltime_speedup(0.5, 1, 0.5) == 1.0
    # per-position: decided by the first rate alone
    assert not speculation_helps([0.1, 1.0, 1.0], 0.2)
    assert max(walltime_speedup([0.1, 1.0, 1.0], g, 0.2) for g in range(1, 60)) <= 1.0


def test_per_position_limit_and_optimum():
    rates = [0.95, 0.9, 0.0]  # a zero: nothing past position 2 is ever accepted
    assert expected_tokens(rates, 10) == pytest.approx(1 + 0.95 + 0.95 * 0.9)
    assert optimal_gamma(rates, 0.05, 16)[0] == 2
    assert speedup_limit(rates, 0.0) == pytest.approx(1 + 0.95 + 0.95 * 0.9)
    rates = [0.99, 0.9, 0.8, 0.7]
    brute = max(walltime_speedup(rates, g, 0.02) for g in range(1, 3000))
    assert speedup_limit(rates, 0.02) == pytest.approx(brute)
    assert speedup_limit(rates, 0.0) == pytest.approx(expected_tokens(rates, 5000))


def test_mixed_length_speedup_matches_simulated_steps_of_random_lengths():
    """Steps drafting different lengths: the weighted formula equals a direct simulation."""
    import numpy as np

    from exactspec import mixed_length_speedup, walltime_speedup

    rng = np.random.default_rng(3)
    alphas, c = [0.9, 0.7, 0.6, 0.5], 0.1
    counts = [30, 0, 10, 0, 60]
    lengths = np.repeat(np.arange(5), counts)
    tokens = time = 0.0
    for _ in range(200):
        for k in lengths:
            kept = 0
            while kept < k and rng.random() < alphas[kept]:
                kept += 1
            tokens += kept + 1
            time += k * c + 1.0
    assert mixed_length_speedup(alphas, counts, c) == pytest.approx(tokens / time, rel=0.02)
    # All steps of one length: the plain formula.
    assert mixed_length_speedup(alphas, [0, 0, 0, 0, 7], c) == pytest.approx(walltime_speedup(alphas, 4, c))
    with pytest.raises(ValueError, match="length_counts"):
        mixed_length_speedup(alphas, [0, 0], c)
