"""llama.cpp's own systems, run by the bench beside exactspec on the same GGUF files, prompts and threads.

Three programs of the llama.cpp source that llama-cpp-python 0.3.36 vendors, and its HTTP server, built once and
cached under ``$EXACTSPEC_CACHE/llamacpp-bin-0.3.36/bin`` by :func:`peer_binaries`. The three programs alone took
about 5 minutes on 2 cores (measured from an empty cache: 7 s for pip to fetch the 77 MB source archive from
PyPI, 3 s to unpack, 2 s to configure, 241 to 313 s to compile; 326 s in all). With the server, the compile of
all four took 575 s, measured while other builds shared the two cores (the three programs were done after
353 s, the server 222 s later): count on about 10 minutes. The archive is kept in
``$EXACTSPEC_CACHE/llamacpp-src/`` so a rebuild does not fetch it again. Later calls find the binaries in 0.06 s.

- ``llamacpp-plain`` = ``llama-completion`` (tools/completion, with ``-no-cnv``): plain decoding, the target
  alone. Chosen because it is llama.cpp's own generation loop that honours ``-t``/``-tb``, ``--temp``, ``-n``,
  ``-f`` and times the generation phase apart ("eval time"; the prompt is "prompt eval time"), in 0.01 ms.
  Rejected: ``llama-simple`` (no thread option: it runs 4 threads on 2 cores; one clock over prompt and
  generation, in 0.01 s); ``llama-speculative-simple`` without a draft (without ``-md`` it fails to initialize,
  and ``--spec-draft-n-max 0`` aborts: "draft-simple requires a draft context"); ``llama-cli`` (in this
  llama.cpp a chat client of the server's /v1/chat/completions: a chat template and HTTP in the timed loop).
- ``llamacpp-spec-simple`` = ``llama-speculative-simple --spec-type draft-simple``: what llama.cpp's server
  does: the draft proposes up to N tokens greedily, the target samples each position and keeps a draft token
  only when it equals its own sample (exact only at T = 0: its output distribution at T > 0 is the target's
  only because the draft is greedy, so acceptance is lower than with a p/q rule).
- ``llamacpp-server`` = ``llama-server`` (tools/server): llama.cpp's HTTP server, for checking a running server
  from outside (not a peer of the bench: :func:`run_peer` does not run it). Built without its web UI
  (``-DLLAMA_USE_PREBUILT_UI=OFF``: the build would otherwise try to download the UI's prebuilt assets).
- ``llamacpp-spec`` = ``llama-speculative``: the multi-draft example that tests p/q on candidate lists (what
  llama.cpp has of a rejection-sampling rule); meant for T > 0. Run with one draft sequence: its tree mode
  (``-np`` > 1) fails in this llama.cpp ("sequence positions remain consecutive" decode errors, 0 accepted;
  with ``LLAMA_ARG_KV_UNIFIED=1`` it aborts), and the example has no ``--kv-unified`` option.

Flags common to all: ``-t``/``-tb`` threads (and ``-td``/``-tbd`` for the draft), ``--temp`` (0 is argmax in
llama.cpp's sampler), top-k/top-p/min-p off, ``-n`` new tokens, ``--ignore-eos`` (as in the bench, EOS never
stops a row: llama.cpp masks it out, so after a point where the target's argmax is EOS its text differs from
ours), ``--no-escape`` (else ``\\n`` inside the prompt is unescaped), ``-s`` seed, ``--no-repack`` on request
(repacked Q4_1 weights crash llama.cpp 0.3.36 on AMX CPUs). ``-f`` drops one trailing newline of the file:
the prompt is written with one more.

Timing: each binary's own clock for its prompt (``prompt_seconds``) and its generation (``seconds``); process
start, model load and warm-up are only in ``wall_seconds``. The binaries print text, not token ids: the caller
re-tokenizes :attr:`PeerResult.text` to compare with its own output.
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

__all__ = ["PeerResult", "PeerError", "peer_binaries", "peer_command", "parse_peer_output", "run_peer",
           "peer_systems", "PEER_KINDS"]

VERSION = "0.3.36"
PEER_KINDS = {"llamacpp-plain": "llama-completion", "llamacpp-spec-simple": "llama-speculative-simple",
              "llamacpp-spec": "llama-speculative"}
_SHORT = {"plain": "llamacpp-plain", "spec-simple": "llamacpp-spec-simple", "spec": "llamacpp-spec"}
SERVER = {"llamacpp-server": "llama-server"}  # built and returned with the peers, not run as one
NAMES = {"llamacpp-plain": "llama.cpp plain (its own binary)", "llamacpp-spec-simple": "llama.cpp speculative-simple",
         "llamacpp-spec": "llama.cpp speculative (p/q, one draft)"}


class PeerError(ValueError):
    """A peer could not be built or run (a ValueError: the CLI prints it as one line, no traceback)."""


@dataclasses.dataclass
class PeerResult:
    kind: str
    tokens: int  # tokens generated, as the binary counts them
    seconds: float  # the generation phase, by the binary's own clock
    text: str  # what it printed after the prompt
    accept: float | None = None  # speculative kinds: accepted / drafted
    prompt_seconds: float = 0.0  # its prompt processing, by its own clock
    n_drafted: int | None = None
    n_accept: int | None = None
    wall_seconds: float | None = None  # the whole process: start, model load, warm-up, prompt, generation
    tokens_per_s: float = float("nan")  # of the generation phase, as the binary prints it (decodes / seconds)
    prompt_tokens: int | None = None  # the prompt as llama.cpp tokenized it (to check it against the caller's)


def _kind(kind: str) -> str:
    kind = _SHORT.get(kind, kind)
    if kind not in PEER_KINDS:
        raise PeerError(f"kind must be one of {', '.join(PEER_KINDS)}, got {kind!r}")
    return kind


def _bin_dir() -> pathlib.Path:
    from exactspec.backends.cachedir import cache_root

    return cache_root() / f"llamacpp-bin-{VERSION}"


def _tail(text, n: int = 6) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return " | ".join(line.strip() for line in (text or "").strip().splitlines()[-n:] if line.strip())


def _source_archive(say) -> pathlib.Path:
    """The llama-cpp-python sdist, fetched once by pip into the cache (pip checks PyPI's hash) and kept."""
    keep = _bin_dir().with_name("llamacpp-src")
    archive = keep / f"llama_cpp_python-{VERSION}.tar.gz"
    if archive.is_file():
        return archive
    say(f"llama.cpp peers: fetching the llama-cpp-python {VERSION} source archive from PyPI (pip download, 77 MB)")
    keep.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=keep) as tmp:  # same file system: the rename below is atomic
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                        f"llama-cpp-python=={VERSION}", "-d", tmp], check=True, capture_output=True, timeout=1800)
        os.replace(next(pathlib.Path(tmp).glob("llama_cpp_python-*.tar.gz")), archive)
    return archive


def peer_binaries(progress=None) -> dict[str, pathlib.Path]:
    """`{kind: path}` of the three binaries and of ``"llamacpp-server"`` (llama-server), built once into the
    cache (about 10 minutes on 2 cores the first time, see the module docstring; then instant). Needs cmake and a
    C++ compiler: a :class:`PeerError` saying what to install when missing. `progress(line)` hears each phase."""
    say = progress or (lambda line: None)
    out = _bin_dir()
    have = {k: out / "bin" / name for k, name in {**PEER_KINDS, **SERVER}.items()}
    if all(p.is_file() and os.access(p, os.X_OK) for p in have.values()):
        return have
    for tool, pkg in (("cmake", "cmake"), ("c++", "a C++ compiler (g++ or clang)")):
        if shutil.which(tool) is None:
            raise PeerError(f"building llama.cpp's own binaries needs {pkg} on PATH (Debian/Ubuntu: apt-get install "
                            "cmake g++; macOS: xcode-select --install and brew install cmake), or run the bench "
                            "without llama.cpp's peers")
    out.parent.mkdir(parents=True, exist_ok=True)
    # Built beside the final folder and renamed into place: a build killed half-way never looks finished.
    work = pathlib.Path(tempfile.mkdtemp(prefix=f"{out.name}.build-", dir=out.parent))
    try:
        archive = _source_archive(say)
        say("llama.cpp peers: unpacking the vendored llama.cpp source")
        with tarfile.open(archive) as tar:
            members = [m for m in tar.getmembers() if "/vendor/llama.cpp/" in m.name]
            tar.extractall(work, members, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        src = next(work.glob("llama_cpp_python-*/vendor/llama.cpp"))
        build = work / "build"
        say("llama.cpp peers: configuring (cmake)")
        # Static and native, as llama-cpp-python's own build: the same kernels as the library exactspec runs.
        subprocess.run(["cmake", "-S", str(src), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON",
                        "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF", "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_BUILD_TESTS=OFF",
                        "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_BUILD_EXAMPLES=ON",
                        "-DLLAMA_BUILD_TOOLS=ON"],
                       check=True, capture_output=True)
        t0 = time.perf_counter()
        names = [*PEER_KINDS.values(), *SERVER.values()]
        say(f"llama.cpp peers: compiling {', '.join(names)} (about 10 minutes on 2 cores)")
        subprocess.run(["cmake", "--build", str(build), "-j", str(len(os.sched_getaffinity(0))), "--target",
                        *names], check=True, capture_output=True)
        staged = work / "out"
        (staged / "bin").mkdir(parents=True)
        for name in names:
            shutil.copy2(build / "bin" / name, staged / "bin" / name)
        shutil.rmtree(out, ignore_errors=True)
        staged.rename(out)
        say(f"llama.cpp peers: compiled in {time.perf_counter() - t0:.0f} s into {out}")
    except subprocess.CalledProcessError as exc:
        raise PeerError(f"building llama.cpp's binaries failed ({' '.join(map(str, exc.cmd[:4]))} ...): "
                        f"{_tail(exc.stderr) or _tail(exc.stdout)}") from None
    except subprocess.TimeoutExpired:
        raise PeerError("fetching the llama-cpp-python source archive from PyPI timed out") from None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return have


def peer_command(kind: str, binary, target_gguf, draft_gguf, prompt_file, *, n_new: int, temperature: float,
                 draft_len: int, threads: int, seed: int, repack: bool = True, n_ctx: int = 4096) -> list[str]:
    """The command line of one peer run (the prompt is read from `prompt_file`, as written, no escapes)."""
    kind = _kind(kind)
    cmd = [str(binary), "-m", str(target_gguf), "-f", str(prompt_file), "-n", str(n_new), "-t", str(threads),
           "-tb", str(threads), "--temp", repr(float(temperature)), "-s", str(seed), "--ignore-eos", "--no-escape",
           "-c", str(n_ctx), "--top-k", "0", "--top-p", "1.0", "--min-p", "0.0", "--log-colors", "off"]
    if kind == "llamacpp-plain":
        cmd += ["-no-cnv", "--no-display-prompt"]
    else:
        cmd += ["-md", str(draft_gguf), "--spec-draft-n-max", str(draft_len), "--spec-draft-n-min", "0",
                "-td", str(threads), "-tbd", str(threads)]
        if kind == "llamacpp-spec-simple":
            cmd += ["--spec-type", "draft-simple"]  # without it: "failed to initialize speculative decoding"
    if not repack:
        cmd += ["--no-repack"]
    return cmd


_EVAL = re.compile(r"(?<!prompt )eval time =\s*([\d.]+) ms /\s*(\d+) runs")
_PROMPT = re.compile(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens")
_ENCODED = re.compile(r"encoded\s+(\d+) tokens in\s+([\d.]+) seconds")
_DECODED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+|inf|nan) t/s")
_DRAFTED = re.compile(r"n_drafted\s*=\s*(\d+)")
_ACCEPTED = re.compile(r"n_accept\s*=\s*(\d+)")


def parse_peer_output(kind: str, stdout: str, stderr: str, prompt: str) -> PeerResult:
    """What a peer printed: tokens and seconds of its generation phase, its text after the prompt, acceptance."""
    kind = _kind(kind)
    if kind == "llamacpp-plain":
        # llama-completion: the new text alone on stdout (--no-display-prompt) then "\n\n"; common_perf_print's
        # lines on stderr. "eval time" is N runs for N + 1 new tokens: the first comes from the prompt's logits
        # (in "prompt eval time") and the last sampled one is never decoded.
        hits = list(_EVAL.finditer(stderr))
        if not hits:
            raise PeerError(f"llama.cpp {kind}: no 'eval time' line in its output: {_tail(stderr, 3)!r}")
        runs, seconds = int(hits[-1].group(2)), float(hits[-1].group(1)) / 1e3
        tokens, rate = runs + 1, runs / seconds if seconds > 0 else float("nan")
        p = list(_PROMPT.finditer(stderr))
        prompt_seconds = float(p[-1].group(1)) / 1e3 if p else 0.0
        prompt_tokens = int(p[-1].group(2)) if p else None
        text = stdout[:-2] if stdout.endswith("\n\n") else stdout
    else:
        # the speculative examples: "\n\n" + prompt echo + new text + "\n\n\n\n" on stdout, their own clocks
        # on stderr ("decoded N tokens": from the first new token on, N can pass -n by up to the draft length)
        m = _DECODED.search(stderr)
        if m is None:
            raise PeerError(f"llama.cpp {kind}: no 'decoded N tokens' line in its output: {_tail(stderr, 3)!r}")
        tokens, seconds = int(m.group(1)), float(m.group(2))
        rate = float(m.group(3))  # printed from microseconds: finer than the 3-decimal seconds
        e = _ENCODED.search(stderr)
        prompt_seconds = float(e.group(2)) if e else 0.0
        prompt_tokens = int(e.group(1)) if e else None
        text = stdout[2:] if stdout.startswith("\n\n") else stdout
        text = text[len(prompt):] if text.startswith(prompt) else text
        text = text[:-4] if text.endswith("\n\n\n\n") else text
    drafted, accepted = _DRAFTED.search(stderr), _ACCEPTED.search(stderr)
    n_drafted = int(drafted.group(1)) if drafted else None
    n_accept = int(accepted.group(1)) if accepted else None
    accept = n_accept / n_drafted if n_drafted and n_accept is not None else None
    return PeerResult(kind, tokens, seconds, text, accept, prompt_seconds, n_drafted, n_accept, None, rate,
                      prompt_tokens)


def run_peer(kind: str, target_gguf, draft_gguf, prompt, *, n_new: int, temperature: float = 0.0,
             draft_len: int = 4, threads: int = 2, seed: int = 0, repack: bool = True, binaries=None,
             timeout: float = 600.0) -> PeerResult:
    """Run one peer on `prompt`: a str is the prompt text, a path (os.PathLike) a file holding it as is.

    A :class:`PeerError` (a ValueError) for a missing file, a binary that fails (with its last stderr lines)
    or one that runs past `timeout` seconds. `binaries` ({kind: path}) defaults to :func:`peer_binaries`, which
    builds them the first time (minutes)."""
    kind = _kind(kind)
    needed = [("target", target_gguf)] + ([("draft", draft_gguf)] if kind != "llamacpp-plain" else [])
    for name, path in needed:
        if path is None or not pathlib.Path(path).is_file():
            raise PeerError(f"{name}: no such .gguf file: {path}")
    if isinstance(prompt, os.PathLike):
        if not pathlib.Path(prompt).is_file():
            raise PeerError(f"prompt: no such file: {prompt}")
        prompt = pathlib.Path(prompt).read_text(encoding="utf-8")
    binaries = binaries or peer_binaries()
    binary = binaries.get(kind) or binaries.get({v: k for k, v in _SHORT.items()}[kind])
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False, encoding="utf-8") as f:
        f.write(prompt + "\n")  # llama.cpp's -f drops one trailing newline
        prompt_file = f.name
    try:
        cmd = peer_command(kind, binary, target_gguf, draft_gguf, prompt_file, n_new=n_new, temperature=temperature,
                           draft_len=draft_len, threads=threads, seed=seed, repack=repack)
        t0 = time.perf_counter()
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, errors="replace")
        except subprocess.TimeoutExpired as exc:
            raise PeerError(f"llama.cpp {kind} did not finish within {timeout:.0f} s: {_tail(exc.stderr, 3)}") from None
        except OSError as exc:  # not executable, wrong architecture, ...
            raise PeerError(f"llama.cpp {kind}: cannot run {binary}: {exc}") from None
        wall = time.perf_counter() - t0
    finally:
        os.unlink(prompt_file)
    if out.returncode != 0:
        raise PeerError(f"llama.cpp {kind} failed (exit status {out.returncode}): {_tail(out.stderr)}")
    res = parse_peer_output(kind, out.stdout, out.stderr, prompt)
    res.wall_seconds = wall
    return res


def peer_systems(target, draft, tokenizer, cfg, gamma_n: int, progress=None):
    """`(name, run, gamma)` per peer for :func:`exactspec.bench.bench.build_systems`: plain (gamma None: the
    bench's baseline), speculative-simple, and at T > 0 the multi-draft example, with the bench's draft
    length. `run(ids, mask, seed)` returns (tokens, None, the re-tokenized new ids [1, N], its own seconds)."""
    import torch

    if draft is None or not getattr(draft, "gguf_path", None):
        kinds = ["llamacpp-plain"]  # llama.cpp's speculation needs the draft as a GGUF file
    else:
        kinds = ["llamacpp-plain", "llamacpp-spec-simple"] + (["llamacpp-spec"] if cfg.temperature > 0 else [])
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

    return [(NAMES[k] + ("" if k == "llamacpp-plain" else f" (γ={gamma_n})"), system(k),
             None if k == "llamacpp-plain" else gamma_n) for k in kinds]
