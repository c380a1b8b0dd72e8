"""llama.cpp's own systems in the bench: their output is read right (tokens, seconds of prompt and generation,
text, acceptance), their command lines carry the bench's settings, and a missing file, a failing or hanging
binary and a missing compiler are one clear error. (Building the binaries takes minutes: never done here;
benchmarks/llamacpp/peers_check.py builds and runs them.)"""
from __future__ import annotations

import pathlib

import pytest

from exactspec.bench import llamacpp_peers
from exactspec.bench.llamacpp_peers import PeerError, parse_peer_output, peer_binaries, peer_command, run_peer

# Captured from the binaries built by peer_binaries() (llama.cpp of llama-cpp-python 0.3.36) on the demo pair,
# f16, -n 24, draft length 4, 2 threads; stderr cut to the lines the parser reads and a few around them.
PROMPT = 'def add(a, b):\n    """Return a plus b."""\n'
PLAIN_OUT = '\ndef _format_from_string(a, b):\n    """Return a string representation of the string of the\n\n'
PLAIN_ERR = """0.00.111.965 I generate: n_ctx = 4096, n_batch = 2048, n_predict = 24, n_keep = 0
0.00.166.275 I common_perf_print:    sampling time =       1.14 ms
0.00.166.277 I common_perf_print:    samplers time =       0.94 ms /    41 tokens
0.00.166.279 I common_perf_print:        load time =      89.63 ms
0.00.166.281 I common_perf_print: prompt eval time =       8.45 ms /    17 tokens (    0.50 ms per token,  2011.83 tokens per second)
0.00.166.283 I common_perf_print:        eval time =      43.44 ms /    23 runs   (    1.89 ms per token,   529.45 tokens per second)
0.00.166.283 I common_perf_print:       total time =      54.51 ms /    40 tokens
"""
SPEC_OUT = "\n\n" + PROMPT + ('\ndef _format_from_string(a, b):\n    """Return a string representation of the string '
                              'of the string.\n\n    The') + "\n\n\n\n"
SPEC_ERR = """0.00.178.450 I encoded   17 tokens in    0.011 seconds, speed: 1558.775 t/s
0.00.178.452 I decoded   28 tokens in    0.057 seconds, speed:  489.699 t/s
0.00.178.452 I 
0.00.178.452 I n_draft   = 4
0.00.178.453 I n_predict = 28
0.00.178.453 I n_drafted = 32
0.00.178.453 I n_accept  = 20
0.00.178.454 I accept    = 62.500%
0.00.178.454 I 
0.00.178.454 I draft:

0.00.178.495 I target:

0.00.178.499 I common_perf_print: prompt eval time =      55.26 ms /    58 tokens (    0.95 ms per token,  1049.51 tokens per second)
0.00.178.500 I common_perf_print:        eval time =       0.00 ms /     1 runs   (    0.00 ms per token,      inf tokens per second)
"""


def test_the_peers_output_is_read_as_printed():
    plain = parse_peer_output("llamacpp-plain", PLAIN_OUT, PLAIN_ERR, PROMPT)
    # 23 decodes for 24 new tokens: the first comes from the prompt's logits, the last is never decoded
    assert (plain.tokens, plain.seconds, plain.prompt_seconds) == (24, pytest.approx(0.04344), pytest.approx(0.00845))
    assert plain.tokens_per_s == pytest.approx(23 / 0.04344)
    assert plain.text == PLAIN_OUT[:-2] and plain.accept is None and plain.n_drafted is None
    spec = parse_peer_output("llamacpp-spec-simple", SPEC_OUT, SPEC_ERR, PROMPT)
    assert (spec.tokens, spec.seconds, spec.prompt_seconds, spec.tokens_per_s) == (28, 0.057, 0.011, 489.699)
    assert spec.text.startswith("\ndef _format") and spec.text.endswith("string.\n\n    The")  # own newlines kept
    assert (spec.n_drafted, spec.n_accept, spec.accept) == (32, 20, pytest.approx(0.625))
    # the short kind names of the first version still work
    assert parse_peer_output("spec", SPEC_OUT, SPEC_ERR, PROMPT).kind == "llamacpp-spec"
    with pytest.raises(PeerError, match="no 'eval time' line"):
        parse_peer_output("llamacpp-plain", "", "something else", "p")
    with pytest.raises(ValueError, match="no 'decoded N tokens' line"):  # PeerError is a ValueError
        parse_peer_output("llamacpp-spec", "", PLAIN_ERR, "p")


def _arg(cmd, flag):
    return cmd[cmd.index(flag) + 1]


def test_command_lines_carry_threads_temperature_draft_length_and_repacking():
    plain = peer_command("llamacpp-plain", "/b/llama-completion", "t.gguf", None, "p.txt", n_new=64,
                         temperature=0.0, draft_len=4, threads=2, seed=7)
    for flag, value in (("-t", "2"), ("-tb", "2"), ("-n", "64"), ("--temp", "0.0"), ("-s", "7"), ("-f", "p.txt")):
        assert _arg(plain, flag) == value
    assert {"--ignore-eos", "--no-escape", "-no-cnv", "--no-display-prompt"} <= set(plain)
    assert "-md" not in plain and "--no-repack" not in plain
    simple = peer_command("llamacpp-spec-simple", "/b/x", "t.gguf", "d.gguf", "p.txt", n_new=64, temperature=1.0,
                          draft_len=5, threads=3, seed=0, repack=False)
    assert _arg(simple, "-md") == "d.gguf" and _arg(simple, "--spec-draft-n-max") == "5"
    assert _arg(simple, "--spec-type") == "draft-simple" and "--no-repack" in simple
    assert [_arg(simple, f) for f in ("-t", "-tb", "-td", "-tbd")] == ["3"] * 4 and _arg(simple, "--temp") == "1.0"
    multi = peer_command("llamacpp-spec", "/b/x", "t.gguf", "d.gguf", "p.txt", n_new=8, temperature=0.8,
                         draft_len=3, threads=1, seed=0)
    assert "--spec-type" not in multi and _arg(multi, "--spec-draft-n-max") == "3" and "-np" not in multi
    with pytest.raises(ValueError, match="kind must be one of llamacpp-plain"):
        peer_command("fast", "/b/x", "t.gguf", None, "p.txt", n_new=8, temperature=0, draft_len=1, threads=1, seed=0)


def _fake(tmp_path, body: str) -> pathlib.Path:
    fake = tmp_path / "llama-fake"
    fake.write_text("#!/bin/sh\n" + body)
    fake.chmod(0o755)
    return fake


def test_a_missing_file_a_failing_or_hanging_binary_are_one_clear_error(tmp_path):
    gguf = tmp_path / "t.gguf"
    gguf.write_bytes(b"GGUF")
    with pytest.raises(PeerError, match="target: no such .gguf file"):
        run_peer("llamacpp-plain", tmp_path / "missing.gguf", None, "p", n_new=4, binaries={"llamacpp-plain": "x"})
    with pytest.raises(PeerError, match="draft: no such .gguf file"):
        run_peer("llamacpp-spec-simple", gguf, tmp_path / "d.gguf", "p", n_new=4, binaries={"x": "x"})
    with pytest.raises(PeerError, match="prompt: no such file"):
        run_peer("llamacpp-plain", gguf, None, tmp_path / "p.txt", n_new=4, binaries={"llamacpp-plain": "x"})
    fake = _fake(tmp_path, "echo 'loading'\necho 'error: the model is broken' >&2\nexit 3\n")
    with pytest.raises(PeerError, match=r"llama.cpp llamacpp-plain failed \(exit status 3\): error: the model is"):
        run_peer("llamacpp-plain", gguf, None, "p", n_new=4, binaries={"llamacpp-plain": fake})
    hang = _fake(tmp_path, "echo started >&2\nexec sleep 30\n")
    with pytest.raises(PeerError, match="did not finish within 1 s"):
        run_peer("llamacpp-plain", gguf, None, "p", n_new=4, binaries={"llamacpp-plain": hang}, timeout=1)


def test_a_run_reads_the_prompt_file_and_hands_the_binary_its_output(tmp_path):
    # a fake llama-completion that checks the prompt file (one extra newline: -f drops one) and prints as it does
    gguf = tmp_path / "t.gguf"
    gguf.write_bytes(b"GGUF")
    prompt = tmp_path / "prompt.txt"
    prompt.write_text(PROMPT)
    (tmp_path / "err.txt").write_text(PLAIN_ERR)
    (tmp_path / "out.txt").write_text(PLAIN_OUT)
    fake = _fake(tmp_path, f'while [ "$1" != -f ]; do shift; done\nprintf \'{PROMPT}\\n\' | cmp -s - "$2" || '
                           f'exit 9\ncat {tmp_path}/out.txt\ncat {tmp_path}/err.txt >&2\n')
    res = run_peer("llamacpp-plain", gguf, None, prompt, n_new=24, binaries={"llamacpp-plain": fake})
    assert res.tokens == 24 and res.text == PLAIN_OUT[:-2] and res.wall_seconds > 0


def test_no_compiler_is_one_clear_error_before_any_download(tmp_path, monkeypatch):
    monkeypatch.setenv("EXACTSPEC_CACHE", str(tmp_path))
    monkeypatch.setattr(llamacpp_peers.shutil, "which", lambda tool: None if tool == "cmake" else "/usr/bin/" + tool)
    with pytest.raises(PeerError, match="needs cmake on PATH .*apt-get install cmake g\\+\\+"):
        peer_binaries()
    assert not any(tmp_path.iterdir())
