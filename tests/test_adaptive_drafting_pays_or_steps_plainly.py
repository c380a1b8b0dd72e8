"""gamma="auto" (exactspec.engine.policy.AdaptivePolicy) drafts only while drafting pays, takes plain steps when it
does not, re-probes, stops early on the draft's own confidence, reproduces under a seed, and keeps the
output exactly the target's: by enumeration of the stopping rule, by greedy equality and by chi-square."""
from __future__ import annotations

import copy
import functools
from collections import defaultdict

import numpy as np
import pytest
import torch

from _spec_models import left_padded, noisy_copy, target_greedy, tiny_lm
from exactspec import CostModel, SpeculativeGenerator
from exactspec.verification.exact import _extend, _outcomes, max_abs_diff, rule_distribution, target_distribution
from exactspec.engine.policy import AcceptanceModel, AdaptivePolicy, DraftingState, FixedPolicy
from test_sampling_speculative_matches_target_distribution import _lm, chi2_pvalue, exact_joint

FLAT = {1: 0.010, 16: 0.010}  # verifying k tokens costs one step: the paper's cost model


def _trained(rate_low: float, rate_high: float, n: int = 400, split: float = 0.5) -> AcceptanceModel:
    """An acceptance model that has seen `n` positions in each confidence bin, accepted at `rate_low` below
    confidence `split` and at `rate_high` above it."""
    m = AcceptanceModel()
    for conf in (0.05, 0.15, 0.25, 0.35, 0.45, 0.55, 0.65, 0.75, 0.85, 0.92, 0.96, 0.99, 0.999):
        c = torch.full((n,), conf)
        m.see(c)
        m.observe(c, torch.arange(n) < round((rate_low if conf < split else rate_high) * n))
    return m


def _at_rate(alpha: float, n: int = 2000) -> AcceptanceModel:
    m = AcceptanceModel()
    c = torch.full((n,), 0.95)
    m.see(c)
    m.observe(c, torch.arange(n) < round(alpha * n))
    return m


@pytest.mark.parametrize("c", [0.1, 0.3, 0.6])
def test_plain_step_exactly_when_the_first_positions_alpha_is_below_the_cost_ratio(c, monkeypatch):
    """With T_target flat (the paper's model), some gamma >= 1 pays iff alpha > c (speculation_helps); the margin
    by which drafting must pay besides (PRICE_MARGIN, tested on its own) set to 0."""
    monkeypatch.setattr("exactspec.engine.policy.PRICE_MARGIN", 0.0)
    cost = CostModel(t_draft=c * 0.010, target_times=FLAT)
    left = torch.tensor([10])
    below = AdaptivePolicy(cost, 8, DraftingState(_at_rate(c - 0.03), probe_gap=1000))
    above = AdaptivePolicy(cost, 8, DraftingState(_at_rate(c + 0.03), probe_gap=1000))
    assert below.model.mean() < c < above.model.mean()
    assert below.next_lengths(left).tolist() == [0]
    assert above.next_lengths(left).tolist()[0] >= 1


def test_plain_steps_reprobe_with_growing_gaps_and_drafting_resumes_when_it_pays(monkeypatch):
    monkeypatch.setattr("exactspec.engine.policy.FIRST_GAP", 2)
    monkeypatch.setattr("exactspec.engine.policy.MAX_GAP", 16)
    cost = CostModel(t_draft=0.004, target_times={1: 0.010, 2: 0.013, 16: 0.02})
    policy = AdaptivePolicy(cost, 8, DraftingState(_at_rate(0.05), probe_gap=2))
    drafted = [int(policy.next_lengths(torch.tensor([50])).max()) > 0 for _ in range(60)]
    probes = [i for i, d in enumerate(drafted) if d]
    gaps = np.diff(probes).tolist()
    assert probes[0] == 1 and gaps[:3] == [4, 8, 16] and set(gaps[3:]) == {16}  # doubling, capped
    policy.state.model = policy.model = _at_rate(0.9)  # the text changed: the draft agrees now
    assert all(int(policy.next_lengths(torch.tensor([50])).max()) > 0 for _ in range(5))
    assert policy.state.probe_gap == 2  # drafting pays: the next slump is probed soon again


def test_drafting_stops_early_when_the_drafts_confidence_says_the_next_token_does_not_pay():
    cost = CostModel(t_draft=0.001, target_times={1: 0.010, 2: 0.0105, 16: 0.012})
    policy = AdaptivePolicy(cost, 8, DraftingState(_trained(0.0, 0.97)))
    caps = policy.next_lengths(torch.tensor([20, 20]))
    assert caps.tolist() == [8, 8]
    sure, unsure = torch.tensor([0.96, 0.97]), torch.tensor([0.3, 0.35])  # the bins the model learnt
    assert policy.include(1, sure, caps).tolist() == [True, True]
    assert policy.include(2, sure, caps).tolist() == [True, True]
    assert policy.include(3, unsure, caps).tolist() == [False, False]  # a third token is not worth it
    assert policy.early_stops == 2 and policy.threshold(3) > 0
    policy.next_lengths(torch.tensor([20, 20]))
    # One sure row carries the batch's step on, and the unsure row rides along: one forward serves both
    # rows, so once the batch drafts a position, a row's own token there costs nothing more.
    assert policy.include(1, torch.tensor([0.96, 0.3]), caps).tolist() == [True, True]
    assert policy.include(2, torch.tensor([0.96, 0.3]), caps).tolist() == [True, True]
    assert policy._p[1] < policy.threshold(2) < policy._p[0]  # alone, the unsure row would have stopped
    single = AdaptivePolicy(cost, 8, DraftingState(_trained(0.0, 0.97)))
    one = single.next_lengths(torch.tensor([20]))
    assert single.include(1, torch.tensor([0.96]), one).tolist() == [True]
    assert single.include(2, torch.tensor([0.3]), one).tolist() == [False]  # alone, it pays for itself: it stops
    # A row stopped by its cap stays out; when the mean row no longer pays, the whole batch stops.
    policy.next_lengths(torch.tensor([20, 20]))
    capped = torch.tensor([8, 1])
    assert policy.include(1, torch.tensor([0.96, 0.96]), capped).tolist() == [True, True]
    assert policy.include(2, torch.tensor([0.96, 0.96]), capped).tolist() == [True, False]
    assert policy.include(3, torch.tensor([0.3, 0.3]), capped).tolist() == [False, False]


def test_the_next_draft_call_is_made_only_when_it_is_expected_to_pay():
    """After position i, `more(i)` weighs the next call (t_draft, not yet paid) against what position i + 1
    is expected to add: a step whose chain is already unlikely to survive does not waste a forward."""
    cost = CostModel(t_draft=0.003, target_times={1: 0.010, 16: 0.010})
    policy = AdaptivePolicy(cost, 8, DraftingState(_trained(0.0, 0.97)))
    caps = policy.next_lengths(torch.tensor([20]))
    assert policy.include(1, torch.tensor([0.96]), caps).tolist() == [True] and policy.more(1)
    assert policy.include(2, torch.tensor([0.55]), caps).tolist() == [True]  # a middling bin, still kept
    p = float(policy._p[0])
    assert policy.more(2) == (p > policy.threshold(3, paid=False))
    assert policy.threshold(3, paid=False) > policy.threshold(3, paid=True)  # an unpaid call costs more
    # a stop made here, before the call, is an early stop of the row (its cap allowed 20 positions)
    policy.next_lengths(torch.tensor([20]))
    before = policy.early_stops
    assert policy.include(1, torch.tensor([0.3]), caps).tolist() == [True]  # its call is paid, width is free
    assert not policy.more(1) and policy.early_stops == before + 1  # a bin never accepted: no next call
    assert not policy.more(8) and policy.early_stops == before + 1  # at max_gamma: the cap, not a stop
    draft = tiny_lm("llama", seed=0)
    target = copy.deepcopy(draft)
    out = SpeculativeGenerator(target, draft, cost_model=cost, max_gamma=8).generate(
        *left_padded([[5, 9, 13, 5, 9]]), max_new_tokens=30, do_sample=False, eos_token_id=[], pad_token_id=0)
    s = out.stats  # a twin draft is always accepted: no call is wasted, each drafted token had its call
    assert s.draft_calls == s.drafted_tokens
    # while it learns that the twin is always right, it stops short of the cap of 8 (the last step's cap is
    # what is left, less the bonus token): each such step is one early stop, counted where more() made it.
    # Optimism about positions after an accepted one (thin evidence) makes it reach further sooner: without
    # it the history was [2, 4, 6, 8, 5]; with the prompt's evidence read before r34 (its 4 positions, on which
    # the twin agrees) it was [4, 6, 8, 8]
    assert s.gamma_history == [3, 5, 7, 8, 2] and s.early_stops == 3


def _verdict(policy, lengths, accepted, conf=0.9):
    """Feed `policy` one step: rows drafted `lengths`, accepted `accepted`, every position at `conf`."""
    from types import SimpleNamespace

    k = max(lengths)
    policy.observe(SimpleNamespace(tokens=torch.zeros(len(lengths), k, dtype=torch.long),
                                   lengths=torch.tensor(lengths), confidence=torch.full((len(lengths), k), conf)),
                   torch.tensor(accepted))


def test_a_probe_drafts_the_length_that_pays_at_rates_one_standard_error_up():
    """The exploration rule: a policy whose few first verdicts say drafting loses steps plainly, and its probe
    (after the gap) drafts the length that pays at optimistic rates: long while the evidence is one verdict,
    one token once thirty rejections leave no length paying even optimistically."""
    steep = CostModel(t_draft=0.0012, target_times={1: 0.010, 2: 0.0145, 8: 0.016})  # T(2)/T(1) = 1.45

    def probe_after(verdicts: int) -> int:
        policy = AdaptivePolicy(steep, 8, DraftingState(probe_gap=1000))
        for _ in range(verdicts):
            _verdict(policy, [4], [0])
        assert int(policy.next_lengths(torch.tensor([50]))) == 0  # the estimate: no length pays
        policy.state.since_probe = policy.state.probe_gap  # the gap is up
        k = int(policy.next_lengths(torch.tensor([50])))
        assert policy.probing and policy.state.since_probe == 0 and policy.state.probe_gap == 256  # doubled, capped at MAX_GAP
        return k

    assert probe_after(1) > 1
    assert probe_after(30) == 1


def test_a_probe_due_where_nothing_is_left_to_draft_waits_for_the_next_step_that_can():
    """A probe due at a run's last token (left = 0 in every row) cannot draft: the gap neither restarts nor
    doubles, and the first step where a row can draft makes the probe."""
    steep = CostModel(t_draft=0.0012, target_times={1: 0.010, 2: 0.0145, 8: 0.016})
    policy = AdaptivePolicy(steep, 8, DraftingState(probe_gap=64))
    _verdict(policy, [4], [0])
    policy.state.since_probe = 63
    assert int(policy.next_lengths(torch.tensor([0]))) == 0 and not policy.probing
    assert (policy.state.probe_gap, policy.state.since_probe) == (64, 64)
    assert policy.plain_streak() == 1  # the probe is due: one plain step at a time until it can be made
    assert policy.next_lengths(torch.tensor([0, 3])).tolist()[1] >= 1 and policy.probing  # one row can draft
    assert (policy.state.probe_gap, policy.state.since_probe) == (128, 0)


def test_a_deeper_position_rejected_once_is_still_drafted_while_its_evidence_is_thin(monkeypatch):
    """Positions after an accepted one are priced at the continuation rate. One early rejection there
    (1 verdict) used to keep every later step at one token, so the rate was never measured again; with
    optimism the next position is still drafted, and after many rejections there it is not."""
    # a staircase seen on a 2-core CPU: verifying 3 tokens costs 1.26x verifying 2, then flat to 8
    cost = CostModel(t_draft=0.00105, target_times={1: 0.010, 2: 0.0126, 3: 0.0159, 8: 0.0159, 10: 0.018})

    def drafts_second(later_rejections: int, optimism: float) -> bool:
        monkey.setattr("exactspec.engine.policy.OPTIMISM", optimism)
        policy = AdaptivePolicy(cost, 8, DraftingState())
        for ok in [1, 1, 0] * 4:  # the first position is accepted two times in three ...
            _verdict(policy, [1], [ok])
        for _ in range(later_rejections):  # ... the second was rejected after it
            _verdict(policy, [2], [1])
        caps = policy.next_lengths(torch.tensor([50]))
        return bool(policy.include(1, torch.tensor([0.9]), caps)) and policy.more(1)

    monkey = monkeypatch
    assert drafts_second(1, optimism=1.0) and not drafts_second(1, optimism=0.0)
    assert not drafts_second(40, optimism=1.0)


def test_positions_after_an_accepted_one_are_priced_at_the_continuation_rate():
    """Acceptance comes in streaks: the policy prices a position reached after an accepted one at the rate
    such positions were accepted (continuation), not at the rate pooled over first positions too."""
    from types import SimpleNamespace

    m = AcceptanceModel()
    assert m.continuation() == m.pooled  # nothing seen yet: the prior
    for _ in range(100):  # position 1 accepted, position 2 (after it) accepted, position 3 rejected
        m.observe([0.5, 0.5, 0.5], [True, True, False], [False, True, True])
    assert m.pooled == pytest.approx(2 / 3, abs=0.01) and m.continuation() == pytest.approx(0.5, abs=0.01)
    # the policy feeds it: a draft of 3 where row 0 accepted 2 (positions 2, 3 came after accepted ones) and
    # row 1 accepted 0 (only position 1 was reached)
    policy = AdaptivePolicy(CostModel(t_draft=0.001, target_times=FLAT), 8, DraftingState(AcceptanceModel()))
    draft = SimpleNamespace(tokens=torch.zeros(2, 3, dtype=torch.long), lengths=torch.tensor([3, 3]),
                            confidence=torch.full((2, 3), 0.9))
    policy.observe(draft, torch.tensor([2, 0]))
    assert policy.model.later_n == pytest.approx(2) and policy.model.later_a == pytest.approx(1)
    # best_length: E(K) = 1 + a1 + a1 l + .. + a1 l^(K-1), the best E(K) / step(K) by enumeration
    cost = CostModel(t_draft=0.002, target_times={1: 0.010, 3: 0.011, 9: 0.016})
    policy = AdaptivePolicy(cost, 8)
    for a1, later in ((0.5, 0.9), (0.9, 0.5), (0.3, 0.3), (0.05, 0.99)):
        rates = [sum([1.0] + [a1 * later ** j for j in range(k)]) / policy.price[k] for k in range(9)]
        k, rate = policy.best_length(a1, later)
        assert rate == pytest.approx(max(rates), rel=1e-12) and rates[k] == pytest.approx(max(rates), rel=1e-12)


def test_random_weight_draft_spends_most_steps_plain_and_a_copy_drafts_long():
    target = tiny_lm("llama", seed=0)
    cost = CostModel(t_draft=0.002, target_times={1: 0.010, 2: 0.013, 5: 0.014, 16: 0.02})
    kw = dict(max_new_tokens=60, do_sample=False, gamma="auto", eos_token_id=[], pad_token_id=0)
    ids, mask = left_padded([[5, 9, 13, 5, 9]])
    useless = SpeculativeGenerator(target, tiny_lm("llama", seed=99, init=1.0), cost_model=cost, max_gamma=8)
    s = useless.generate(ids, mask, **kw).stats
    assert s.plain_steps >= 0.7 * s.target_calls and s.gamma_history.count(0) == s.plain_steps
    assert len(s.length_counts) >= 1 and s.length_counts[0] == s.plain_steps
    twin = SpeculativeGenerator(target, copy.deepcopy(target), cost_model=cost, max_gamma=8)
    s = twin.generate(ids, mask, **kw).stats
    assert s.plain_steps == 0 and s.acceptance_rate == 1.0 and max(s.gamma_history) == 8
    assert s.mean_tokens_per_step > 6


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_auto_greedy_equals_target_generate_on_a_ragged_batch(arch):
    target = tiny_lm(arch, seed=0)
    draft = noisy_copy(target, 0.3, seed=3)
    prompts = [[5, 9, 13, 5, 9], [7, 8, 11], [20, 21, 22, 20, 21, 22, 20]]
    cost = CostModel(t_draft=0.002, target_times={1: 0.010, 2: 0.012, 16: 0.016})
    gen = SpeculativeGenerator(target, draft, cost_model=cost, max_gamma=6)
    for _ in range(2):  # the second run starts from what the first one learnt
        out = gen.generate(*left_padded(prompts), max_new_tokens=24, do_sample=False, gamma="auto",
                           eos_token_id=[], pad_token_id=0)
        new = out.sequences[:, -24:].tolist()
        assert new == [target_greedy(target, p, 24) for p in prompts]
    assert out.stats.early_stops + out.stats.plain_steps > 0  # the policy did make decisions


def test_seeded_sampled_auto_runs_reproduce_on_a_fresh_generator():
    target = tiny_lm("llama", seed=0)
    draft = noisy_copy(target, 0.2, seed=3)
    ids, mask = left_padded([[5, 9, 13, 5, 9], [7, 8, 11]])
    kw = dict(max_new_tokens=30, temperature=1.0, do_sample=True, gamma="auto", seed=7, eos_token_id=[],
              pad_token_id=0)
    runs = [SpeculativeGenerator(target, draft).generate(ids, mask, **kw) for _ in range(2)]
    assert torch.equal(runs[0].sequences, runs[1].sequences)
    assert runs[0].stats.gamma_history == runs[1].stats.gamma_history
    gen = SpeculativeGenerator(target, draft)
    unseeded = {k: v for k, v in kw.items() if k != "seed"}
    gen.generate(ids, mask, **unseeded, generator=torch.Generator().manual_seed(7))  # an unseeded run learns
    assert gen._drafting  # acceptance, between runs, never inside one
    again = gen.generate(ids, mask, **kw)  # a seeded run on it ignores what it learnt: the same tokens
    assert torch.equal(again.sequences, runs[0].sequences)


def _dist(seed: int, v: int, sharp: float):
    cache = {}

    def f(prefix):
        if prefix not in cache:
            g = torch.Generator().manual_seed(hash((seed,) + prefix) % 2**31)
            cache[prefix] = torch.softmax(sharp * torch.randn(v, generator=g, dtype=torch.float64), 0)
        return cache[prefix]
    return f


@pytest.mark.parametrize("method", ["token", "block"])
def test_stopping_on_the_drafts_confidence_keeps_both_rules_exact_by_enumeration(method):
    """A stop decided from q at the next position (the prefix only) leaves the output law the target's; a
    stop that looks at the sampled token (drop it when q(x) is small) does not: the check has power."""
    for trial in range(4):
        p, q = _dist(trial, 3, 1.5), _dist(100 + trial, 3, 2.5)
        want = target_distribution(p, 4)
        thr = (0.45, 0.55, 0.6, 0.5)[trial]
        got = rule_distribution(p, q, 3, method, stop=lambda prefix, qq: float(qq.max()) < thr)
        assert max_abs_diff(got, want) < 1e-12
        emitted = defaultdict(float)  # the inexact variant, enumerated with the same rule functions
        for x, qx in _sample_dependent_drafts(q, 3, 0.3):
            for n, pr, nxt in _outcomes(p, q, x, method):
                for y in range(3):
                    emitted[x[:n] + (y,)] += qx * pr * float(nxt[y])
        assert max_abs_diff(_extend(emitted, p, 4), want) > 1e-3


def _sample_dependent_drafts(q_dist, k: int, thr: float):
    def rec(prefix, pr):
        if len(prefix) == k:
            yield prefix, pr
            return
        q = q_dist(prefix)
        for x in range(q.shape[0]):
            if float(q[x]) < thr:  # peeks at the drawn token: drop it and stop
                yield prefix, pr * float(q[x])
            else:
                yield from rec(prefix + (x,), pr * float(q[x]))
    yield from rec((), 1.0)


@pytest.mark.parametrize("method", ["token", "block"])
def test_sampled_auto_with_early_stops_matches_the_exact_target_law(method, monkeypatch):
    """Thousands of rows, a policy that has learnt that unsure positions fail: each row's draft ends early
    at its own position (0, 1 or 2 tokens), and the first three tokens still follow the target's
    enumerated law (chi-square). Rows stop on their own P (`row_stops`; by default a batch's rows share
    its stops, which a batch of 400 like rows would make all alike)."""
    monkeypatch.setattr("exactspec.engine.decoding.AdaptivePolicy", functools.partial(AdaptivePolicy, row_stops=True))
    target, draft = _lm(8, seed=0), _lm(8, seed=1)
    cost = CostModel(t_draft=0.002, target_times={1: 0.010, 2: 0.0102, 3: 0.0104})
    gen = SpeculativeGenerator(target, draft, cost_model=cost, max_gamma=2, calibrate=False)
    key = (False, 1.0, 0, 1.0, method)
    gen._drafting[key] = DraftingState(_trained(0.0, 0.95, n=100000, split=0.4))
    prompt, rows, batch = [3, 1, 4], 4800, 400
    ids, mask = left_padded([prompt] * batch)
    samples, stops, lengths = [], 0, np.zeros(3)
    for i in range(rows // batch):
        out = gen.generate(ids, mask, max_new_tokens=3, method=method, gamma="auto", eos_token_id=[],
                           generator=torch.Generator().manual_seed(i),  # unseeded: the planted acceptance
                           pad_token_id=0, do_sample=True, top_k=0)  # the law of `key`
        samples.append(out.sequences[:, -3:].numpy())
        stops += out.stats.early_stops
        lengths[:len(out.stats.length_counts)] += out.stats.length_counts
    assert stops > rows / 20 and lengths.min() > rows / 100  # the policy's stops shaped the drafts
    p = chi2_pvalue(np.concatenate(samples), exact_joint(target, prompt, {}))
    assert p > 1e-3, f"{method}: chi-square p = {p:.2e}"


def test_a_model_free_drafter_finds_up_to_max_gamma_verifies_the_best_length_and_probes_with_one_token():
    """Prompt lookup is never asked about confidence: it finds up to max_gamma tokens (one for a probe), and
    `trim` cuts a long find to the length worth verifying (at least the best length under the plain
    estimates, since positions after an accepted one are valued optimistically), not max_gamma."""
    cost = CostModel(t_draft=0.0, target_times={1: 0.010, 2: 0.0105, 5: 0.012, 16: 0.02})
    model = _at_rate(0.8)
    conf = torch.full((2000,), 0.95)
    model.observe(conf, torch.arange(2000) < 1600, later=[True] * 2000)  # positions after accepted ones too
    good = AdaptivePolicy(cost, 12, DraftingState(model), free_draft=True)
    k, _ = good.best_length(good.model.mean(), good.model.continuation())
    assert good.next_lengths(torch.tensor([50])).tolist() == [12]
    assert 1 <= k <= good.trim([12]) < 12
    bad = AdaptivePolicy(cost, 12, DraftingState(_at_rate(0.02), probe_gap=1), free_draft=True)
    assert bad.next_lengths(torch.tensor([50])).tolist() == [1]  # a probe: one token


def test_prompt_lookup_verifies_only_the_width_its_found_tokens_pay_for():
    """A model-free drafter finds every row's tokens first; `trim` picks the width worth verifying for the
    whole batch. One row's repeat does not widen a batch of four whose other rows found nothing; four
    rows with repeats, or one row alone, do draft; a probe keeps one token; a fixed gamma keeps them all."""
    cost = CostModel(t_draft=0.0, target_times={1: 0.010, 2: 0.012, 5: 0.015})
    policy = AdaptivePolicy(cost, 8, DraftingState(_at_rate(0.5)), free_draft=True)
    policy.next_lengths(torch.tensor([50, 50, 50, 50]))
    assert policy.trim([4, 0, 0, 0]) == 0 and policy.early_stops == 1  # a plain step: the repeat is cut
    assert policy.trim([4, 4, 4, 4]) == 4 and policy.trim([0, 0, 0, 0]) == 0
    assert policy.trim([4]) == 4  # alone, the row's repeat pays for its own width
    assert policy.trim([4, 4, 1, 0]) in (1, 2, 3, 4)  # (some width pays; its value is the formula's)
    bad = AdaptivePolicy(cost, 12, DraftingState(_at_rate(0.02), probe_gap=1), free_draft=True)
    bad.next_lengths(torch.tensor([50, 50]))
    assert bad.probing and bad.trim([3, 0]) == 1  # a probe verifies one position
    assert FixedPolicy(3).trim([2, 0]) == 2


def test_sampled_prompt_lookup_under_auto_with_trimmed_drafts_matches_the_exact_target_law():
    """Prompt lookup under gamma="auto" whose steps verify fewer tokens than the rows found (trim): the first
    three tokens of thousands of rows follow the target's enumerated law (chi-square)."""
    target = _lm(8, seed=0)
    # A second verified token is nearly free, a third is dear: the steps verify one of the 3 tokens found.
    cost = CostModel(t_draft=0.0, target_times={1: 0.010, 2: 0.0102, 3: 0.013, 4: 0.016})
    gen = SpeculativeGenerator(target, drafter="prompt_lookup", cost_model=cost, max_gamma=3, calibrate=False)
    gen._drafting[(False, 1.0, 0, 1.0, "token")] = DraftingState(_at_rate(0.6))
    prompts = [[3, 1, 4, 3, 1, 4, 3, 1]] * 1500 + [[6, 2, 6, 2, 5]] * 1500
    ids, mask = left_padded(prompts)
    out = gen.generate(ids, mask, max_new_tokens=3, gamma="auto", seed=7, eos_token_id=[], pad_token_id=0,
                       do_sample=True, top_k=0)
    st = out.stats
    assert st.early_stops > 0 and 0 < st.accepted_tokens < st.drafted_tokens  # trimmed, both verdicts
    new = out.sequences[:, ids.shape[1]:].numpy()
    for i, prompt in enumerate(([3, 1, 4, 3, 1, 4, 3, 1], [6, 2, 6, 2, 5])):
        p = chi2_pvalue(new[i * 1500:(i + 1) * 1500], exact_joint(target, prompt, {}))
        assert p > 1e-3, f"prompt {prompt}: chi-square p = {p:.2e}"


def test_prices_no_draft_can_beat_make_auto_the_target_alone_with_no_probe():
    """price[k] >= (k + 1) price[0] for every k: even a draft the target always keeps loses, so nothing is
    worth probing; one step cheaper than that and the policy is back to its estimate and probes."""
    dear = CostModel(t_draft=0.002, target_times={1: 0.010, 2: 0.019, 16: 0.16})  # price[k] >= (k+1) price[0]
    policy = AdaptivePolicy(dear, 8, DraftingState(_at_rate(0.999), probe_gap=1))
    assert all(policy.price[k] >= (k + 1) * policy.price[0] for k in range(9))
    assert policy.hopeless
    assert all(policy.next_lengths(torch.tensor([50])).tolist() == [0] for _ in range(600))  # no probe, ever
    assert not policy.probing and policy.plain_streak() >= 1 << 20
    cheaper = AdaptivePolicy(CostModel(t_draft=0.002, target_times={1: 0.010, 2: 0.0105, 16: 0.16}), 8,
                             DraftingState(probe_gap=1))
    assert not cheaper.hopeless
