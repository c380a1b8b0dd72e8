"""Prompt lookup under gamma="auto": its n-gram index finds exactly what a scan of the history finds (any
history, grown any way), each found token is binned by its match's length and its distance from the match
(a function of the history only), and the policy drafts a row's tokens when their bins' rates pay for the
width and plain steps when they do not."""
from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from exactspec.engine.drafters import NgramIndex, PromptLookupDrafter
from exactspec.engine.policy import AcceptanceModel, AdaptivePolicy, DraftingState, FixedPolicy
from exactspec.speed.costmodel import CostModel


@settings(max_examples=300, deadline=None)
@given(lo=st.integers(1, 3), extra=st.integers(0, 2), start=st.lists(st.integers(0, 4), max_size=8),
       growth=st.lists(st.tuples(st.lists(st.integers(0, 4), min_size=1, max_size=3), st.integers(0, 6)),
                       max_size=25))
def test_the_index_finds_what_a_scan_of_the_history_finds(lo, extra, start, growth):
    drafter = PromptLookupDrafter(max_ngram=lo + extra, min_ngram=lo)
    hist = list(start)
    index = NgramIndex(lo, lo + extra, hist)
    for tokens, k in growth:
        assert index.match(k) == drafter.match(list(hist), k)
        hist.extend(tokens)  # the index reads the same list: it catches up on the next match
    assert index.match(4) == drafter.match(list(hist), 4)


def test_each_match_length_and_distance_has_a_bin_of_its_own():
    d = PromptLookupDrafter(max_ngram=3)
    keys = [d.confidence(n, j) for n in (1, 2, 3) for j in (0, 1, 3)]
    assert len(set(AcceptanceModel.bins(keys))) == 9
    assert d.confidence(2, 1) == d.confidence(2, 2) and d.confidence(2, 3) == d.confidence(2, 7)


def _model(rates: dict) -> AcceptanceModel:
    """An acceptance model that measured `rates` {bin key: rate} over 400 positions each."""
    m = AcceptanceModel()
    for key, rate in rates.items():
        n = 400
        m.observe([key] * n, [i < rate * n for i in range(n)])
    return m


def test_auto_drafts_a_long_match_and_steps_plainly_on_a_short_one():
    d = PromptLookupDrafter(max_ngram=3)
    # verifying 5 tokens costs 2.5 plain steps (llama.cpp on two cores): only a good match pays for it
    cost = CostModel(t_draft=0.0, target_times={1: 0.002, 2: 0.0035, 6: 0.005})
    rates = {d.confidence(1, 0): 0.2, d.confidence(1, 1): 0.5, d.confidence(1, 3): 0.5,
             d.confidence(3, 0): 0.85, d.confidence(3, 1): 0.9, d.confidence(3, 3): 0.9}
    policy = AdaptivePolicy(cost, 8, DraftingState(_model(rates)), free_draft=True)
    assert policy.next_lengths(torch.tensor([50])).tolist() == [8]  # a 3-token match pays: it looks every step
    short = [[d.confidence(1, j) for j in range(5)]]
    long = [[d.confidence(3, j) for j in range(5)]]
    assert policy.trim([5], short) == 0  # a plain step: the 1-token match's continuation is cut
    assert policy.trim([5], long) == 5
    assert policy.trim([5, 5], short + long) > 0  # the batch's width pays for the row that found a good one
    assert FixedPolicy(4).trim([5], short) == 5


def test_a_generated_run_learns_each_kind_of_token_in_its_own_bin():
    """generate() with prompt lookup under gamma="auto" hands the policy each verified token's bin: after a
    run on text that repeats itself, first tokens and later ones were counted apart, none in the single
    bin every position used to share."""
    from _spec_models import tiny_lm

    from exactspec import SpeculativeGenerator

    target = tiny_lm(vocab=16, seed=3)
    cost = CostModel(t_draft=0.0, target_times={1: 0.010, 8: 0.0101})  # a wide step costs a plain one
    gen = SpeculativeGenerator(target, drafter="prompt_lookup", cost_model=cost, calibrate=False)
    ids = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6] * 4])
    out = gen.generate(ids, max_new_tokens=40, do_sample=False, gamma="auto", eos_token_id=[])
    assert out.stats.drafted_tokens > 0
    model = next(iter(gen._drafting.values())).model
    d = PromptLookupDrafter()
    first, later = AcceptanceModel.bins([d.confidence(3, 0)])[0], AcceptanceModel.bins([d.confidence(3, 1)])[0]
    assert model.n[first] > 0 and model.n[later] > 0
    assert model.n[-1] == 0  # (confidence 1.0: where every prompt-lookup position went before)
