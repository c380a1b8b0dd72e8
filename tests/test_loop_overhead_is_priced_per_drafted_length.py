"""Inside the loop a target forward made right after gamma draft calls runs slower than a bare one, more so
the more draft work came before it. A run records its speculative steps' seconds per drafted length
(GenerationStats.gamma_steps / gamma_seconds); calibrate prices each length apart (t_overhead_by_gamma:
shrunk towards the pooled overhead, non-decreasing, and still pricing the run at what it took); gamma="auto"
then prices longer steps dearer, and a prediction prices each step at its length."""
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

BARE = CostModel(0.001, {1: 0.010, 3: 0.011, 4: 0.012, 5: 0.013})


def _run(per_gamma: dict[int, tuple[int, float]], plain: int = 0) -> GenerationStats:
    """Statistics of a chain run: per drafted length gamma, (steps, overhead seconds per step beyond the bare
    forward over gamma + 1 tokens); one draft call per drafted token; `plain` plain steps at T_target(1)."""
    st = GenerationStats()
    for g, (n, over) in per_gamma.items():
        for _ in range(n):
            st.record_step(torch.tensor([g]), torch.tensor([g - 1]))
            st.record_step_time(g, BARE.t_target(g + 1) + over)
            st.gamma_history.append(g)
            st.target_time += BARE.t_target(g + 1) + over
            st.draft_calls += g
            st.draft_time += g * 0.001
    for _ in range(plain):
        st.record_plain(1)
        st.gamma_history.append(0)
        st.plain_steps += 1
        st.plain_step_time += 0.010
        st.target_time += 0.010
    return st


def test_each_drafted_length_is_priced_at_what_its_steps_cost_and_the_run_at_what_it_took():
    st = _run({2: (40, 0.001), 4: (40, 0.003)})
    cal = BARE.calibrate(st)
    assert cal.t_overhead == pytest.approx(0.002)  # the pooled overhead, as before
    by = cal.t_overhead_by_gamma
    assert set(by) == {2, 4}
    # each length shrunk towards a line through all lengths' own, which here passes through both
    assert by[2] == pytest.approx(0.001) and by[4] == pytest.approx(0.003)
    assert cal.overhead(3) == pytest.approx((by[2] + by[4]) / 2)  # interpolated between lengths it saw
    assert cal.overhead(1) == by[2] and cal.overhead(9) == by[4]  # held flat past its ends
    assert cal.step_time(4) - cal.step_time(2) > 2 * cal.t_draft + BARE.t_target(5) - BARE.t_target(3)
    # the run's own steps are priced at the seconds they took
    assert cal.loop_overhead(st) == pytest.approx(40 * 0.001 + 40 * 0.003)
    # a fixed-gamma run has one length, which the pooled overhead already is: no table, nothing changes
    assert BARE.calibrate(_run({4: (40, 0.003)})).t_overhead_by_gamma is None


def test_a_long_length_seen_in_few_steps_is_priced_near_its_own_along_the_trend(monkeypatch):
    """gamma="auto" drafts long only now and then: 2 steps of 5 tokens among 40 of 2. Shrunk towards the
    pooled overhead (which the short steps make) the long ones would be priced near the short ones'; shrunk
    towards the line through both, at what they cost."""
    import exactspec.speed.costmodel

    st = _run({2: (40, 0.001), 5: (2, 0.004)})
    by = BARE.calibrate(st).t_overhead_by_gamma
    assert by[2] == pytest.approx(0.001) and by[5] == pytest.approx(0.004)
    monkeypatch.setattr(exactspec.speed.costmodel, "_TREND", False)
    assert BARE.calibrate(st).t_overhead_by_gamma[5] < 0.002


def test_a_length_that_timed_cheaper_than_a_shorter_one_is_pooled_with_it():
    cal = BARE.calibrate(_run({2: (30, 0.002), 3: (30, 0.001), 4: (30, 0.003)}))
    by = cal.t_overhead_by_gamma
    assert by[2] == pytest.approx(by[3]) and by[3] < by[4]  # non-decreasing: noise is not chased
    assert sum(30 * v for v in by.values()) == pytest.approx(90 * cal.t_overhead)


def test_plain_steps_too_few_to_price_apart_keep_the_run_priced_at_what_it_took():
    st = _run({2: (20, 0.001), 5: (20, 0.004)}, plain=2)
    cal = BARE.calibrate(st)
    assert cal.t_overhead_by_gamma is not None and cal._t_overhead_plain is None
    loop = st.draft_time + st.target_time + st.verify_time
    assert st.draft_calls * cal.t_draft + st.target_calls * cal.mean_target_time(st) + cal.loop_overhead(st) \
        == pytest.approx(loop)
    assert _loop_seconds(st, cal) == pytest.approx(loop)


def test_the_table_round_trips_and_survives_monotone_and_without_draft(tmp_path):
    cm = CostModel(0.001, {1: 0.010, 5: 0.014}, t_overhead=0.002, t_overhead_by_gamma={2: 0.001, 4: 0.003})
    assert CostModel.from_dict(json.loads(json.dumps(cm.to_dict()))) == cm
    cm.save(tmp_path / "cm.json")
    assert CostModel.load(tmp_path / "cm.json") == cm
    assert cm.monotone().t_overhead_by_gamma == cm.t_overhead_by_gamma
    assert cm.without_draft().overhead(4) == 0.003
    assert cm != CostModel(0.001, {1: 0.010, 5: 0.014}, t_overhead=0.002)
    assert cm.overhead(0) == 0.002  # a plain step keeps t_overhead_plain (here t_overhead)
    with pytest.raises(ValueError, match="t_overhead_by_gamma"):
        CostModel(0.001, {1: 0.01}, t_overhead_by_gamma={0: 0.001})
    with pytest.raises(ValueError, match="t_overhead_by_gamma"):
        CostModel(0.001, {1: 0.01}, t_overhead_by_gamma={2: -1.0})
    with pytest.raises(TypeError, match="t_overhead_by_gamma"):
        CostModel(0.001, {1: 0.01}, t_overhead_by_gamma=[0.001])



def test_auto_drafts_shorter_when_long_steps_cost_more_in_the_loop():
    """The same pooled overhead; with the long steps dearer than the short ones, the best fixed length
    under the model shortens and drafting on past position 2 needs a surer prefix."""
    pooled = CostModel(0.001, {1: 0.010, 3: 0.0105, 5: 0.011, 9: 0.012}, t_overhead=0.002)
    by = CostModel(0.001, pooled.target_times, t_overhead=0.002, t_overhead_by_gamma={2: 0.001, 3: 0.003})
    policies = [AdaptivePolicy(cm, 8, DraftingState(acceptance_at_rate(0.75))) for cm in (pooled, by)]
    for p in policies:
        p.next_lengths(torch.tensor([50]))
    (k_pooled, _), (k_by, _) = (p.best_length(0.75, 0.75) for p in policies)
    assert k_by < k_pooled
    policies[1].rate = policies[0].rate  # the same rate R: only the price of going on differs
    assert policies[1].threshold(3) > policies[0].threshold(3)
    assert policies[1].threshold(3, paid=False) > policies[0].threshold(3, paid=False)


def test_a_real_auto_run_records_its_steps_per_drafted_length_and_is_priced_at_what_it_took():
    target, draft = tiny_lm("llama", seed=0, init=0.02), tiny_lm("llama", seed=0, init=0.02, layers=1)
    gen = SpeculativeGenerator(target, draft, cost_model=CostModel(1e-4, {1: 1e-3, 2: 1.1e-3, 9: 1.5e-3}))
    st = gen.generate(torch.randint(0, 64, (1, 8), generator=torch.Generator().manual_seed(0)),
                      max_new_tokens=40, do_sample=True, seed=0, eos_token_id=[]).stats
    spec = st.target_calls - st.plain_steps
    assert sum(st.gamma_steps) == spec and st.gamma_steps[0] == 0
    assert [sum(1 for g in st.gamma_history if g == k) for k in range(len(st.gamma_steps))][1:] == st.gamma_steps[1:]
    # a speculative step's seconds outside draft calls: target_time and verify_time less the plain steps'
    # share (plain_step_time, which also holds their few microseconds before the forward)
    total = st.target_time + st.verify_time
    assert total - st.plain_step_time <= sum(st.gamma_seconds) <= total
    merged = GenerationStats.merge([st, st])
    assert merged.gamma_steps == [2 * n for n in st.gamma_steps]
    assert merged.gamma_seconds == pytest.approx([2 * s for s in st.gamma_seconds])


def test_a_batch_prices_its_drafted_lengths_only_from_steps_with_every_row_running():
    """Steps after a row finished are narrower and cheaper: they would mix the batch's shrinking into the
    price of a drafted length, so only the steps with the whole batch are timed per length."""
    target = tiny_lm("llama", seed=0, init=0.02)
    draft = tiny_lm("llama", seed=0, init=0.02, layers=1)
    ids = torch.randint(1, 64, (3, 6), generator=torch.Generator().manual_seed(3))
    st = SpeculativeGenerator(target, draft).generate(ids, max_new_tokens=30, gamma=3, do_sample=True, seed=1,
                                                      eos_token_id=list(range(1, 64, 5))).stats
    rows = [len(r) for r in st.step_rows]
    assert min(rows) < 3 and max(rows) == 3  # a row finished before the others
    whole = sum(1 for n, g in zip(rows, st.gamma_history) if n == 3 and g > 0)
    assert sum(st.gamma_steps) == whole


def test_a_batch_weighs_each_rows_p_by_the_tokens_it_has_left():
    """A batch ends with its slowest row: a confident row about to finish does not keep the batch drafting
    for a doubtful row with most of its tokens left, unless every row is weighed alike."""
    from exactspec.engine.policy import AcceptanceModel

    m = AcceptanceModel()
    lo, hi = torch.full((500,), 0.05), torch.full((500,), 0.99)
    for c, rate in ((lo, 0.1), (hi, 0.95)):
        m.see(c)
        m.observe(c, torch.arange(500) < round(rate * 500), later=[True] * 500)
    cm = CostModel(0.002, {1: 0.010, 2: 0.012, 5: 0.015})
    decided = {}
    for weigh in (True, False):
        pol = AdaptivePolicy(cm, 8, DraftingState(m))
        caps = pol.next_lengths(torch.tensor([50, 2]))
        if not weigh:  # every row alike
            pol._w = [0.5, 0.5]
        assert caps.tolist() == [8, 2] and not pol.probing
        h = pol.threshold(1)
        p = m.predict([0.05, 0.99])
        assert (51 * p[0] + 3 * p[1]) / 54 < h < (p[0] + p[1]) / 2  # the two weighings fall either side
        decided[weigh] = pol.include(1, torch.tensor([0.05, 0.99]), caps).tolist()
    assert decided == {True: [False, False], False: [True, True]}
