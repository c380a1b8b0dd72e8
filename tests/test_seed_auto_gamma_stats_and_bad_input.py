"""Seeds reproduce runs, gamma="auto" follows acceptance, statistics are consistent with the output,
streaming yields what generate returns, and bad input fails with a clear error."""
from __future__ import annotations

import copy
import json

import pytest
import torch

from _spec_models import left_padded, noisy_copy, tiny_lm
from exactspec import CostModel, SpeculativeGenerator
from exactspec.engine.drafters import PromptLookupDrafter

PROMPTS = [[5, 9, 13, 5, 9], [7, 8, 11], [20, 21, 22, 20, 21, 22, 20]]
_m: dict = {}


def _models():
    if not _m:
        _m["t"] = tiny_lm("llama", seed=0)
        _m["d"] = noisy_copy(_m["t"], 0.05, seed=1)
    return _m["t"], _m["d"]


@pytest.mark.parametrize("drafter", ["model", "prompt_lookup"])
@pytest.mark.parametrize("gamma", [3, "auto"])
def test_seed_makes_sampling_reproducible(drafter, gamma):
    """Same seed and settings on a fresh generator: the same output (gamma="auto" learns between runs of one
    generator, so its reproducibility is per fresh generator; a fixed gamma reproduces on any)."""
    target, draft = _models()

    def fresh():
        return SpeculativeGenerator(target, draft) if drafter == "model" else \
            SpeculativeGenerator(target, drafter=PromptLookupDrafter(max_ngram=2, max_draft=5))
    ids, mask = left_padded(PROMPTS)
    kw = dict(max_new_tokens=16, do_sample=True, temperature=1.5, eos_token_id=[], pad_token_id=0, gamma=gamma)
    a = fresh().generate(ids, mask, seed=11, **kw).sequences
    b = fresh().generate(ids, mask, seed=11, **kw).sequences
    c = fresh().generate(ids, mask, seed=12, **kw).sequences
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    if gamma == 3:
        gen = fresh()
        assert torch.equal(gen.generate(ids, mask, seed=11, **kw).sequences, a)
        assert torch.equal(gen.generate(ids, mask, seed=11, **kw).sequences, a)


def test_auto_gamma_carries_what_it_learnt_per_sampling_setting_and_keeps_its_prices():
    """A second run starts from the acceptance the first one measured (a twin draft: long drafts at once);
    a fresh generator starts over; each sampling setting learns apart; the prices stay the given model's."""
    target, _ = _models()
    cheap = CostModel(t_draft=0.001, target_times={1: 0.010, 16: 0.012})
    ids, mask = left_padded(PROMPTS[:1])
    kw = dict(max_new_tokens=30, do_sample=False, gamma="auto", eos_token_id=[], pad_token_id=0)
    gen = SpeculativeGenerator(target, copy.deepcopy(target), cost_model=cheap, max_gamma=8, calibrate=False)
    first = gen.generate(ids, mask, **kw).stats
    second = gen.generate(ids, mask, **kw).stats
    assert second.target_calls <= first.target_calls and second.gamma_history[0] == 8
    fresh = SpeculativeGenerator(target, copy.deepcopy(target), cost_model=cheap, max_gamma=8, calibrate=False)
    assert fresh.generate(ids, mask, **kw).stats.gamma_history == first.gamma_history  # per generator
    assert len(gen._drafting) == 1
    gen.generate(ids, mask, **{**kw, "do_sample": True, "temperature": 1.0, "generator": torch.Generator().manual_seed(0)})
    assert len(gen._drafting) == 2 and gen._cost_model(1) is cheap


def test_auto_gamma_measures_the_cost_model_once_per_pair_and_batch_size(monkeypatch, tmp_path):
    from exactspec.speed import profiles

    target, draft = _models()
    from exactspec.engine import loopcosts

    calls = []
    real = loopcosts.loop_priced

    def counting(gen, batch_size=1, **kw):
        calls.append(batch_size)
        return real(gen, batch_size, **kw)

    monkeypatch.setattr(loopcosts, "loop_priced", counting)
    monkeypatch.setenv("EXACTSPEC_CACHE", str(tmp_path))  # no stored profiles either
    monkeypatch.setattr(profiles, "_IN_PROCESS", {})
    kw = dict(max_new_tokens=3, gamma="auto", do_sample=False, eos_token_id=[])
    for prompts in (PROMPTS[:1], PROMPTS[:1], PROMPTS[:2], PROMPTS[:2]):
        SpeculativeGenerator(target, draft).generate(*left_padded(prompts), **kw)
    # Timed once per batch size (a batched step costs differently; as the loop runs it, stored on disk:
    # exactspec.engine.loopcosts), then reused by every generator, and by a new process
    assert calls == [1, 2]
    monkeypatch.setattr(profiles, "_IN_PROCESS", {})
    SpeculativeGenerator(target, draft).generate(*left_padded(PROMPTS[:2]), **kw)
    assert calls == [1, 2] and len(list((tmp_path / "costs").glob("*.loop-greedy-*.json"))) == 2


@pytest.mark.parametrize("method", ["token", "block"])
def test_stats_and_stream_are_consistent_with_sequences(method):
    target, draft = _models()
    ids, mask = left_padded(PROMPTS)
    gen = SpeculativeGenerator(target, draft)
    stream = gen.stream(ids, mask, max_new_tokens=13, seed=5, gamma=3, method=method, eos_token_id=[],
                        pad_token_id=0, do_sample=True)
    got = {r: [] for r in range(len(PROMPTS))}
    flags = {r: [] for r in range(len(PROMPTS))}
    for step in stream:
        for row, toks, fd in zip(step.rows, step.tokens, step.from_draft):
            got[row] += toks
            flags[row] += fd
    out, s = stream.output, stream.output.stats
    assert list(stream) == [] and stream.output is out  # re-iterating an exhausted stream keeps the result
    out.sequences[0, 0] = out.sequences[0, 0]  # plain tensors, editable outside inference mode
    new = out.sequences[:, ids.shape[1]:]
    assert [got[r] for r in range(len(PROMPTS))] == new.tolist()
    assert [flags[r] for r in range(len(PROMPTS))] == out.from_draft.tolist()
    assert s.new_tokens == new.numel() == len(PROMPTS) * 13
    assert 0 < s.accepted_tokens < s.drafted_tokens
    assert sum(s.position_accepted) == s.accepted_tokens == int(out.from_draft.sum())
    assert all(a <= d for a, d in zip(s.position_accepted, s.position_drafted))
    assert s.target_calls == len(s.gamma_history)
    assert s.draft_calls >= s.target_calls - 1
    assert s.mean_tokens_per_step == pytest.approx(s.mean_accepted_per_step + 1.0)  # no EOS cuts here
    assert s.row_steps * 1.0 == pytest.approx(s.new_tokens / s.mean_tokens_per_step)
    assert min(s.draft_time, s.target_time, s.verify_time, s.total_time) > 0
    assert s.total_time >= s.draft_time + s.target_time
    json.dumps(s.to_dict())


def test_bad_input_is_rejected_with_clear_errors():
    target, draft = _models()
    gen = SpeculativeGenerator(target, draft)
    ids, mask = left_padded(PROMPTS)
    kw = dict(max_new_tokens=4, eos_token_id=[])
    with pytest.raises(ValueError, match="context"):
        gen.generate(torch.randint(3, 60, (1, 120)), max_new_tokens=20)
    with pytest.raises(ValueError, match="gamma"):
        gen.generate(ids, mask, gamma=0, **kw)
    with pytest.raises(ValueError, match="gamma"):
        gen.generate(ids, mask, gamma="fast", **kw)
    with pytest.raises(ValueError, match="method"):
        gen.generate(ids, mask, method="tree", **kw)
    with pytest.raises(ValueError, match="left-padded"):
        gen.generate(ids, mask.flip(1), **kw)
    with pytest.raises(ValueError, match="top_p"):
        gen.generate(ids, mask, top_p=1.5, **kw)
    with pytest.raises(ValueError, match="input_ids"):  # an id beyond the target's vocabulary
        gen.generate(torch.tensor([[5, 9, 10_000, 13]]), **kw)
    with pytest.raises(TypeError, match="causal LM"):
        SpeculativeGenerator(target, torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="drafter"):
        SpeculativeGenerator(target, drafter="medusa")
    with pytest.raises(ValueError, match="either"):
        SpeculativeGenerator(target, draft, drafter="prompt_lookup")
    with pytest.raises(ValueError, match="eval"):
        SpeculativeGenerator(target, copy.deepcopy(draft).train())


def test_check_tokenizers_compares_vocabularies():
    class Tok:
        def __init__(self, vocab):
            self.vocab = vocab

        def get_vocab(self):
            return dict(self.vocab)

    SpeculativeGenerator.check_tokenizers(Tok({"a": 0, "b": 1}), Tok({"b": 1, "a": 0}))
    with pytest.raises(ValueError, match="differs"):
        SpeculativeGenerator.check_tokenizers(Tok({"a": 0, "b": 1}), Tok({"a": 1, "b": 0}))
    target, draft = _models()
    with pytest.raises(ValueError, match="differs"):
        SpeculativeGenerator(target, draft, tokenizer=Tok({"a": 0}), draft_tokenizer=Tok({"a": 0, "c": 1}))


def test_two_streams_of_one_generator_can_interleave():
    target, draft = _models()
    gen = SpeculativeGenerator(target, draft)
    ids, mask = left_padded(PROMPTS)
    kw = dict(max_new_tokens=10, do_sample=False, eos_token_id=[], pad_token_id=0)
    alone = gen.generate(ids, mask, **kw).sequences
    s1, s2 = gen.stream(ids, mask, **kw), gen.stream(ids[:1], mask[:1], **kw)
    for _ in zip(s1, s2):
        pass
    for _ in s1:
        pass
    for _ in s2:
        pass
    assert torch.equal(s1.output.sequences, alone)
    assert torch.equal(s2.output.sequences, alone[:1, :s2.output.sequences.shape[1]])


@pytest.mark.parametrize("tree", [None, (2, 1)])
def test_outputs_are_ordinary_tensors_and_rules_still_run_outside_the_loop(tree):
    """The loop runs in inference mode; what it returns must still take in-place edits and autograd use,
    and the rules' per-thread scratch buffers it filled must serve a later call made outside the loop."""
    from exactspec import verify

    target, draft = _models()
    ids, mask = left_padded(PROMPTS)
    out = SpeculativeGenerator(target, draft).generate(ids, mask, max_new_tokens=6, do_sample=True, seed=3,
                                                       eos_token_id=[], pad_token_id=0, tree=tree)
    assert not out.sequences.is_inference() and not out.from_draft.is_inference()
    out.sequences[:, 0] = 1  # in place
    out.from_draft |= True
    g, v = torch.Generator().manual_seed(0), target.config.vocab_size  # the run's buffer shape [3, V]
    p = torch.softmax(torch.randn(3, 4, v, generator=g), -1)
    q = torch.softmax(torch.randn(3, 3, v, generator=g), -1)
    verdict = verify(p, q, torch.randint(0, v, (3, 3), generator=g), method="token", generator=g)
    assert verdict.accepted.shape == (3,)


def test_block_rule_rows_on_worker_threads_write_into_the_loops_inference_tensors():
    """Block verification spreads rows over worker threads when (K - 1) * V is large; the workers write into
    tensors the loop made in inference mode, which only works if they run in the caller's mode."""
    target = tiny_lm("llama", vocab=40000, hidden=16, layers=1, seed=0)
    draft = noisy_copy(target, 0.3, seed=2)
    ids, mask = left_padded([[5, 9, 13, 5], [7, 8, 11, 12]])
    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # the row-parallel path needs more than one thread
    try:
        out = SpeculativeGenerator(target, draft).generate(ids, mask, max_new_tokens=6, gamma=4, method="block",
                                                           do_sample=True, seed=1, eos_token_id=[], pad_token_id=0)
    finally:
        torch.set_num_threads(threads)
    assert out.sequences.shape == (2, 10) and out.stats.drafted_tokens > 0
