"""One request to a running engine, timed by the server's own clock where it keeps one, and counted by its own counters.

A client's clock adds the HTTP round trip and the machine's jitter to every request: llama.cpp's server decodes a
token in about a millisecond here, and its 64-token requests spread 20% between repetitions on the client's clock
(docs/engines.md, r1). Both engines time their requests themselves:

- llama.cpp's server answers every completion with ``timings`` (``tools/server/server-common.cpp``):
  ``prompt_n`` / ``prompt_ms``, the tokens its prompt pass computed (a cached prefix excluded) and how long that
  pass and the first token took; ``predicted_n`` / ``predicted_ms``, the tokens sampled and the time from the first
  to the last; ``draft_n_accepted``, the request's accepted drafts.
- vLLM keeps per-request histograms on ``/metrics`` (``vllm/v1/metrics/loggers.py``): the sums of
  ``vllm:request_prefill_time_seconds`` (scheduled to first token), ``vllm:request_decode_time_seconds`` (first
  token to last) and ``vllm:request_prefill_kv_computed_tokens`` (the tokens a prefill computed, a cached prefix
  excluded). One request at a time, their increments around it are that request's.

Where neither is there (another server), the server's fields are None and the caller falls back on the client's
clock.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from exactspec.audit.engines import NO_IDS

VLLM_CLOCK = {"prefill_s": "vllm:request_prefill_time_seconds_sum",
              "decode_s": "vllm:request_decode_time_seconds_sum",
              "prompt_n": "vllm:request_prefill_kv_computed_tokens_sum"}
VLLM_DONE = "vllm:request_decode_time_seconds_count"  # requests it has recorded: its logger may trail the answer
RECORD_WAIT_S = 2.0


@dataclass
class Timed:
    """One request: ``client`` seconds end to end, ``tokens`` returned; by the server's clock (None where it keeps
    none) ``prefill_s`` (its prompt pass and the first token), ``prompt_n`` (the tokens that pass computed) and
    ``decode_s`` (first token to last); ``accepted`` / ``drafts`` its speculative counters' increments (None
    where the server shows none), ``gamma`` the draft positions its counters know (None: no speculation seen)."""

    client: float
    tokens: int
    prefill_s: float | None = None
    prompt_n: int | None = None
    decode_s: float | None = None
    accepted: float | None = None
    drafts: float | None = None
    gamma: int | None = None


def scrape(server) -> tuple[object, dict]:
    """``(speculative counters or None, {name: value} of vLLM's clock sums, {} where absent)`` from one GET of
    ``/metrics``."""
    from prometheus_client.parser import text_string_to_metric_families

    from exactspec.deploy.enginemetrics import parse_spec_counters

    text = server.get_text("/metrics")
    if not text:
        return None, {}
    try:
        spec = parse_spec_counters(text)
    except ValueError:
        spec = None
    wanted, sums = {*VLLM_CLOCK.values(), VLLM_DONE}, {}
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name in wanted:
                    sums[s.name] = sums.get(s.name, 0.0) + s.value
    except ValueError:
        sums = {}
    return spec, sums


def timed_request(server, dialect, model, prompt: list[int], n: int, settings, seed: int = 0,
                  pause: float = 0.0) -> Timed:
    """Send one completion of `n` tokens of `prompt` (after `pause` seconds: vLLM-CPU spins after a request), its
    prompt not read from llama.cpp's cache, and time it by both clocks; a server that returns no ids is a
    ValueError naming it."""
    time.sleep(pause)
    request = dialect.request(model, prompt, n, settings, seed)
    if "cache_prompt" in request:
        # a timed prompt is read afresh, as a user's new one: llama.cpp's server keeps the states of earlier
        # prompts, and from a prompt's second repetition on it computed 1 of its 10-50 tokens (r3, T = 1: prompt
        # passes of 8-42 ms on a first reading, 2.5-3.5 ms repeated; a request decodes in about 100 ms)
        request["cache_prompt"] = False
    spec0, sums0 = scrape(server)
    t0 = time.perf_counter()
    body = server.post_json(dialect.path, request)
    client = time.perf_counter() - t0
    ids = dialect.tokens(body)
    if not ids:
        raise ValueError(f"the server at {server.url} {NO_IDS[dialect.name]}")
    spec1, sums1 = scrape(server)
    deadline = time.perf_counter() + RECORD_WAIT_S
    while VLLM_DONE in sums0 and sums1.get(VLLM_DONE, 0.0) <= sums0[VLLM_DONE] and time.perf_counter() < deadline:
        time.sleep(0.02)  # vLLM records a request's histograms after its answer may have left
        spec1, sums1 = scrape(server)
    out = Timed(client, len(ids))
    if spec0 is not None and spec1 is not None:
        d = spec1.minus(spec0)
        out.accepted, out.drafts = d.accepted, d.drafts
        out.gamma = len(spec1.per_pos) if spec1.drafts else None
    timings = body.get("timings") if isinstance(body, dict) else None
    if isinstance(timings, dict) and "predicted_ms" in timings:  # llama.cpp's server
        out.prefill_s, out.prompt_n = timings.get("prompt_ms", 0.0) / 1e3, timings.get("prompt_n")
        out.decode_s = timings["predicted_ms"] / 1e3
        if "draft_n_accepted" in timings:
            out.accepted = float(timings["draft_n_accepted"])
    elif all(k in sums0 and k in sums1 for k in VLLM_CLOCK.values()) and sums1[VLLM_DONE] == sums0[VLLM_DONE] + 1:  # vLLM's histograms
        d = {field: sums1[name] - sums0[name] for field, name in VLLM_CLOCK.items()}
        out.prefill_s, out.decode_s, out.prompt_n = d["prefill_s"], d["decode_s"], int(round(d["prompt_n"]))
    return out
