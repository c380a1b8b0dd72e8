"""A few CPU rows (a batch-1 step's token, a draft's next token) are drawn by sample_from_probs' NumPy path:
the same uniform from the generator and the same two-level search as the vectorised torch path, so the
same token, and draws that follow the row's law."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from exactspec.verification import sampling
from exactspec.verification.sampling import sample_from_probs


def _torch_path(probs, generator):
    with sampling._one_thread():
        sampling._check_mass(probs)
        return sampling._sample(probs, generator)


def _rows(n, v, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(n, v, generator=g) * 4, -1)
    p[p < 2e-4] = 0  # holes, often whole blocks of them
    p[:, 0] += 1e-3  # every row keeps some mass
    if v > 1100:
        p[0, -70:] = 0  # row 0: the partial last block empty
        p[-1, : v - 70] = 0  # the last row: all its mass in the last blocks
        p[-1, -1] = 0.3
    return p.to(dtype)


@pytest.mark.parametrize("v", [1, 7, 1024, 1025, 3000, 4096, 49152])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_the_numpy_path_draws_the_torch_paths_token(v, dtype):
    for n in (1, 2, 4):
        for seed in range(12):
            p = _rows(n, v, dtype, seed)
            mine = sample_from_probs(p, torch.Generator().manual_seed(seed))
            ref = _torch_path(p, torch.Generator().manual_seed(seed))
            assert torch.equal(mine, ref), (v, dtype, n, seed)
            assert (p.float().gather(1, mine[:, None]) > 0).all()
    # and it leaves the generator where the torch path leaves it: one uniform per row
    g1, g2 = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    sample_from_probs(_rows(3, v, dtype, 0), g1)
    _torch_path(_rows(3, v, dtype, 0), g2)
    assert torch.equal(torch.rand(4, generator=g1), torch.rand(4, generator=g2))


def test_only_a_few_cpu_rows_take_the_numpy_path(monkeypatch):
    calls = []
    real = sampling._sample
    monkeypatch.setattr(sampling, "_sample", lambda p, g: calls.append(p.shape) or real(p, g))
    p = torch.softmax(torch.randn(2, 3, 500), -1)
    sample_from_probs(p[0, :1])
    sample_from_probs(p[0])  # 3 rows
    sample_from_probs(torch.softmax(torch.randn(2, 2, 3, 500), -1)[:, :, 1])  # 4 rows, [2, 2, V], strided
    assert calls == []
    sample_from_probs(torch.softmax(torch.randn(5, 500), -1))
    assert calls == [(5, 500)]


def test_single_row_draws_follow_the_rows_law():
    """V = 3000 with holes and an empty partial last block: 60,000 draws, four rows a call (the sampler's
    shape in a batch-1 engine step is one row; four make the test four times quicker and run the same code
    row by row)."""
    g = torch.Generator().manual_seed(3)
    v, calls = 3000, 15_000
    p = torch.rand(v, generator=g) ** 3
    p[::5] = 0
    p[-100:] = 0
    rows = p.expand(4, v)
    counts = torch.zeros(v, dtype=torch.float64)
    for _ in range(calls):
        counts.index_add_(0, sample_from_probs(rows, g), torch.ones(4, dtype=torch.float64))
    n = 4 * calls
    probs = p.double() / p.double().sum()
    assert counts[probs == 0].sum() == 0
    group = torch.arange(v) // 100  # 30 groups, expected counts in the thousands
    obs = torch.zeros(30, dtype=torch.float64).index_add_(0, group, counts)
    exp = torch.zeros(30, dtype=torch.float64).index_add_(0, group, probs * n)
    keep = exp > 0
    assert chisquare(obs[keep].numpy(), exp[keep].numpy()).pvalue > 1e-3
    top = probs.topk(15).indices  # per token on the likeliest: an off-by-one inside a block shows here
    assert chisquare(torch.cat([counts[top], (n - counts[top].sum()).view(1)]).numpy(),
                     torch.cat([probs[top] * n, (n - probs[top].sum() * n).view(1)]).numpy()).pvalue > 1e-3


@pytest.mark.parametrize("v", [5, 3000])
def test_a_bad_row_is_named_as_the_torch_path_names_it(v):
    good = torch.full((v,), 1.0 / v)
    for bad, what in ((-0.1, "negative"), (float("nan"), "NaN")):
        rows = torch.stack([good, good, good.clone().index_fill_(0, torch.tensor([2]), bad)])
        with pytest.raises(ValueError, match=f"probs: row 2 has a {what} entry"):
            sample_from_probs(rows)
    for row, total in ((torch.zeros(v), "0.0"), (good.clone().index_fill_(0, torch.tensor([1]), float("inf")), "inf")):
        with pytest.raises(ValueError, match=f"probs: row 1 has total mass {total}"):
            sample_from_probs(torch.stack([good, row]))


def test_a_draw_at_a_block_boundary_is_the_torch_paths_too(monkeypatch):
    """Where a uniform falls between two float32 sums of one block that differ in their last bit (NumPy and
    torch add a block's 256 values in different orders), both paths use the torch op's sums: a case a review
    found, V = 128,000, where NumPy's own block sums drew the neighbouring token. The boundary is found on the
    machine that runs the test (which sums differ depends on its CPU's kernels) and the uniform put inside it."""
    torch.manual_seed(1)
    p = torch.softmax(torch.randn(1, 128_000) * 0.5, -1)  # [1, V]
    torch_cdf = sampling._block_sums(p)[0].cumsum(0)  # [nb] float64, from the torch op's fp32 block sums
    a = p[0].numpy()
    nb = a.size // sampling._BLOCK
    own = np.cumsum(a[: nb * sampling._BLOCK].reshape(nb, -1).sum(1, dtype=np.float32), dtype=np.float64)
    gap = np.abs(torch_cdf[:nb].numpy() - own)
    j = int(gap.argmax())
    if gap[j] == 0:
        pytest.skip("NumPy's block sums equal torch's on this CPU: no boundary to test")
    total = float(torch_cdf[-1])
    x = (float(torch_cdf[j]) + float(own[j])) / 2  # inside the gap: one sum puts it in block j, the other in j + 1
    by_own = int(np.searchsorted(own, x, "right"))  # the block NumPy's own sums would pick
    by_torch = int(np.searchsorted(torch_cdf.numpy(), x, "right"))
    assert by_own != by_torch  # the case is a real boundary
    real_rand = torch.rand
    monkeypatch.setattr(torch, "rand", lambda *shape, **kw: real_rand(*shape, **kw) * 0 + x / total)
    g = torch.Generator()
    tok = int(sample_from_probs(p, g))  # the NumPy path (one row)
    assert tok == int(_torch_path(p, g))
    assert tok // sampling._BLOCK == by_torch


def test_a_row_without_mass_leaves_the_generator_where_it_was():
    g = torch.Generator().manual_seed(5)
    for v in (5, 3000):
        with pytest.raises(ValueError, match="row 1 has total mass"):
            sample_from_probs(torch.stack([torch.full((v,), 1.0 / v), torch.zeros(v)]), g)
    assert torch.equal(torch.rand(3, generator=g), torch.rand(3, generator=torch.Generator().manual_seed(5)))
