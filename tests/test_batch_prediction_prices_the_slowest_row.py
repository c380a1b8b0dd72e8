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
