"""llama.cpp's own systems, run by the bench beside exactspec on the same GGUF files, prompts and threads.

Three programs of the llama.cpp source that llama-cpp-python 0.3.36 vendors, built once and cached under
``$EXACTSPEC_CACHE/llamacpp-bin-0.3.36/`` (:func:`peer_binaries`; about 5 minutes on 2 cores, from the package's
source archive, fetched from PyPI by pip the first time):

- ``llama-completion`` (tools/completion): plain decoding, the target alone; its "eval time" line is the
  generation phase (the prompt is timed apart).
- ``llama-speculative-simple``: what llama.cpp's server does: the draft proposes up to N tokens greedily,
  the target samples each position and keeps a draft token only when it equals its own sample.
- ``llama-speculative``: the multi-draft example that tests p/q on top-k/top-p-truncated candidate lists
  (what llama.cpp has of a rejection-sampling rule); run at T > 0 only.

Each runs in a process of its own; its time is the binary's own clock for its prompt processing plus its
generation (process start, model load and warm-up excluded), as exactspec's systems are timed from their
prefill on. The binaries print text, not
token ids: the caller re-tokenizes it to compare greedy output. Flags: ``-t``/``-tb`` threads, ``--temp``,
``-n`` new tokens, ``--ignore-eos`` (as the bench's systems, EOS never stops a row), ``--no-escape``,
``--no-repack`` for Q4_1 files (llama.cpp 0.3.36 crashes with repacked Q4_1 weights here), ``-s`` seed.
"""
from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

__all__ = ["PeerResult", "peer_binaries", "peer_command", "parse_peer_output", "run_peer", "peer_systems",
           "PEER_KINDS"]

VERSION = "0.3.36"
PEER_KINDS = {"plain": "llama-completion", "spec-simple": "llama-speculative-simple", "spec": "llama-speculative"}
NAMES = {"plain": "llama.cpp plain (its own binary)", "spec-simple": "llama.cpp speculative-simple",
         "spec": "llama.cpp speculative (multi-draft)"}


@dataclasses.dataclass
class PeerResult:
    kind: str
    tokens: int  # tokens generated, as the binary counts them
    seconds: float  # the generation phase, by the binary's own clock
    text: str  # what it printed after the prompt
    accept: float | None = None  # speculative kinds: accepted / drafted
    prompt_seconds: float = 0.0  # its prompt processing, by its own clock


def _bin_dir() -> pathlib.Path:
    from exactspec.backends.cachedir import cache_root

    return cache_root() / f"llamacpp-bin-{VERSION}"


def peer_binaries(progress=None) -> dict[str, pathlib.Path]:
    """The three binaries, built once into the cache. Needs cmake and a C++ compiler (ValueError saying what
    to install when missing); `progress(line)` hears each phase."""
    say = progress or (lambda line: None)
    out = _bin_dir()
    have = {k: out / "bin" / name for k, name in PEER_KINDS.items()}
    if all(p.is_file() and os.access(p, os.X_OK) for p in have.values()):
        return have
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            raise ValueError(f"building llama.cpp's own binaries needs {tool} (apt-get install cmake g++), or "
                             "run the bench with --no-peers")
    work = pathlib.Path(tempfile.mkdtemp(prefix="exactspec-llamacpp-"))
    try:
        say(f"llama.cpp peers: fetching the llama-cpp-python {VERSION} source archive (pip download)")
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                        f"llama-cpp-python=={VERSION}", "-d", str(work)], check=True, capture_output=True)
        archive = next(work.glob("llama_cpp_python-*.tar.gz"))
        with tarfile.open(archive) as tar:
            tar.extractall(work, filter="data")
        src = next(work.glob("llama_cpp_python-*/vendor/llama.cpp"))
        build = work / "build"
        say("llama.cpp peers: configuring (cmake)")
        subprocess.run(["cmake", "-S", str(src), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON",
                        "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF", "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_BUILD_TESTS=OFF",
                        "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_BUILD_EXAMPLES=ON", "-DLLAMA_BUILD_TOOLS=ON"],
                       check=True, capture_output=True)
        t0 = time.perf_counter()
        say("llama.cpp peers: building llama-completion, llama-speculative-simple, llama-speculative (about 5 min)")
        subprocess.run(["cmake", "--build", str(build), "-j", str(len(os.sched_getaffinity(0))), "--target",
                        *PEER_KINDS.values()], check=True, capture_output=True)
        tmp = out.with_name(out.name + f".tmp{os.getpid()}")
        (tmp / "bin").mkdir(parents=True, exist_ok=True)
        for name in PEER_KINDS.values():
            shutil.copy2(build / "bin" / name, tmp / "bin" / name)
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
        say(f"llama.cpp peers: built in {time.perf_counter() - t0:.0f} s into {out}")
    except subprocess.CalledProcessError as exc:
        tail = (exc.stderr or b"").decode(errors="replace").strip().splitlines()[-3:]
        raise ValueError(f"building llama.cpp's binaries failed ({' '.join(map(str, exc.cmd[:3]))} ...): "
                         f"{' | '.join(tail)}; the bench runs without them with --no-peers") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return have


def peer_command(kind: str, binary, target_gguf, draft_gguf, prompt_file, *, n_new: int, temperature: float,
                 draft_len: int, threads: int, seed: int, repack: bool = True) -> list[str]:
    """The command line of one peer run (the prompt is read from `prompt_file`, as written, no escapes)."""
    if kind not in PEER_KINDS:
        raise ValueError(f"kind must be one of {', '.join(PEER_KINDS)}, got {kind!r}")
    cmd = [str(binary), "-m", str(target_gguf), "-f", str(prompt_file), "-n", str(n_new), "-t", str(threads),
           "-tb", str(threads), "--temp", repr(float(temperature)), "-s", str(seed), "--ignore-eos", "--no-escape",
           "-c", "4096", "--top-k", "0", "--top-p", "1.0", "--min-p", "0.0"]
    if kind == "plain":
        cmd += ["-no-cnv", "--no-warmup", "--no-display-prompt"]
    else:
        cmd += ["-md", str(draft_gguf), "--spec-draft-n-max", str(draft_len), "--spec-draft-n-min", "0",
                "-td", str(threads), "-tbd", str(threads)]
        if kind == "spec-simple":
            cmd += ["--spec-type", "draft-simple"]
    if not repack:
        cmd += ["--no-repack"]
    return cmd


_EVAL = re.compile(r"(?<!prompt )eval time =\s*([\d.]+) ms /\s*(\d+) runs")
_PROMPT = re.compile(r"prompt eval time =\s*([\d.]+) ms")
_ENCODED = re.compile(r"encoded\s+\d+ tokens in\s+([\d.]+) seconds")
_DECODED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds")
_DRAFTED = re.compile(r"n_drafted\s*=\s*(\d+)")
_ACCEPTED = re.compile(r"n_accept\s*=\s*(\d+)")


def parse_peer_output(kind: str, stdout: str, stderr: str, prompt: str) -> PeerResult:
    """What a peer printed: tokens and seconds of its generation phase, its text after the prompt, acceptance."""
    if kind == "plain":
        hits = list(_EVAL.finditer(stderr))
        if not hits:
            raise ValueError(f"llama.cpp {kind}: no 'eval time' line in its output: {stderr.strip()[-300:]!r}")
        ms, runs = float(hits[-1].group(1)), int(hits[-1].group(2))
        tokens, seconds = runs, ms / 1e3
        p = list(_PROMPT.finditer(stderr))
        prompt_seconds = float(p[-1].group(1)) / 1e3 if p else 0.0
        text = stdout
    else:
        m = _DECODED.search(stderr)
        if m is None:
            raise ValueError(f"llama.cpp {kind}: no 'decoded N tokens' line in its output: {stderr.strip()[-300:]!r}")
        tokens, seconds = int(m.group(1)), float(m.group(2))
        e = _ENCODED.search(stderr)
        prompt_seconds = float(e.group(1)) if e else 0.0
        text = stdout.strip("\n")
        text = text[len(prompt):] if text.startswith(prompt) else text
    drafted, accepted = _DRAFTED.search(stderr), _ACCEPTED.search(stderr)
    accept = int(accepted.group(1)) / int(drafted.group(1)) if drafted and accepted and int(drafted.group(1)) \
        else None
    return PeerResult(kind, tokens, seconds, text.rstrip("\n") if kind != "plain" else text, accept, prompt_seconds)


def run_peer(kind: str, target_gguf, draft_gguf, prompt: str, *, n_new: int, temperature: float = 0.0,
             draft_len: int = 4, threads: int = 2, seed: int = 0, repack: bool = True, binaries=None,
             timeout: float = 600.0) -> PeerResult:
    """Run one peer on `prompt` (text); a ValueError with its last lines when it fails."""
    for name, path in (("target", target_gguf), ("draft", draft_gguf if kind != "plain" else target_gguf)):
        if not pathlib.Path(path).is_file():
            raise ValueError(f"{name}: no such .gguf file: {path}")
    binaries = binaries or peer_binaries()
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
        f.write(prompt + "\n")  # llama.cpp's -f drops one trailing newline
        prompt_file = f.name
    try:
        cmd = peer_command(kind, binaries[kind], target_gguf, draft_gguf, prompt_file, n_new=n_new,
                           temperature=temperature, draft_len=draft_len, threads=threads, seed=seed, repack=repack)
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, errors="replace")
        except subprocess.TimeoutExpired:
            raise ValueError(f"llama.cpp {kind} did not finish within {timeout:.0f} s") from None
    finally:
        os.unlink(prompt_file)
    if out.returncode != 0:
        tail = " | ".join(out.stderr.strip().splitlines()[-3:])
        raise ValueError(f"llama.cpp {kind} failed (exit status {out.returncode}): {tail}")
    return parse_peer_output(kind, out.stdout, out.stderr, prompt)


def peer_systems(target, draft, tokenizer, cfg, gamma_n: int, progress=None):
    """`(name, run, gamma)` per peer for :func:`exactspec.bench.bench.build_systems`: plain (gamma None: the
    bench's baseline), speculative-simple, and at T > 0 the multi-draft example, with the bench's draft
    length. `run(ids, mask, seed)` returns (tokens, None, the re-tokenized new ids [1, N], its own seconds)."""
    import torch

    if draft is None or not getattr(draft, "gguf_path", None):
        kinds = ["plain"]  # llama.cpp's speculation needs the draft as a GGUF file
    else:
        kinds = ["plain", "spec-simple"] + (["spec"] if cfg.temperature > 0 else [])
    if cfg.batch_size != 1:
        return []  # its examples decode one sequence
    binaries = peer_binaries(progress)

    def system(kind):
        def run(ids, mask, seed):
            prompt = tokenizer.decode(ids[0][mask[0].bool()])
            res = run_peer(kind, target.gguf_path, getattr(draft, "gguf_path", None) or target.gguf_path, prompt,
                           n_new=cfg.max_new_tokens, temperature=cfg.temperature, draft_len=gamma_n,
                           threads=target.threads, seed=seed, repack=target.repack, binaries=binaries)
            new = tokenizer(res.text, add_special_tokens=False, return_tensors="pt").input_ids[:, :cfg.max_new_tokens]
            width = cfg.max_new_tokens
            if new.shape[1] < width:  # re-tokenized text may merge tokens: pad so shapes compare (as unequal)
                new = torch.cat([new, torch.full((1, width - new.shape[1]), -1, dtype=torch.long)], 1)
            # end to end as exactspec's systems are timed (their prefill included): prompt + generation
            return res.tokens, None, new, res.seconds + res.prompt_seconds
        return run

    return [(NAMES[k] + ("" if k == "plain" else f" (γ={gamma_n})"), system(k), None if k == "plain" else gamma_n)
            for k in kinds]
