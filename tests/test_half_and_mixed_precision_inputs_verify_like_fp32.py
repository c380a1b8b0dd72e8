"""fp16/bf16/fp64 inputs, also mixed between target and draft, are verified in (at least) fp32: with
probabilities that every dtype represents exactly, the verdicts equal the fp32 ones draw for draw."""
import itertools

import pytest
import torch

from exactspec import verify

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


def _instance(B=64, K=3, V=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    # Multiples of 1/32 summing to 1: exact in fp16, bf16, fp32 and fp64.
    def dist(*shape):
        counts = torch.multinomial(torch.ones(V), 32 * int(torch.tensor(shape).prod()), replacement=True,
                                   generator=g).view(*shape, 32)
        return torch.nn.functional.one_hot(counts, V).sum(-2).double() / 32
    tp, dp = dist(B, K + 1), dist(B, K)
    tokens = torch.multinomial(dp.view(-1, V), 1, generator=g).view(B, K)
    return tp, dp, tokens


@pytest.mark.parametrize("method", ["token", "block", "greedy"])
@pytest.mark.parametrize("t_dtype,d_dtype", list(itertools.product(DTYPES, DTYPES)))
def test_any_dtype_pair_gives_the_fp32_verdict(method, t_dtype, d_dtype):
    tp, dp, tokens = _instance()
    ref = verify(tp.float(), dp.float(), tokens, method=method, generator=torch.Generator().manual_seed(1))
    got = verify(tp.to(t_dtype), dp.to(d_dtype), tokens, method=method,
                 generator=torch.Generator().manual_seed(1))
    assert torch.equal(got.accepted, ref.accepted)
    assert torch.equal(got.next_token, ref.next_token)
