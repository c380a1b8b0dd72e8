"""The samples, fetched over HTTP as a user's client would (``httpx``), many requests in flight at once.

Requests are ordered sample-major and cycle through the sampling settings, so the requests an engine batches
together carry different prompts and different settings: faults that live in per-request values spread over a
batch show up. Ctrl-C stops sending and keeps every sample that came back.
"""
from __future__ import annotations

import concurrent.futures as cf
import time
from dataclasses import dataclass, field

from exactspec.audit.engines import NO_IDS, Dialect
from exactspec.audit.laws import Settings


PROGRESS_EVERY = 2.0  # seconds between progress lines


@dataclass(frozen=True)
class Job:
    prompt: int  # index into the prompts
    sample: int  # index among that prompt's samples
    setting: int  # index into the settings
    seed: int | None  # sent to the engine, or None


@dataclass
class Sampled:
    jobs: list[Job] = field(default_factory=list)  # those that came back, in the order they came
    tokens: list[list[int]] = field(default_factory=list)  # aligned with jobs
    asked: int = 0
    interrupted: bool = False
    seconds: float = 0.0


class Server:
    """One engine's base URL; every failure to talk to it is a ValueError of one line."""

    def __init__(self, url: str, timeout: float = 120.0, concurrency: int = 8):
        import httpx

        if not url.startswith(("http://", "https://")):
            raise ValueError(f"URL must start with http:// or https://, got {url!r}")
        self.url = url.rstrip("/")
        limits = httpx.Limits(max_connections=concurrency + 2, max_keepalive_connections=concurrency + 2)
        self.client = httpx.Client(base_url=self.url, timeout=timeout, limits=limits)

    def close(self) -> None:
        self.client.close()

    def _send(self, method: str, path: str, **kw):
        import httpx

        try:
            return self.client.request(method, path, **kw)
        except httpx.TimeoutException:
            raise ValueError(f"the server at {self.url} did not answer {path} in time") from None
        except httpx.HTTPError as exc:
            raise ValueError(f"cannot reach the server at {self.url}: {_reason(exc)}") from None

    def get_json(self, path: str):
        """Parsed JSON of a GET, or None when the page is missing or not JSON."""
        r = self._send("GET", path)
        if r.status_code != 200:
            return None
        try:
            return r.json()
        except ValueError:
            return None

    def get_text(self, path: str) -> str | None:
        r = self._send("GET", path)
        return r.text if r.status_code == 200 else None

    def post_json(self, path: str, body: dict) -> dict:
        r = self._send("POST", path, json=body)
        if r.status_code != 200:
            raise ValueError(f"the server at {self.url} refused {path} ({r.status_code}): {_message(r)}")
        try:
            return r.json()
        except ValueError:
            raise ValueError(f"the server at {self.url} answered {path} with something other than JSON") from None


def counters(server: Server):
    """The server's speculative-decoding counters (vLLM's or llama.cpp's), or None where it shows none."""
    from exactspec.deploy.enginemetrics import parse_spec_counters

    text = server.get_text("/metrics")
    try:
        return parse_spec_counters(text) if text else None
    except ValueError:
        return None


def _reason(exc) -> str:
    text = str(exc) or type(exc).__name__
    return " ".join(text.split())[:200]


def _message(r) -> str:
    try:
        body = r.json()
        msg = body.get("error", body) if isinstance(body, dict) else body
        msg = msg.get("message", msg) if isinstance(msg, dict) else msg
    except ValueError:
        msg = r.text
    return " ".join(str(msg).split())[:300]


def plan_jobs(n_prompts: int, samples: int, n_settings: int, seed: int | None) -> list[Job]:
    """Sample-major, settings cycling, so concurrent requests mix prompts and settings."""
    jobs = []
    for i in range(samples):
        for j in range(n_prompts):
            k = len(jobs)
            jobs.append(Job(j, i, (i + j) % n_settings, None if seed is None else (seed + k) % (2 ** 31)))
    return jobs


def sample(server: Server, dialect: Dialect, model: str | None, prompts: list[list[int]], settings: list[Settings],
           jobs: list[Job], max_tokens: int, concurrency: int, progress=None) -> Sampled:
    """Send every job, ``concurrency`` at a time; the first error (the server refused, returned no ids) stops all."""
    out = Sampled(asked=len(jobs))
    t0 = last = time.perf_counter()

    def one(job: Job) -> list[int]:
        body = dialect.request(model, prompts[job.prompt], max_tokens, settings[job.setting], job.seed)
        ids = dialect.tokens(server.post_json(dialect.path, body))
        if ids is None:
            raise ValueError(f"the server at {server.url} {NO_IDS[dialect.name]}")
        return ids

    pool = cf.ThreadPoolExecutor(max_workers=concurrency)
    futures = {pool.submit(one, job): job for job in jobs}
    try:
        for fut in cf.as_completed(futures):
            out.tokens.append(fut.result())
            out.jobs.append(futures[fut])
            now = time.perf_counter()
            if progress is not None and (now - last >= PROGRESS_EVERY or len(out.jobs) == len(jobs)):
                progress.unit(f"samples ({sum(map(len, out.tokens))} tokens)", len(out.jobs))
                last = now
    except KeyboardInterrupt:
        out.interrupted = True
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=not out.interrupted, cancel_futures=True)
    out.seconds = time.perf_counter() - t0
    return out
