"""Exact enumeration: every verification rule and candidate scheme outputs the target distribution
(to 1e-9) for prefix-dependent target/draft distributions; block verification keeps >= as many tokens as
token verification in expectation. The enumeration calls the formula functions the running rules call
(looked up on exactspec.verification.rules), so a fault patched into one of them (a 5% inflated acceptance, a residual
p - 0.9q, block keeping up to the first failed coin) makes these tests fail."""
import hashlib

import pytest
import torch

import _faults
from exactspec.verification import exact, rules
from exactspec.verification.rules import (block_accept_probs, block_keep_count, block_masses, block_tau_probs,
                             block_weights, residual, token_accept_prob)

TOL = 1e-9  # what every exactness assertion below allows


def prefix_dist(V, seed, sharp=2.0, zeros=False):
    """A deterministic, prefix-dependent distribution over V tokens (float64)."""
    def dist(prefix):
        h = int(hashlib.sha256(repr((seed, prefix)).encode()).hexdigest()[:8], 16)
        g = torch.Generator().manual_seed(h)
        logits = torch.randn(V, generator=g, dtype=torch.float64) * sharp
        if zeros:  # some tokens impossible under this distribution
            logits[torch.rand(V, generator=g) < 0.3] = float("-inf")
            logits[h % V] = 0.0 if torch.isinf(logits[h % V]) else logits[h % V]
        return torch.softmax(logits, -1)
    return dist


CASES = [(3, 1, 0), (3, 2, 1), (4, 2, 2), (3, 3, 3), (5, 2, 4), (4, 3, 5)]


@pytest.mark.parametrize("method", ["token", "block"])
@pytest.mark.parametrize("V,K,seed", CASES)
def test_rule_output_equals_target(method, V, K, seed):
    p, q = prefix_dist(V, 10 * seed + 1), prefix_dist(V, 10 * seed + 2)
    got = exact.rule_distribution(p, q, K, method)
    want = exact.target_distribution(p, K + 1)
    assert abs(sum(got.values()) - 1) < 1e-12
    assert exact.max_abs_diff(got, want) < TOL


@pytest.mark.parametrize("method", ["token", "block"])
def test_rule_exact_with_zero_probability_tokens(method):
    p, q = prefix_dist(4, 7, zeros=True), prefix_dist(4, 8, zeros=True)
    got = exact.rule_distribution(p, q, 3, method)
    assert exact.max_abs_diff(got, exact.target_distribution(p, 4)) < TOL


@pytest.mark.parametrize("method", ["token", "block"])
def test_rule_exact_when_draft_equals_target(method):
    p = prefix_dist(3, 9)
    got = exact.rule_distribution(p, p, 2, method)
    assert exact.max_abs_diff(got, exact.target_distribution(p, 3)) < TOL
    assert exact.expected_accepted(p, p, 2, method) == pytest.approx(2.0, abs=1e-12)


@pytest.mark.parametrize("fault", list(_faults.FAULTS))
@pytest.mark.parametrize("method", ["token", "block"])
def test_enumeration_fails_on_subtle_faults(monkeypatch, method, fault):
    """Power: with a formula of the running rule made subtly wrong (patched on exactspec.verification.rules, where
    verify reads it too), the enumeration of every CASES instance misses the target by far more than TOL."""
    _faults.apply(monkeypatch, fault)
    for V, K, seed in CASES:
        p, q = prefix_dist(V, 10 * seed + 1), prefix_dist(V, 10 * seed + 2)
        got = exact.rule_distribution(p, q, K, method)
        diff = exact.max_abs_diff(got, exact.target_distribution(p, K + 1))
        assert diff > 1e3 * TOL, (V, K, seed, diff)


def test_enumeration_detects_wrong_block_keep_count_and_weightless_residual(monkeypatch):
    """Power against the mutations that once slipped past it: block keeping up to the first failed coin
    instead of the last success, and block's residual without its weight, both patched where verify
    reads them (on CASES[2]; where block's weights are all ~0 or 1 the weight cannot show)."""
    p, q = prefix_dist(4, 21), prefix_dist(4, 22)
    want = exact.target_distribution(p, 3)
    monkeypatch.setattr(rules, "block_keep_count", lambda ok: rules.token_keep_count(ok))  # first failure
    assert exact.max_abs_diff(exact.rule_distribution(p, q, 2, "block"), want) > 1e-4
    monkeypatch.undo()
    monkeypatch.setattr(rules, "residual", lambda a, b, w=1.0, out=None: residual(a, b, out=out))
    assert exact.max_abs_diff(exact.rule_distribution(p, q, 2, "block"), want) > 1e-4


def test_block_masses_and_tau_law_agree_with_residual_and_keep_count():
    """block_masses' Z is the mass of `residual`, and block_tau_probs is the law of block_keep_count over
    independent coins (the closed form and the counting function say the same)."""
    g = torch.Generator().manual_seed(0)
    p, q, w = (torch.rand(s, generator=g, dtype=torch.float64) for s in ((5, 3, 7), (5, 3, 7), (5, 3)))
    p, q = p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)
    z, s = block_masses(p, q, w, with_sums=True)
    assert torch.allclose(z, residual(p, q, w[..., None]).sum(-1), atol=1e-15)
    assert torch.allclose(s, 1 - w, atol=1e-12)
    h = torch.rand(4, generator=g, dtype=torch.float64)
    assert torch.allclose(exact._keep_law(h, block_keep_count), block_tau_probs(h), atol=1e-15)
    # Large batches (verify's rows of a 32k vocab) go row by row on worker threads: same numbers.
    p, q = (torch.softmax(torch.randn(3, 3, 2**15, generator=g), -1) for _ in range(2))
    w = torch.rand(3, 3, generator=g)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        z, s = block_masses(p, q, w, with_sums=True)
    finally:
        torch.set_num_threads(threads)
    assert torch.allclose(z, residual(p, q, w[..., None]).sum(-1), atol=1e-6)
    assert torch.allclose(s, 1 - w, atol=1e-5)


CANDIDATE_CASES = [(3, 1, 0), (3, 2, 1), (4, 3, 2), (5, 2, 3), (4, 4, 4)]
TREES = [[-1, -1, 0, 1], [-1, 0, 0, 1], [-1, -1, -1, 0]]


@pytest.mark.parametrize("scheme", ["iid", "without_replacement", "deterministic"])
@pytest.mark.parametrize("V,n,seed", CANDIDATE_CASES)
def test_candidate_scheme_output_equals_target(scheme, V, n, seed):
    p, q = prefix_dist(V, 100 + seed)(()), prefix_dist(V, 200 + seed)(())
    got = exact.candidates_distribution(p, q, n, scheme)
    assert float(got.sum()) == pytest.approx(1.0, abs=1e-12)
    assert float((got - p).abs().max()) < TOL


def test_candidate_enumeration_detects_wrong_scheme():
    """Treating without-replacement candidates as i.i.d. (the wrong q_s) is not exact."""
    p = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=torch.float64)
    q = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    out = torch.zeros(4, dtype=torch.float64)
    for c, pc in exact._candidate_draws(q, 3, "without_replacement"):
        for s, pr, R in exact._mrrs_outcomes(p, q, c, "iid"):
            if s < 0:
                out += pc * pr * R
            else:
                out[c[s]] += pc * pr
    assert float((out - p).abs().max()) > 1e-3


@pytest.mark.parametrize("scheme", ["iid", "without_replacement", "deterministic"])
@pytest.mark.parametrize("parents", TREES)
def test_tree_walker_output_equals_target(scheme, parents):
    p, q = prefix_dist(3, 31), prefix_dist(3, 32)
    depth = exact.TokenTree(parents, [0] * len(parents)).depth()
    got = exact.tree_distribution(p, q, parents, scheme)
    assert exact.max_abs_diff(got, exact.target_distribution(p, depth + 1)) < TOL


@pytest.mark.parametrize("fault", list(_faults.FAULTS))
@pytest.mark.parametrize("scheme", ["iid", "without_replacement", "deterministic"])
def test_candidate_and_tree_enumeration_fail_on_subtle_faults(monkeypatch, scheme, fault):
    """Power, as for the single-draft rules: every tree and some candidate case fails under each fault.
    (Not every candidate case can: with V = 3 the residual often has one token, identical after
    normalising for p - 0.9q, and a one-hot q_s changes only where R(x_s) > 0.9.)"""
    _faults.apply(monkeypatch, fault)
    diffs = []
    for V, n, seed in CANDIDATE_CASES:
        p, q = prefix_dist(V, 100 + seed)(()), prefix_dist(V, 200 + seed)(())
        diffs.append(float((exact.candidates_distribution(p, q, n, scheme) - p).abs().max()))
    assert max(diffs) > 1e3 * TOL, diffs
    p, q = prefix_dist(3, 31), prefix_dist(3, 32)
    for parents in TREES:
        depth = exact.TokenTree(parents, [0] * len(parents)).depth()
        diff = exact.max_abs_diff(exact.tree_distribution(p, q, parents, scheme),
                                  exact.target_distribution(p, depth + 1))
        assert diff > 1e3 * TOL, (parents, diff)


def test_block_expected_accepted_at_least_token_on_random_instances():
    strictly = 0
    for seed in range(25):
        V, K = 3 + seed % 3, 1 + seed % 3
        p, q = prefix_dist(V, 1000 + seed, sharp=1.5), prefix_dist(V, 2000 + seed, sharp=1.5)
        tok = exact.expected_accepted(p, q, K, "token")
        blk = exact.expected_accepted(p, q, K, "block")
        assert blk >= tok - 1e-12
        strictly += blk > tok + 1e-9
    assert strictly >= 10  # block is not just equal to token


def test_paper_two_token_example():
    """Sun et al. 2024 motivating example: context-free p = (1/3, 2/3), q = (2/3, 1/3) over {a, b}, K = 2:
    token verification keeps 10/9 tokens in expectation, block verification 11/9."""
    p = lambda prefix: torch.tensor([1 / 3, 2 / 3], dtype=torch.float64)
    q = lambda prefix: torch.tensor([2 / 3, 1 / 3], dtype=torch.float64)
    assert exact.expected_accepted(p, q, 2, "token") == pytest.approx(10 / 9, abs=1e-12)
    assert exact.expected_accepted(p, q, 2, "block") == pytest.approx(11 / 9, abs=1e-12)


def test_formula_functions_basic_values():
    assert token_accept_prob(torch.tensor(0.3), torch.tensor(0.5)) == pytest.approx(0.6)
    w = block_weights(torch.tensor([0.3, 0.9]), torch.tensor([0.5, 0.3]))
    assert w.tolist() == pytest.approx([1.0, 0.6, 1.0])
    h = block_accept_probs(w, torch.tensor([0.0]))
    assert h.tolist() == pytest.approx([0.0, 1.0])
