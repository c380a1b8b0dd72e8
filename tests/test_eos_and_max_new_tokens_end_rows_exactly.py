"""Rows end exactly: at max_new_tokens (a step that could overshoot drafts fewer tokens) or at the first
EOS, even when the EOS sits inside a run of accepted draft tokens (the tokens after it are dropped and the
row is padded); rows of a batch finish at different steps."""
from __future__ import annotations

import copy

import pytest

from _spec_models import left_padded, target_greedy, tiny_lm
from exactspec import SpeculativeGenerator

PROMPTS = [[5, 9, 13, 5], [7, 8, 11, 12, 30, 31], [20, 21], [40, 41, 40, 50, 51]]
N = 20
_pair: dict = {}


def _models():
    if not _pair:
        target = tiny_lm("llama", seed=0)
        _pair["t"] = target
        _pair["same"] = copy.deepcopy(target)  # a perfect draft: every draft token is accepted
        _pair["refs"] = [target_greedy(target, p, N) for p in PROMPTS]
    return _pair["t"], _pair["same"], _pair["refs"]


@pytest.mark.parametrize("max_new", [0, 1, 2, 3, 5, 6, 9])
def test_max_new_tokens_is_exact_even_when_all_drafts_are_accepted(max_new):
    target, same, refs = _models()
    ids, mask = left_padded(PROMPTS)
    out = SpeculativeGenerator(target, same).generate(ids, mask, max_new_tokens=max_new, do_sample=False,
                                                      gamma=4, eos_token_id=[], pad_token_id=0)
    assert out.sequences.shape == (len(PROMPTS), ids.shape[1] + max_new)
    assert out.sequences[:, ids.shape[1]:].tolist() == [r[:max_new] for r in refs]
    assert out.stats.new_tokens == len(PROMPTS) * max_new


def test_eos_inside_an_accepted_run_ends_the_row_there():
    target, same, refs = _models()
    # An EOS id whose first occurrence in row 0 is at index 2: with a perfect draft and gamma=4 the first
    # step emits 5 tokens, so the EOS is the 3rd of an accepted run and tokens 4-5 must be dropped.
    eos = refs[0][2]
    assert eos not in refs[0][:2]
    expected = []
    for prompt, r in zip(PROMPTS, refs):
        cut = r[: r.index(eos) + 1] if eos in r else r
        assert cut == target_greedy(target, prompt, N, eos=eos)  # the target's own generate agrees
        expected.append(cut)
    longest = max(len(e) for e in expected)
    assert len({len(e) for e in expected}) > 1, "rows should finish at different steps"
    ids, mask = left_padded(PROMPTS)
    stream = SpeculativeGenerator(target, same).stream(ids, mask, max_new_tokens=N, do_sample=False, gamma=4,
                                                       eos_token_id=eos, pad_token_id=0)
    finished_at = {}
    for i, step in enumerate(stream):
        for row, done in zip(step.rows, step.finished):
            if done:
                finished_at[row] = i
    out = stream.output
    assert out.sequences.shape[1] == ids.shape[1] + longest
    for row, e in enumerate(expected):
        assert out.sequences[row, ids.shape[1]:].tolist() == e + [0] * (longest - len(e))
    assert bool(out.from_draft[0, 2])  # the EOS itself was an accepted draft token
    assert len(set(finished_at.values())) > 1
    assert out.stats.new_tokens == sum(len(e) for e in expected)
    # Statistics count emitted tokens only: drafts after the EOS were dropped, so they are not "accepted".
    assert out.stats.accepted_tokens == int(out.from_draft.sum())
    # Every step emits its accepted drafts plus one target token, except a step whose EOS was a draft token.
    assert out.stats.accepted_tokens < out.stats.new_tokens < out.stats.accepted_tokens + out.stats.row_steps


def test_sampled_rows_stop_at_eos_and_are_padded():
    target, same, _ = _models()
    ids, mask = left_padded(PROMPTS * 8)
    eos = 17
    out = SpeculativeGenerator(target, same).generate(ids, mask, max_new_tokens=N, seed=3, gamma=3,
                                                      do_sample=True, eos_token_id=eos, pad_token_id=0)
    new = out.sequences[:, ids.shape[1]:]
    n_tokens = 0
    stopped = 0
    for row in new.tolist():
        if eos in row:
            j = row.index(eos)
            assert all(t == 0 for t in row[j + 1:])
            n_tokens += j + 1
            stopped += 1
        else:
            n_tokens += N
    assert 0 < stopped < len(new)
    assert out.stats.new_tokens == n_tokens


@pytest.mark.parametrize("tree", [None, (2, 1)])
def test_a_consumer_editing_the_steps_it_is_handed_ends_no_row(tree):
    """The stream's steps are the caller's: a consumer that marks every row finished in a step it was handed
    does not end any row (the loop keeps its own record of which rows finished)."""
    target, same, refs = _models()
    ids, mask = left_padded(PROMPTS)
    gen = SpeculativeGenerator(target, copy.deepcopy(target))
    stream = gen.stream(ids, mask, max_new_tokens=N, do_sample=False, eos_token_id=[], gamma=2, tree=tree)
    for step in stream:
        step.finished[:] = [True] * len(step.finished)
        step.tokens.clear()
    assert stream.output.stats.row_tokens == [N] * len(PROMPTS)
    for row, ref in zip(stream.output.sequences[:, ids.shape[1]:].tolist(), refs):
        assert row == ref
