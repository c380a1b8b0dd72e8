"""The independent numpy references of exactspec.speed.acceptance (own recursions, no shared code) give the same
expected accepted counts and multi-candidate acceptance rates as exactspec.verification.exact, which enumerates with the
running rules' formula functions: on random small prefix-dependent distributions, to 1e-12. Two
implementations written apart agreeing is what makes either a reference for the other."""
import numpy as np
import pytest
import torch

from exactspec.verification import exact
from exactspec.speed.acceptance import expected_accepted_block, expected_accepted_token_rule, multi_draft_acceptance


def random_dist(V, rng, zeros=False):
    """A prefix-dependent distribution: a fresh Dirichlet draw per prefix (memoised), float64."""
    table = {}

    def dist(prefix):
        if prefix not in table:
            v = rng.dirichlet(np.full(V, 0.6))
            if zeros:  # some impossible tokens, never all of them
                v[rng.random(V) < 0.3] = 0.0
                v = v / v.sum() if v.sum() > 0 else np.eye(V)[rng.integers(V)]
            table[prefix] = torch.tensor(v, dtype=torch.float64)
        return table[prefix]
    return dist


@pytest.mark.parametrize("method,reference", [("token", expected_accepted_token_rule),
                                              ("block", expected_accepted_block)])
def test_expected_accepted_agrees(method, reference):
    rng = np.random.default_rng(0 if method == "token" else 1)
    for trial in range(12):
        V, K = 2 + trial % 3, 1 + trial % 3
        p, q = random_dist(V, rng, zeros=trial % 4 == 3), random_dist(V, rng, zeros=trial % 4 == 3)
        assert reference(p, q, K) == pytest.approx(exact.expected_accepted(p, q, K, method), abs=1e-12), trial


@pytest.mark.parametrize("scheme", ["iid", "without_replacement", "deterministic"])
def test_multi_draft_acceptance_agrees(scheme):
    rng = np.random.default_rng(2)
    for trial in range(12):
        V, n = 3 + trial % 3, 1 + trial % 3
        p, q = rng.dirichlet(np.full(V, 0.6)), rng.dirichlet(np.full(V, 0.6))
        got = exact.candidates_accept_prob(torch.tensor(p), torch.tensor(q), n, scheme)
        assert multi_draft_acceptance(p, q, n, scheme) == pytest.approx(got, abs=1e-12), trial


def test_the_cross_check_tells_the_rules_apart():
    """Not vacuous: block keeps strictly more than token on these instances, so a reference computing the
    wrong rule would disagree."""
    rng = np.random.default_rng(3)
    p, q = random_dist(3, rng), random_dist(3, rng)
    assert expected_accepted_block(p, q, 3) > exact.expected_accepted(p, q, 3, "token") + 1e-3
