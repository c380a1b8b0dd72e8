"""An engine under load: its servers timed at a concurrency C, and what speculation gives there (`plan --engine
--engine-url … --engine-load C`).

**What is timed.** The prompts, each ``repeats`` times, sent C at a time (a thread pool of C clients, as C users
would), on the client's clock from the first request to the last answer (W seconds); the server's counters are
read before and after. N tokens come back from R requests. A speculative row advances in *row-steps* (one
verification of one request's draft: vLLM counts them as its drafts; llama.cpp's are N − R − accepted), a plain
row one token per row-step after its first (N − R of them). The seconds per row-step at load C is ``u = W / S``: the
C rows share each batched step, and prompt passes interleave with steps, both inside W alike for every server.

**The fit.** Speculative servers at two γ or more give ``u(γ) = a + b·γ`` (least squares, a line through the γ
measured, say 2 and 3). Then a server at γ decodes ``tokens_per_step(γ) / u(γ)`` tokens per second of each row-step's
share, against ``1 / u_0`` plain: **speedup at load C = tokens_per_step(γ) · u_0 / u(γ)**, with the tokens per
step of the engine's own rule replayed offline (batch 1's: acceptance does not depend on the load). What it
cannot follow: a load at which the engine's scheduler changes regime (vLLM's γ-per-batch-size schedule, chunked
prefill at longer prompts) between the γ measured and the γ predicted — measure at the load you will run.
"""
from __future__ import annotations

import concurrent.futures as cf
import statistics
import time

import numpy as np

from exactspec.audit.client import Server
from exactspec.audit.engineclock import scrape
from exactspec.audit.engines import DIALECTS, NO_IDS, detect
from exactspec.audit.laws import Settings

__all__ = ["measure_load", "fit_load", "load_speedup", "parse_loads"]


def parse_loads(text: str | None) -> list[int]:
    """``--engine-load 4,16`` as [4, 16] (each ≥ 2: load 1 is batch 1, timed anyway)."""
    if not text:
        return []
    try:
        loads = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ValueError(f"--engine-load must be comma-separated integers >= 2, got {text!r}") from None
    if not loads or min(loads) < 2 or max(loads) > 256:
        raise ValueError(f"--engine-load must be comma-separated integers in 2..256, got {text!r}")
    return sorted(set(loads))


def measure_load(url: str, prompts: list[list[int]], concurrency: int, *, max_tokens: int = 64, repeats: int = 1,
                 temperature: float = 0.0, pause: float = 0.0) -> dict:
    """One server at `concurrency` (module docstring): ``wall`` W, ``tokens`` N, ``requests`` R, ``row_steps`` S,
    ``u`` = W / S, ``gamma`` (None: no speculation), ``tokens_per_second`` N / W."""
    server = Server(url, concurrency=concurrency)
    try:
        engine, model = detect(server.get_json)
        dialect, law = DIALECTS[engine], Settings(temperature)
        jobs = [p for _ in range(repeats) for p in prompts]

        def one(job: tuple[int, list[int]]) -> int:
            ids = dialect.tokens(server.post_json(dialect.path, dialect.request(model, job[1], max_tokens, law,
                                                                                job[0])))
            if not ids:
                raise ValueError(f"the server at {url} {NO_IDS[engine]}")
            return len(ids)

        time.sleep(pause)
        before, _ = scrape(server)
        t0 = time.perf_counter()
        with cf.ThreadPoolExecutor(max_workers=concurrency) as pool:
            tokens = sum(pool.map(one, enumerate(jobs)))
        wall = time.perf_counter() - t0
        after, _ = scrape(server)
    finally:
        server.close()
    d = after.minus(before) if before is not None and after is not None else None
    spec = d is not None and d.drafts > 0
    n_req = len(jobs)
    steps = (d.drafts if engine == "vllm" else tokens - n_req - d.accepted) if spec else tokens - n_req
    return {"url": url, "engine": engine, "concurrency": concurrency, "gamma": len(after.per_pos) if spec else None,
            "wall": wall, "tokens": tokens, "requests": n_req, "row_steps": steps, "u": wall / max(steps, 1),
            "tokens_per_second": tokens / wall,
            "tokens_per_step": (tokens - n_req) / steps if spec and steps else None}


def fit_load(measured: list[dict]) -> dict:
    """At one concurrency: ``{"concurrency", "u_plain", "a", "b", "measured"}`` from one plain server and
    speculative ones at two γ at least."""
    plain = [m for m in measured if m["gamma"] is None]
    spec = [m for m in measured if m["gamma"] is not None]
    if len(plain) != 1 or len({m["gamma"] for m in spec}) < 2:
        raise ValueError("--engine-load: one plain server and speculative servers at two draft lengths at least are "
                         "timed at each load")
    g = np.array([m["gamma"] for m in spec], float)
    u = np.array([m["u"] for m in spec], float)
    b, a = np.polyfit(g, u, 1)
    if b < 0:  # a row-step never gets cheaper for drafting more: flat, at the mean
        b, a = 0.0, float(u.mean())
    return {"concurrency": measured[0]["concurrency"], "u_plain": plain[0]["u"], "a": float(a), "b": float(b),
            "plain_tokens_per_second": plain[0]["tokens_per_second"], "measured": measured}


def load_speedup(load: dict, gamma: int, tokens_per_step: float) -> float:
    """The engine's throughput at γ over its plain throughput, at the load's concurrency (module docstring)."""
    return tokens_per_step * load["u_plain"] / (load["a"] + load["b"] * gamma)


def ratio_runs(plain_url: str, spec_url: str, prompts, concurrency: int, *, max_tokens: int, temperature: float,
               repeats: int = 3, waves: int = 1, pause: float = 0.0) -> dict:
    """The measured check: plain and speculative throughput at `concurrency`, alternated `repeats` times; the
    median of the per-repetition ratios (`benchmarks/engines/plan_check.py --concurrency`)."""
    ratios, tps = [], []
    for _ in range(repeats):
        kw = dict(max_tokens=max_tokens, temperature=temperature, repeats=waves, pause=pause)
        a = measure_load(plain_url, prompts, concurrency, **kw)
        b = measure_load(spec_url, prompts, concurrency, **kw)
        ratios.append(b["tokens_per_second"] / a["tokens_per_second"])
        tps.append(b["tokens_per_step"])
    return {"speedups": ratios, "speedup": statistics.median(ratios),
            "tokens_per_step": statistics.median(t for t in tps if t is not None) if any(tps) else None}
