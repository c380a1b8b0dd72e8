"""fp16/bf16/fp64 inputs, also mixed between target and draft, are verified in (at least) fp32
(docs/verify.md: "fp16/bf16 are computed in fp32"). With probabilities that every dtype represents exactly, the verdicts
equal the fp32 ones draw for draw; with probabilities that round differently in fp16, bf16 and fp32, the
verdict for inputs in those dtypes is the fp32 verdict of the same rounded values, upcast (exactly) to fp32
-- and the rounding does change verdicts, so the comparison can tell the dtypes apart."""
import functools
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


ROUNDING = [torch.float16, torch.bfloat16, torch.float32]


@functools.lru_cache(maxsize=1)
def _rounding_instance(B=20000, K=3, V=8, seed=1):
    """fp64 probabilities none of the three dtypes holds exactly (so each rounds them its own way)."""
    g = torch.Generator().manual_seed(seed)
    tp = torch.softmax(torch.randn(B, K + 1, V, generator=g, dtype=torch.float64) * 1.5, -1)
    dp = torch.softmax(torch.randn(B, K, V, generator=g, dtype=torch.float64) * 1.5, -1)
    return tp, dp, torch.multinomial(dp.view(-1, V), 1, generator=g).view(B, K)


def _verdict(tp, dp, tokens, method, checks="rule"):
    v = verify(tp, dp, tokens, method=method, generator=torch.Generator().manual_seed(1), checks=checks)
    return v.accepted, v.next_token


@pytest.mark.parametrize("method", ["token", "block", "greedy"])
@pytest.mark.parametrize("t_dtype,d_dtype", list(itertools.product(ROUNDING, ROUNDING)))
def test_rounded_inputs_give_the_fp32_verdict_of_their_values(method, t_dtype, d_dtype):
    tp, dp, tokens = _rounding_instance()
    t, d = tp.to(t_dtype), dp.to(d_dtype)
    # Reference: the same rounded values in fp32 (checks off: bf16-rounded rows miss fp32's 1e-3 sum test).
    ref = _verdict(t.float(), d.float(), tokens, method, checks="none")
    got = _verdict(t, d, tokens, method)
    assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1])


@pytest.mark.parametrize("method", ["token", "block", "greedy"])
def test_rounding_changes_verdicts_so_the_comparison_has_teeth(method):
    """The instance is sensitive: the fp32 verdicts of the fp16-, bf16- and fp32-rounded values are not all
    the same, so a verifier that rounded through another dtype (or not at all) would fail the test above."""
    tp, dp, tokens = _rounding_instance()
    verdicts = [_verdict(tp.to(dt).float(), dp.to(dt).float(), tokens, method, checks="none")
                for dt in ROUNDING]
    differ = [int(((a[0] != b[0]) | (a[1] != b[1])).sum()) for a, b in itertools.combinations(verdicts, 2)]
    assert min(differ) > 0, differ
