"""Property: any input to the public API gives either a ValueError / TypeError naming an argument, or a
correct result. Never another exception type, never a silently wrong answer (hypothesis, seeded).

Each test draws arguments from a mix of valid values and bad ones (wrong types, bools, strings, None,
NaN / inf, out-of-range ids, odd shapes and dtypes), decides independently whether the call is valid,
and checks: invalid -> clear error; valid -> a result with the properties the docs promise.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exactspec import (CostModel, TokenTree, expected_tokens, optimal_gamma, probs_from_logits,
                       sample_from_probs, verify, verify_candidates, walltime_speedup)

FAST = settings(max_examples=80, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# ------------------------------------------------------------------------------------- strategies
junk = st.sampled_from([None, "1", "abc", True, False, [1], {"a": 1}, 1j, b"x", object()])
reals = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=64), st.integers(-5, 5),
                  st.sampled_from([np.float32(0.5), np.int64(2)]))
anything = st.one_of(reals, junk)


def is_real(v) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_)) \
        and math.isfinite(float(v))


def is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def expect_clear(call, names, valid: bool):
    """Run call(); return its result, or None after checking the error is a clear one (and expected)."""
    try:
        out = call()
    except (ValueError, TypeError) as exc:
        assert not valid, f"valid input rejected: {exc!r}"
        assert any(n in str(exc) for n in names), f"error does not name any of {names}: {exc!r}"
        return None
    assert valid, "invalid input accepted silently"
    return out


@st.composite
def float_tensors(draw, max_dims=3, min_last=0):
    dims = draw(st.integers(1, max_dims))
    shape = draw(st.lists(st.integers(0, 5), min_size=dims, max_size=dims))
    shape[-1] = max(shape[-1], min_last)
    dtype = draw(st.sampled_from([torch.float32, torch.float64, torch.float16, torch.bfloat16]))
    n = int(np.prod(shape))
    vals = draw(st.lists(st.one_of(st.floats(-8, 8, width=32),
                                   st.sampled_from([float("nan"), float("inf"), float("-inf"), 0.0])),
                         min_size=n, max_size=n))
    return torch.tensor(vals, dtype=torch.float64).reshape(shape).to(dtype)


weird_tensors = st.sampled_from([torch.ones(2, 3, dtype=torch.long), torch.ones(2, 2, dtype=torch.bool),
                                 torch.tensor(1.0), torch.zeros(2, 0), [[0.5, 0.5]], np.ones((2, 2)), None])


# ----------------------------------------------------------------------------------- sampling
@FAST
@given(logits=st.one_of(float_tensors(), weird_tensors),
       temperature=st.one_of(st.floats(0, 3), anything), top_k=st.one_of(st.integers(0, 6), anything),
       top_p=st.one_of(st.floats(0, 1), anything))
def test_probs_from_logits_errors_clearly_or_returns_distributions(logits, temperature, top_k, top_p):
    settings_ok = (is_real(temperature) and temperature >= 0 and is_int(top_k) and top_k >= 0
                   and is_real(top_p) and 0 <= top_p <= 1)
    tensor_ok = isinstance(logits, torch.Tensor) and logits.is_floating_point() and logits.dim() >= 1 \
        and logits.shape[-1] >= 1
    rows_ok = tensor_ok and (logits.numel() == 0 or bool(
        (~torch.isnan(logits).any(-1) & ~torch.isposinf(logits).any(-1)
         & ~torch.isneginf(logits).all(-1)).all()))
    out = expect_clear(lambda: probs_from_logits(logits, temperature=temperature, top_k=top_k, top_p=top_p),
                       ("temperature", "top_k", "top_p", "logits"), settings_ok and rows_ok)
    if out is not None:
        assert out.dtype == torch.float32 and out.shape == logits.shape
        assert bool((out >= 0).all())
        torch.testing.assert_close(out.sum(-1), torch.ones(out.shape[:-1]), atol=1e-4, rtol=0)


@FAST
@given(probs=st.one_of(float_tensors(min_last=1), weird_tensors),
       generator=st.one_of(st.none(), st.just(torch.Generator().manual_seed(0)), junk))
def test_sample_from_probs_errors_clearly_or_draws_a_token_with_mass(probs, generator):
    gen_ok = generator is None or isinstance(generator, torch.Generator)
    ok = gen_ok and isinstance(probs, torch.Tensor) and probs.is_floating_point() and probs.dim() >= 1 \
        and probs.shape[-1] >= 1
    if ok and probs.numel():
        p64 = probs.double()
        ok = bool(torch.isfinite(p64).all() and (p64 >= 0).all() and (p64.sum(-1) > 0).all())
    out = expect_clear(lambda: sample_from_probs(probs, generator), ("probs", "generator"), ok)
    if out is not None:
        assert out.shape == probs.shape[:-1] and out.dtype == torch.int64
        flat = probs.reshape(-1, probs.shape[-1])
        assert bool((flat.gather(1, out.reshape(-1, 1)) > 0).all())  # never a zero-probability token


# ------------------------------------------------------------------------------------- verify
@st.composite
def verify_inputs(draw):
    B, K, V = draw(st.integers(0, 3)), draw(st.integers(0, 3)), draw(st.integers(1, 5))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    tp = torch.softmax(torch.randn(B, K + 1, V, generator=g, dtype=torch.float64) * 2, -1)
    dp = torch.softmax(torch.randn(B, K, V, generator=g, dtype=torch.float64) * 2, -1)
    x = torch.multinomial(dp.reshape(-1, V), 1, generator=g).reshape(B, K) if B * K else \
        torch.zeros(B, K, dtype=torch.long)
    lengths = torch.randint(0, K + 1, (B,), generator=g) if draw(st.booleans()) else None
    corrupt = draw(st.sampled_from(["none", "nan", "neg", "scale", "token", "q-shape", "lengths", "tokens-float"]))
    return tp, dp, x, lengths, corrupt, draw(st.sampled_from(["token", "block", "greedy"])), draw(st.integers(0, 99))


@FAST
@given(inp=verify_inputs(), checks=st.sampled_from(["rule", "full", "none", "all", None]),
       generator=st.one_of(st.none(), junk))
def test_verify_errors_clearly_or_returns_a_consistent_verdict(inp, checks, generator):
    tp, dp, x, lengths, corrupt, method, where = inp
    B, K1, V = tp.shape
    K = K1 - 1
    L = lengths if lengths is not None else torch.full((B,), K)
    used = torch.cat([torch.arange(K)[None] < L[:, None], torch.ones(B, 1, dtype=torch.bool)], 1)  # [B, K+1]
    invalid = generator is not None or checks not in ("rule", "full", "none")
    detectable = False  # corrupted data that checks="full" must catch
    if corrupt in ("nan", "neg", "scale") and bool(used.any()):
        b, i = used.nonzero()[where % int(used.sum())].tolist()
        tp = tp.clone()
        tp[b, i, where % V] = {"nan": float("nan"), "neg": -0.5}.get(corrupt, tp[b, i, where % V])
        if corrupt == "scale":
            tp[b, i] *= 3
        detectable = True
    elif corrupt == "token" and bool(used[:, :K].any()):
        b, i = used[:, :K].nonzero()[where % int(used[:, :K].sum())].tolist()
        x = x.clone()
        x[b, i] = V + where
        invalid = True
    elif corrupt == "q-shape":
        dp, invalid = dp[..., :-1], True
    elif corrupt == "lengths" and lengths is not None:
        lengths, invalid = lengths + K + 1, True
    elif corrupt == "tokens-float":
        x, invalid = x.double(), True
    call = lambda: verify(tp, dp, x, method=method, draft_lengths=lengths, generator=generator,  # noqa: E731
                          checks=checks)
    names = ("target_probs", "draft_probs", "draft_tokens", "draft_lengths", "method", "checks", "generator")
    if invalid or (detectable and checks == "full"):
        expect_clear(call, names, valid=False)
        return
    if detectable:  # default checks: an error naming the data, or a verdict (what the rule never read)
        try:
            v = call()
        except (ValueError, TypeError) as exc:
            assert any(n in str(exc) for n in names), exc
            return
    else:
        v = expect_clear(call, names, valid=True)
    assert v.accepted.shape == (B,) and bool(((v.accepted >= 0) & (v.accepted <= L)).all())
    assert bool(((v.next_token >= 0) & (v.next_token < V)).all())


@FAST
@given(B=st.integers(0, 3), V=st.integers(1, 6), n=st.integers(0, 4), lo=st.integers(-3, 0),
       hi=st.integers(1, 9), scheme=st.sampled_from(["iid", "without_replacement", "deterministic", "x"]),
       seed=st.integers(0, 999))
def test_verify_candidates_errors_clearly_or_emits_a_token(B, V, n, lo, hi, scheme, seed):
    g = torch.Generator().manual_seed(seed)
    p = torch.softmax(torch.randn(B, V, generator=g), -1)
    q = torch.softmax(torch.randn(B, V, generator=g), -1)
    c = torch.randint(lo, hi, (B, n), generator=g)
    ok = scheme != "x" and bool(((c >= -1) & (c < V)).all())
    ok &= all(row == sorted(row, key=lambda t: t < 0) for row in c.tolist())  # -1 padding is trailing
    if ok and scheme == "without_replacement":
        for row in c.tolist():
            real = [t for t in row if t >= 0]
            ok &= len(real) == len(set(real))
    out = expect_clear(lambda: verify_candidates(p, q, c, scheme=scheme, generator=g),
                       ("scheme", "candidates"), ok)
    if out is not None:
        acc, nxt = out
        assert acc.shape == nxt.shape == (B,) and bool(((nxt >= 0) & (nxt < V)).all())
        chosen = acc >= 0
        assert bool((nxt[chosen] == c[chosen, acc[chosen]]).all())


@FAST
@given(parents=st.lists(st.one_of(st.integers(-3, 4), st.floats(-1, 3), st.booleans()), max_size=4),
       tokens=st.lists(st.one_of(st.integers(-2, 9), st.floats(0, 5), st.booleans(), st.none()), max_size=4))
def test_token_tree_errors_clearly_or_is_topological(parents, tokens):
    ints = lambda xs: all(is_int(v) for v in xs)  # noqa: E731
    ok = ints(parents) and ints(tokens) and len(parents) == len(tokens) \
        and all(-1 <= p < i for i, p in enumerate(parents)) and all(t >= 0 for t in tokens)
    tree = expect_clear(lambda: TokenTree(parents, tokens), ("parents", "tokens"), ok)
    if tree is not None:
        assert tree.parents.tolist() == parents and tree.tokens.tolist() == tokens


# ------------------------------------------------------------------------------------ speedup
@FAST
@given(alpha=st.one_of(st.floats(0, 1), anything, st.lists(st.floats(0, 1), min_size=1, max_size=3)),
       gamma=st.one_of(st.integers(0, 8), st.sampled_from([10**12, 10**15]), anything),
       cost=st.one_of(st.floats(0, 2), anything))
def test_speedup_formulas_error_clearly_or_return_finite_numbers(alpha, gamma, cost):
    a_ok = (is_real(alpha) and 0 <= alpha <= 1) or (isinstance(alpha, list) and all(0 <= a <= 1 for a in alpha))
    g_ok = is_int(gamma) and gamma >= 0
    c_ok = is_real(cost) and cost >= 0
    e = expect_clear(lambda: expected_tokens(alpha, gamma), ("alpha", "gamma"), a_ok and g_ok)
    if e is not None:
        assert 1.0 <= e <= gamma + 1 + 1e-9 * gamma
    s = expect_clear(lambda: walltime_speedup(alpha, gamma, cost), ("alpha", "gamma", "cost"),
                     a_ok and g_ok and c_ok)
    if s is not None:
        assert math.isfinite(s) and s > 0
    o = expect_clear(lambda: optimal_gamma(alpha, cost), ("alpha", "cost"), a_ok and c_ok)
    if o is not None:
        assert 1 <= o[0] <= 64 and o[1] > 0


@FAST
@given(t_draft=st.one_of(st.floats(0, 1), anything),
       times=st.one_of(st.dictionaries(st.one_of(st.integers(-1, 9), st.booleans(), st.text(max_size=2),
                                                 st.floats(0, 4)),
                                       st.one_of(st.floats(-1, 1), st.booleans(), st.text(max_size=2)),
                                       max_size=3), junk))
def test_cost_model_errors_clearly_or_interpolates_positive_times(t_draft, times):
    ok = is_real(t_draft) and t_draft >= 0 and isinstance(times, dict) and len(times) > 0 and all(
        is_int(k) and k >= 1 and is_real(v) and v > 0 for k, v in times.items())
    cm = expect_clear(lambda: CostModel(t_draft, times), ("t_draft", "target_times"), ok)
    if cm is not None:
        assert all(cm.t_target(k) > 0 for k in (1, 2.5, 40))
        assert CostModel.from_dict(cm.to_dict()) == cm


# ------------------------------------------------------------------------------------ generator
@pytest.fixture(scope="module")
def generator():
    from exactspec import SpeculativeGenerator
    from _spec_models import noisy_copy, tiny_lm

    target = tiny_lm("llama", vocab=32, hidden=16, layers=1, max_pos=64)
    return SpeculativeGenerator(target, noisy_copy(target, 0.3))


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(max_new=st.one_of(st.integers(0, 3), anything), do_sample=st.one_of(st.booleans(), junk),
       temperature=st.one_of(st.floats(0, 2), anything), seed=st.one_of(st.integers(-2**63, 2**64 - 1),
                                                                         st.integers(2**64, 2**70), junk),
       eos=st.one_of(st.none(), st.integers(-2, 40), st.lists(st.integers(0, 40), max_size=2), junk),
       gamma=st.one_of(st.integers(1, 3), st.just("auto"), anything))
def test_generate_errors_clearly_or_returns_the_right_shape(generator, max_new, do_sample, temperature, seed,
                                                            eos, gamma):
    ids = torch.tensor([[3, 5, 7, 9], [2, 4, 6, 8]])
    eos_ok = eos is None or (is_int(eos) and 0 <= eos < 32) or (
        isinstance(eos, list) and all(0 <= t < 32 for t in eos))
    seed_ok = seed is None or (is_int(seed) and -2**63 <= seed < 2**64)
    ok = (is_int(max_new) and max_new >= 0 and isinstance(do_sample, bool) and is_real(temperature)
          and temperature >= 0 and seed_ok and eos_ok
          and ((is_int(gamma) and gamma >= 1) or (isinstance(gamma, str) and gamma == "auto")))
    out = expect_clear(lambda: generator.generate(ids, max_new_tokens=max_new, do_sample=do_sample,
                                                  temperature=temperature, seed=seed, eos_token_id=eos,
                                                  gamma=gamma),
                       ("max_new_tokens", "do_sample", "temperature", "seed", "eos_token_id", "gamma"), ok)
    if out is not None:
        assert out.sequences.shape[0] == 2 and out.sequences.shape[1] <= 4 + max_new
        assert torch.equal(out.sequences[:, :4], ids)
