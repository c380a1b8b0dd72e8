"""probs_from_logits: temperature 0 = argmax (lowest id among ties), top-k keeps exactly min(k, V) tokens
ranked by (prob desc, id asc), top_p 0 -> top token / 1 -> all, min_p, any leading shape, fp32 output;
bad arguments raise ValueError naming the argument; sample_from_probs draws from the given rows."""
import pytest
import torch
from scipy.stats import chisquare

from exactspec import probs_from_logits, sample_from_probs


def test_temperature_zero_is_one_hot_argmax_lowest_id_on_ties():
    logits = torch.tensor([[1.0, 3.0, 3.0, 2.0], [0.0, 0.0, 0.0, 0.0]], dtype=torch.float16)
    out = probs_from_logits(logits, temperature=0)
    assert out.dtype == torch.float32
    assert out.tolist() == [[0, 1, 0, 0], [1, 0, 0, 0]]


def test_plain_softmax_any_leading_shape():
    logits = torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(0))
    out = probs_from_logits(logits)
    assert out.shape == (2, 3, 5)
    assert torch.allclose(out, torch.softmax(logits, -1))
    assert torch.allclose(probs_from_logits(logits, temperature=2.0), torch.softmax(logits / 2, -1))


def test_top_k_keeps_exactly_k_with_ties_to_lower_ids():
    logits = torch.tensor([1.0, 2.0, 2.0, 2.0, 0.5])
    out = probs_from_logits(logits, top_k=2)
    assert (out > 0).tolist() == [False, True, True, False, False]
    assert float(out.sum()) == pytest.approx(1.0)
    assert torch.allclose(probs_from_logits(logits, top_k=5), torch.softmax(logits, -1))
    assert torch.allclose(probs_from_logits(logits, top_k=99), torch.softmax(logits, -1))  # top_k > V


def test_top_p_edges_and_nucleus():
    logits = torch.log(torch.tensor([0.1, 0.4, 0.3, 0.2]))
    assert (probs_from_logits(logits, top_p=0.0) > 0).tolist() == [False, True, False, False]
    assert torch.allclose(probs_from_logits(logits, top_p=1.0), torch.softmax(logits, -1))
    out = probs_from_logits(logits, top_p=0.7)  # 0.4 + 0.3 reaches 0.7
    assert (out > 0).tolist() == [False, True, True, False]
    assert out[1].item() == pytest.approx(0.4 / 0.7, rel=1e-5)
    tie = torch.log(torch.tensor([0.3, 0.3, 0.4]))
    assert (probs_from_logits(tie, top_p=0.5) > 0).tolist() == [True, False, True]  # tie -> lower id


def test_min_p_filters_relative_to_max():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    out = probs_from_logits(logits, min_p=0.3)  # keep p >= 0.15
    assert (out > 0).tolist() == [True, True, True, False]


@pytest.mark.parametrize("kwargs,name", [
    ({"temperature": -1.0}, "temperature"), ({"temperature": float("nan")}, "temperature"),
    ({"top_k": -1}, "top_k"), ({"top_k": 1.5}, "top_k"), ({"top_p": 1.5}, "top_p"),
    ({"top_p": -0.1}, "top_p"), ({"min_p": 2.0}, "min_p"),
])
def test_bad_arguments_name_themselves(kwargs, name):
    with pytest.raises(ValueError, match=name):
        probs_from_logits(torch.zeros(3), **kwargs)


def test_nan_logits_are_rejected():
    with pytest.raises(ValueError, match="logits"):
        probs_from_logits(torch.tensor([[0.0, float("nan")], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="logits"):
        probs_from_logits(torch.full((2,), float("-inf")))


def test_sample_from_probs_matches_distribution_and_skips_zeros():
    g = torch.Generator().manual_seed(0)
    p = torch.tensor([0.5, 0.0, 0.2, 0.3, 0.0])
    draws = sample_from_probs(p.expand(200_000, 5) * 3.0, g)  # unnormalised rows are fine
    counts = torch.bincount(draws, minlength=5)
    assert counts[1] == 0 and counts[4] == 0
    keep = p > 0
    assert chisquare(counts[keep].double().numpy(), (p[keep].double() * 200_000).numpy()).pvalue > 1e-3


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_sample_from_probs_two_level_path_on_large_rows(dtype):
    """V = 3000 (> 1024, not a multiple of the 256-token block) exercises the block-sum search."""
    g = torch.Generator().manual_seed(1)
    V, N = 3000, 100_000  # a top token expects ~130 draws: an off-by-one onto a neighbour moves most of them
    p = (torch.rand(V, generator=g) ** 3).to(dtype)
    p[::5] = 0
    p[-100:] = 0  # the partial last block is empty
    counts = torch.bincount(sample_from_probs(p.expand(N, V), g), minlength=V).double()
    probs = p.double() / p.double().sum()
    assert counts[probs == 0].sum() == 0
    group = torch.arange(V) // 60  # 50 groups of 60 tokens, so expected counts are large
    obs = torch.zeros(50, dtype=torch.float64).index_add_(0, group, counts)
    exp = torch.zeros(50, dtype=torch.float64).index_add_(0, group, probs * N)
    keep = exp > 0
    assert chisquare(obs[keep].numpy(), (exp[keep] * obs.sum() / exp[keep].sum()).numpy()).pvalue > 1e-3
    # and per-token on the most likely tokens (catches an off-by-one inside a block)
    top = probs.topk(20).indices
    assert chisquare(torch.cat([counts[top], (N - counts[top].sum()).view(1)]).numpy(),
                     torch.cat([probs[top] * N, (N - probs[top].sum() * N).view(1)]).numpy()).pvalue > 1e-3
