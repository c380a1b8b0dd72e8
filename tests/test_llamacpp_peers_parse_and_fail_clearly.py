"""llama.cpp's own systems in the bench: their output is read right (tokens, seconds of prompt and generation,
text, acceptance), their command lines carry the bench's settings, and a missing file or a failing binary is
one clear error. (Building the binaries takes minutes: not done here; docs/bench/llamacpp runs them.)"""
from __future__ import annotations

import pathlib

import pytest

from exactspec.bench.llamacpp_peers import parse_peer_output, peer_command, run_peer

PLAIN_ERR = """0.00.020.101 I llama_context: n_ctx = 4096
0.00.076.249 I common_perf_print: prompt eval time =       5.10 ms /     6 tokens (    0.85 ms per token,  1175.78 tokens per second)
0.00.076.348 I common_perf_print:        eval time =      33.45 ms /    15 runs   (    2.23 ms per token,   448.47 tokens per second)
0.00.076.400 I common_perf_print:       total time =      39.89 ms /    21 tokens
"""
SPEC_ERR = """0.00.300.001 I encoded    6 tokens in    0.012 seconds, speed:  500.000 t/s
0.00.300.002 I decoded   34 tokens in    0.062 seconds, speed:  548.387 t/s
0.00.300.003 I
0.00.300.004 I n_draft   = 4
0.00.300.005 I n_predict = 34
0.00.300.006 I n_drafted = 41
0.00.300.007 I n_accept  = 23
0.00.300.008 I accept    = 56.098%
"""


def test_the_peers_output_is_read_as_printed():
    plain = parse_peer_output("plain", "\nreturn x + 1\n", PLAIN_ERR, "def foo(x):")
    assert (plain.tokens, plain.seconds, plain.prompt_seconds) == (15, pytest.approx(0.03345), pytest.approx(0.0051))
    assert plain.text == "\nreturn x + 1\n" and plain.accept is None
    spec = parse_peer_output("spec-simple", "\n\ndef foo(x):\n    return x + 1\n\n\n\n", SPEC_ERR, "def foo(x):")
    assert (spec.tokens, spec.seconds, spec.prompt_seconds) == (34, 0.062, 0.012)
    assert spec.text == "\n    return x + 1" and spec.accept == pytest.approx(23 / 41)
    with pytest.raises(ValueError, match="no 'eval time' line"):
        parse_peer_output("plain", "", "something else", "p")
    with pytest.raises(ValueError, match="no 'decoded N tokens' line"):
        parse_peer_output("spec", "", PLAIN_ERR, "p")


def test_command_lines_carry_threads_temperature_draft_length_and_repacking():
    plain = peer_command("plain", "/b/llama-completion", "t.gguf", None, "p.txt", n_new=64, temperature=0.0,
                         draft_len=4, threads=2, seed=7)
    for flag, value in (("-t", "2"), ("-tb", "2"), ("-n", "64"), ("--temp", "0.0"), ("-s", "7")):
        assert plain[plain.index(flag) + 1] == value
    assert "--ignore-eos" in plain and "--no-escape" in plain and "-md" not in plain and "--no-repack" not in plain
    spec = peer_command("spec-simple", "/b/x", "t.gguf", "d.gguf", "p.txt", n_new=64, temperature=1.0, draft_len=5,
                        threads=2, seed=0, repack=False)
    assert spec[spec.index("-md") + 1] == "d.gguf" and spec[spec.index("--spec-draft-n-max") + 1] == "5"
    assert spec[spec.index("--spec-type") + 1] == "draft-simple" and "--no-repack" in spec
    assert spec[spec.index("-td") + 1] == "2"
    multi = peer_command("spec", "/b/x", "t.gguf", "d.gguf", "p.txt", n_new=8, temperature=1.0, draft_len=3,
                         threads=1, seed=0)
    assert "--spec-type" not in multi
    with pytest.raises(ValueError, match="kind must be one of"):
        peer_command("fast", "/b/x", "t.gguf", None, "p.txt", n_new=8, temperature=0, draft_len=1, threads=1, seed=0)


def test_a_missing_file_and_a_failing_binary_are_one_clear_error(tmp_path):
    gguf = tmp_path / "t.gguf"
    gguf.write_bytes(b"GGUF")
    with pytest.raises(ValueError, match="target: no such .gguf file"):
        run_peer("plain", tmp_path / "missing.gguf", None, "p", n_new=4, binaries={"plain": "/bin/true"})
    fake = tmp_path / "llama-fake"
    fake.write_text("#!/bin/sh\necho 'error: the model is broken' >&2\nexit 3\n")
    fake.chmod(0o755)
    with pytest.raises(ValueError, match=r"llama.cpp plain failed \(exit status 3\): error: the model is broken"):
        run_peer("plain", gguf, None, "p", n_new=4, binaries={"plain": pathlib.Path(fake)})
