"""A fresh gamma="auto" starts from what the prompt says of the draft (exactspec.engine.promptprior), a seeded run
prices with a profile the engine's own loop measured (exactspec.engine.loopcosts.loop_priced), and an optimistic
probe drafts the length it hopes pays. None of it changes the output's law: greedy output equals the target's,
and seeded runs reproduce."""
from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from _spec_models import left_padded, noisy_copy, target_greedy, tiny_lm
from exactspec import CostModel, SpeculativeGenerator
from exactspec.engine.hfconfig import SamplingSpec
from exactspec.engine.loopcosts import calibration_run
from exactspec.engine.policy import AcceptanceModel, AdaptivePolicy, DraftingState
from exactspec.engine.promptprior import PROMPT_WEIGHT, prompt_evidence, prompt_positions
from exactspec.speed import profiles

P = torch.tensor([0.40, 0.30, 0.15, 0.10, 0.05])
Q = torch.tensor([0.20, 0.50, 0.15, 0.10, 0.05])  # the brief's worked example: sum min(p, q) = 0.8


def test_the_prompts_evidence_is_the_token_rules_acceptance_at_each_teacher_forced_position():
    p_logits = torch.stack([P.log(), Q.log(), P.log()])[None]  # [1, 3, 5]
    q_logits = torch.stack([Q.log(), Q.log(), P.log().flip(0)])[None]
    valid = torch.tensor([[True, True, True]])
    conf, acc, after = prompt_evidence(p_logits, q_logits, valid, SamplingSpec(vocab_size=5))  # T = 1
    assert acc == pytest.approx([0.8, 1.0, 0.05 + 0.10 + 0.15 + 0.10 + 0.05], abs=1e-6)
    assert conf == pytest.approx([0.5, 0.5, 0.4], abs=1e-6)  # max_x q(x): the drafter's confidence
    assert after == pytest.approx([0.0, 0.8, 1.0], abs=1e-6)  # reached after an accepted position
    conf, acc, after = prompt_evidence(p_logits, q_logits, valid, SamplingSpec(vocab_size=5, greedy=True))
    assert acc == [0.0, 1.0, 0.0]  # greedy: the argmaxes agree or not
    # padded slots are left out, and a slot after a pad is nobody's continuation
    conf, acc, after = prompt_evidence(p_logits, q_logits, torch.tensor([[False, True, True]]),
                                       SamplingSpec(vocab_size=5))
    assert acc == pytest.approx([1.0, 0.45], abs=1e-6) and after == pytest.approx([0.0, 1.0], abs=1e-6)
    with pytest.raises(ValueError, match="prompt_evidence"):
        prompt_evidence(p_logits, q_logits[:, :2], valid, SamplingSpec(vocab_size=5))


def _models():
    target = tiny_lm("llama", seed=0)
    return target, noisy_copy(target, 0.3, seed=3)


def _spy(monkeypatch):
    seen = []
    real = AdaptivePolicy.seed_from_prompt

    def spy(self, conf, acc, after):
        seen.append((list(conf), list(acc)))
        real(self, conf, acc, after)

    monkeypatch.setattr(AdaptivePolicy, "seed_from_prompt", spy)
    return seen


def test_a_fresh_auto_run_reads_the_prompts_last_positions_and_a_learnt_one_does_not(monkeypatch):
    target, draft = _models()
    seen = _spy(monkeypatch)
    gen = SpeculativeGenerator(target, draft, calibrate=False, cost_model=CostModel(0.001, {1: 0.01, 16: 0.012}))
    prompts = [[5, 9, 13, 5, 9, 21, 30], [7, 8, 11]]  # left-padded: the second row has 2 real slots
    kw = dict(max_new_tokens=6, do_sample=False, eos_token_id=[], pad_token_id=0)
    out = gen.generate(*left_padded(prompts), generator=torch.Generator().manual_seed(0), **kw)
    assert len(seen) == 1 and len(seen[0][0]) == 6 + 2  # every real (slot, next token) pair of both rows
    state = gen._drafting[next(iter(gen._drafting))]
    assert state.model.observations >= PROMPT_WEIGHT * 8 * 0.995 ** 6  # (decayed by the run's verdicts)
    gen.generate(*left_padded(prompts), generator=torch.Generator().manual_seed(0), **kw)
    assert len(seen) == 1  # the generator has learnt: its own verdicts, not the prompt's, from now on
    gen.generate(*left_padded(prompts), seed=3, **kw)
    assert len(seen) == 2  # a seeded run starts fresh, from the prompt
    gen.generate(*left_padded(prompts), seed=3, gamma=3, **kw)
    gen.generate(*left_padded(prompts), seed=3, repetition_penalty=1.3, **kw)  # prefix-dependent: no prior
    SpeculativeGenerator(target, drafter="prompt_lookup").generate(*left_padded(prompts), seed=3, **kw)
    assert len(seen) == 2
    for row, prompt in zip(out.sequences.tolist(), prompts):  # greedy output stays the target's
        assert row[-6:] == target_greedy(target, prompt, 6)


@pytest.mark.parametrize("sampled", [False, True])
def test_the_prompts_evidence_matches_the_models_own_logits(monkeypatch, sampled):
    monkeypatch.setattr("exactspec.engine.promptprior.PROMPT_POSITIONS", 32)  # (the test was written for 32)
    target, draft = _models()
    seen = _spy(monkeypatch)
    prompt = [3, 14, 15, 9, 26, 5, 35, 8, 9, 7]
    SpeculativeGenerator(target, draft, cost_model=CostModel(0.001, {1: 0.01, 16: 0.012})).generate(
        torch.tensor([prompt]), max_new_tokens=2, seed=1, eos_token_id=[],
        **(dict(do_sample=True, temperature=1.0, top_k=0) if sampled else dict(do_sample=False)))
    ids = torch.tensor([prompt])
    with torch.no_grad():
        p = torch.softmax(target(ids).logits[0, :-1].float(), -1)  # [P-1, V]: the law of tokens 1 .. P-1
        q = torch.softmax(draft(ids).logits[0, :-1].float(), -1)
    want = torch.minimum(p, q).sum(-1) if sampled else (p.argmax(-1) == q.argmax(-1)).float()
    conf, acc = seen[0]
    assert acc == pytest.approx(want.tolist(), abs=1e-6)
    assert conf == pytest.approx(q.amax(-1).tolist(), abs=1e-6)


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
    assert len(files) == 2 and files[0].endswith(".loop-greedy.json") and files[1].endswith(".loop-sampled.json")
    stored = CostModel.load(tmp_path / "costs" / files[0])
    assert stored.metadata["loop"] == "greedy" and stored.t_overhead_plain == 0.0
    # a plain step is priced at what the loop's plain steps took, the table shifted to it
    assert stored.t_target(1) == pytest.approx(stored.metadata["loop_plain_step"], rel=1e-9)
    assert stored.t_draft > 0 and json.loads((tmp_path / "costs" / files[0]).read_text())["format"]
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


def test_an_optimistic_probe_drafts_the_length_it_hopes_pays_and_learns_the_continuation(monkeypatch):
    # verifying costs little more than one token; a draft call costs a fifth of a plain step: drafting pays
    # from an acceptance of about 0.75 on; a fresh model (prior 0.6, no verdicts) is unsure either way
    monkeypatch.setattr("exactspec.engine.policy.PRIOR", 0.6)
    cost = CostModel(t_draft=0.006, target_times={1: 0.010, 2: 0.0105, 16: 0.012})
    policy = AdaptivePolicy(cost, 8, DraftingState(probe_gap=1))
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
    assert priced[0] == CostModel.load(next((tmp_path / "costs").glob("*.loop-greedy.json")))


def test_a_padded_batchs_evidence_is_each_rows_own_under_top_p_and_a_large_batch_reads_fewer_positions(monkeypatch):
    monkeypatch.setattr("exactspec.engine.promptprior.PROMPT_POSITIONS", 32)  # (the test was written for 32)
    target, draft = _models()
    seen = _spy(monkeypatch)
    prompts = [[3, 14, 15, 9, 26, 5, 35, 8, 9, 7, 9, 3], [7, 8, 11, 12], [21, 22, 23, 24, 25, 26, 27]]
    kw = dict(max_new_tokens=2, eos_token_id=[], pad_token_id=0, do_sample=True, temperature=0.7, top_p=0.9,
              top_k=0, seed=1)
    gen = SpeculativeGenerator(target, draft, cost_model=CostModel(0.001, {1: 0.01, 16: 0.012}))
    gen.generate(*left_padded(prompts), **kw)
    batch_conf, batch_acc = seen[-1]
    want_conf, want_acc = [], []
    for prompt in prompts:  # each row alone: the same expected verdicts, in row order
        gen.generate(torch.tensor([prompt]), **kw)
        want_conf += seen[-1][0]
        want_acc += seen[-1][1]
    assert len(batch_acc) == sum(len(p) - 1 for p in prompts)
    assert batch_acc == pytest.approx(want_acc, abs=1e-5) and batch_conf == pytest.approx(want_conf, abs=1e-5)
    assert any(0 < a < 1 for a in batch_acc)  # sampled laws (top-p truncated), not one-hot argmaxes
    assert prompt_positions(1, 100, 4096) == 32 and prompt_positions(1, 1, 4096) == 0
    assert 0 < prompt_positions(16, 100, 49_152) < 32  # a bounded number of logits in flight ...
    assert prompt_positions(64, 100, 152_000) == 0  # ... and none when one position per row would pass it


def test_a_seeded_auto_run_reproduces_from_the_stored_profile_and_the_prompt(monkeypatch, tmp_path):
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


def test_the_prompts_evidence_stands_in_for_the_probes_it_replaces():
    cost = CostModel(t_draft=0.004, target_times={1: 0.010, 2: 0.02, 16: 0.05})  # verifying costs ~ plain steps
    for n, gap in ((0, 4), (1, 4), (2, 8), (6, 32), (32, 256)):  # PROMPT_WEIGHT 0.5: a doubling per 2 positions
        policy = AdaptivePolicy(cost, 8, DraftingState())
        policy.seed_from_prompt([0.5] * n, [0.3] * n, [0.0] * n)
        assert policy.state.probe_gap == gap, n
    # a seeded run whose prompt says the draft loses: no re-probe in 64 tokens (a fresh gap of 4 re-probed at
    # steps 4, 12, 28 and 60); the first check below fails without the evidence's gap
    target, draft = _models()
    gen = SpeculativeGenerator(target, draft, cost_model=cost)
    prompt = torch.tensor([[5, 9, 13, 5, 9, 21, 30, 4, 8, 17, 3, 12, 6, 19, 2, 11, 7, 14, 10, 1, 16]])
    kw = dict(max_new_tokens=64, do_sample=True, temperature=1.0, top_k=0, eos_token_id=[])
    out = gen.generate(prompt, gamma="auto", seed=1, **kw)
    assert out.stats.draft_calls == 0 and out.stats.plain_steps == 64
    policy = AdaptivePolicy(cost, 8, DraftingState())  # without the evidence, the same policy re-probes
    probes = sum(bool(policy.next_lengths(torch.tensor([64 - i])).any()) for i in range(64))
    assert probes >= 4


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


def test_a_run_whose_prompt_says_draft_gives_the_pending_token_back_and_stays_greedy_equal(monkeypatch):
    """The target's prefill takes the whole prompt before the evidence is read (betting on a plain first step);
    when the policy drafts instead, the prompt's last token leaves the target's cache again and the first
    verification feeds it with the drafts, as a prefill of the prompt less its last token would have."""
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
    assert widths[0] == 8 and widths[1] > 1 and widths[2] > 1  # the whole prompt, then verifications
    assert out.stats.prefill_steps == 0 and out.stats.gamma_history[0] > 0 and out.stats.accepted_tokens > 0
    for row, prompt in zip(out.sequences.tolist(), prompts):
        assert row[-10:] == target_greedy(target, prompt, 10)


def test_the_loop_priced_profile_prices_each_length_at_its_median_step_timed_in_turns(monkeypatch):
    """One price per draft length, each the median of its timed runs (one busy run must not price every later
    seeded run), the lengths timed in turns round by round, a longer one on the line through them all."""
    from exactspec.engine import loopcosts
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
    from exactspec.engine import loopcosts

    assert [loopcosts.loop_tokens(b) for b in (1, 8, 9, 64, 2000)] == [32, 32, 28, 12, 12]
    made = []
    real = loopcosts.calibration_run

    def run(gen, ids, **kw):
        made.append(kw["max_new_tokens"])
        return real(gen, ids, **kw)
    monkeypatch.setattr(loopcosts, "calibration_run", run)
    target, draft = _models()
    cm = loopcosts.loop_priced(SpeculativeGenerator(target, draft), 64)
    assert set(made) == {loopcosts.loop_tokens(64)}
    assert sorted(int(g) for g in cm.metadata["loop_step"]) == list(loopcosts.LOOP_GAMMAS)
    assert cm.metadata["loop_tokens"] == 12 and cm.metadata["batch_size"] == 64


def test_a_generators_first_run_keeps_the_gap_its_prompts_evidence_grew():
    """Unseeded, the evidence grows the gap of the state the generator carries to its later runs (as a seeded
    run's, which ends with it): no probe in the first 64-token run, whose prompt said drafting loses (the gap
    grew to 64), and the probe then due at its last token, where nothing is left to draft, is made at the next
    run's first step instead of doubling the gap unseen; then none for 128 plain steps."""
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


# Drafting pays only where the draft is kept ~97 times in 100 or more: 8 positions of the prompt cannot say that
# (AcceptanceModel.ceiling(8, PROMPT_WEIGHT) = 0.967 / 0.964), 16 could; a draft the target always kept would pay (not hopeless)
NEAR_HOPELESS = CostModel(t_draft=0.009, target_times={1: 0.010, 2: 0.0125, 16: 0.014})


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1), st.floats(0, 1)), min_size=1, max_size=40))
def test_no_evidence_of_n_positions_lifts_a_fresh_model_above_its_ceiling(evidence):
    conf, accept, after = (list(x) for x in zip(*evidence))
    after[0] = 0.0  # a row's first position follows none
    policy = AdaptivePolicy(NEAR_HOPELESS, 8, DraftingState())
    policy.seed_from_prompt(conf, accept, after)
    first, later = AcceptanceModel.ceiling(len(conf), PROMPT_WEIGHT)
    assert policy.model.mean() <= first + 1e-12 and policy.model.continuation() <= later + 1e-12


@pytest.mark.parametrize("n", [1, 4, 8, 16])
def test_the_ceiling_is_what_the_most_favourable_evidence_gives(n):
    policy = AdaptivePolicy(NEAR_HOPELESS, 8, DraftingState())
    policy.seed_from_prompt([0.99] * n, [1.0] * n, [0.0] + [1.0] * (n - 1))
    assert (policy.model.mean(), policy.model.continuation()) == pytest.approx(AcceptanceModel.ceiling(n, PROMPT_WEIGHT), abs=1e-12)


def test_the_prompt_is_read_only_where_what_it_could_say_might_make_the_first_step_draft(monkeypatch):
    """Where no evidence of its 8 positions could make a length pay, a seeded run does not read the prompt (the
    draft never fed), grows the gap as reading would have, and emits what a run that reads it emits, step for step;
    where two rows' 16 could, it reads them."""
    from exactspec.engine import drafters

    fed, real_open = [], drafters.open_session

    def opening(model, rows, *, target):
        session = real_open(model, rows, target=target)
        real = session.forward
        session.forward = lambda *a, **k: (fed.append(a[0].shape[1]), real(*a, **k))[1]
        return session

    monkeypatch.setattr(drafters, "open_session", opening)
    seen = _spy(monkeypatch)
    target, draft = _models()
    gen = SpeculativeGenerator(target, draft, cost_model=NEAR_HOPELESS)
    prompt = torch.tensor([[5, 9, 13, 5, 9, 21, 30, 4, 8, 17, 3, 12, 6, 19, 2, 11, 7, 14, 10, 1, 16]])  # 8 read
    kw = dict(max_new_tokens=64, do_sample=True, temperature=1.0, top_k=0, eos_token_id=[], gamma="auto", seed=5)
    out = gen.generate(prompt, **kw)
    assert seen == [] and fed == [] and out.stats.plain_steps == 64  # not read, and no probe in its grown gap
    monkeypatch.setattr(AdaptivePolicy, "prompt_could_draft", lambda self, n: True)
    read = gen.generate(prompt, **kw)
    assert len(seen) == 1 and len(seen[0][0]) == 8 and fed  # read: the draft fed the prompt
    assert torch.equal(out.sequences, read.sequences) and out.stats.gamma_history == read.stats.gamma_history
    monkeypatch.undo()
    seen = _spy(monkeypatch)
    gen.generate(prompt.repeat(2, 1), **kw | {"max_new_tokens": 4})  # two rows' 16 positions could: read
    assert len(seen) == 1 and len(seen[0][0]) == 16
    state = DraftingState()
    policy = AdaptivePolicy(NEAR_HOPELESS, 8, state)
    assert policy.wants_prompt_prior and not policy.prompt_could_draft(8)
    policy.skip_prompt(8)
    assert state.probe_gap == 64 and not policy.wants_prompt_prior  # as 8 read positions grow it, asked once


def test_a_prompt_with_no_valid_evidence_position_is_neither_read_nor_marked_unread():
    """Left padding may leave the last slots with no (slot, next token) pair both real: nothing to weigh, so the
    generator's next run may still read its prompt (as before the ceiling existed)."""
    target, draft = _models()
    gen = SpeculativeGenerator(target, draft, cost_model=NEAR_HOPELESS)
    ids, mask = torch.tensor([[0, 5]]), torch.tensor([[0, 1]])  # one slot before the last, and it is padding
    gen.generate(ids, attention_mask=mask, max_new_tokens=3, do_sample=False, eos_token_id=[], pad_token_id=0,
                 generator=torch.Generator().manual_seed(0))
    state = next(iter(gen._drafting.values()))
    assert not state.prompt_unread and state.probe_gap == 4
