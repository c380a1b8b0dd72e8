"""A plain step (nothing drafted) skips verification, rollback and the drafter, so it costs less than a
speculative step beyond their forwards. Calibrated on a run, the cost model prices each kind at what it cost
(t_overhead_plain and t_overhead), gamma="auto" prices its choice between them so, and a model-free drafter
(prompt lookup) is re-priced between runs as a draft model is."""
from __future__ import annotations

import json

import pytest
import torch

from _policy_models import acceptance_at_rate
from _spec_models import tiny_lm
from exactspec import CostModel, SpeculativeGenerator
from exactspec.engine.policy import AdaptivePolicy, DraftingState
from exactspec.speed.prediction import _loop_seconds
from exactspec.speed.stats import GenerationStats

BARE = CostModel(0.0, {1: 0.010, 2: 0.011, 5: 0.014})


def _lookup_run(plain_each: float, plain_lookups: float = 0.001) -> GenerationStats:
    """A prompt-lookup run: 16 plain steps of `plain_each` s (plus `plain_lookups` s of lookups that found
    nothing worth verifying) and 4 width-2 steps of 13.5 ms with 3 ms of lookups."""
    plain_time = 16 * plain_each + plain_lookups
    return GenerationStats(target_calls=20, plain_steps=16, width_counts=[0, 16, 4], target_positions=24,
                           target_time=16 * plain_each + 4 * 0.0125, verify_time=4 * 0.001,
                           draft_time=plain_lookups + 0.003, plain_step_time=plain_time)


def test_calibrate_prices_plain_and_speculative_steps_at_what_each_cost():
    st = _lookup_run(0.0105)
    cal = BARE.calibrate(st)
    assert cal.t_overhead_plain == pytest.approx((16 * 0.0105 + 0.001) / 16 - 0.010)
    assert cal.t_overhead == pytest.approx((4 * 0.0135 + 0.003) / 4 - 0.011)
    assert cal.target_times == BARE.target_times and cal.t_draft == 0.0
    assert cal.step_time(0) == pytest.approx(0.0105 + 0.001 / 16)
    assert cal.step_time(1) == pytest.approx(0.0135 + 0.003 / 4)
    # The run's loop priced from its counts takes the seconds it took.
    assert _loop_seconds(st, cal) == pytest.approx(st.target_time + st.verify_time + st.draft_time)
    # One overhead pooled over both kinds priced a plain step dearer and a speculative one cheaper.
    pooled = BARE.calibrate(GenerationStats(**{**st.__dict__, "plain_step_time": 0.0}))
    assert pooled.t_overhead_plain == pooled.t_overhead
    assert pooled.step_time(0) > cal.step_time(0) and pooled.step_time(1) < cal.step_time(1)
    assert pooled.step_time(1) / pooled.step_time(0) < 1.15 < cal.step_time(1) / cal.step_time(0)


def test_plain_steps_cheaper_than_the_bare_table_are_priced_at_it_and_a_few_are_not_priced_apart():
    st = _lookup_run(0.009, plain_lookups=0.0)
    cal = BARE.calibrate(st)
    assert cal.target_times == BARE.target_times and cal.t_overhead_plain == 0.0  # never below the table
    assert cal.step_time(1) == pytest.approx(0.0135 + 0.003 / 4)  # the speculative step as it ran
    # A measured plain decoding (a prediction's baseline) is what it is: the plain overhead is then >= 0.
    against = BARE.calibrate(st, plain_time=0.0095)
    assert against.t_target(1) == pytest.approx(0.0095) and against.t_overhead_plain == 0.0
    # A batch-4 run whose one plain step came after three rows had finished (cheap): pooled, as before.
    # (Priced apart, and shifting the table to it, it made the next run go plain: 57 steps of 61.)
    one = GenerationStats(target_calls=28, plain_steps=1, width_counts=[0, 1, 0, 0, 0, 27], target_positions=136,
                          target_time=0.006 + 27 * 0.014, verify_time=27 * 0.001, plain_step_time=0.006)
    pooled = BARE.calibrate(GenerationStats(**{**one.__dict__, "plain_step_time": 0.0}))
    assert BARE.calibrate(one) == pooled and pooled.t_overhead_plain == pooled.t_overhead


def test_a_run_of_plain_steps_only_keeps_what_the_model_knew_of_speculative_steps():
    given = CostModel(0.001, {1: 0.010, 5: 0.014}, t_overhead=0.003, t_draft_cold=0.0005)
    st = GenerationStats(target_calls=10, plain_steps=10, width_counts=[0, 10], target_positions=10,
                         target_time=0.104, verify_time=0.001, plain_step_time=0.105)
    cal = given.calibrate(st)
    assert cal.t_overhead == 0.003 and cal.t_draft == 0.001
    assert cal.t_overhead_plain == pytest.approx(0.0005)


def test_the_plain_overhead_defaults_to_the_pooled_one_and_round_trips(tmp_path):
    old = CostModel(0.002, {1: 0.010, 5: 0.014}, t_overhead=0.001)
    assert old.t_overhead_plain == 0.001 and old.step_time(0) == pytest.approx(0.011)
    cm = CostModel(0.002, {1: 0.010, 5: 0.014}, t_overhead=0.001, t_overhead_plain=0.0002)
    assert cm.step_time(0) == pytest.approx(0.0102) and cm.step_time(4) == pytest.approx(0.008 + 0.014 + 0.001)
    assert cm != old and CostModel.from_dict(json.loads(json.dumps(cm.to_dict()))) == cm
    assert CostModel.from_dict(json.loads(json.dumps(old.to_dict()))) == old
    for derived in (cm.monotone(), cm.without_draft()):
        assert derived.t_overhead_plain == 0.0002
    with pytest.raises(ValueError, match="t_overhead_plain"):
        CostModel(0.1, {1: 1.0}, t_overhead_plain=-1.0)



def test_auto_takes_plain_steps_when_the_verification_path_costs_more_than_a_bad_lookup_brings():
    """Prompt lookup accepting 15% of its tokens: on the bare table a width-2 step costs 1% more than a
    plain one, so it drafts; priced as the loop ran (the speculative path costs 2 ms more) it steps plainly."""
    table = {1: 0.010, 2: 0.0101, 5: 0.012}
    bare = AdaptivePolicy(CostModel(0.0, table), 12, DraftingState(acceptance_at_rate(0.15)), free_draft=True)
    priced = AdaptivePolicy(CostModel(0.0, table, t_overhead=0.002, t_overhead_plain=0.0), 12,
                            DraftingState(acceptance_at_rate(0.15), probe_gap=1000), free_draft=True)
    left = torch.tensor([50])
    assert bare.next_lengths(left).tolist() == [12] and bare.trim([3]) >= 1
    assert priced.next_lengths(left).tolist() == [0]


def test_stopping_before_the_first_position_saves_the_verification_path():
    cm = CostModel(0.001, {1: 0.010, 2: 0.011, 5: 0.014}, t_overhead=0.002)
    pooled = AdaptivePolicy(cm, 8, DraftingState(acceptance_at_rate(0.6)))
    apart = AdaptivePolicy(CostModel(0.001, cm.target_times, t_overhead=0.002, t_overhead_plain=0.0), 8,
                           DraftingState(acceptance_at_rate(0.6)))
    for p in (pooled, apart):
        p.next_lengths(torch.tensor([50]))
    apart.rate = pooled.rate  # the same rate R: only the price of stopping differs
    assert apart.threshold(1) > pooled.threshold(1)
    assert apart.threshold(2) == pytest.approx(pooled.threshold(2))


class _Counting:
    """A prompt-lookup drafter that counts the steps it is asked to propose for."""

    def __init__(self):
        from exactspec.engine.drafters import PromptLookupDrafter

        self.inner, self.asked = PromptLookupDrafter(), 0

    def start(self, ids, mask):
        self.inner.start(ids, mask)

    def propose(self, caps, spec, policy=None):
        self.asked += 1
        return self.inner.propose(caps, spec, policy)

    def update(self, accepted, next_token, draft):
        self.inner.update(accepted, next_token, draft)

    def select_rows(self, rows):
        self.inner.select_rows(rows)


def test_a_lookup_run_times_its_plain_steps_apart():
    target = tiny_lm("llama").eval()
    drafter = _Counting()
    # verifying a drafted token costs 3x a plain step: auto steps plainly but for its probes
    gen = SpeculativeGenerator(target, drafter=drafter, cost_model=CostModel(0.0, {1: 0.010, 2: 0.03, 5: 0.05}))
    ids = torch.arange(3, 19)[None, :]  # (vocabulary 64)
    st = gen.generate(ids, max_new_tokens=24, gamma="auto", do_sample=True, eos_token_id=[],
                      generator=torch.Generator().manual_seed(0)).stats
    assert st.plain_steps > st.target_calls / 2
    assert 0 < st.plain_step_time <= st.target_time + st.verify_time + st.draft_time
    assert drafter.asked < st.plain_steps  # plain steps the policy chose ask nothing of the drafter
    cal = CostModel(0.0, {1: 0.010, 2: 0.03, 5: 0.05}).calibrate(st)  # what a cost profile reads of the run
    assert cal._t_overhead_plain is not None  # priced apart: at what they cost, never below the table's
    assert cal.step_time(0) == pytest.approx(max(0.010, st.plain_step_time / st.plain_steps))


def test_a_plain_first_step_whose_forward_was_the_prefills_is_not_priced_as_a_forward():
    """A run whose first step rode the prefill (GenerationStats.prefill_steps) timed one forward fewer than it
    has plain steps: a plain step is priced over the steps that made one."""
    st = _lookup_run(0.0105)
    rode = GenerationStats(**{**st.__dict__, "plain_steps": 17, "width_counts": [0, 17, 4], "target_calls": 21,
                              "target_positions": 25, "prefill_steps": 1})
    assert BARE.calibrate(rode).t_overhead_plain == pytest.approx(BARE.calibrate(st).t_overhead_plain)
    assert GenerationStats.merge([rode, st]).prefill_steps == 1
    # runs whose only plain step rode the prefill have no plain step priced: nothing to divide by
    only = GenerationStats(**{**st.__dict__, "plain_steps": 1, "width_counts": [0, 1, 4], "target_calls": 5,
                              "target_positions": 9, "prefill_steps": 1, "plain_step_time": 0.0001})
    assert BARE.calibrate(GenerationStats.merge([only] * 4)).t_overhead_plain == \
        BARE.calibrate(GenerationStats.merge([only] * 4)).t_overhead
