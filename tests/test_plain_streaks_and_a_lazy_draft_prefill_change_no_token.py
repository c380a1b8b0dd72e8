"""Two ways the loop saves time when gamma="auto" stops drafting change nothing a user gets: a plain streak
(several plain steps handed over as one StreamStep, exactspec.engine.plainstep) emits the same tokens, drawn in
the same order, counted per step, as one plain step at a time; and the draft's prompt, fed at its first
proposal (DraftModelDrafter.start(lazy=True)), is never fed in a run that never drafts, and gives the same
drafts as an eager prefill in a run that does."""
from __future__ import annotations

import pytest
import torch

from _spec_models import left_padded, noisy_copy, target_greedy, tiny_lm
from exactspec import CostModel, SpeculativeGenerator
from exactspec.engine import decoding, plainstep
from exactspec.engine import steps as engine_steps
from exactspec.engine.policy import FIRST_GAP, AdaptivePolicy, DraftingState

# Drafting never pays at these prices (a draft call as dear as a target call, a flat target): plain steps,
# probes growing 4, 8, 16, ... steps apart
# drafting pays only for a draft kept 9 times in 10 (one that never could is not even asked: AdaptivePolicy.hopeless)
DEAR = CostModel(t_draft=0.002, target_times={1: 0.010, 2: 0.017, 3: 0.0275, 16: 0.160})
PROMPTS = [[5, 9, 13, 5, 9], [7, 8, 11]]


def _run(gen, sampled: bool, **extra):
    kw = dict(max_new_tokens=40, eos_token_id=[], pad_token_id=0, gamma="auto")
    kw.update(dict(do_sample=True, temperature=1.0, seed=11) if sampled else dict(do_sample=False))
    kw.update(extra)
    stream = gen.stream(*left_padded(PROMPTS), **kw)
    steps = list(stream)
    return stream.output, steps


@pytest.mark.parametrize("sampled", [False, True])
def test_a_plain_streak_emits_what_single_plain_steps_emit(monkeypatch, sampled):
    target = tiny_lm("llama", seed=0)
    useless = tiny_lm("llama", seed=99, init=1.0, layers=1)
    out, steps = _run(SpeculativeGenerator(target, useless, cost_model=DEAR, calibrate=False), sampled)
    monkeypatch.setattr(decoding, "PLAIN_RUN", 1)
    one, one_steps = _run(SpeculativeGenerator(target, useless, cost_model=DEAR, calibrate=False), sampled)
    assert torch.equal(out.sequences, one.sequences)
    assert out.stats.gamma_history == one.stats.gamma_history  # every token of a streak is a step
    assert out.stats.target_calls == one.stats.target_calls and out.stats.plain_steps == one.stats.plain_steps
    assert out.stats.step_rows == one.stats.step_rows
    widest = max(len(s.tokens[0]) for s in steps if s.gamma == 0)
    assert 1 < widest <= plainstep.PLAIN_RUN and max(len(s.tokens[0]) for s in one_steps if s.gamma == 0) == 1
    assert len(steps) < len(one_steps)
    # the stream hands over exactly the output, streak or not
    for got, ref in ((steps, out), (one_steps, one)):
        rows = {0: [], 1: []}
        for s in got:
            for r, toks in zip(s.rows, s.tokens):
                rows[r] += toks
        assert [rows[0], rows[1]] == ref.sequences[:, -40:].tolist()
    if not sampled:
        assert out.sequences[:, -40:].tolist() == [target_greedy(target, p, 40) for p in PROMPTS]


def test_a_streak_ends_where_a_row_finishes():
    target = tiny_lm("llama", seed=0)
    useless = tiny_lm("llama", seed=99, init=1.0, layers=1)
    ids, mask = left_padded(PROMPTS)
    free = SpeculativeGenerator(target, useless, cost_model=DEAR, calibrate=False).generate(
        ids, mask, max_new_tokens=40, do_sample=False, eos_token_id=[], pad_token_id=0)
    eos = free.sequences[0, -40 + 13].item()  # a token row 0 emits in the middle of a streak
    stream = SpeculativeGenerator(target, useless, cost_model=DEAR, calibrate=False).stream(
        ids, mask, max_new_tokens=40, do_sample=False, eos_token_id=[eos], pad_token_id=0)
    seen = {0: [], 1: []}
    for s in stream:
        for r, toks, fin in zip(s.rows, s.tokens, s.finished):
            assert eos not in toks[:-1]  # nothing after a row's EOS
            seen[r] += toks
    out = stream.output
    first = free.sequences[0, -40:].tolist().index(eos)
    assert seen[0] == free.sequences[0, -40:].tolist()[:first + 1]
    assert out.sequences[0, ids.shape[1]:].tolist()[:first + 1] == seen[0]
    assert out.stats.row_tokens[0] == first + 1 < 40


def test_the_policy_commits_to_a_streak_only_up_to_the_next_probe():
    policy = AdaptivePolicy(DEAR, 8, DraftingState(probe_gap=6))
    left = torch.tensor([50])
    assert policy.next_lengths(left).tolist() == [0] or policy.probing
    while policy.probing:  # (optimism may probe first)
        policy.next_lengths(left)
    streak = policy.plain_streak()
    assert streak == policy.state.probe_gap - policy.state.since_probe >= 1
    # asking next_lengths step by step gives the same plain steps, then a probe
    twin = AdaptivePolicy(DEAR, 8, DraftingState(policy.model, probe_gap=policy.state.probe_gap,
                                                 since_probe=policy.state.since_probe))
    plain = 1
    while int(twin.next_lengths(left).max()) == 0:
        plain += 1
    assert plain == streak
    policy.skip_plain(streak - 1)
    assert int(policy.next_lengths(left).max()) > 0 and policy.probing


def _count_draft_forwards(monkeypatch):
    """Every forward on a draft session (the drafter's, whichever forward the backend runs), counted."""
    from exactspec.engine import drafters

    calls, real_open = [], drafters.open_session

    def opening(model, rows, *, target):
        session = real_open(model, rows, target=target)
        real = session.forward

        def counting(*a, **k):
            calls.append(a[0].shape[1])  # tokens fed per row
            return real(*a, **k)

        session.forward = counting
        return session

    monkeypatch.setattr(drafters, "open_session", opening)
    return calls


def test_a_run_that_never_drafts_never_feeds_the_draft(monkeypatch):
    target = tiny_lm("llama", seed=0)
    useless = tiny_lm("llama", seed=99, init=1.0, layers=1)
    gen = SpeculativeGenerator(target, useless, max_gamma=4, cost_model=DEAR)
    calls = _count_draft_forwards(monkeypatch)
    out = gen.generate(*left_padded(PROMPTS), max_new_tokens=3, do_sample=False, eos_token_id=[], pad_token_id=0)
    assert out.stats.plain_steps == out.stats.target_calls == 3 and out.stats.draft_calls == 0
    assert calls == []  # a fresh gamma="auto" that steps plainly does not feed the draft even the prompt ...
    state = next(iter(gen._drafting.values()))
    state.since_probe, state.probe_gap = 0, 4  # (a learnt one: its next re-probe 4 plain steps away)
    out = gen.generate(*left_padded(PROMPTS), max_new_tokens=3, do_sample=False, eos_token_id=[], pad_token_id=0)
    assert out.stats.plain_steps == out.stats.target_calls == 3 and out.stats.draft_calls == 0
    assert calls == []  # ... nor does a learnt one
    hopeless = SpeculativeGenerator(target, useless, max_gamma=4,
                                    cost_model=CostModel(t_draft=1.0, target_times={1: 0.010, 16: 0.010}))
    hopeless.generate(*left_padded(PROMPTS), max_new_tokens=3, do_sample=False, eos_token_id=[], pad_token_id=0)
    assert calls == []  # prices no draft could beat (AdaptivePolicy.hopeless): not even the prompt is read
    out = gen.generate(*left_padded(PROMPTS), max_new_tokens=3, gamma=2, do_sample=False, eos_token_id=[],
                       pad_token_id=0)
    assert calls[0] == 4 and len(calls) == 1 + out.stats.draft_calls >= 2  # the prompt (less its last token), then drafts


@pytest.mark.parametrize("gamma", [3, "auto"])
def test_a_lazy_prefill_drafts_what_an_eager_one_drafts(monkeypatch, gamma):
    target = tiny_lm("llama", seed=0)
    draft = noisy_copy(target, 0.3, seed=3)
    kw = dict(max_new_tokens=30, do_sample=True, temperature=1.0, seed=5, gamma=gamma, eos_token_id=[],
              pad_token_id=0)
    lazy = SpeculativeGenerator(target, draft).generate(*left_padded(PROMPTS), **kw)
    real = engine_steps.prefill
    monkeypatch.setattr(decoding, "prefill", lambda *a, lazy=False, **k: real(*a, lazy=False, **k))
    eager = SpeculativeGenerator(target, draft).generate(*left_padded(PROMPTS), **kw)
    assert torch.equal(lazy.sequences, eager.sequences)
    assert lazy.stats.gamma_history == eager.stats.gamma_history and lazy.stats.draft_calls == eager.stats.draft_calls
    # the deferred prefill is counted as prefill time, not as drafting
    assert lazy.stats.prefill_time > 0 and lazy.stats.draft_time > 0


def test_a_feature_draft_which_reads_the_last_forwards_features_gets_no_streaks(monkeypatch):
    """A feature drafter is fed the target's features of the forward that emitted each token; a streak would
    leave it only the last forward's, so with one the loop steps plainly one at a time: its proposals are
    what they are with streaks turned off."""
    from test_feature_draft_is_fed_the_targets_features_and_stays_exact import _pair, _Recording

    target, draft = _pair()
    ids, mask = left_padded([[3, 1, 4, 1, 5], [2, 7]])
    kw = dict(max_new_tokens=40, gamma="auto", do_sample=False, eos_token_id=[], pad_token_id=0)
    logs = []
    monkeypatch.setattr(decoding, "DraftingState", lambda: DraftingState(probe_gap=FIRST_GAP))  # probes in 40 tokens
    for run in (8, 1):
        monkeypatch.setattr(decoding, "PLAIN_RUN", run)
        log: list = []
        gen = SpeculativeGenerator(target, drafter=_Recording(draft, log), cost_model=DEAR, calibrate=False)
        steps = list(gen.stream(ids, mask, **kw))
        assert all(len(t) == 1 for s in steps if s.gamma == 0 for t in s.tokens)
        logs.append([t.tolist() for t in log])
    assert logs[0] == logs[1] and len(logs[0]) >= 2  # it did draft (probes) between plain steps


@pytest.mark.parametrize("settings", [dict(repetition_penalty=1.5), dict(no_repeat_ngram_size=2, min_new_tokens=30)])
def test_a_streak_reads_each_steps_own_prefix_for_prefix_dependent_settings(monkeypatch, settings):
    """Processors that read the text so far see, inside a streak, every token emitted before each step."""
    target = tiny_lm("llama", seed=0)
    useless = tiny_lm("llama", seed=99, init=1.0, layers=1)
    runs = []
    for run in (8, 1):
        monkeypatch.setattr(decoding, "PLAIN_RUN", run)
        out, steps = _run(SpeculativeGenerator(target, useless, cost_model=DEAR, calibrate=False), False, **settings)
        runs.append((out.sequences, max(len(s.tokens[0]) for s in steps if s.gamma == 0)))
    assert torch.equal(runs[0][0], runs[1][0]) and runs[0][1] > 1 == runs[1][1]
    ids, mask = left_padded(PROMPTS)
    for b, p in enumerate(PROMPTS):  # and they are the target's own generate() with the same settings
        ref = target.generate(input_ids=torch.tensor([p]), do_sample=False, max_new_tokens=40, pad_token_id=0,
                              eos_token_id=None, **settings)[0, len(p):]
        assert runs[0][0][b, ids.shape[1]:].tolist() == ref.tolist()


def test_a_streaks_tokens_reach_the_drafter_as_one_step_each_would():
    """update_plain (a streak's tokens at once) leaves a drafter as update() per token does; a feature draft,
    which pairs each token with its forward's features, has none and gets update() per token."""
    from exactspec.engine.drafters import Draft, DraftModelDrafter, PromptLookupDrafter
    from exactspec.engine.featuredrafter import FeatureDrafter
    from exactspec.engine.plainstep import tell_drafter

    ids, mask = left_padded(PROMPTS)
    made = torch.tensor([[3, 4, 5], [6, 7, 8]])
    empty = Draft.empty(2, ids.device)
    for make in (lambda: DraftModelDrafter(tiny_lm("llama", seed=5, layers=1)), lambda: PromptLookupDrafter()):
        block, single = make(), make()
        for d in (block, single):
            d.start(ids, mask)
        tell_drafter(block, torch.zeros(2, dtype=torch.long), made, empty)
        for j in range(3):
            single.update(torch.zeros(2, dtype=torch.long), made[:, j], empty)
        if isinstance(block, DraftModelDrafter):
            assert torch.equal(block.pending, single.pending) and torch.equal(block.pending_valid, single.pending_valid)
            assert block.pending[:, -3:].tolist() == made.tolist()
        else:
            assert block.history == single.history and [h[-3:] for h in block.history] == made.tolist()
    calls = []

    class OwnUpdate(DraftModelDrafter):  # overrides update() alone: hears of each token through it
        def update(self, accepted, next_token, draft):
            calls.append(next_token.tolist())
    own = OwnUpdate(tiny_lm("llama", seed=5, layers=1))
    own.start(ids, mask)
    tell_drafter(own, torch.zeros(2, dtype=torch.long), made, empty)
    assert calls == made.T.tolist()
    assert not plainstep._takes_blocks(FeatureDrafter.__new__(FeatureDrafter))


def test_a_plain_step_after_a_draft_call_whose_tokens_were_dropped_rolls_the_draft_back():
    """The policy may stop a step at its first position after the draft's call fed the pending tokens: the
    step is plain, and the drafter must hear of it through update() (a roll-back), not as tokens of a streak
    none of whose steps called it. (update_plain there let the draft's cache grow by the pending tokens at
    every such step until a row overflowed llama.cpp's context.)"""
    from exactspec.engine.drafters import DraftModelDrafter
    from exactspec.engine.plainstep import tell_drafter
    from exactspec.engine.runargs import run_args

    class StopsAtOnce:
        wants_confidence = True

        def include(self, i, confidence, caps):
            return torch.zeros_like(caps, dtype=torch.bool)

    ids, mask = left_padded(PROMPTS)
    model = tiny_lm("llama", seed=5, layers=1)
    gen = SpeculativeGenerator(tiny_lm("llama", seed=0), model)
    spec = run_args(gen, ids, mask, 8, dict(do_sample=False), None, 2, "token", [], 0, None, None)["spec"]
    states = []
    for tell in (True, False):
        d = DraftModelDrafter(model)
        d.start(ids, mask)
        for step in range(3):
            draft = d.propose(torch.full((2,), 2), spec, StopsAtOnce())
            assert draft.calls == 1 and draft.tokens.shape[1] == 0  # called, nothing drafted: a plain step
            made = torch.tensor([[10 + step], [20 + step]])
            if tell:
                tell_drafter(d, torch.zeros(2, dtype=torch.long), made, draft)
            else:
                d.update(torch.zeros(2, dtype=torch.long), made[:, 0], draft)
        states.append((d.pending.tolist(), d.pending_valid.tolist(), d.state.n_real.tolist()))
    assert states[0] == states[1]
    assert states[0][0] == [[12], [22]]  # only the newest token waits; the ones before were fed and kept


def test_a_streak_hands_over_what_it_has_after_plain_seconds(monkeypatch):
    """A stream shows text at least every PLAIN_SECONDS however long the streak the policy committed to: with
    no time at all, each hand-over is one token, and the tokens and per-step statistics are the same."""
    target = tiny_lm("llama", seed=0)
    useless = tiny_lm("llama", seed=99, init=1.0, layers=1)
    out, steps = _run(SpeculativeGenerator(target, useless, cost_model=DEAR, calibrate=False), True)
    assert max(len(s.tokens[0]) for s in steps if s.gamma == 0) > 1
    monkeypatch.setattr(plainstep, "PLAIN_SECONDS", 0.0)
    now, now_steps = _run(SpeculativeGenerator(target, useless, cost_model=DEAR, calibrate=False), True)
    assert max(len(s.tokens[0]) for s in now_steps if s.gamma == 0) == 1
    assert torch.equal(out.sequences, now.sequences) and out.stats.gamma_history == now.stats.gamma_history
