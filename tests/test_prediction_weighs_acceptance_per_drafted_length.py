"""A policy that drafts long when its draft is confident accepts more in its long steps. The prediction
therefore reads acceptance per drafted length: its expected accepted tokens per step equal the run's
measured ones exactly, where one pooled per-position curve mixes short and long steps and is biased."""
from __future__ import annotations

import numpy as np
import pytest

from _spec_models import left_padded, noisy_copy, tiny_lm
from exactspec import CostModel, SpeculativeGenerator
from exactspec.speed.speedup import _expected_tokens_array, _for_length, batch_steps, mixed_length_speedup
from exactspec.speed.stats import GenerationStats


def _expected_accepted(alpha, counts) -> float:
    a = np.asarray(alpha, dtype=float)
    w = np.asarray(counts, dtype=float) / sum(counts)
    by_length = a.ndim == 2
    return float(sum(wk * (_expected_tokens_array(_for_length(a, k, by_length), k) - 1.0)
                     for k, wk in enumerate(w) if wk))


def _hand_stats() -> GenerationStats:
    """10 steps of one token, all rejected; 10 steps of four tokens, all accepted."""
    s = GenerationStats(length_counts=[0, 10, 0, 0, 10], length_accepted=[[0], [10, 0], [0] * 3, [0] * 4,
                                                                           [0, 0, 0, 0, 10]],
                        position_drafted=[20, 10, 10, 10], position_accepted=[10, 10, 10, 10], row_steps=20,
                        accepted_tokens=40)
    return s


def test_rates_per_length_reproduce_the_measured_accepted_tokens_where_pooled_rates_do_not():
    s = _hand_stats()
    by_length = s.alphas_by_length()
    assert by_length[1][0] == 0.0 and by_length[4] == [1.0, 1.0, 1.0, 1.0]
    assert _expected_accepted(by_length, s.length_counts) == pytest.approx(2.0, abs=1e-12)  # 40 / 20
    assert _expected_accepted(s.per_position_acceptance, s.length_counts) == pytest.approx(1.25)  # pooled: biased
    cost = CostModel(0.1, {1: 1.0, 5: 1.0})
    # 3 tokens per step (2 accepted + 1) over a mean step of (1 * 0.1 + 1) and (4 * 0.1 + 1) target units
    assert mixed_length_speedup(by_length, s.length_counts, cost, by_length=True) == pytest.approx(3.0 / 1.25)
    # without by_length a 2-d alpha still batches over its leading axis, as everywhere in the module
    batched = mixed_length_speedup([[0.9], [0.1]], [1, 1, 1], 0.1)
    assert batched.shape == (2,) and batched[0] > batched[1]
    with pytest.raises(ValueError, match="by_length"):
        mixed_length_speedup([0.5, 0.5], [1, 1], 0.1, by_length=True)
    # the batch simulation draws each step's acceptance from its length's row: 1 or 5 tokens, 3 on average
    assert batch_steps(by_length, s.length_counts, 60, 1, sims=400, by_length=True) == pytest.approx(20.0, rel=0.06)
    assert batch_steps(s.per_position_acceptance, s.length_counts, 60, 1, sims=400) > 24  # pooled: 2.25 a step


def test_a_gamma_auto_run_is_predicted_with_its_own_accepted_tokens_per_step():
    target = tiny_lm("llama", seed=0)
    gen = SpeculativeGenerator(target, noisy_copy(target, 0.3, seed=2), cost_model=CostModel(0.05, {1: 1.0, 9: 1.1}))
    ids, mask = left_padded([[5, 9, 13, 5, 9], [7, 8, 11], [20, 21, 22, 20]])
    merged = GenerationStats.merge([gen.generate(ids, mask, max_new_tokens=24, do_sample=True, seed=s,
                                                 eos_token_id=[], pad_token_id=0).stats for s in range(4)])
    assert len({k for k, c in enumerate(merged.length_counts) if c and k}) >= 2  # lengths vary under auto
    assert sum(map(sum, merged.length_accepted)) == merged.row_steps
    measured = merged.accepted_tokens / merged.row_steps
    assert _expected_accepted(merged.alphas_by_length(), merged.length_counts) == pytest.approx(measured, abs=1e-9)
