"""A batch runs until its slowest row is done: the predicted number of steps is the expected maximum over
the rows (simulated), which equals one row's when acceptance is certain and grows with the batch."""
from __future__ import annotations

import numpy as np
import pytest

from exactspec import CostModel, end_to_end_speedup
from exactspec.speedup import batch_steps


def _simulated_max_steps(alpha: float, gamma: int, n: int, batch: int, sims: int, seed: int) -> float:
    """An independent simulation, row by row in plain Python."""
    rng = np.random.default_rng(seed)
    worst = []
    for _ in range(sims):
        steps = []
        for _ in range(batch):
            done = s = 0
            while done < n:
                kept = 0
                while kept < gamma and rng.random() < alpha:
                    kept += 1
                done, s = done + kept + 1, s + 1
            steps.append(s)
        worst.append(max(steps))
    return float(np.mean(worst))


def test_certain_acceptance_needs_the_same_steps_for_any_batch():
    for b in (1, 4, 16):
        assert batch_steps(1.0, [0, 0, 0, 0, 1], 64, b, sims=50) == pytest.approx(64 / 5, abs=1)


@pytest.mark.parametrize("alpha", [0.5, 0.8])
def test_expected_slowest_row_matches_an_independent_simulation_and_grows_with_the_batch(alpha):
    one, four, sixteen = (batch_steps(alpha, [0, 0, 0, 0, 1], 64, b, sims=3000) for b in (1, 4, 16))
    assert one < four < sixteen
    ref = _simulated_max_steps(alpha, 4, 64, 4, sims=1500, seed=1)
    assert four == pytest.approx(ref, rel=0.02)
    # One row: the renewal count, a little above n / E (the last step overshoots).
    e = sum(alpha ** i for i in range(5))
    assert 64 / e <= one <= 64 / e + 1


def test_batched_end_to_end_prediction_uses_the_slowest_row():
    cm = CostModel(t_draft=0.001, target_times={1: 0.010, 5: 0.013})
    single = end_to_end_speedup([0.8] * 4, [0, 0, 0, 0, 1], cm, 64)
    batched = end_to_end_speedup([0.8] * 4, [0, 0, 0, 0, 1], cm, 64, batch_size=4)
    steps1, steps4 = 64 / sum(0.8 ** i for i in range(5)), batch_steps([0.8] * 4, [0, 0, 0, 0, 1], 64, 4)
    assert batched == pytest.approx(single * steps1 / steps4, rel=1e-9)
    assert batched < single


def _rows_stats(tables, tokens, widths, draft_calls=0):
    from exactspec.stats import GenerationStats

    return GenerationStats(row_length_accepted=tables, row_tokens=tokens, width_counts=widths,
                           draft_calls=draft_calls, target_calls=sum(widths), position_drafted=[1])


def test_a_row_without_repeats_sets_the_pace_and_every_step_is_as_wide_as_its_longest_row():
    """Prompt lookup at batch 2: row 0 always finds 4 tokens and keeps them, row 1 never finds any. Row 1
    needs 20 plain steps; the first 4 are as wide as row 0's draft. Replayed row by row the prediction is
    exact here; pooling the rows' rates, as if both rows were alike, predicts a speedup where there is a
    loss."""
    from exactspec.prediction import predict_batch

    cm = CostModel(t_draft=0.0, target_times={1: 0.010, 5: 0.014}, t_overhead=0.001)
    full = [[0], [0, 0], [0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0, 4]]  # drafted 4, kept 4
    stats = _rows_stats([full, [[20]]], [20, 20], [0, 16, 0, 0, 0, 4])
    want = 0.019 * 10 / (4 * 0.015 + 16 * 0.011)  # plain: 19 steps of 10 ms
    assert predict_batch([stats], cm, n_tokens=20) == pytest.approx(want, rel=1e-12)
    assert want < 1 < end_to_end_speedup([1.0] * 4, [20, 0, 0, 0, 4], cm, 20, batch_size=2)
    # Prefills are added once per batch, and batches add up: two such batches predict the same ratio.
    two = predict_batch([stats, stats], cm, n_tokens=20, prefill_plain=0.005, prefill_spec=0.007)
    assert two == pytest.approx((0.005 + 0.19) / (0.007 + 4 * 0.015 + 16 * 0.011), rel=1e-12)


def test_alike_rows_replayed_row_by_row_agree_with_the_pooled_slowest_row_prediction():
    """Two rows with the same verdicts (gamma = 4 every step, acceptance 0.8 per position): replaying each
    row from its own (k, a) counts gives the pooled prediction of the expected slowest row."""
    from exactspec.prediction import predict_batch

    cm = CostModel(t_draft=0.001, target_times={1: 0.010, 5: 0.013}, t_overhead=0.0005)
    alpha, n = 0.8, 64
    law = [alpha ** a * (1 - alpha) for a in range(4)] + [alpha ** 4]  # P(a kept of 4)
    table = [[0], [0, 0], [0, 0, 0], [0, 0, 0, 0], [round(1e6 * p) for p in law]]
    stats = _rows_stats([table, table], [n, n], [0, 0, 0, 0, 0, 10], draft_calls=40)
    pooled = end_to_end_speedup([alpha] * 4, [0, 0, 0, 0, 1], cm, n, batch_size=2)
    assert predict_batch([stats], cm, n_tokens=n, sims=4000) == pytest.approx(pooled, rel=0.02)
