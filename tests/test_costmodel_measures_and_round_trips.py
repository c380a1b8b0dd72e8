"""CostModel interpolates/extrapolates its table as documented, round-trips through dict and JSON, and
`measure` times real HF forward passes with a rolled-back KV cache (tiny random-weight Llamas, no downloads)."""
import json

import pytest
import torch

from exactspec import CostModel


def test_interpolation_and_extrapolation():
    cm = CostModel(0.01, {1: 1.0, 3: 2.0, 5: 2.5})
    assert cm.t_target(1) == 1.0 and cm.t_target(2) == 1.5 and cm.t_target(4) == 2.25
    assert cm.t_target(7) == pytest.approx(3.0)  # slope of the last two points: 0.25 per token
    assert cm.cost_ratio == 0.01
    assert cm.step_time(3) == pytest.approx(3 * 0.01 + 2.25)
    noisy = CostModel(0.01, {1: 1.0, 16: 2.0, 17: 1.9})  # measurement noise: T(17) < T(16)
    assert noisy.t_target(40) == pytest.approx(1.9)  # never extrapolate to cheaper verification
    below = CostModel(0.01, {2: 1.2, 4: 1.4})
    assert below.t_target(1) == 1.2  # held constant below the table
    with pytest.raises(ValueError, match="k"):
        cm.t_target(0)


@pytest.mark.parametrize("kwargs,match", [
    (dict(t_draft=-1, target_times={1: 1.0}), "t_draft"),
    (dict(t_draft=0.1, target_times={}), "target_times"),
    (dict(t_draft=0.1, target_times={0: 1.0}), "target_times"),
    (dict(t_draft=0.1, target_times={1: -2.0}), "target_times"),
])
def test_bad_tables(kwargs, match):
    with pytest.raises(ValueError, match=match):
        CostModel(**kwargs)


def test_round_trip(tmp_path):
    cm = CostModel(0.003, {1: 0.01, 2: 0.012, 8: 0.02}, {"note": "x"})
    d = json.loads(json.dumps(cm.to_dict()))
    assert CostModel.from_dict(d) == cm and CostModel.from_dict(d).metadata == {"note": "x"}
    cm.save(tmp_path / "c.json")
    assert CostModel.load(tmp_path / "c.json") == cm
    with pytest.raises(ValueError, match="t_draft"):
        CostModel.from_dict({"target_times": {"1": 1.0}})


def tiny_llama(hidden, layers, seed):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=128, hidden_size=hidden, intermediate_size=2 * hidden,
                      num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=4,
                      max_position_embeddings=256)
    return LlamaForCausalLM(cfg).eval()


def test_measure_on_tiny_models():
    target, draft = tiny_llama(128, 4, 0), tiny_llama(32, 1, 1)
    cm = CostModel.measure(target, draft, prompt_len=16, ks=(1, 4, 32), repeats=3, warmup=1, seed=0)
    assert set(cm.target_times) == {1, 4, 32}
    assert cm.t_draft > 0 and all(t > 0 for t in cm.target_times.values())
    # "monotone enough": 32 tokens are not cheaper than a single one, beyond timer noise
    assert cm.target_times[32] > 0.7 * cm.target_times[1]
    md = cm.metadata
    assert md["batch_size"] == 1 and md["prompt_len"] == 16 and md["torch_threads"] >= 1
    assert md["target"]["params"] > md["draft"]["params"] > 0
    assert CostModel.from_dict(json.loads(json.dumps(cm.to_dict()))) == cm


def test_measure_rolls_the_cache_back(monkeypatch):
    # After each timed call the slot cache is rolled back by k, so repeats see the same context: the logits
    # of the timed k-token call are the same in every repeat (recorded by a wrapper of SlotCache.forward).
    from exactspec.backends.cache import SlotCache

    target = tiny_llama(64, 2, 2)
    seen = []
    forward = SlotCache.forward

    def spy(self, tokens, valid, logits_to_keep=0):
        out = forward(self, tokens, valid, logits_to_keep)
        if self.model is target:
            seen.append((self.cache.get_seq_length(), out[0, -1].clone()))
        return out

    monkeypatch.setattr(SlotCache, "forward", spy)
    CostModel.measure(target, tiny_llama(64, 1, 1), prompt_len=8, ks=(1, 3), repeats=2, warmup=1)
    lengths = {n for n, _ in seen}
    assert lengths == {8, 8 + 1, 8 + 3}  # the prefill, then prompt + k after each call: never growing
    for n in lengths:
        logits = [l for m, l in seen if m == n]
        assert len(logits) == (1 if n == 8 else 3)
        for other in logits[1:]:
            torch.testing.assert_close(other, logits[0])


def test_without_draft_keeps_target_times_and_frees_the_draft():
    from exactspec import CostModel

    cm = CostModel(0.002, {1: 0.01, 5: 0.015}, {"note": "x"})
    free = cm.without_draft()
    assert free.t_draft == 0.0 and free.target_times == cm.target_times and free.metadata == cm.metadata
    assert free.step_time(4) == cm.t_target(5)


def test_overhead_is_priced_per_step_and_round_trips(tmp_path):
    from exactspec.speed.speedup import mixed_length_speedup, walltime_speedup

    cm = CostModel(0.002, {1: 0.010, 5: 0.014}, t_overhead=0.001)
    assert cm.step_time(4) == pytest.approx(4 * 0.002 + 0.014 + 0.001)
    assert cm.without_draft().step_time(4) == pytest.approx(0.014 + 0.001)
    # E(alpha=.5, gamma=4) = (1 - .5^5)/.5 = 1.9375 tokens for 0.023 s, against 0.010 s per plain token.
    assert walltime_speedup(0.5, 4, cm) == pytest.approx(1.9375 * 0.010 / 0.023)
    assert walltime_speedup(0.5, 0, cm) == pytest.approx(1.0)  # gamma = 0 is plain decoding: no loop
    # ...but a step of the loop that drafted nothing still pays the loop's overhead.
    assert mixed_length_speedup(0.5, [1], cm) == pytest.approx(0.010 / 0.011)
    assert CostModel.from_dict(json.loads(json.dumps(cm.to_dict()))) == cm
    assert cm != CostModel(0.002, {1: 0.010, 5: 0.014})
    assert CostModel.from_dict({"t_draft": 0.1, "target_times": {"1": 1.0}}).t_overhead == 0.0  # old files
    with pytest.raises(ValueError, match="t_overhead"):
        CostModel(0.1, {1: 1.0}, t_overhead=float("nan"))


def test_calibrate_prices_the_loop_from_a_runs_statistics():
    from exactspec.speed.stats import GenerationStats

    bare = CostModel(0.001, {1: 0.010, 5: 0.014})
    # 10 target calls over 5 positions each (gamma = 4), 40 draft calls.
    st = GenerationStats(target_calls=10, draft_calls=40, target_positions=50, draft_time=0.060,
                         target_time=0.150, verify_time=0.008)
    cal = bare.calibrate(st)
    assert cal.t_draft == pytest.approx(0.060 / 40)  # a draft step as it cost inside the loop
    assert cal.t_overhead == pytest.approx((0.150 + 0.008) / 10 - 0.014)  # beyond the bare T_target(5)
    assert cal.target_times == bare.target_times  # plain decoding is still priced by bare T_target(1)
    # The calibrated step reproduces the run's own time per step (what makes it "calibrated").
    assert cal.step_time(4) * 10 == pytest.approx(st.draft_time + st.target_time + st.verify_time)
    assert bare.calibrate([st, st]) == cal  # several runs are merged first
    with pytest.raises(ValueError, match="target call"):
        bare.calibrate(GenerationStats())


def test_calibrate_on_a_real_run_counts_positions_fed():
    from exactspec import SpeculativeGenerator

    target, draft = tiny_llama(64, 2, 0), tiny_llama(32, 1, 1)
    out = SpeculativeGenerator(target, draft).generate(torch.randint(0, 128, (1, 8)), max_new_tokens=21,
                                                      gamma=4, do_sample=False, eos_token_id=[])
    st = out.stats
    # Every call feeds the pending token + the drafts; near max_new_tokens a step drafts fewer.
    assert st.target_positions == sum(k * c for k, c in enumerate(st.length_counts)) + st.target_calls
    cal = CostModel.measure(target, draft, prompt_len=8, ks=(1, 5), repeats=2, warmup=1).calibrate(st)
    # Later draft calls and the cold first ones together make up the run's draft time, except that a cold
    # call measured *faster* than the later ones is priced as one of them (t_draft_cold >= 0): then the
    # model over-prices the run by exactly that gap. Either way, this identity holds.
    assert st.draft_calls > st.draft_steps > 0 and cal.t_draft_cold >= 0.0
    later = st.draft_calls - st.draft_steps
    assert cal.t_draft == pytest.approx((st.draft_time - st.draft_first_time) / later, rel=1e-9)
    gap = max(0.0, cal.t_draft * st.draft_steps - st.draft_first_time)
    # With plain steps in the run (a step near max_new_tokens may draft nothing) the cold extra is capped
    # at one call, so a first call slower than two later ones (a busy machine) is under-priced by the rest.
    excess = max(0.0, st.draft_first_time - 2 * cal.t_draft * st.draft_steps) if st.plain_steps else 0.0
    assert cal.t_draft * later + (cal.t_draft + cal.t_draft_cold) * st.draft_steps \
        == pytest.approx(st.draft_time + gap - excess, rel=1e-6)


@pytest.mark.parametrize("first_time,cold", [(0.030, 0.030 / 10 - 0.030 / 30), (0.005, 0.0)])
def test_calibrate_prices_cold_first_draft_calls_apart(first_time, cold):
    """Deterministic both ways: first calls slower than the later ones give t_draft_cold > 0 and the
    draft time adds up exactly; faster ones give t_draft_cold = 0, never negative."""
    from exactspec.speed.stats import GenerationStats

    st = GenerationStats(target_calls=10, draft_calls=40, target_positions=50, draft_time=0.030 + first_time,
                         target_time=0.150, verify_time=0.008, draft_steps=10, draft_first_time=first_time)
    cal = CostModel(0.001, {1: 0.010, 5: 0.014}).calibrate(st)
    assert cal.t_draft == pytest.approx(0.030 / 30) and cal.t_draft_cold == pytest.approx(cold, abs=1e-15)
    if cold > 0:
        assert cal.t_draft * 30 + (cal.t_draft + cal.t_draft_cold) * 10 == pytest.approx(st.draft_time)


def test_calibrate_against_measured_plain_decoding_shifts_the_table():
    from exactspec.speed.stats import GenerationStats

    bare = CostModel(0.001, {1: 0.010, 5: 0.014})
    st = GenerationStats(target_calls=10, draft_calls=40, target_positions=50, draft_time=0.060,
                         target_time=0.170, verify_time=0.008)
    cal = bare.calibrate(st, plain_time=0.012)  # plain decoding ran at 12 ms per token, not the bare 10
    assert cal.t_target(1) == pytest.approx(0.012) and cal.t_target(5) == pytest.approx(0.016)
    assert cal.t_overhead == pytest.approx((0.170 + 0.008) / 10 - 0.016)
    assert cal.step_time(4) == pytest.approx(bare.calibrate(st).step_time(4))  # the step itself is unchanged
    for bad in (-0.001, float("inf"), 0.0):  # 0 s cannot be this target's step (the table would hit 0)
        with pytest.raises(ValueError, match="plain_time"):
            bare.calibrate(st, plain_time=bad)


def test_a_bare_table_whose_wider_forward_timed_below_the_shift_prices_it_as_a_plain_step():
    """A busy machine timed the bare T(1) at 10 ms and T(3) at 3 ms; plain decoding then ran at 4 ms: the shift
    (-6 ms) would price T(3) at -3 ms. That width is priced at the plain step's 4 ms instead of failing the
    calibration (it raised in the suite on two workers)."""
    from exactspec.speed.stats import GenerationStats

    bare = CostModel(0.001, {1: 0.010, 3: 0.003, 5: 0.014})
    st = GenerationStats(target_calls=10, draft_calls=40, target_positions=50, draft_time=0.060,
                         target_time=0.170, verify_time=0.008)
    cal = bare.calibrate(st, plain_time=0.004)
    assert cal.t_target(1) == pytest.approx(0.004) and cal.t_target(3) == pytest.approx(0.004)
    assert cal.t_target(5) == pytest.approx(0.008) and min(cal.target_times.values()) > 0


def test_calibrate_scales_the_tables_rise_when_the_loop_verifies_cheaper_than_the_shifted_table():
    """The bare table was measured before the run; when the loop ran faster than that table says (this VM's
    speed drifts), a clamped t_overhead = 0 over-priced every step. Instead the rise above T_target(1) is
    scaled to the loop's measured step, so the calibrated step reproduces the run exactly, and plain
    decoding keeps the measured plain_time."""
    from exactspec.speed.stats import GenerationStats

    bare = CostModel(0.001, {1: 0.010, 3: 0.013, 5: 0.014})
    # gamma = 4: 10 target calls, (0.105 + 0.005) / 10 = 11 ms of target + verification per call, while
    # plain decoding ran at 8 ms: shifted, the table says T_target(5) = 12 ms, 1 ms more than the loop took.
    st = GenerationStats(target_calls=10, draft_calls=40, target_positions=50, draft_time=0.040,
                         target_time=0.105, verify_time=0.005)
    cal = bare.calibrate(st, plain_time=0.008)
    assert cal.t_overhead == 0.0 and cal.t_target(1) == pytest.approx(0.008)
    assert cal.t_target(5) == pytest.approx(0.011)  # the rise of 4 ms scaled by 3/4
    assert cal.t_target(3) == pytest.approx(0.008 + 0.75 * 0.003)
    assert cal.metadata["calibrated_from"]["target_rise_scale"] == pytest.approx(0.75)
    assert cal.metadata["calibrated_from"]["overpriced_per_step"] == pytest.approx(0.0, abs=1e-15)
    assert cal.step_time(4) * 10 == pytest.approx(st.draft_time + st.target_time + st.verify_time)
    # gamma="auto"'s own re-pricing (no plain_time) keeps the measured table's shape, clamped as before.
    own = bare.calibrate(st)
    assert own.target_times == bare.target_times and own.t_overhead == 0.0
    assert own.metadata["calibrated_from"]["target_rise_scale"] == 1.0
    # The bare cost is that of the widths the calls had (width_counts), not of their mean width: half plain
    # steps (width 1) and half fed 5 positions cost (T(1) + T(5)) / 2 bare, here 12 ms, not T(3). That
    # holds for a batch, whose call is as wide as its longest row (its rows' lengths do not say), and for
    # a tree, whose call feeds its nodes.
    mixed = GenerationStats(target_calls=10, draft_calls=20, target_positions=30, draft_time=0.020,
                            target_time=0.090, verify_time=0.005, width_counts=[0, 5, 0, 0, 0, 5],
                            length_counts=[25, 5, 0, 0, 10])  # (batch 4: most rows drafted nothing)
    cal = bare.calibrate(mixed, plain_time=0.008)  # shifted: (0.008 + 0.012) / 2 = 10 ms > 9.5 measured
    assert cal.metadata["calibrated_from"]["target_rise_scale"] == pytest.approx((0.0095 - 0.008) / 0.002)
    assert (5 * cal.t_target(1) + 5 * cal.t_target(5)) / 10 == pytest.approx(0.0095)
    assert bare.mean_target_time(mixed) == pytest.approx(0.012)
    # Statistics without the histogram (older records) are priced at their mean width.
    older = GenerationStats(**{**mixed.__dict__, "width_counts": []})
    cal = bare.calibrate(older, plain_time=0.008)  # shifted T(3) = 11 ms; measured 9.5: scale 1.5 / 3
    assert cal.metadata["calibrated_from"]["target_rise_scale"] == pytest.approx(0.5)
    # A loop step cheaper than even a plain step cannot be reached by scaling: the rise goes to 0 and the
    # remaining gap is recorded as over-pricing, never as a negative overhead.
    fast = GenerationStats(target_calls=10, draft_calls=40, target_positions=50, draft_time=0.040,
                           target_time=0.070, verify_time=0.005)
    cal = bare.calibrate(fast, plain_time=0.008)
    assert cal.t_target(5) == pytest.approx(0.008) and cal.t_overhead == 0.0
    assert cal.metadata["calibrated_from"]["overpriced_per_step"] == pytest.approx(0.0005)


def test_end_to_end_speedup_adds_the_prefills():
    from exactspec import end_to_end_speedup, mixed_length_speedup

    cm = CostModel(0.002, {1: 0.010, 5: 0.014}, t_overhead=0.001)
    # alpha = .5, always 4 drafted: E = 1.9375 tokens per 0.023 s step.
    n = 64
    want = (0.020 + 63 * 0.010) / (0.030 + n / 1.9375 * 0.023)
    assert end_to_end_speedup(0.5, [0, 0, 0, 0, 1], cm, n, prefill_plain=0.020, prefill_spec=0.030) \
        == pytest.approx(want)
    # Without prefills and for long generations it tends to the per-step speedup.
    assert end_to_end_speedup(0.5, [0, 0, 0, 0, 1], cm, 10**7) == pytest.approx(
        mixed_length_speedup(0.5, [0, 0, 0, 0, 1], cm), rel=1e-5)
    with pytest.raises(ValueError, match="CostModel"):
        end_to_end_speedup(0.5, [0, 1], 0.1, 10)
    with pytest.raises(ValueError, match="n_tokens"):
        end_to_end_speedup(0.5, [0, 1], cm, 0)
    with pytest.raises(ValueError, match="prefill_spec"):
        end_to_end_speedup(0.5, [0, 1], cm, 10, prefill_spec=-1.0)


def test_calibrate_prices_a_steps_cold_first_draft_call_apart():
    from exactspec.speed.speedup import walltime_speedup
    from exactspec.speed.stats import GenerationStats

    bare = CostModel(0.001, {1: 0.010, 5: 0.014})
    # 10 steps of 4 draft calls: the first of each took 2.0 ms, the other three 1.2 ms each.
    st = GenerationStats(target_calls=10, draft_calls=40, draft_steps=10, target_positions=50,
                         draft_time=10 * (0.0020 + 3 * 0.0012), draft_first_time=10 * 0.0020,
                         target_time=0.170, verify_time=0.008)
    cal = bare.calibrate(st)
    assert cal.t_draft == pytest.approx(0.0012) and cal.t_draft_cold == pytest.approx(0.0008)
    # The step is still the run's own step, and a one-token draft now costs 2.0 ms, not the mean 1.4 ms.
    assert cal.step_time(4) * 10 == pytest.approx(st.draft_time + st.target_time + st.verify_time)
    assert cal.step_time(1) - cal.t_target(2) - cal.t_overhead == pytest.approx(0.0020)
    assert cal.step_time(0) == pytest.approx(cal.t_target(1) + cal.t_overhead)  # no draft call, no cold one
    assert walltime_speedup(0.5, 1, cal) == pytest.approx(1.5 * 0.010 / cal.step_time(1))
    assert CostModel.from_dict(json.loads(json.dumps(cal.to_dict()))) == cal
    assert cal.without_draft().step_time(4) == pytest.approx(cal.t_target(5) + cal.t_overhead)
    # One call per step: first and later calls cannot be told apart, all priced alike.
    one = GenerationStats(target_calls=10, draft_calls=10, draft_steps=10, target_positions=20,
                          draft_time=0.020, draft_first_time=0.020, target_time=0.120, verify_time=0.008)
    assert bare.calibrate(one).t_draft == pytest.approx(0.002) and bare.calibrate(one).t_draft_cold == 0.0


def test_a_real_run_records_the_first_draft_call_of_each_step():
    from exactspec import SpeculativeGenerator

    target, draft = tiny_llama(64, 2, 0), tiny_llama(32, 1, 1)
    st = SpeculativeGenerator(target, draft).generate(torch.randint(0, 128, (1, 8)), max_new_tokens=21, gamma=4,
                                                     do_sample=False, eos_token_id=[]).stats
    assert st.draft_steps == sum(c for k, c in enumerate(st.length_counts) if k > 0)
    assert 0 < st.draft_first_time < st.draft_time


def test_monotone_table_is_the_isotonic_fit_and_leaves_a_monotone_table_alone():
    """Verifying more tokens cannot cost less: noise that makes T_target(k) dip is pooled with its
    neighbours (pool-adjacent-violators: the least-squares non-decreasing fit), a monotone table is kept."""
    noisy = CostModel(0.002, {1: 0.015, 2: 0.023, 3: 0.020, 4: 0.024, 5: 0.016, 8: 0.011, 16: 0.017})
    fit = noisy.monotone().target_times
    values = list(fit.values())
    assert all(a <= b + 1e-15 for a, b in zip(values, values[1:]))
    assert fit[1] == 0.015 and sum(values) == pytest.approx(sum(noisy.target_times.values()))
    assert fit[2] == fit[8] == pytest.approx((0.023 + 0.020 + 0.024 + 0.016 + 0.011 + 0.017) / 6)
    clean = CostModel(0.002, {1: 0.010, 2: 0.011, 5: 0.013}, t_overhead=0.001, t_draft_cold=0.0005)
    assert clean.monotone() == clean


def test_calibrate_after_plain_steps_does_not_price_a_probes_catch_up_as_every_call():
    """gamma="auto": after plain steps, a probe's one draft call also feeds the tokens those steps emitted.
    With plain steps in the run, one-call steps keep the bare draft price and the cold extra is capped at
    one call; without plain steps (a fixed gamma) the run's own timings price the draft as before."""
    from exactspec.speed.stats import GenerationStats

    bare = CostModel(0.001, {1: 0.010, 5: 0.014})
    probes = GenerationStats(target_calls=40, draft_calls=4, target_positions=44, draft_time=0.040,
                             target_time=0.40, verify_time=0.004, draft_steps=4, draft_first_time=0.040,
                             plain_steps=36)  # 4 probes, each a 10 ms catch-up
    cal = bare.calibrate(probes)
    assert cal.t_draft == pytest.approx(0.001) and cal.t_draft_cold == pytest.approx(0.001)
    # a price measured on a busy machine (40 ms a call) is above what the probes cost, catch-up included
    # (10 ms): it cannot be right, and kept it would hold auto on plain steps for good
    dear = CostModel(0.040, {1: 0.010, 5: 0.014}).calibrate(probes)
    assert dear.t_draft == pytest.approx(0.010) and dear.t_draft_cold == 0.0
    fixed = GenerationStats(target_calls=4, draft_calls=4, target_positions=8, draft_time=0.040,
                            target_time=0.044, verify_time=0.001, draft_steps=4, draft_first_time=0.040)
    assert bare.calibrate(fixed).t_draft == pytest.approx(0.010)  # gamma=1, no plain steps: as it ran
    lookup = GenerationStats(target_calls=10, target_positions=14, draft_time=0.002, target_time=0.1,
                             verify_time=0.001, plain_steps=6)  # a model-free drafter with plain steps
    assert bare.calibrate(lookup).t_draft == 0.001 and bare.calibrate(lookup).t_draft_cold == 0.0


def test_a_steps_first_draft_call_is_timed_with_its_draw_as_every_later_call_is(monkeypatch):
    """first_call_time holds the first call's whole iteration (forward, q, the draw), as each later call's
    share of the draft time does. Timed up to the forward alone, every call's draw landed on the later
    calls, calibrate's t_draft came out dearer than a call and its cold extra clamped to 0 (r14: 3.2 ms per
    call priced where 2.6 ran, gamma="auto" at T = 1 predicted 13% slow)."""
    import time as _time

    from exactspec import SpeculativeGenerator
    from exactspec.engine.hfconfig import SamplingSpec

    draw, slow = SamplingSpec.sample, 0.02  # a draw far dearer than the tiny draft's forward

    def sample(self, q):
        _time.sleep(slow)
        return draw(self, q)

    monkeypatch.setattr(SamplingSpec, "sample", sample)
    target, draft = tiny_llama(64, 2, 0), tiny_llama(32, 1, 1)
    st = SpeculativeGenerator(target, draft).generate(torch.randint(0, 128, (1, 8)), max_new_tokens=13, gamma=3,
                                                     do_sample=True, eos_token_id=[], seed=0).stats
    assert st.draft_steps > 0 and st.draft_calls > st.draft_steps
    assert st.draft_first_time >= slow * st.draft_steps  # each first call's draw is in it
    later = (st.draft_time - st.draft_first_time) / (st.draft_calls - st.draft_steps)
    assert later >= slow and later < 2 * slow  # one draw per later call, not the first calls' draws too
