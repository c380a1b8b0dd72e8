"""The model seam: a GGUF file on llama.cpp and the same weights on transformers give the same logits for the
same prefixes (ragged rows, keeping what each row accepted, rows leaving); keeping equals recomputation; the
engine on llama.cpp is greedy-equal to the same backend's target-alone loop and samples the law of that
backend's own logits (chi-square); bad input and a missing llama-cpp-python give one clear error each."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch

pytest.importorskip("llama_cpp")

from _tiny_gguf import assert_two_tokens_follow_the_law, gguf_of, llama_dir, tiny_pair, tokenizer_dir  # noqa: E402

from exactspec import CostModel, SpeculativeGenerator  # noqa: E402
from exactspec.backends.llamacpp import LlamaCppLM  # noqa: E402
from exactspec.backends.seam import open_session  # noqa: E402
from exactspec.engine.baseline import target_alone_loop  # noqa: E402

# ggml rounds otherwise than torch (on a CPU with AMX it repacks even f32 weights as f16): logits agree to
# about 1e-3 of their largest magnitude, which is what is asserted (2e-3; measured up to 1.1e-3)
RTOL = 2e-3


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_pair(tmp_path_factory.mktemp("tiny"))


def _compare(a: torch.Tensor, b: torch.Tensor, valid: torch.Tensor) -> float:
    """Largest |a - b| over the valid slots `valid [B, S]` of logits `[B, S, V]`, over the largest |a|."""
    return float((a - b)[valid].abs().max() / a[valid].abs().max())


def test_both_backends_give_the_same_logits_through_keeps_ragged_rows_and_row_removal(tiny):
    hf, ll = open_session(tiny["hf"], 3, target=True), open_session(tiny["target"], 3, target=True)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, tiny["target"].vocab_size, (3, 12), generator=g)
    mask = torch.ones(3, 12, dtype=torch.bool)
    mask[1, :5] = mask[2, :9] = False  # left padding: rows of 12, 7 and 3 tokens
    with torch.inference_mode():
        assert _compare(hf.forward(ids, mask), ll.forward(ids, mask), mask) < RTOL
        new = torch.randint(1, tiny["target"].vocab_size, (3, 4), generator=g)
        ragged = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 1, 1, 0]], dtype=torch.bool)
        start = hf.length
        assert _compare(hf.forward(new, ragged), ll.forward(new, ragged), ragged) < RTOL
        keep = torch.tensor([2, 1, 3])  # what each accepted
        hf.keep(start, keep)
        ll.keep(start, keep)
        assert hf.length == ll.length == start + 3
        assert ll.n_real.tolist() == hf.n_real.tolist() == [14, 8, 6]
        more = torch.randint(1, tiny["target"].vocab_size, (3, 2), generator=g)
        every = torch.ones(3, 2, dtype=torch.bool)
        assert _compare(hf.forward(more, every), ll.forward(more, every), every) < RTOL
        hf.select_rows(torch.tensor([0, 2]))
        ll.select_rows(torch.tensor([0, 2]))
        last = more[[0, 2], -1:]
        one = torch.ones(2, 1, dtype=torch.bool)
        assert _compare(hf.forward(last, one), ll.forward(last, one), one) < RTOL


def test_keeping_after_a_rejection_equals_recomputation(tiny):
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(1, tiny["target"].vocab_size, (1, 10), generator=g)
    drafts = torch.randint(1, tiny["target"].vocab_size, (1, 5), generator=g)
    after = torch.randint(1, tiny["target"].vocab_size, (1, 3), generator=g)
    ones = lambda n: torch.ones(1, n, dtype=torch.bool)  # noqa: E731
    with torch.inference_mode():
        s = open_session(tiny["target"], 1, target=True)
        s.forward(prompt, ones(10))
        s.forward(drafts, ones(5))
        s.keep(10, torch.tensor([2]))  # 2 accepted, 3 rejected
        rolled = s.forward(after, ones(3))
        fresh = open_session(tiny["target"], 1, target=True)
        fresh.forward(prompt, ones(10))
        fresh.forward(drafts[:, :2], ones(2))
        recomputed = fresh.forward(after, ones(3))
    assert float((rolled - recomputed).abs().max()) < 1e-4


@pytest.mark.parametrize("gamma,method", [(3, "token"), ("auto", "token"), (4, "block")])
def test_greedy_on_llamacpp_equals_its_own_target_alone_loop(tiny, gamma, method):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny["tok"])
    tok.padding_side = "left"
    enc = tok(["def add(a, b):", "for i in range(10):\n    print"], return_tensors="pt", padding=True)
    # (priced so that drafting pays: a tiny file's calls cost about what the engine's Python costs, and a
    # stored profile would rightly make gamma="auto" take plain steps, which verify nothing)
    gen = SpeculativeGenerator(tiny["target"], tiny["draft"], cost_model=CostModel(1e-5, {1: 0.01, 16: 0.011}))
    out = gen.generate(enc.input_ids, enc.attention_mask, max_new_tokens=24, do_sample=False, gamma=gamma,
                       method=method, eos_token_id=[])
    for b in range(2):  # each row alone, one token per call
        real = enc.attention_mask[b].bool()
        ids = enc.input_ids[b, real][None]
        alone = target_alone_loop(tiny["target"], ids, torch.ones_like(ids), max_new_tokens=24, temperature=0,
                                  seed=0)
        assert out.sequences[b, -24:].tolist() == alone[0].tolist()
    assert sum(out.stats.position_accepted) > 0  # the draft was used, not only plain steps


@pytest.mark.parametrize("temperature,top_p,method", [(1.0, 1.0, "token"), (0.7, 0.9, "block")])
def test_first_tokens_follow_the_law_of_the_backends_own_logits(tiny, temperature, top_p, method):
    gen = SpeculativeGenerator(tiny["target"], tiny["draft"])  # 768 draws, batched 64 rows at a time
    assert_two_tokens_follow_the_law(gen, tiny["target"], rows=64, runs=12, temperature=temperature, top_p=top_p,
                                     gamma=2, method=method)


def test_bad_files_a_vocabulary_mismatch_and_bad_use_give_one_clear_error(tiny, tmp_path):
    with pytest.raises(ValueError, match="gguf_path: no such file"):
        LlamaCppLM(tmp_path / "missing.gguf")
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf file at all")
    with pytest.raises(ValueError, match="not a GGUF file"):
        LlamaCppLM(junk)
    with pytest.raises(TypeError, match="gguf_path"):
        LlamaCppLM(3)
    other_tok = tokenizer_dir(tmp_path / "tok2", vocab=280)
    other = LlamaCppLM(gguf_of(llama_dir(tmp_path / "other", seed=3, layers=1, tok_dir=other_tok),
                               tmp_path / "other.gguf"), threads=1)
    with pytest.raises(ValueError, match="draft: its vocabulary differs"):
        SpeculativeGenerator(tiny["target"], other)
    with pytest.raises(ValueError, match="load the file a second time"):
        SpeculativeGenerator(tiny["target"], tiny["target"])
    gen = SpeculativeGenerator(tiny["target"], tiny["draft"])
    ids = torch.tensor([[5, 6, 7]])
    with pytest.raises(ValueError, match="context of 256"):
        gen.generate(ids, max_new_tokens=300)
    s = open_session(tiny["target"], 2, target=True)
    s.forward(torch.cat([ids, ids]), torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="keeps more than"):  # in the second row: the first is left as it was too
        s.keep(0, torch.tensor([1, 4]))
    assert s.n.tolist() == [3, 3]
    s.keep(0, torch.tensor([1, 2]))
    assert s.n.tolist() == [1, 2]
    open_session(tiny["target"], 1, target=True)
    with pytest.raises(RuntimeError, match="session ended"):
        s.forward(ids, torch.ones_like(ids, dtype=torch.bool))


def test_a_missing_llama_cpp_python_is_one_clear_error(tiny, tmp_path):
    """In a process where llama_cpp cannot be imported: the library raises BackendMissing saying how to install
    it, and the command line prints one line and exits 2."""
    block = tmp_path / "block"
    block.mkdir()
    (block / "llama_cpp.py").write_text("raise ImportError('blocked for this test')\n")
    (block / "sitecustomize.py").write_text(
        "import importlib.util as u\n_f = u.find_spec\n"
        "u.find_spec = lambda name, *a, **k: None if name == 'llama_cpp' else _f(name, *a, **k)\n")
    env = {**__import__("os").environ, "PYTHONPATH": str(block)}
    code = ("from exactspec.backends.llamacpp import LlamaCppLM\n"
            f"try:\n    LlamaCppLM({str(tiny['t_gguf'])!r})\nexcept ModuleNotFoundError as e:\n    print('ERR', e)\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert "ERR the llama.cpp backend needs llama-cpp-python: pip install 'exactspec[llamacpp]'" in out.stdout, out
    cli = subprocess.run([sys.executable, "-m", "exactspec", "generate", "--backend", "llamacpp", "x"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 2 and cli.stderr.count("\n") == 1 and "pip install 'exactspec[llamacpp]'" in cli.stderr


@pytest.mark.parametrize("sampled", [False, True])
def test_a_plain_run_on_llamacpp_makes_its_target_alone_loops_calls_and_tokens(tiny, monkeypatch, sampled):
    """A run whose first step is plain takes the whole prompt in its prefill, as target-alone decoding does, so
    on llama.cpp (where a k-token batch rounds otherwise than a 1-token call) its logits are the loop's own:
    the same calls, the same tokens, seeded at T = 1 too. A generator whose gamma="auto" learnt that
    drafting does not pay starts its next run so."""
    from exactspec.backends.llamacpp import LlamaCppSession
    from exactspec.engine.loopcosts import calibration_run

    widths, real = [], LlamaCppSession.forward

    def forward(self, tokens, valid, logits_to_keep=0):
        widths.append(tokens.shape[1])
        return real(self, tokens, valid, logits_to_keep)
    monkeypatch.setattr(LlamaCppSession, "forward", forward)
    # a draft kept 4 times in 5 would pay (one that never pays is not even asked: AdaptivePolicy.hopeless)
    gen = SpeculativeGenerator(tiny["target"], tiny["draft"], cost_model=CostModel(0.002, {1: 0.01, 2: 0.016, 16: 0.16}))
    kw = dict(do_sample=True, temperature=1.0, top_k=0) if sampled else dict(do_sample=False)
    for seed, prompt in enumerate([[5, 9, 13, 5, 9, 2], [7, 8, 11, 12, 30, 31, 40, 41]]):
        ids = torch.tensor([prompt])
        widths.clear()
        out = calibration_run(gen, ids, gamma=0, max_new_tokens=20, eos_token_id=[], seed=seed, **kw)
        engine = list(widths)
        widths.clear()
        alone = target_alone_loop(tiny["target"], ids, torch.ones_like(ids), max_new_tokens=20,
                                  temperature=1.0 if sampled else 0, seed=seed)
        assert engine == widths == [len(prompt)] + [1] * 19
        assert out.sequences[0, len(prompt):].tolist() == alone[0].tolist()
    ids = torch.tensor([[5, 9, 13, 5, 9, 2]])
    gen.generate(ids, max_new_tokens=8, eos_token_id=[], **kw)  # a fresh gamma="auto"
    widths.clear()
    out = gen.generate(ids, max_new_tokens=8, eos_token_id=[], **kw)  # learnt: plain from the start
    assert widths[0] == 6 and out.stats.gamma_history[0] == 0  # (it may probe later on)


@pytest.mark.parametrize("sampled", [False, True])
def test_a_seeded_auto_run_that_steps_plainly_makes_the_loops_calls(tiny, monkeypatch, sampled):
    """A seeded gamma="auto" decides its first step before the prefill; a plain one takes the whole prompt in the
    target's prefill, so a run that steps plainly makes target-alone decoding's very calls and tokens (here
    drafting does not pay at the prior's rate, and the fresh gap outlasts the run)."""
    from exactspec.backends.llamacpp import LlamaCppSession

    widths, real = [], LlamaCppSession.forward

    def forward(self, tokens, valid, logits_to_keep=0):
        if self.model is tiny["target"]:
            widths.append(tokens.shape[1])
        return real(self, tokens, valid, logits_to_keep)
    monkeypatch.setattr(LlamaCppSession, "forward", forward)
    # a draft kept 4 times in 5 would pay (one that never pays is not even asked: AdaptivePolicy.hopeless)
    gen = SpeculativeGenerator(tiny["target"], tiny["draft"], cost_model=CostModel(0.002, {1: 0.01, 2: 0.016, 16: 0.16}))
    kw = dict(do_sample=True, temperature=1.0, top_k=0) if sampled else dict(do_sample=False)
    ids = torch.tensor([[5, 9, 13, 5, 9, 2, 7, 8, 11, 12]])
    out = gen.generate(ids, max_new_tokens=20, eos_token_id=[], seed=4, **kw)
    engine = list(widths)
    widths.clear()
    alone = target_alone_loop(tiny["target"], ids, torch.ones_like(ids), max_new_tokens=20,
                              temperature=1.0 if sampled else 0, seed=4)
    assert engine == widths == [10] + [1] * 19 and out.stats.draft_calls == 0 and out.stats.prefill_steps == 1
    assert out.sequences[0, 10:].tolist() == alone[0].tolist()
