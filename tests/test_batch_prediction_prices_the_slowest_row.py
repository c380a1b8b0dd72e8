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


def _trace_stats(steps, tokens, widths, draft_calls=0):
    from exactspec.stats import GenerationStats

    return GenerationStats(step_rows=steps, row_tokens=tokens, width_counts=widths, draft_calls=draft_calls,
                           target_calls=sum(widths), target_positions=sum(w * c for w, c in enumerate(widths)),
                           position_drafted=[1])


def test_a_row_without_repeats_sets_the_pace_and_every_step_is_as_wide_as_its_longest_row():
    """Prompt lookup at batch 2: row 0 always finds 4 tokens and keeps them, row 1 never finds any. Row 1
    needs 20 plain steps; the first 4 are as wide as row 0's draft. Replayed step by step the prediction
    is exact here; pooling the rows' rates, as if both rows were alike, predicts a speedup where there is a
    loss."""
    from exactspec.prediction import predict_batch

    cm = CostModel(t_draft=0.0, target_times={1: 0.010, 5: 0.014}, t_overhead=0.001)
    steps = [[[0, 4, 4], [1, 0, 0]]] * 4 + [[[1, 0, 0]]] * 16  # row 0 left after 4 steps
    stats = _trace_stats(steps, [20, 20], [0, 16, 0, 0, 0, 4])
    want = 0.019 * 10 / (4 * 0.015 + 16 * 0.011)  # plain: 19 steps of 10 ms
    assert predict_batch([stats], cm, n_tokens=20) == pytest.approx(want, rel=1e-12)
    assert want < 1 < end_to_end_speedup([1.0] * 4, [20, 0, 0, 0, 4], cm, 20, batch_size=2)
    # Prefills are added once per batch, and batches add up: two such batches predict the same ratio.
    two = predict_batch([stats, stats], cm, n_tokens=20, prefill_plain=0.005, prefill_spec=0.007)
    assert two == pytest.approx((0.005 + 0.19) / (0.007 + 4 * 0.015 + 16 * 0.011), rel=1e-12)


def test_alike_rows_replayed_step_by_step_agree_with_the_pooled_slowest_row_prediction():
    """Two rows with the same law (gamma = 4 every step, acceptance 0.8 per position): replaying recorded
    steps gives the pooled prediction of the expected slowest row."""
    from exactspec.prediction import predict_batch

    cm = CostModel(t_draft=0.001, target_times={1: 0.010, 5: 0.013}, t_overhead=0.0005)
    alpha, n, rng = 0.8, 64, np.random.default_rng(3)
    kept = lambda: int(np.argmin(np.append(rng.random(4) < alpha, False)))  # noqa: E731 (accepted of 4)
    steps = [[[0, 4, kept()], [1, 4, kept()]] for _ in range(20000)]
    stats = _trace_stats(steps, [n, n], [0, 0, 0, 0, 0, 20000], draft_calls=80000)
    pooled = end_to_end_speedup([alpha] * 4, [0, 0, 0, 0, 1], cm, n, batch_size=2)
    assert predict_batch([stats], cm, n_tokens=n, sims=4000) == pytest.approx(pooled, rel=0.02)


def test_rows_that_share_each_steps_length_are_priced_at_that_length_not_the_longest_of_independent_draws():
    """gamma="auto" at batch 2: each step both rows draft 1 token or both draft 8 (the batch decides), and
    keep all of them. The replay draws whole steps, so a step is 2 or 9 wide; drawing each row's length on
    its own would make three steps in four 9 wide."""
    from exactspec.prediction import predict_batch

    cm = CostModel(t_draft=0.001, target_times={1: 0.010, 2: 0.011, 9: 0.020}, t_overhead=0.0)
    n = 60
    steps = [[[0, 1, 1], [1, 1, 1]], [[0, 8, 8], [1, 8, 8]]] * 50
    stats = _trace_stats(steps, [n, n], [0, 0, 50] + [0] * 6 + [50], draft_calls=450)
    got = predict_batch([stats], cm, n_tokens=n, sims=3000)
    rng, shared, independent = np.random.default_rng(0), [], []
    for _ in range(3000):  # both rows advance together when they share the length; a draft is capped
        done = t = 0  # at the tokens left - 1, as the engine caps it
        while done < n:
            k = min(1 if rng.random() < 0.5 else 8, n - done - 1)
            done, t = done + k + 1, t + cm.step_time(k)
        shared.append(t)
        done0 = done1 = t = 0
        while min(done0, done1) < n:  # each row's length drawn on its own
            k0, k1 = (min(1 if rng.random() < 0.5 else 8, n - d - 1) for d in (done0, done1))
            live = [d < n for d in (done0, done1)]
            t += cm.step_time(max(k for k, lv in zip((k0, k1), live) if lv))
            done0, done1 = done0 + live[0] * (k0 + 1), done1 + live[1] * (k1 + 1)
        independent.append(t)
    assert got == pytest.approx(0.010 * (n - 1) / np.mean(shared), rel=0.02)
    assert 0.010 * (n - 1) / np.mean(independent) < 0.9 * got


def test_a_rows_last_steps_cut_short_by_its_cap_are_replayed_at_the_end_not_drawn_in_mid_run():
    """One row of 21 tokens: four steps of 4 drafted and kept, then a plain step (1 token left: the cap
    is 0). The replay caps its own last step the same way, so the prediction is that run's time exactly;
    had the capped step been drawn in mid-run, the row would need more steps."""
    from exactspec.prediction import predict_batch

    cm = CostModel(t_draft=0.001, target_times={1: 0.010, 5: 0.013}, t_overhead=0.0005)
    steps = [[[0, 4, 4]]] * 4 + [[[0, 0, 0]]]
    stats = _trace_stats(steps, [21], [0, 1, 0, 0, 0, 4], draft_calls=16)
    run = 4 * (0.004 + 0.013 + 0.0005) + (0.010 + 0.0005)
    assert predict_batch([stats], cm, n_tokens=21) == pytest.approx(0.010 * 20 / run, rel=1e-12)
    # Rows of one step each (max_new_tokens=1): nothing is left to draw from but those steps.
    one = _trace_stats([[[0, 0, 0], [1, 0, 0]]], [1, 1], [0, 1], draft_calls=0)
    one.position_drafted = [1]
    assert predict_batch([one], cm, n_tokens=1, prefill_plain=0.02, prefill_spec=0.02) == \
        pytest.approx(0.02 / (0.02 + 0.0105), rel=1e-12)
