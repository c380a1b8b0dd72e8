"""Bad inputs to verify / verify_candidates / verify_tree raise ValueError naming the argument."""
import pytest
import torch

from exactspec import TokenTree, verify, verify_candidates, verify_tree


def good(B=2, K=3, V=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    tp = torch.softmax(torch.randn(B, K + 1, V, generator=g), -1)
    dp = torch.softmax(torch.randn(B, K, V, generator=g), -1)
    x = torch.multinomial(dp.reshape(-1, V), 1, generator=g).reshape(B, K)
    return tp, dp, x


@pytest.mark.parametrize("method", ["token", "block"])
def test_valid_input_passes(method):
    tp, dp, x = good()
    v = verify(tp, dp, x, method=method, generator=torch.Generator().manual_seed(0))
    assert v.accepted.shape == (2,) and v.accept_probs.shape == (2, 3)


@pytest.mark.parametrize("method", ["token", "block"])
def test_nan_in_target_read_by_rule(method):
    tp, dp, x = good()
    tp[0, 0, x[0, 0]] = float("nan")
    with pytest.raises(ValueError, match="target_probs"):
        verify(tp, dp, x, method=method)


@pytest.mark.parametrize("method", ["token", "block"])
def test_negative_draft_probability(method):
    tp, dp, x = good()
    dp[1, 0, x[1, 0]] = -0.1
    with pytest.raises(ValueError, match="draft_probs"):
        verify(tp, dp, x, method=method)


def test_negative_in_sampled_bonus_row():
    tp, dp, x = good()
    tp[:, 3, 0] -= 0.5
    tp[:, 3, 1] += 0.5
    with pytest.raises(ValueError, match="target_probs"):  # K = 0: plain sampling from that row
        verify(tp[:, 3:], dp[:, :0], x[:, :0], method="token")


@pytest.mark.parametrize("method", ["token", "block"])
def test_unnormalised_rows(method):
    """Unnormalised rows the rule reads are rejected. (The token rule reads a draft row only where it
    rejects: p(x_1) = 0 forces that here.)"""
    tp, dp, x = good()
    with pytest.raises(ValueError, match="target_probs"):
        verify(tp * 1.5, dp, x, method=method)
    tp[1, 0, x[1, 0]] = 0.0
    tp[1, 0] /= tp[1, 0].sum()
    with pytest.raises(ValueError, match="draft_probs"):
        verify(tp, dp * 0.5, x, method=method, draft_lengths=torch.tensor([0, 3]))


def test_block_reads_every_row_so_checks_every_row_sum():
    tp, dp, x = good()
    bad = tp.clone()
    bad[0, 1] *= 1.3  # a middle row; the token rule may not read it, block always does
    with pytest.raises(ValueError, match="target_probs"):
        verify(bad, dp, x, method="block")
    bad = dp.clone()
    bad[1, 2] *= 0.8
    with pytest.raises(ValueError, match="draft_probs"):
        verify(tp, bad, x, method="block")


def test_checks_full_scans_every_element():
    tp, dp, x = good()
    tp[0, 2, (x[0, 2] + 1) % 5] = -1e-3  # a negative entry no rule reads directly
    with pytest.raises(ValueError, match="target_probs"):
        verify(tp, dp, x, checks="full")


def test_shape_and_vocab_mismatch():
    tp, dp, x = good()
    with pytest.raises(ValueError, match="draft_probs"):
        verify(tp, dp[:, :2], x)
    with pytest.raises(ValueError, match="vocab"):
        verify(tp, dp[..., :4], x)
    with pytest.raises(ValueError, match="draft_tokens"):
        verify(tp, dp, x[:, :2])
    with pytest.raises(ValueError, match="target_probs"):
        verify(tp[0], dp, x)


def test_token_out_of_range_and_zero_draft_probability():
    tp, dp, x = good()
    bad = x.clone()
    bad[0, 1] = 5
    with pytest.raises(ValueError, match="draft_tokens"):
        verify(tp, dp, bad)
    dp[0, 0, x[0, 0]] = 0.0
    dp[0, 0] /= dp[0, 0].sum()
    for method in ("token", "block"):
        with pytest.raises(ValueError, match="draft_probs.*probability 0"):
            verify(tp, dp, x, method=method)


def test_bad_method_draft_lengths_and_missing_draft_probs():
    tp, dp, x = good()
    with pytest.raises(ValueError, match="method"):
        verify(tp, dp, x, method="typical")
    with pytest.raises(ValueError, match="draft_lengths"):
        verify(tp, dp, x, draft_lengths=torch.tensor([4, 1]))
    with pytest.raises(ValueError, match="draft_lengths"):
        verify(tp, dp, x, draft_lengths=torch.tensor([1]))
    with pytest.raises(ValueError, match="draft_probs"):
        verify(tp, None, x, method="token")


def test_candidates_bad_scheme_zero_q_and_duplicates():
    p = torch.tensor([[0.5, 0.3, 0.2]])
    q = torch.tensor([[0.6, 0.4, 0.0]])
    with pytest.raises(ValueError, match="scheme"):
        verify_candidates(p, q, torch.tensor([[0]]), scheme="beam")
    with pytest.raises(ValueError, match="candidates"):
        verify_candidates(p, q, torch.tensor([[2]]), scheme="iid")  # q(2) = 0
    with pytest.raises(ValueError, match="candidates"):
        verify_candidates(p, q, torch.tensor([[0, 0]]), scheme="without_replacement")
    with pytest.raises(ValueError, match="draft_probs"):
        verify_candidates(p, q[:, :2], torch.tensor([[0]]), scheme="iid")
    with pytest.raises(ValueError, match="target_probs"):
        verify_candidates(torch.tensor([[0.5, 0.6, 0.2]]), q, torch.tensor([[0]]), scheme="iid")


def test_tree_bad_parents_and_shapes():
    with pytest.raises(ValueError, match="parents"):
        TokenTree([-1, 2, 0], [0, 1, 2])
    tree = TokenTree([-1, 0], [1, 2])
    with pytest.raises(ValueError, match="target_probs"):
        verify_tree(tree, torch.full((1, 2, 3), 1 / 3), None, scheme="deterministic")


def test_zero_mass_residual_falls_back_to_target_without_nan():
    """A residual with mass ~0 (p ~ q) would be 0/0; the rules fall back to p (token/block emitter and
    the multi-candidate residual)."""
    from exactspec.verification.candidates import mrrs_residual
    from exactspec.verification.rules import _emit

    p = torch.tensor([[0.25, 0.25, 0.5]]).repeat(4, 1)
    tp, dp = p[:, None].repeat(1, 2, 1), p[:, None].clone()
    out = _emit(tp, dp, torch.zeros(4, dtype=torch.long), None, torch.ones(4, dtype=torch.bool),
                torch.Generator().manual_seed(0), "rule")
    assert out.shape == (4,) and bool(((out >= 0) & (out < 3)).all())
    r = mrrs_residual(p, p)
    assert torch.equal(r, p) and not bool(torch.isnan(r).any())
