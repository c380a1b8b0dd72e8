"""A seeded gamma="auto" prices with a profile the engine's own loop measured (exactspec.engine.loopcosts.loop_priced),
a fresh one believes the pair's acceptance counted beside those prices (loop_acceptance) and waits FRESH_GAP plain
steps before its first probe, and an optimistic probe drafts the length it hopes pays. None of it changes the
output's law: greedy output equals the target's, and seeded runs reproduce."""
from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest
import torch
from _spec_models import left_padded, noisy_copy, target_greedy, tiny_lm
from exactspec import CostModel, SpeculativeGenerator
from exactspec.engine import loopcosts
from exactspec.engine.loopcosts import calibration_run, loop_acceptance
from exactspec.engine.policy import (DECAY, FIRST_GAP, FRESH_GAP, PRICE_MARGIN, PRIOR, PRIOR_SPREAD, AcceptanceModel,
                                     AdaptivePolicy, DraftingState)
from exactspec.speed import profiles


def _models():
    target = tiny_lm("llama", seed=0)
    return target, noisy_copy(target, 0.3, seed=3)


def test_a_seeded_auto_run_prices_with_a_profile_its_loop_measured_in_its_mode(monkeypatch, tmp_path):
    monkeypatch.setenv("EXACTSPEC_CACHE", str(tmp_path))
    monkeypatch.setattr(profiles, "_IN_PROCESS", {})
    target, draft = _models()
    asked = []
    real = profiles.stored_cost_model
    monkeypatch.setattr(profiles, "stored_cost_model", lambda *a, **k: asked.append(k.get("loop")) or real(*a, **k))
    gen = SpeculativeGenerator(target, draft)
    kw = dict(max_new_tokens=4, eos_token_id=[])
    gen.generate(torch.tensor([[4, 5, 6]]), seed=0, **kw)
    gen.generate(torch.tensor([[4, 5, 6]]), seed=0, do_sample=True, temperature=1.0, **kw)
    assert asked == ["greedy", "sampled"]
    files = sorted(p.name for p in (tmp_path / "costs").iterdir())
    assert len(files) == 2 and ".loop-greedy-" in files[0] and ".loop-sampled-" in files[1]
    stored = CostModel.load(tmp_path / "costs" / files[0])
    assert stored.metadata["loop"] == "greedy" and stored.t_overhead_plain == 0.0
    # a plain step is priced at what the loop's plain steps took, the table shifted to it
    assert stored.t_target(1) == pytest.approx(stored.metadata["loop_plain_step"], rel=1e-9)
    assert stored.t_draft > 0 and json.loads((tmp_path / "costs" / files[0]).read_text())["format"]
    rates = stored.metadata["acceptance"]  # counted beside the prices, in the profile's mode: the pair's own
    assert rates == loop_acceptance(SpeculativeGenerator(target, draft), sampled=False)
    assert 0 <= rates["first"] <= 1 and 0 <= rates["later"] <= 1 and rates["verdicts"] >= loopcosts.ACCEPT_RUNS
    monkeypatch.setattr(profiles, "_IN_PROCESS", {})  # a new process reads the same numbers back
    assert profiles.stored_cost_model(target, draft, 1, loop="greedy", measure=lambda: 1 / 0) == stored
    with pytest.raises(ValueError, match="loop"):
        profiles.stored_cost_model(target, draft, 1, loop="fast", measure=lambda: stored)
    with pytest.raises(ValueError, match="measure"):
        profiles.stored_cost_model(target, draft, 1, loop="sampled")


def test_the_engines_plain_run_never_drafts_and_emits_the_targets_tokens():
    target, draft = _models()
    gen = SpeculativeGenerator(target, draft)
    out = calibration_run(gen, torch.tensor([[4, 5, 6]]), gamma=0, max_new_tokens=7, eos_token_id=[], seed=0,
                          do_sample=False)
    assert out.stats.draft_calls == 0 and out.stats.plain_steps == out.stats.target_calls
    assert out.sequences[0, 3:].tolist() == target_greedy(target, [4, 5, 6], 7)


def test_an_optimistic_probe_drafts_the_length_it_hopes_pays_and_learns_the_continuation():
    # verifying costs little more than one token; a draft call costs a fifth of a plain step: drafting pays
    # from an acceptance of about 0.75 on; a fresh model (prior 0.6, no verdicts) is unsure either way
    cost = CostModel(t_draft=0.006, target_times={1: 0.010, 2: 0.0105, 16: 0.012})
    policy = AdaptivePolicy(cost, 8, DraftingState(AcceptanceModel(prior=0.6), probe_gap=1))
    m = policy.model
    assert policy.best_length(m.mean(), m.continuation())[0] == 0  # no length pays at the estimates ...
    u1, u2 = m.uncertainty()
    hopeful = policy.best_length(m.mean() + u1, m.continuation() + u2)[0]
    assert hopeful > 1  # ... a longer one would at optimistic rates
    caps = policy.next_lengths(torch.tensor([50]))  # the gap (1) is up: a probe
    assert policy.probing and caps.tolist() == [hopeful]
    before = policy.model.uncertainty()[1]
    conf = torch.tensor([0.9])
    assert policy.include(1, conf, caps).tolist() == [True]  # a probe verifies its first position
    draft = type("D", (), {"tokens": torch.zeros(1, 3, dtype=torch.long), "confidence": conf.repeat(1, 3),
                           "lengths": torch.tensor([3])})()
    policy.observe(draft, torch.tensor([3]))
    assert policy.model.later_n > 0 and policy.model.uncertainty()[1] < before  # the continuation was measured


def test_an_unseeded_generator_prices_every_run_with_the_stored_profile_not_its_own_clocks(monkeypatch, tmp_path):
    """gamma="auto" re-prices nothing from step times: a generator's later runs price as its first did, with the
    profile stored on disk (so prices learnt from clocks reach any run only through stored measurements)."""
    monkeypatch.setenv("EXACTSPEC_CACHE", str(tmp_path))
    monkeypatch.setattr(profiles, "_IN_PROCESS", {})
    target, draft = _models()
    priced = []
    real = AdaptivePolicy.__init__

    def init(self, cost_model, *a, **kw):
        priced.append(cost_model)
        real(self, cost_model, *a, **kw)
    monkeypatch.setattr(AdaptivePolicy, "__init__", init)
    gen = SpeculativeGenerator(target, draft)
    kw = dict(max_new_tokens=12, do_sample=False, eos_token_id=[])
    for i in range(3):
        gen.generate(torch.tensor([[4, 5, 6]]), generator=torch.Generator().manual_seed(i), **kw)
    gen.generate(torch.tensor([[4, 5, 6]]), seed=0, **kw)
    assert len(priced) == 4 and all(cm is priced[0] for cm in priced)
    assert priced[0] == CostModel.load(next((tmp_path / "costs").glob("*.loop-greedy-*.json")))


def test_a_seeded_auto_run_reproduces_from_the_stored_profile(monkeypatch, tmp_path):
    monkeypatch.setenv("EXACTSPEC_CACHE", str(tmp_path))
    monkeypatch.setattr(profiles, "_IN_PROCESS", {})
    target, draft = _models()
    kw = dict(max_new_tokens=24, eos_token_id=[], do_sample=True, temperature=1.0, top_k=0, seed=7)
    ids = torch.tensor([[3, 14, 15, 9, 26, 5, 35]])
    first = SpeculativeGenerator(target, draft).generate(ids, **kw)  # measures and stores the profile
    learnt = SpeculativeGenerator(target, draft)
    learnt.generate(ids, **{**kw, "seed": None}, generator=torch.Generator().manual_seed(3))
    monkeypatch.setattr(profiles, "_IN_PROCESS", {})  # as a new process: the profile read back from disk
    again = learnt.generate(ids, **kw)
    assert torch.equal(first.sequences, again.sequences)
    assert first.stats.gamma_history == again.stats.gamma_history


def test_a_profiles_name_follows_the_models_dtypes_and_configs_though_configs_are_read_once():
    target, draft = _models()
    key = profiles.profile_key(target, draft, 1)
    assert profiles.profile_key(target, draft, 1) == key and profiles.profile_key(target, draft, 2) != key
    assert profiles.profile_key(target, tiny_lm("llama", seed=0, layers=1), 1) != key  # another config
    draft.to(torch.float32)  # in place (tiny_lm builds float64): the same object, other numerics
    assert profiles.profile_key(target, draft, 1) != key


def test_a_profile_is_named_by_the_code_that_timed_its_loop(tmp_path, monkeypatch):
    (tmp_path / "engine").mkdir()
    (tmp_path / "engine" / "step.py").write_text("x = 1\n")
    before = profiles.source_digest(tmp_path)
    assert profiles.source_digest(tmp_path) == before
    (tmp_path / "engine" / "step.py").write_text("x = 2\n")  # an edit, the version number unchanged
    assert profiles.source_digest(tmp_path) != before
    target, draft = _models()
    key = profiles.profile_key(target, draft, 1)
    monkeypatch.setattr(profiles, "_version", lambda: "0.1.0+000000000000")
    assert profiles.profile_key(target, draft, 1) != key


def test_a_profile_is_named_by_the_processor_it_was_timed_on(monkeypatch):
    """A VM moved from an AVX2 CPU to an AVX-512 one keeps its node name and `platform.processor()` (empty on
    Linux); its stored profiles must not follow it: the model name and instruction sets name the profile."""
    target, draft = _models()
    key = profiles.profile_key(target, draft, 1)
    assert profiles._cpu() and profiles._cpu() == profiles._cpu()
    monkeypatch.setattr(profiles, "_cpu", lambda: "AMD EPYC 000000000000")
    assert profiles.profile_key(target, draft, 1) != key
    if pathlib.Path("/proc/cpuinfo").exists():  # the flags are read: another instruction set, another name
        monkeypatch.undo()
        profiles._cpu.cache_clear()
        real = open("/proc/cpuinfo").read()
        fake = real.replace(" avx2", " ", 1) if " avx2" in real else real + "\nflags\t: fake_isa\n"
        monkeypatch.setattr("builtins.open", _opener(fake))
        try:
            assert profiles.profile_key(target, draft, 1) != key
        finally:
            monkeypatch.undo()
            profiles._cpu.cache_clear()
        assert profiles.profile_key(target, draft, 1) == key


def _opener(text):
    import builtins
    import io

    real_open = builtins.open

    def fake(path, *a, **kw):
        return io.StringIO(text) if str(path) == "/proc/cpuinfo" else real_open(path, *a, **kw)
    return fake


def test_the_loop_priced_profile_prices_each_length_at_its_median_step_timed_in_turns(monkeypatch):
    """One price per draft length, each the median of its timed runs (one busy run must not price every later
    seeded run), the lengths timed in turns round by round, a longer one on the line through them all."""
    from exactspec.speed.stats import GenerationStats

    target, draft = _models()
    top = max(loopcosts.LOOP_GAMMAS)
    base = {g: 0.010 + 0.002 * g + (0.004 if g == 3 else 0.0) for g in range(top + 1)}  # seconds a step
    busy = [5.0, 1.0, 3.0, 0.9]  # the warm-up (two runs), then three rounds, the second beside something else
    order, rounds = [], iter([0, 0] + [r for r in range(1, len(busy)) for _ in loopcosts.LOOP_GAMMAS])

    def run(gen, ids, *, gamma, **kw):
        order.append(gamma)
        f, steps, call = busy[next(rounds)], 4, 0.001
        if gamma == 0:
            s = GenerationStats(plain_steps=steps + 1, prefill_steps=1, plain_step_time=steps * base[0] * f)
        else:
            drafted = base[gamma] * f - gamma * call  # the step's seconds besides its draft calls
            s = GenerationStats(gamma_steps=[0] * gamma + [steps], gamma_seconds=[0.0] * gamma + [steps * drafted],
                                draft_steps=steps, draft_calls=steps * gamma, draft_first_time=steps * call,
                                draft_time=steps * gamma * call)
        return type("Out", (), {"stats": s})()
    monkeypatch.setattr(loopcosts, "calibration_run", run)
    monkeypatch.setattr(loopcosts, "loop_acceptance", lambda gen, sampled: {"first": 0.5, "later": 0.6})
    cm = loopcosts.loop_priced(SpeculativeGenerator(target, draft, calibrate=False), 1, new_tokens=8)
    assert order == [0, top] + list(loopcosts.LOOP_GAMMAS) * 3  # warm-up, then in turns, round by round
    for g in loopcosts.LOOP_GAMMAS:  # the median of the three rounds: factor 1.0
        assert cm.step_time(g) == pytest.approx(base[g], rel=1e-9), g
    assert cm.metadata["loop_plain_step"] == pytest.approx(base[0])
    assert cm.t_draft == pytest.approx(0.001)
    for g in range(2, top):  # a length not timed: between its neighbours (base rises by 2 ms a length)
        if g not in loopcosts.LOOP_GAMMAS:
            assert cm.step_time(g) == pytest.approx(0.010 + 0.002 * g, rel=1e-9), g
    # past the timed lengths: the least-squares line through every drafting length, not through the last two
    # (which gamma = 3's extra 4 ms does not touch)
    timed = [g for g in loopcosts.LOOP_GAMMAS if g]
    slope, icpt = np.polyfit(timed, [base[g] for g in timed], 1)
    line = icpt + slope * (top + 4)
    assert abs(line - (base[top] + 4 * 0.002)) > 1e-4  # the last two's line would be another price
    assert cm.step_time(top + 4) == pytest.approx(line, rel=1e-9)


def test_a_large_batch_is_priced_by_short_runs_that_still_time_every_length_in_full(monkeypatch):
    """Past 8 rows a pricing run makes fewer tokens (ROW_TOKENS in all), never so few that a length's first step
    drafts less than the length: every length of LOOP_GAMMAS is priced from its own timed steps."""
    assert [loopcosts.loop_tokens(b) for b in (1, 8, 9, 64, 2000)] == [32, 32, 28, 12, 12]
    made = []
    real = loopcosts.calibration_run

    def run(gen, ids, **kw):
        made.append(kw["max_new_tokens"])
        return real(gen, ids, **kw)
    monkeypatch.setattr(loopcosts, "calibration_run", run)
    monkeypatch.setattr(loopcosts, "loop_acceptance", lambda gen, sampled: {"first": 0.5, "later": 0.6})
    target, draft = _models()
    cm = loopcosts.loop_priced(SpeculativeGenerator(target, draft), 64)
    assert set(made) == {loopcosts.loop_tokens(64)}
    assert sorted(int(g) for g in cm.metadata["loop_step"]) == list(loopcosts.LOOP_GAMMAS)
    assert cm.metadata["loop_tokens"] == 12 and cm.metadata["batch_size"] == 64


def test_a_run_whose_first_step_drafts_prefills_the_prompt_less_its_last_token_and_stays_greedy_equal(monkeypatch):
    """The first step is decided before the prompt is read: a plain one takes the whole prompt (its last slot is
    that step's law), a drafting one the prompt less its last token, which the first verification feeds."""
    from exactspec.backends.cache import SlotCache

    target = _models()[0]
    draft = noisy_copy(target, 0.02, seed=3)
    widths, real = [], SlotCache.forward

    def forward(self, tokens, valid, logits_to_keep=0):
        if self.model is target:
            widths.append(tokens.shape[1])
        return real(self, tokens, valid, logits_to_keep)
    monkeypatch.setattr(SlotCache, "forward", forward)
    cheap = CostModel(t_draft=0.0001, target_times={1: 0.010, 2: 0.0101, 16: 0.0102})  # drafting pays
    gen = SpeculativeGenerator(target, draft, cost_model=cheap)
    prompts = [[5, 9, 13, 5, 9, 21, 30], [7, 8, 11, 12, 2, 6, 5, 3]]
    out = gen.generate(*left_padded(prompts), max_new_tokens=10, do_sample=False, eos_token_id=[], pad_token_id=0,
                       seed=0)
    assert widths[0] == 7 and widths[1] > 1  # the prompt less its last token, then verifications
    assert out.stats.prefill_steps == 0 and out.stats.gamma_history[0] > 0 and out.stats.accepted_tokens > 0
    for row, prompt in zip(out.sequences.tolist(), prompts):
        assert row[-10:] == target_greedy(target, prompt, 10)


@pytest.mark.parametrize("sampled", [False, True])
def test_the_pairs_rates_are_counted_on_its_own_text_and_a_draft_the_target_always_keeps_counts_one(sampled):
    target = _models()[0]
    near = noisy_copy(target, 0.05, seed=3)
    rates = loop_acceptance(SpeculativeGenerator(target, near), sampled=sampled)
    assert 0.2 < rates["first"] < 0.9 and 0.2 < rates["later"] < 0.9
    assert rates == loop_acceptance(SpeculativeGenerator(target, near), sampled=sampled)  # seeded: no clock
    twin = noisy_copy(target, 0.0, seed=3)  # q = p: every draft kept, greedy or sampled
    assert loop_acceptance(SpeculativeGenerator(target, twin), sampled=sampled) | {"verdicts": 0} == \
        {"first": 1.0, "later": 1.0, "verdicts": 0}
    far = noisy_copy(target, 0.3, seed=3)  # a draft further from the target is kept less
    assert loop_acceptance(SpeculativeGenerator(target, far), sampled=sampled)["first"] < rates["first"] - 0.2


def test_two_drafts_of_one_shape_keep_their_own_rates_for_the_profile_is_named_by_their_weights(monkeypatch, tmp_path):
    """Prices follow shapes, acceptance follows weights: a fine-tune of a draft (here: the same config at another
    noise) shares the profile_key of its base but must not start from its base's rates."""
    monkeypatch.setenv("EXACTSPEC_CACHE", str(tmp_path))
    monkeypatch.setattr(profiles, "_IN_PROCESS", {})
    monkeypatch.setattr(loopcosts, "loop_priced", lambda gen, batch_size=1, *, sampled=False: CostModel(
        0.001, {1: 0.01, 2: 0.02}, {"acceptance": loop_acceptance(gen, sampled=sampled)}))  # untimed: rates only
    target = _models()[0]
    near, far = noisy_copy(target, 0.05, seed=3), noisy_copy(target, 0.3, seed=3)
    assert profiles.profile_key(target, near, 1) == profiles.profile_key(target, far, 1)  # one shape
    rates = {}
    for name, draft in (("near", near), ("far", far)):
        cm = loopcosts.auto_cost(SpeculativeGenerator(target, draft), 1, sampled=False)
        rates[name] = cm.metadata["acceptance"]
        assert rates[name] == loop_acceptance(SpeculativeGenerator(target, draft))
    assert rates["far"]["first"] < rates["near"]["first"] - 0.2
    assert len(list((tmp_path / "costs").glob("*.loop-greedy-*.json"))) == 2
    digest = profiles.weights_digest(target, near)
    assert profiles.weights_digest(target, noisy_copy(target, 0.05, seed=3)) == digest  # same weights, new object
    with torch.no_grad():
        next(near.parameters()).mul_(1.5)  # an in-place write to the same object: other weights, another name
    assert profiles.weights_digest(target, near) != digest


def test_a_fresh_model_believes_the_profiles_rates_and_a_learnt_one_its_own():
    cost = CostModel(0.004, {1: 0.010, 2: 0.02, 16: 0.05}, {"acceptance": {"first": 0.2, "later": 0.35}})
    policy = AdaptivePolicy(cost, 8, DraftingState())
    assert (policy.model.mean(), policy.model.continuation()) == pytest.approx((0.2, 0.35), abs=1e-12)
    assert AdaptivePolicy(cost, 8, free_draft=True).model.mean() == PRIOR  # prompt lookup: not the draft model's
    assert AdaptivePolicy(CostModel(0.004, {1: 0.010, 2: 0.02, 16: 0.05}), 8).model.mean() == PRIOR  # none given
    learnt = DraftingState()
    learnt.model.observe([0.9, 0.9], [True, True], [False, True])
    assert AdaptivePolicy(cost, 8, learnt).model.prior == PRIOR  # its own verdicts, not the profile's belief


def test_a_fresh_gap_stands_in_for_the_probes_a_seeded_run_would_repeat_every_run():
    """A seeded run whose prices and prior say the draft loses makes no probe in 64 tokens; a gap of FIRST_GAP
    would re-probe at steps 4, 12, 28 and 60 of every one (0.87x our loop on llama.cpp, unseen9)."""
    cost = CostModel(0.004, {1: 0.010, 2: 0.02, 16: 0.05}, {"acceptance": {"first": 0.3, "later": 0.4}})
    target, draft = _models()
    prompt = torch.tensor([[5, 9, 13, 5, 9, 21, 30, 4, 8, 17, 3, 12, 6, 19, 2, 11, 7, 14, 10, 1, 16]])
    kw = dict(max_new_tokens=64, do_sample=True, temperature=1.0, top_k=0, eos_token_id=[])
    out = SpeculativeGenerator(target, draft, cost_model=cost).generate(prompt, gamma="auto", seed=1, **kw)
    assert FRESH_GAP == 64 and out.stats.draft_calls == 0 and out.stats.plain_steps == 64
    policy = AdaptivePolicy(cost, 8, DraftingState(probe_gap=FIRST_GAP))
    probes = sum(bool(policy.next_lengths(torch.tensor([64 - i])).any()) for i in range(64))
    assert probes >= 4


def test_a_generators_first_run_keeps_its_fresh_gap_and_probes_at_the_next_runs_first_step():
    """Unseeded, the fresh gap is the state the generator carries to its later runs (as a seeded run's, which ends
    with it): no probe in the first 64-token run, where drafting loses; the probe then due at its last token, where
    nothing is left to draft, is made at the next run's first step instead of doubling the gap unseen; then none
    for 128 plain steps."""
    cost = CostModel(t_draft=0.004, target_times={1: 0.010, 2: 0.02, 16: 0.05})
    target, draft = _models()
    gen = SpeculativeGenerator(target, draft, cost_model=cost, calibrate=False)
    prompt = torch.tensor([[5, 9, 13, 5, 9, 21, 30, 4, 8, 17, 3, 12, 6, 19, 2, 11, 7, 14, 10, 1, 16]])
    kw = dict(max_new_tokens=64, do_sample=True, temperature=1.0, top_k=0, eos_token_id=[])
    stats = [gen.generate(prompt, gamma="auto", generator=torch.Generator().manual_seed(i), **kw).stats
             for i in range(3)]
    state = next(iter(gen._drafting.values()))
    assert [s.draft_calls > 0 for s in stats] == [False, True, False]
    assert stats[0].plain_steps == 64 and stats[2].plain_steps == 64
    assert state.probe_gap == 128 and state.since_probe < state.probe_gap


def test_a_fresh_model_drafts_only_where_a_length_loses_at_most_the_margin_below_its_measured_rates_by_their_spread():
    """The pair's measured rates lie within PRIOR_SPREAD of a new text's: a length that pays at them but loses more
    than PRICE_MARGIN at rates that much lower waits for the run's own verdicts (a plain step, then the fresh gap);
    one that loses less there drafts at once (where it had to pay there, seeded runs at T = 1 stayed plain where
    gamma = 3 ran 1.11x, r37). The doubt fades with the run's verdicts, and a prior nobody measured has none."""
    cost = CostModel(0.0, {1: 0.010, 2: 0.021, 16: 0.035})  # price[k] = 20 + k ms: a plain step 10

    def fresh(first, later, prices=cost):
        return AdaptivePolicy(CostModel(0.0, prices.target_times, {"acceptance": {"first": first, "later": later}}), 4)

    def gain(policy, first, later, k=4):  # a k-draft step's tokens a second over a plain step's, less 1
        return policy.expected(k, first, later) / policy.price[k] * policy.price[0] - 1

    d = PRIOR_SPREAD
    policy = fresh(0.6, 0.7)
    assert policy.expected(4, 0.6, 0.7) == pytest.approx(1 + 0.6 * (1 + 0.7 + 0.7 ** 2 + 0.7 ** 3))
    assert policy.best_length(0.6, 0.7)[0] == 4 and gain(policy, 0.6, 0.7) > PRICE_MARGIN  # pays at the prior ...
    assert gain(policy, 0.6 - d, 0.7 - d) < -PRICE_MARGIN  # ... loses more than the margin PRIOR_SPREAD lower
    assert policy.model.doubt() == pytest.approx(PRIOR_SPREAD)
    assert policy.next_lengths(torch.tensor([50])).tolist() == [0] and policy.plain_streak() == FRESH_GAP - 1
    near = fresh(0.62, 0.7)  # pays at the prior, loses under the margin PRIOR_SPREAD lower: drafts at once
    assert near.best_length(0.62 - d, 0.7 - d)[0] == 0 and -PRICE_MARGIN < gain(near, 0.62 - d, 0.7 - d) < 0
    assert near.next_lengths(torch.tensor([50])).tolist() == [4]  # (a cap: the drafter stops itself)
    sure = fresh(0.75, 0.8)
    assert sure.next_lengths(torch.tensor([50])).tolist() == [4]  # pays by more than the spread: drafts at once
    # Some length within the margin is enough (the drafter's own stops pick the length): gamma = 4 pays best at the
    # prior and loses more than the margin PRIOR_SPREAD lower, where gamma = 2 loses less
    short = fresh(0.5, 0.9, CostModel(0.0, {1: 0.010, 2: 0.0152, 16: 0.0628}))  # price[k] = 15.2 + 3.4 (k - 1) ms
    assert short.best_length(0.5, 0.9)[0] == 4 and gain(short, 0.5, 0.9) > PRICE_MARGIN
    assert gain(short, 0.5 - d, 0.9 - d) < -PRICE_MARGIN < gain(short, 0.5 - d, 0.9 - d, k=2) < 0
    assert short.next_lengths(torch.tensor([50])).tolist() == [4]
    unmeasured = AdaptivePolicy(cost, 4, DraftingState(AcceptanceModel(prior=0.6)))
    assert unmeasured.model.doubt() == 0.0
    learnt = DraftingState()
    learnt.model.prior, learnt.model.prior_later = 0.6, 0.7
    n = int(8 * learnt.model.weight()) + 1  # a measured prior's weight in verdicts, eight times over
    learnt.model.observe([0.9] * n, [True] * n, [False] + [True] * (n - 1))
    assert learnt.model.doubt() < PRIOR_SPREAD / 8
    assert AdaptivePolicy(cost, 4, learnt).next_lengths(torch.tensor([50])).tolist() == [4]


def test_a_measured_prior_weighs_what_its_spread_says_so_one_rejection_does_not_overturn_it():
    """The pair's measured rates lie within PRIOR_SPREAD of a new text's: they weigh as many verdicts as a Beta
    belief of that spread (scipy's Beta), and a fresh run's first rejection leaves a length that paid paying. With
    2 pseudo-verdicts one rejection took a rate of 0.705 to 0.47, and seeded runs of the stdlib pair at T = 1 went
    plain for 528 of 1,536 steps where the text kept 0.67 (transformers, unseen_code25, r36: 0.86x gamma = 4)."""
    from scipy import stats

    for first, later in ((0.7, 0.7), (0.3, 0.4), (0.9, 0.8)):
        model = AcceptanceModel(prior=first, prior_later=later)
        for p in (first, later):
            w = model.weight(p)
            assert stats.beta(w * p, w * (1 - p)).std() == pytest.approx(PRIOR_SPREAD, rel=1e-9)
        assert AcceptanceModel(prior=first).weight() == 2.0  # nobody measured it: a weak belief
    cost = CostModel(0.006, {1: 0.010, 16: 0.010})  # price[k] = 10 + 6 k ms: one token pays at 0.7, not at 0.5
    policy = AdaptivePolicy(CostModel(0.006, cost.target_times, {"acceptance": {"first": 0.75, "later": 0.75}}), 4)
    assert policy.next_lengths(torch.tensor([50])).tolist() == [4]  # drafts (a cap: the drafter stops itself)
    policy.model.observe([0.5], [False], [False])  # the run's first verdict: a rejection
    assert policy.model.pooled > 0.73
    assert AdaptivePolicy(cost, 4, policy.state).next_lengths(torch.tensor([50])).tolist() == [4]  # still drafts


@pytest.mark.parametrize("gain, drafts", [(0.02, False), (0.04, True)])
def test_a_step_drafts_only_where_it_beats_plain_steps_by_the_price_margin(gain, drafts):
    """Prices move more than a few per cent between measurements: a length that pays by less than PRICE_MARGIN at
    them stays plain, one that pays by more drafts (a learnt model, so PRIOR_SPREAD plays no part)."""
    state = DraftingState()
    state.model.observe([0.9] * 400, [True, False] * 200, [False] * 400)  # rates 0.5 first and later, well counted
    first, later = state.model.mean(), state.model.continuation()
    e1 = 1 + first  # a one-token step's expected tokens: price it to pay by `gain` exactly
    cost = CostModel(0.0, {1: 0.010, 2: 0.010 * e1 / (1 + gain), 3: 1.0, 16: 1.0})  # longer lengths never pay
    policy = AdaptivePolicy(cost, 4, state)
    assert policy.best_length(first, later)[0] == 1 and PRICE_MARGIN == 0.03
    # a drafting step's cap is max_gamma (the drafter's own stops end it), a plain one's 0
    assert policy.next_lengths(torch.tensor([50])).tolist() == [4 if drafts else 0]


def test_a_carried_models_verdicts_fade_over_plain_steps_as_over_drafted_ones():
    """A generator carries its model to the next prompt: one poor prompt's verdicts must fade while it steps
    plainly (r34: 1,522 of 1,536 steps plain where gamma = 4 ran 1.32x), so that its later probes meet rates near
    the pair's again, by the same DECAY a step whether the steps ran one at a time or as a streak."""
    cost = CostModel(0.004, {1: 0.010, 2: 0.02, 16: 0.05}, {"acceptance": {"first": 0.7, "later": 0.8}})
    poor = [DraftingState(), DraftingState()]
    for st in poor:
        AdaptivePolicy(cost, 8, st)  # the prior: the pair's rates
        st.model.observe([0.5] * 600, [False] * 570 + [True] * 30, [False] * 600)
    before = poor[0].model.mean()
    assert before < 0.2
    one, streak = AdaptivePolicy(cost, 8, poor[0]), AdaptivePolicy(cost, 8, poor[1])
    n0 = poor[0].model.observations
    for _ in range(50):
        one.model.fade()
    streak.skip_plain(50)
    assert poor[0].model.observations == pytest.approx(n0 * DECAY ** 50) == poor[1].model.observations
    policy = AdaptivePolicy(cost, 8, poor[0])
    assert policy.next_lengths(torch.tensor([60])).tolist() == [0]  # a plain step by decision, faded too
    assert poor[0].model.observations == pytest.approx(n0 * DECAY ** 51)
    poor[0].model.fade(950)  # 1,001 steps in all: about 16 runs of 64 tokens
    assert poor[0].model.mean() > 0.55  # back near the pair's 0.7 (DECAY's time constant is 200 steps)


@pytest.mark.parametrize("target_pos, draft_pos", [(64, 64), (64, 40)])
def test_the_pairs_rates_are_counted_within_the_shorter_models_context(target_pos, draft_pos):
    """ACCEPT_PROMPT + ACCEPT_TOKENS positions would pass a 64-position model's context: the runs are cut to fit,
    so counting the rates never fails the user's first gamma="auto" call."""
    target = tiny_lm("llama", seed=0, max_pos=target_pos)
    draft = noisy_copy(tiny_lm("llama", seed=0, max_pos=draft_pos), 0.05, seed=3)
    assert loopcosts.ACCEPT_PROMPT + loopcosts.ACCEPT_TOKENS > min(target_pos, draft_pos)
    rates = loop_acceptance(SpeculativeGenerator(target, draft), sampled=True)
    assert rates["verdicts"] >= loopcosts.ACCEPT_RUNS and 0 < rates["first"] <= 1
