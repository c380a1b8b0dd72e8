"""Exact enumerations of acceptance.py: the block rule (Sun et al. 2024) accepts at least as many tokens
as the token rule in expectation, both agree with seeded simulation, and the distribution formats agree."""
import itertools

import numpy as np
import pytest
import torch

from exactspec import expected_accepted_block, expected_accepted_token_rule
from exactspec.speed.acceptance import _as_dist_fn


def random_dist_fn(V, seed, sharp=1.0):
    """A prefix-dependent distribution: a seeded softmax per prefix (float64)."""
    cache = {}

    def dist(prefix):
        if prefix not in cache:
            g = torch.Generator().manual_seed(hash((seed,) + prefix) % (2 ** 31))
            cache[prefix] = torch.softmax(sharp * torch.randn(V, generator=g, dtype=torch.float64), 0)
        return cache[prefix]
    return dist


def test_block_at_least_token_on_random_instances():
    gains = []
    for trial in range(40):
        V, K = (2, 4) if trial % 2 else (3, 3)
        p, q = random_dist_fn(V, 2 * trial, 2.0), random_dist_fn(V, 2 * trial + 1, 2.0)
        tok = expected_accepted_token_rule(p, q, K)
        blk = expected_accepted_block(p, q, K)
        assert blk >= tok - 1e-12
        assert blk <= K + 1e-12
        gains.append(blk - tok)
    assert max(gains) > 1e-3  # and the block gain is real on some instances


def test_k_equal_one_both_are_the_acceptance_rate():
    p, q = random_dist_fn(5, 0), random_dist_fn(5, 1)
    alpha = torch.minimum(p(()), q(())).sum().item()
    assert expected_accepted_token_rule(p, q, 1) == pytest.approx(alpha)
    assert expected_accepted_block(p, q, 1) == pytest.approx(alpha)


def test_context_free_token_rule_is_geometric():
    p, q = np.array([0.6, 0.3, 0.1]), np.array([0.2, 0.3, 0.5])
    a = np.minimum(p, q).sum()
    assert expected_accepted_token_rule(p, q, 4) == pytest.approx(sum(a ** i for i in range(1, 5)))
    assert expected_accepted_token_rule(p, p, 3) == pytest.approx(3.0)
    assert expected_accepted_block(p, p, 3) == pytest.approx(3.0)


def test_table_dict_and_callable_forms_agree():
    V, K = 3, 3
    p, q = random_dist_fn(V, 7), random_dist_fn(V, 8)
    tables = [np.stack([p(pre).numpy() for pre in itertools.product(range(V), repeat=i)])
              .reshape([V] * i + [V]) for i in range(K)]
    as_dict = {pre: q(pre) for i in range(K) for pre in itertools.product(range(V), repeat=i)}
    ref = expected_accepted_block(p, q, K)
    assert expected_accepted_block(tables, as_dict, K) == pytest.approx(ref, rel=1e-12)
    assert _as_dist_fn(tables, "p")((2, 1)) == pytest.approx(p((2, 1)).numpy())


def simulate(p, q, K, n, seed, rule):
    """Monte Carlo of the verification rules, written independently of the enumeration."""
    rng = np.random.default_rng(seed)
    total = 0
    for _ in range(n):
        xs, prefix = [], ()
        for _ in range(K):
            qd = q(prefix).numpy()
            x = int(rng.choice(len(qd), p=qd))
            xs.append(x)
            prefix += (x,)
        if rule == "token":
            acc = 0
            for i, x in enumerate(xs):
                pre = tuple(xs[:i])
                if rng.random() < min(1.0, p(pre)[x].item() / q(pre)[x].item()):
                    acc += 1
                else:
                    break
        else:
            w, hs = 1.0, [1.0]
            for i in range(1, K + 1):
                pre = tuple(xs[:i - 1])
                w = min(1.0, w * p(pre)[xs[i - 1]].item() / q(pre)[xs[i - 1]].item())
                if i < K:
                    pi, qi = p(tuple(xs[:i])).numpy(), q(tuple(xs[:i])).numpy()
                    Z = np.maximum(w * pi - qi, 0).sum()
                    hs.append(1.0 if Z + 1 - w <= 0 else Z / (Z + 1 - w))
                else:
                    hs.append(w)
            coins = [i for i in range(K + 1) if rng.random() < hs[i]]
            acc = max(coins + [0])
        total += acc
    return total / n


@pytest.mark.parametrize("rule", ["token", "block"])
def test_enumeration_matches_simulation(rule):
    p, q = random_dist_fn(3, 11, 1.5), random_dist_fn(3, 12, 1.5)
    exact = (expected_accepted_token_rule if rule == "token" else expected_accepted_block)(p, q, 3)
    sim = simulate(p, q, 3, 20_000, seed=5, rule=rule)
    assert sim == pytest.approx(exact, abs=0.04)  # ~5 standard errors (sd <= 1.5, n = 20k)


def test_bad_input_names_argument():
    p = np.array([0.5, 0.5])
    with pytest.raises(ValueError, match="K"):
        expected_accepted_block(p, p, 0)
    with pytest.raises(ValueError, match="q"):
        expected_accepted_token_rule(p, np.array([0.5, 0.6]), 2)
    with pytest.raises(ValueError, match="p"):
        expected_accepted_block({(): p}, p, 2)  # no entry for prefix (0,)
