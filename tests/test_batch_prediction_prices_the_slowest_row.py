"""A batch runs until its slowest row is done. Planned (no run to count): the predicted number of steps is the
expected maximum over the rows (simulated), which equals one row's when acceptance is certain and grows with
the batch. Predicted from a run: its own steps, each as wide as its longest row."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from exactspec import CostModel, end_to_end_speedup
from exactspec.speed.speedup import batch_steps


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


def _trace_stats(steps, tokens, widths, draft_calls=0, draft_steps=0):
    from exactspec.speed.stats import GenerationStats

    return GenerationStats(step_rows=steps, row_tokens=tokens, width_counts=widths, draft_calls=draft_calls,
                           draft_steps=draft_steps, target_calls=sum(widths),
                           target_positions=sum(w * c for w, c in enumerate(widths)), position_drafted=[1])


def test_a_row_without_repeats_sets_the_pace_and_every_step_is_as_wide_as_its_longest_row():
    """Prompt lookup at batch 2: row 0 always finds 4 tokens and keeps them, row 1 never finds any. Row 1
    needs 20 plain steps; the first 4 are as wide as row 0's draft. Priced from the run's counts the
    prediction is exact here; pooling the rows' rates, as if both rows were alike, predicts a speedup where
    there is a loss."""
    from exactspec.speed.prediction import predict_batch

    cm = CostModel(t_draft=0.0, target_times={1: 0.010, 5: 0.014}, t_overhead=0.001)
    steps = [[[0, 4, 4], [1, 0, 0]]] * 4 + [[[1, 0, 0]]] * 16  # row 0 left after 4 steps
    stats = _trace_stats(steps, [20, 20], [0, 16, 0, 0, 0, 4])
    want = 0.019 * 10 / (4 * 0.015 + 16 * 0.011)  # plain: 19 steps of 10 ms
    assert predict_batch([stats], cm, n_tokens=20) == pytest.approx(want, rel=1e-12)
    assert want < 1 < end_to_end_speedup([1.0] * 4, [20, 0, 0, 0, 4], cm, 20, batch_size=2)
    # Prefills are added once per batch, and batches add up: two such batches predict the same ratio.
    two = predict_batch([stats, stats], cm, n_tokens=20, prefill_plain=0.005, prefill_spec=0.007)
    assert two == pytest.approx((0.005 + 0.19) / (0.007 + 4 * 0.015 + 16 * 0.011), rel=1e-12)


@pytest.mark.parametrize("gamma", [3, "auto"])
def test_a_real_ragged_batch_is_priced_call_by_call_and_its_calibration_run_is_priced_at_what_it_took(gamma):
    """A batch of 3 rows with ragged acceptance on tiny models: the prediction prices the run's own steps
    (the slowest row's count, each call at its width, its draft calls); a cost model calibrated on that
    very run prices its loop at the seconds the loop took (draft, target and verification)."""
    from exactspec import SpeculativeGenerator
    from exactspec.speed.prediction import predict_batch
    from transformers import LlamaConfig, LlamaForCausalLM

    def tiny_llama(hidden, layers, seed):
        torch.manual_seed(seed)
        return LlamaForCausalLM(LlamaConfig(vocab_size=128, hidden_size=hidden, intermediate_size=2 * hidden,
                                            num_hidden_layers=layers, num_attention_heads=4,
                                            num_key_value_heads=4, max_position_embeddings=256)).eval()


    target, draft = tiny_llama(64, 2, 0), tiny_llama(32, 1, 1)
    ids = torch.randint(0, 128, (3, 6), generator=torch.Generator().manual_seed(0))
    n = 24
    # gamma="auto" priced so that drafting pays (decisions then do not hang on how fast this machine runs
    # the tiny models): its steps draft several tokens, as the exact pricing below needs; a run of probes
    # between plain steps keeps the bare draft price by design (CostModel.calibrate's catch-up rule)
    cheap = CostModel(t_draft=1e-5, target_times={1: 0.010, 9: 0.0101})
    st = SpeculativeGenerator(target, draft, cost_model=cheap).generate(
        ids, max_new_tokens=n, gamma=gamma, do_sample=True, eos_token_id=[], seed=0).stats
    assert st.draft_calls > st.draft_steps
    assert st.target_calls >= max(len([r for rows in st.step_rows for r in rows if r[0] == b]) for b in range(3))
    cm = CostModel(t_draft=0.002, target_times={1: 0.010, 4: 0.013, 9: 0.018}, t_overhead=0.001,
                   t_draft_cold=0.0005)
    widths = sum(c * cm.t_target(w) for w, c in enumerate(st.width_counts) if c)
    spec = widths + st.target_calls * 0.001 + st.draft_calls * 0.002 + st.draft_steps * 0.0005
    assert predict_batch([st], cm, n_tokens=n) == pytest.approx((n - 1) * 0.010 / spec, rel=1e-12)
    cal = CostModel(t_draft=1e-7, target_times={1: 1e-7, 9: 1e-7}).calibrate(st)  # bare forwards ~free
    assert cal.t_overhead > 0
    if cal.t_draft_cold > 0:  # (a first call measured faster than a later one is priced as one of them)
        loop = st.draft_time + st.target_time + st.verify_time
        priced = (n - 1) * cal.t_target(1) / predict_batch([st], cal, n_tokens=n)
        assert priced == pytest.approx(loop, rel=1e-6)


def test_a_run_without_drafts_predicts_nothing_and_rows_of_one_step_are_priced_as_they_ran():
    from exactspec.speed.prediction import predict_batch

    cm = CostModel(t_draft=0.001, target_times={1: 0.010, 5: 0.013}, t_overhead=0.0005)
    one = _trace_stats([[[0, 0, 0], [1, 0, 0]]], [1, 1], [0, 1], draft_calls=0)
    assert predict_batch([one], cm, n_tokens=1, prefill_plain=0.02, prefill_spec=0.02) == \
        pytest.approx(0.02 / (0.02 + 0.0105), rel=1e-12)
    one.position_drafted = [0]
    assert predict_batch([one], cm, n_tokens=1) is None
