"""A plain step (no draft to verify; exactspec.engine.plainstep) is one step of target-alone decoding: with a
drafter that never drafts, every row gets the target's own tokens (greedy: generate's, rows ending at
their EOS at different steps; sampled: the inverse-CDF draw from the run's seeded generator), and the
statistics and stream count one token per target call, none from the draft."""
from __future__ import annotations

import pytest
import torch

from _spec_models import left_padded, target_greedy, tiny_lm
from exactspec import SpeculativeGenerator
from exactspec.engine.drafters import Draft
from exactspec.verification.sampling import sample_from_probs

PROMPTS = [[5, 9, 13, 5], [7, 8, 11, 12, 30, 31], [20, 21]]
N = 12


class NeverDrafts:
    """A drafter that proposes nothing: every step is a plain one."""

    def start(self, input_ids, attention_mask):
        pass

    def propose(self, caps, spec, policy=None):
        b = caps.shape[0]
        return Draft(torch.zeros(b, 0, dtype=torch.long), None, torch.zeros(b, dtype=torch.long))

    def update(self, accepted, next_token, draft):
        pass

    def select_rows(self, rows):
        pass


def test_plain_steps_emit_target_greedy_and_end_rows_at_their_eos():
    target = tiny_lm("llama", seed=0)
    free = [target_greedy(target, p, N) for p in PROMPTS]
    eos = free[1][4]  # ends row 1 after 5 tokens (and any row whose greedy text holds it earlier)
    refs = [target_greedy(target, p, N, eos=eos) for p in PROMPTS]
    ids, mask = left_padded(PROMPTS)
    stream = SpeculativeGenerator(target, drafter=NeverDrafts()).stream(
        ids, mask, max_new_tokens=N, do_sample=False, gamma=4, eos_token_id=eos, pad_token_id=0)
    streamed = [[] for _ in PROMPTS]
    for step in stream:
        assert step.gamma == 0 and step.drafted == [0] * len(step.rows)
        for row, toks, kinds in zip(step.rows, step.tokens, step.from_draft):
            assert len(toks) == 1 and kinds == [False]
            streamed[row] += toks
    out = stream.output
    assert streamed == refs
    new = out.sequences[:, ids.shape[1]:].tolist()
    assert [r[:len(ref)] for r, ref in zip(new, refs)] == refs
    assert all(t == 0 for r, ref in zip(new, refs) for t in r[len(ref):])  # padded after EOS
    st = out.stats
    assert not out.from_draft.any()
    assert st.new_tokens == sum(map(len, refs)) == st.row_steps == st.length_counts[0]
    assert st.plain_steps == st.target_calls == st.target_positions == max(map(len, refs)) == len(st.gamma_history)
    assert st.drafted_tokens == st.accepted_tokens == 0 and not any(st.gamma_history)


def test_plain_steps_sample_from_the_target_with_the_run_generator():
    target = tiny_lm("llama", seed=3, init=0.1)  # flat enough that sampling differs from greedy
    prompt, seed = [5, 9, 13, 5], 1234
    out = SpeculativeGenerator(target, drafter=NeverDrafts()).generate(
        torch.tensor([prompt]), max_new_tokens=N, do_sample=True, temperature=1.0, top_k=0, gamma=2,
        eos_token_id=[], pad_token_id=0, seed=seed)
    gen, seq = torch.Generator().manual_seed(seed), list(prompt)
    with torch.no_grad():
        for _ in range(N):
            p = torch.softmax(target(torch.tensor([seq])).logits[:, -1].float(), -1)
            seq.append(int(sample_from_probs(p, gen)))
    assert out.sequences[0].tolist() == seq
    assert seq[len(prompt):] != target_greedy(target, prompt, N)  # the check can tell sampling apart


def _forward_widths(monkeypatch, session_class):
    """Record the number of tokens each target-session forward feeds (prefills included)."""
    widths, real = [], session_class.forward

    def forward(self, tokens, valid, logits_to_keep=0):
        widths.append(tokens.shape[1])
        return real(self, tokens, valid, logits_to_keep)
    monkeypatch.setattr(session_class, "forward", forward)
    return widths


@pytest.mark.parametrize("sampled", [False, True])
def test_a_run_whose_first_step_is_plain_feeds_the_whole_prompt_as_the_target_alone_loop_does(monkeypatch, sampled):
    """A policy that decided before the prompt that its first step is plain (gamma=0 here, as the engine prices
    plain steps; a learnt gamma="auto" likewise) makes that step's forward the prefill's: the same calls as
    target-alone decoding (the whole prompt, then one token per call), and so its very tokens, seeded."""
    from exactspec.backends.cache import SlotCache
    from exactspec.engine.baseline import target_alone_loop
    from exactspec.engine.loopcosts import calibration_run

    target = tiny_lm("llama", seed=3, init=0.1)
    gen = SpeculativeGenerator(target, tiny_lm("llama", seed=99, init=1.0, layers=1))
    ids = torch.tensor([[5, 9, 13, 5, 9, 2]])
    widths = _forward_widths(monkeypatch, SlotCache)
    kw = dict(do_sample=True, temperature=1.0, top_k=0) if sampled else dict(do_sample=False)
    out = calibration_run(gen, ids, gamma=0, max_new_tokens=N, eos_token_id=[], seed=77, **kw)
    engine, widths[:] = list(widths), []
    alone = target_alone_loop(target, ids, torch.ones_like(ids), max_new_tokens=N, temperature=1.0 if sampled else 0,
                              seed=77)
    assert engine == widths == [6] + [1] * (N - 1)  # (it fed the prompt less its last token, then N tokens)
    assert out.sequences[0, 6:].tolist() == alone[0].tolist()
    assert out.stats.plain_steps == out.stats.target_calls == N and out.stats.new_tokens == N
    assert out.stats.prefill_steps == 1  # (its seconds are the prefill's)
    if sampled:
        assert alone[0].tolist() != target_greedy(target, ids[0].tolist(), N)
