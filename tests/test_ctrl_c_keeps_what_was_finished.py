"""Ctrl-C on the command line: no traceback, exit status 130, and what was finished is kept and said: `generate`
prints the text so far, `bench` writes the rows timed so far (bench.json marked partial, with the planned count),
`plan` prints the plan of the prompts measured, `profile` writes the batch sizes measured. Off a terminal the long
commands write a progress line per finished unit on stderr (and with --out, to a log there). The Python API keeps
raising KeyboardInterrupt (run_bench's carries the partial report), and a generator interrupted mid-run works after.

The SIGINT tests run the real command in a subprocess, wait (with a timeout) for the line that says the work is
under way, and send the signal then: no sleep guesses.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from _spec_models import left_padded, noisy_copy, tiny_lm
from exactspec.cli import main

TIMEOUT = 90  # seconds: a machine far slower than a 2-core VM still gets there


def _start(argv: list[str], **kw) -> subprocess.Popen:
    # SIGINT at its default in the child (a non-interactive shell may start it ignored): Python makes it a
    # KeyboardInterrupt, as it is in a terminal.
    return subprocess.Popen([sys.executable, "-m", "exactspec", *argv], stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL), **kw)


def _read_until(stream, marker: bytes, proc: subprocess.Popen) -> bytes:
    """Bytes read from `stream` until `marker` is among them (or the process ended, or TIMEOUT passed)."""
    seen, t0 = b"", time.monotonic()
    while marker not in seen:
        assert time.monotonic() - t0 < TIMEOUT, f"no {marker!r} within {TIMEOUT} s; saw {seen[-2000:]!r}"
        chunk = os.read(stream.fileno(), 4096)
        if not chunk:
            pytest.fail(f"the command ended (status {proc.wait()}) before {marker!r}; saw {seen[-2000:]!r}")
        seen += chunk
    return seen


def test_sigint_to_bench_writes_the_rows_timed_so_far(tmp_path):
    out = tmp_path / "bench"
    proc = _start(["bench", "--num-prompts", "2", "--max-new-tokens", "8", "--repeats", "3", "--threads", "1",
                   "--tree", "none", "--out", str(out)], stdout=subprocess.PIPE)
    err = _read_until(proc.stderr, b"bench: 3/", proc)  # three timed calls done, the run far from its end
    proc.send_signal(signal.SIGINT)
    stdout, rest = proc.communicate(timeout=TIMEOUT)
    err = (err + rest).decode()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert "exactspec bench: interrupted:" in err and str(out / "bench.json") in err
    report = json.loads((out / "bench.json").read_text())
    part = report["partial"]
    assert part["interrupted"] is True and part["repeats_planned"] == 3
    assert part["timed_calls_planned"] == 3 * 2 * len(part["systems_planned"]) > part["timed_calls_done"] >= 3
    assert report["rows"] and report["rows"][0]["system"] == "target (HF generate)"
    assert all(r["tokens_per_second"] > 0 for r in report["rows"])
    assert "Partial" in (out / "bench.md").read_text() and "Partial" in stdout.decode()
    log = (out / "bench.log").read_text()
    assert "bench: 3/" in log and "interrupted" in log


def test_bench_with_stdout_to_a_file_shows_progress_lines_on_stderr(tmp_path):
    out = tmp_path / "bench"
    with open(tmp_path / "stdout.md", "wb") as fh:
        proc = _start(["bench", "--num-prompts", "2", "--max-new-tokens", "6", "--repeats", "1", "--threads", "1",
                       "--tree", "none", "--systems", "token (γ=4)", "--out", str(out)], stdout=fh)
        _, err = proc.communicate(timeout=TIMEOUT)
    err = err.decode()
    assert proc.returncode == 0, err
    units = [line for line in err.splitlines() if line.startswith("bench: ") and "elapsed" in line and "/4 " in line]
    assert [u.split()[1] for u in units] == ["1/4", "2/4", "3/4", "4/4"], err
    assert "prompt 2 x exactspec token (γ=4)" in units[-1] and "left" in units[0]
    assert "| system |" in (tmp_path / "stdout.md").read_text()  # the table went to the file, not the progress
    log = (out / "bench.log").read_text()
    assert all(u in log for u in units)


def test_sigint_to_generate_prints_the_text_so_far():
    prompt = "def fibonacci(n):"
    proc = _start(["generate", "--max-new-tokens", "900", "--seed", "0", prompt], stdout=subprocess.PIPE)
    shown = _read_until(proc.stdout, b"\n", proc)  # the prompt, then generated text streamed as it comes
    shown += os.read(proc.stdout.fileno(), 4096)
    proc.send_signal(signal.SIGINT)
    rest, err = proc.communicate(timeout=TIMEOUT)
    err = err.decode()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "exactspec generate: interrupted:" in err and "new token" in err
    text = (shown + rest).decode()
    produced = text.split("accepted draft token")[0]  # the colour legend follows the text
    assert text.startswith(prompt) and len(produced.strip()) > len(prompt)
    assert "statistics" not in text  # the run did not end: no statistics table


def test_interrupted_generate_json_has_what_was_produced(monkeypatch, capsys):
    from exactspec.engine.decoding import SpeculativeGenerator

    real = SpeculativeGenerator.stream

    def stream(self, *a, **kw):
        steps = real(self, *a, **kw)

        class Cut:  # three steps, then Ctrl-C
            output = None

            def __iter__(self):
                for i, step in enumerate(steps):
                    if i == 3:
                        raise KeyboardInterrupt
                    yield step
        return Cut()

    monkeypatch.setattr(SpeculativeGenerator, "stream", stream)
    assert main(["generate", "--json", "--max-new-tokens", "64", "--seed", "0", "def f(x):"]) == 130
    cap = capsys.readouterr()
    out = json.loads(cap.out)
    assert out["interrupted"] is True and out["stats"] is None
    assert 3 <= len(out["token_ids"][0]) < 64 and out["text"]
    assert "interrupted" in cap.err and len(cap.err.strip().splitlines()) == 1


def test_run_bench_raises_keyboard_interrupt_carrying_the_partial_report():
    """The Python API: Ctrl-C is still a KeyboardInterrupt; its report holds the rows finished, at three points:
    inside the first prompt batch, after it, and after a complete repeat."""
    from exactspec.bench.bench import BenchConfig, run_bench
    from exactspec.bench.benchpartial import BenchInterrupted
    from exactspec.pairs.load import load_pair, pair_prompts

    torch.set_num_threads(1)
    target, draft, tok = load_pair("stdlib")
    cfg = BenchConfig(prompts=pair_prompts("stdlib")[:2], max_new_tokens=6, repeats=2, trees=(),
                      systems=["loop", "token (γ=4)"])
    n_sys = 3  # target (HF generate), target (exactspec loop), exactspec token (γ=4)
    for stop_after, rows, repeats_done in ((2, 2, 0), (3, 3, 0), (8, 3, 1)):
        def events(info):
            if info.get("done") == stop_after:
                raise KeyboardInterrupt
        with pytest.raises(KeyboardInterrupt) as caught:
            run_bench(target, draft, tok, cfg, events=events)
        assert isinstance(caught.value, BenchInterrupted)
        report = caught.value.report
        part = report["partial"]
        assert part["timed_calls_done"] == stop_after and part["timed_calls_planned"] == 2 * 2 * n_sys
        assert part["repeats_done"] == repeats_done
        assert len(report["rows"]) == rows, part["rows_from"]
        json.loads(json.dumps(report))  # what bench.json holds
        if rows == 3:  # every system timed on the same prompts: the loop-calibrated prediction is there
            spec = next(r for r in report["rows"] if r["system"] == "exactspec token (γ=4)")
            assert spec["predicted_speedup"] is not None and spec["speedup_vs_target"] > 0


def test_a_generator_interrupted_mid_run_works_after():
    """KeyboardInterrupt inside a model call (the prefill, a draft step, a verification pass: every call goes
    through SlotCache.forward) leaves the SpeculativeGenerator usable: its next run gives what a fresh generator
    gives (greedy; sampled at a fixed gamma with a seed)."""
    from exactspec import SpeculativeGenerator
    from exactspec.backends import cache

    target = tiny_lm("llama", seed=0)
    draft = noisy_copy(target, 0.1)
    ids, mask = left_padded([[5, 6, 7, 8], [9, 3, 9]])
    kw = dict(max_new_tokens=20, eos_token_id=[], pad_token_id=0)
    real_forward = cache.SlotCache.forward
    for run_kw in (dict(do_sample=False, gamma="auto"), dict(do_sample=True, gamma=3, seed=7),
                   dict(do_sample=False, tree="auto")):
        fresh = SpeculativeGenerator(target, draft).generate(ids, mask, **kw, **run_kw)
        for stop_at in (1, 4, 9):
            gen, calls = SpeculativeGenerator(target, draft), [0]

            def forward(self, *a, **k):
                calls[0] += 1
                if calls[0] == stop_at:
                    raise KeyboardInterrupt
                return real_forward(self, *a, **k)

            cache.SlotCache.forward = forward
            try:
                with pytest.raises(KeyboardInterrupt):
                    gen.generate(ids, mask, **kw, **run_kw)
            finally:
                cache.SlotCache.forward = real_forward
            again = gen.generate(ids, mask, **kw, **run_kw)
            assert torch.equal(again.sequences, fresh.sequences), (run_kw, stop_at)
            assert again.stats.new_tokens == 2 * 20


def _prompts_file(tmp_path, n: int) -> str:
    from exactspec.pairs.load import pair_prompts

    prompts = (pair_prompts("stdlib") * 4)[:n]
    path = tmp_path / "prompts.json"
    path.write_text(json.dumps(prompts))
    return str(path)


def test_interrupted_plan_prints_the_plan_of_the_prompts_measured(tmp_path, monkeypatch, capsys):
    from exactspec.deploy import offline

    real, calls = offline.measure_acceptance, [0]

    def measure(*a, **kw):
        calls[0] += 1
        if calls[0] == 2:  # the second chunk of 8 prompts
            raise KeyboardInterrupt
        return real(*a, **kw)

    monkeypatch.setattr(offline, "measure_acceptance", measure)
    argv = ["plan", "--pair", "demo", "--prompts", _prompts_file(tmp_path, 10), "--max-new-tokens", "6",
            "--max-gamma", "3", "--tree-nodes", "0", "--cost", "0.1", "--json"]
    assert main(argv) == 130
    cap = capsys.readouterr()
    plan = json.loads(cap.out)
    assert plan["partial"] == {"interrupted": True, "prompts_measured": 8, "prompts_planned": 10,
                               "batch_sizes_costed": [1], "batch_sizes_planned": [1]}
    assert plan["recommended_gamma"] in (1, 2, 3) and plan["measured"]["prompts"] == 8
    assert "Traceback" not in cap.err and "exactspec plan: interrupted:" in cap.err
    assert "plan: 8/10 prompts 1-8" in cap.err  # the progress line of the chunk that finished


def test_interrupted_profile_writes_the_batch_sizes_measured(tmp_path, monkeypatch, capsys):
    from exactspec.deploy.costprofile import CostProfile

    real, calls = CostProfile.measure.__func__, [0]

    def measure(cls, *a, **kw):
        calls[0] += 1
        if calls[0] == 2:
            raise KeyboardInterrupt
        return real(cls, *a, **kw)

    monkeypatch.setattr(CostProfile, "measure", classmethod(measure))
    out = tmp_path / "prof.json"
    argv = ["profile", "--pair", "demo", "--batch-sizes", "1,2", "--prompt-len", "8", "--repeats", "1",
            "--out", str(out)]
    assert main(argv) == 130
    err = capsys.readouterr().err
    prof = CostProfile.load(out)
    assert prof.batch_sizes == [1]
    assert prof.metadata["partial"] == {"interrupted": True, "batch_sizes_done": [1], "batch_sizes_planned": [1, 2]}
    assert "Traceback" not in err and "exactspec profile: interrupted:" in err and str(out) in err
    assert "profile: 1/2 batch size 1" in (tmp_path / "prof.log").read_text()
