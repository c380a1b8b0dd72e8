"""gamma="auto" re-prices its cost model from its own runs (CostModel.as_run). A machine that runs every
forward k times slower (a busy CPU) must scale every price by k, so that the policy, which only compares
prices, decides as on a quiet machine; CostModel.calibrate, which keeps the bare target table, would
instead read the slowdown as a per-step overhead and favour long drafts."""
from __future__ import annotations

import pytest
import torch

from exactspec import CostModel
from exactspec.policy import AdaptivePolicy
from exactspec.stats import GenerationStats

BARE = CostModel(0.0016, {1: 0.0064, 2: 0.0069, 4: 0.0085, 8: 0.0095, 13: 0.0125})


def _run(slow: float) -> GenerationStats:
    """A run of 30 steps (5 plain), 75 draft calls, as timed on a machine `slow` times slower."""
    return GenerationStats(target_calls=30, draft_calls=75, draft_steps=25, target_positions=105,
                           draft_time=slow * 0.16, draft_first_time=slow * 0.06,
                           target_time=slow * 0.24, verify_time=slow * 0.03)


@pytest.mark.parametrize("slow", [1.5, 4.0])
def test_a_uniformly_slower_run_scales_every_price_alike(slow):
    quiet, busy = BARE.as_run(_run(1.0)), BARE.as_run(_run(slow))
    for k in range(13):
        assert busy.step_time(k) == pytest.approx(slow * quiet.step_time(k), rel=1e-9)
    a, b = AdaptivePolicy(quiet, 12), AdaptivePolicy(busy, 12)
    for alpha in (0.3, 0.6, 0.8, 0.9):
        assert a.best_length(alpha)[0] == b.best_length(alpha)[0]
    assert a.next_lengths(torch.tensor([20])).tolist() == b.next_lengths(torch.tensor([20])).tolist()
    assert [a.threshold(i) for i in range(1, 13)] == pytest.approx([b.threshold(i) for i in range(1, 13)])
    # calibrate() does not have this property: the slowdown lands in a per-step constant
    assert BARE.calibrate(_run(slow)).step_time(1) != pytest.approx(slow * BARE.calibrate(_run(1.0)).step_time(1))


def test_as_run_overhead_is_the_runs_bookkeeping_per_call():
    cm = BARE.as_run([_run(1.0), _run(1.0)])
    assert cm.t_overhead == pytest.approx(0.03 / 30)
    assert cm.t_draft == pytest.approx((0.16 - 0.06) / (75 - 25))
    assert cm.t_target(1) / BARE.t_target(1) == pytest.approx(0.24 / 30 / BARE.t_target(105 / 30))
