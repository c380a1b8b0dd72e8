"""Edge cases (alpha 0/1, c = 0, c >= alpha, gamma = 0, zero rates) behave as the formulas say, and bad
input raises a ValueError that names the argument."""
import math

import numpy as np
import pytest

from exactspec import (CostModel, expected_tokens, ops_factor, optimal_gamma, speculation_helps,
                       speedup_limit, walltime_speedup)


def test_alpha_zero_and_one():
    assert expected_tokens(0.0, 9) == 1.0
    assert expected_tokens(1.0, 9) == 10.0
    assert walltime_speedup(0.0, 3, 0.0) == 1.0  # free but useless draft: exactly break-even
    assert walltime_speedup(1.0, 3, 0.0) == 4.0
    assert ops_factor(1.0, 3, 0.0) == 1.0  # every drafted token is used: no wasted work
    assert speedup_limit(1.0, 0.0) == math.inf
    assert speedup_limit(0.0, 0.0) == 1.0
    assert speedup_limit(1.0, 0.25) == pytest.approx(4.0)
    assert speedup_limit(1.0, 1.0) == pytest.approx(1.0)


def test_cost_at_least_alpha_never_helps():
    for a, c in [(0.5, 0.5), (0.3, 0.9), (0.0, 0.0), (1.0, 1.0), (0.9, 3.0)]:
        assert not speculation_helps(a, c)
        g, s = optimal_gamma(a, c, 32)
        assert g >= 1 and s <= 1.0 + 1e-12
        assert speedup_limit(a, c) <= 1.0 + 1e-12


def test_gamma_zero():
    assert expected_tokens(0.7, 0) == 1.0
    assert walltime_speedup([0.9, 0.8], 0, 0.1) == 1.0
    assert ops_factor(0.7, 0, 0.3) == 1.0


def test_per_position_rates_with_zeros():
    assert expected_tokens([0.0, 1.0, 1.0], 3) == 1.0
    assert expected_tokens([1.0, 0.0], 5) == 2.0  # the trailing zero repeats
    assert optimal_gamma([0.9, 0.0], 0.01, 10) == (1, pytest.approx(1.9 / 1.01))
    assert speedup_limit([0.9, 0.0], 0.0) == pytest.approx(1.9)


def test_float_noise_near_one_is_stable():
    assert expected_tokens(1 - 1e-15, 10) == pytest.approx(11.0)


@pytest.mark.parametrize("bad", [-0.1, 1.1, float("nan"), [0.5, 1.2], [], "x"])
def test_bad_alpha_names_alpha(bad):
    for fn in (lambda: expected_tokens(bad, 3), lambda: walltime_speedup(bad, 3, 0.1),
               lambda: optimal_gamma(bad, 0.1), lambda: speedup_limit(bad, 0.1),
               lambda: speculation_helps(bad, 0.1), lambda: ops_factor(bad, 2, 0.1)):
        with pytest.raises(ValueError, match="alpha"):
            fn()


@pytest.mark.parametrize("bad", [-1, 1.5, "3", None, True])
def test_bad_gamma_names_gamma(bad):
    with pytest.raises(ValueError, match="gamma"):
        expected_tokens(0.5, bad)
    with pytest.raises(ValueError, match="gamma"):
        walltime_speedup(0.5, bad, 0.1)


@pytest.mark.parametrize("bad", [-0.01, float("nan"), float("inf"), "cheap", None])
def test_bad_cost_names_cost(bad):
    with pytest.raises(ValueError, match="cost"):
        walltime_speedup(0.5, 2, bad)
    with pytest.raises(ValueError, match="cost"):
        optimal_gamma(0.5, bad)
    with pytest.raises(ValueError, match="ops_cost"):
        ops_factor(0.5, 2, bad)


def test_bad_max_gamma_and_batched_alpha_for_optimum():
    with pytest.raises(ValueError, match="max_gamma"):
        optimal_gamma(0.5, 0.1, 0)
    with pytest.raises(ValueError, match="alpha"):
        optimal_gamma(np.full((2, 3), 0.5), 0.1)


def test_cost_model_matches_scalar_cost_when_verification_is_flat():
    cm = CostModel(0.05, {1: 1.0, 2: 1.0})  # T_target(k) = 1 for all k: the paper's assumption
    for a, g in [(0.8, 4), (0.6, 7), (1.0, 2)]:
        assert walltime_speedup(a, g, cm) == pytest.approx(walltime_speedup(a, g, 0.05))
    assert optimal_gamma(0.8, cm, 30) == optimal_gamma(0.8, 0.05, 30)


def test_cost_model_verification_cost_lowers_the_optimum():
    flat = CostModel(0.02, {1: 1.0, 17: 1.0})
    steep = CostModel(0.02, {1: 1.0, 5: 1.4, 17: 2.6})  # ~1.4x for 5 tokens, as on 2 CPU cores
    g_flat, s_flat = optimal_gamma(0.8, flat, 64)
    g_steep, s_steep = optimal_gamma(0.8, steep, 64)
    assert g_steep < g_flat and s_steep < s_flat
    assert walltime_speedup(0.8, 4, steep) == pytest.approx(expected_tokens(0.8, 4) / (4 * 0.02 + 1.4))
    assert speedup_limit(0.8, steep) == pytest.approx(s_steep)
    # gamma = 1 needs alpha > c + (T(2) - T(1))/T(1) = 0.02 + 0.1 under this model
    assert walltime_speedup(0.11, 1, steep) < 1 < walltime_speedup(0.13, 1, steep)
    assert speculation_helps(0.5, steep) and not speculation_helps(0.1, steep)
