"""A small HTTP server the tests own: it samples from a known law, right or wrong in small, known ways, and speaks
vLLM's or llama.cpp's dialect, so `exactspec audit` is tested against a real process over real HTTP.

    python tests/_law_server.py --target DIR [--draft DIR --gamma G] [--fault F] [--dialect vllm|llamacpp]

prints ``PORT <n>`` once it listens on 127.0.0.1. Its law is written here, apart from exactspec's
(`exactspec.audit.laws`), in each engine's order: vLLM tempers, then min-p, top-k, top-p, its repetition penalty
over prompt and output; llama.cpp filters the untempered law (top-k, top-p, min-p), tempers last, and looks back
`repeat_last_n` tokens.
With ``--draft`` it decodes speculatively by the token rule, written here too: draft tokens sampled from q, each
kept with min(1, p/q), the first rejection resampled from norm(max(0, p − q)), a bonus token from p.

Faults (``--fault``): ``temperature:F`` samples at T·F; ``move:D`` moves D of the probability from the likeliest
token to the second at every position; ``bonus-q`` draws the bonus token from q instead of p (speculative only);
``greedy-flip`` returns the second-best token at the third position under T = 0; ``swap-order`` applies the other
engine's order of temperature and filters; ``no-ids`` leaves the token ids
out of its answers; ``no-metrics`` has no /metrics page; ``no-clock`` keeps no clock of its own. ``--step-ms`` makes its steps cost
known times; it answers with its own clock of each request as each engine does (llama.cpp's ``timings``, vLLM's
request histograms), and caches the last prompt's prefix (a prompt pass computes only the tokens after it).
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from transformers import AutoModelForCausalLM

torch.set_num_threads(1)


def _top_k(p: torch.Tensor, k: int) -> torch.Tensor:
    return torch.where(p >= p.topk(k).values[-1], p, 0.0) if k > 0 else p


def _top_p(p: torch.Tensor, top_p: float) -> torch.Tensor:
    if top_p >= 1.0:
        return p
    p = p / p.sum()
    sp, order = p.sort(descending=True)
    keep = torch.zeros_like(p, dtype=torch.bool)
    keep[order[(sp.cumsum(0) - sp) < top_p]] = True
    return torch.where(keep, p, 0.0)


def _min_p(p: torch.Tensor, min_p: float) -> torch.Tensor:
    return torch.where(p >= min_p * p.max(), p, 0.0) if min_p > 0 else p


class Sampler:
    def __init__(self, target, draft, gamma: int, fault: str, banned: list[int], costs=(0.0, 0.0, 0.0, 0.0)):
        self.target, self.draft, self.gamma, self.fault, self.banned = target, draft, gamma, fault, banned
        self.costs = costs  # seconds slept: the prompt's pass, a plain step, a speculative step's a and b[, v]
        self.lock = threading.Lock()  # one forward at a time: torch on one thread, the tests' server is small
        self.cached: list[int] = []  # the last prompt: its common prefix with the next is not computed again
        self.clock: dict = {}  # the last request's: prompt_n, prefill_s, decode_s, accepted
        self.memo: dict = {}  # (model, ids, last) -> logits [last, V]

    def forward_s(self, k: int) -> float:
        """Seconds slept by a target forward of k tokens under --step-ms with a fifth number V: PLAIN + V (k - 1)^2
        (a curve no line through two draft lengths extrapolates)."""
        return self.costs[1] + self.costs[4] * (k - 1) ** 2

    def prompt_pass_s(self, prompt: list[int]) -> float:
        """The prompt's pass: PREFILL, or with V a forward of the tokens after the cached prefix (more than 16: PREFILL)."""
        same = 0
        while same < min(len(prompt), len(self.cached)) and prompt[same] == self.cached[same]:
            same += 1
        computed = max(len(prompt) - same, 1)
        self.cached, self.clock["prompt_n"] = list(prompt), computed
        return self.forward_s(computed) if len(self.costs) > 4 and computed <= 16 else self.costs[0]

    def logits(self, model, ids: list[int], last: int = 1) -> torch.Tensor:  # [last, V] float64
        # memoised: every request of an audit starts from one of a few prompts, so its first positions were computed
        # by an earlier one (each forward is ~2 ms of transformers' Python; they made the audit's tests wait)
        key = (id(model), tuple(ids), last)
        if key not in self.memo:
            with torch.no_grad():
                self.memo[key] = model(input_ids=torch.tensor([ids])).logits[0, -last:].double()
        return self.memo[key]

    def law(self, z: torch.Tensor, body: dict, llamacpp: bool, history: list[int]) -> torch.Tensor:  # [V] float64
        """The law at one position: each engine's order, written apart from exactspec.audit.laws."""
        z = z.clone()
        if llamacpp and body.get("ignore_eos"):
            z[self.banned] = -float("inf")
        r = float(body.get("repeat_penalty" if llamacpp else "repetition_penalty", 1.0))
        if r != 1.0:  # llama.cpp looks back repeat_last_n tokens, vLLM over the prompt and the output
            seen = sorted(set(history[-int(body.get("repeat_last_n", 64)):] if llamacpp else history))
            z[seen] = torch.where(z[seen] > 0, z[seen] / r, z[seen] * r)
        t = float(body.get("temperature", 1.0))
        if t == 0:
            out = torch.zeros_like(z)
            out[int(z.argmax())] = 1.0
            return out
        if self.fault.startswith("temperature:"):
            t *= float(self.fault.split(":")[1])
        k, top_p, min_p = int(body.get("top_k", 0) or 0), float(body.get("top_p", 1.0)), float(body.get("min_p", 0.0))
        if llamacpp != (self.fault == "swap-order"):  # llama.cpp: filters on the untempered law, temperature last
            p = _min_p(_top_p(_top_k(torch.softmax(z, -1), k), top_p), min_p)
            p = torch.where(p > 0, torch.softmax(z / t, -1), 0.0)
        else:  # temperature first, then min-p, top-k, top-p
            p = _top_p(_top_k(_min_p(torch.softmax(z / t, -1), min_p), k), top_p)
        p = p / p.sum()
        if self.fault.startswith("move:"):
            d = float(self.fault.split(":")[1])
            a, b = p.topk(2).indices.tolist()
            moved = min(d, float(p[a]))
            p[a] -= moved
            p[b] += moved
        return p

    def complete(self, prompt: list[int], n: int, body: dict, llamacpp: bool, counters) -> tuple[list[int], dict]:
        """(tokens, this request's clock): the clock is handed back under the lock, since the next request
        replaces `self.clock` as soon as the lock is free (a handler that read it afterwards met another's)."""
        seed = body.get("seed")
        g = torch.Generator().manual_seed(int(seed)) if seed is not None else torch.Generator().manual_seed(
            int(torch.randint(0, 2 ** 62, ()).item()))
        with self.lock:
            self.clock = {"accepted": 0}
            if self.draft is None or self.fault == "greedy-flip":
                return self._plain(prompt, n, body, llamacpp, g), self.clock
            return self._speculative(prompt, n, body, llamacpp, g, counters), self.clock

    def _plain(self, prompt, n, body, llamacpp, g) -> list[int]:
        out = []
        t0 = time.perf_counter()
        for k in range(n):
            if k == 1:
                t0, self.clock["prefill_s"] = time.perf_counter(), time.perf_counter() - t0
            start = time.perf_counter()
            z = self.logits(self.target, prompt + out)[0]
            _pace(start, self.prompt_pass_s(prompt) if k == 0 else self.costs[1])  # a prompt's pass, a plain step
            x = int(torch.multinomial(self.law(z, body, llamacpp, prompt + out), 1, generator=g))
            if self.fault == "greedy-flip" and float(body.get("temperature", 1.0)) == 0 and k == 2:
                x = int(z.topk(2).indices[1])  # the target's second choice
            out.append(x)
        self.clock.setdefault("prefill_s", time.perf_counter() - t0)
        self.clock["decode_s"] = time.perf_counter() - t0 if n > 1 else 0.0
        return out

    def _speculative(self, prompt, n, body, llamacpp, g, counters) -> list[int]:
        out = self._plain(prompt, 1, body, llamacpp, g)  # the first token from the prompt's pass, as engines do
        if not llamacpp:  # vLLM drafts the first step's γ tokens in the prompt's step, before the first token's stamp
            start = time.perf_counter()
            _pace(start, self.costs[3] * self.gamma)
            self.clock["prefill_s"] += time.perf_counter() - start
        t0 = time.perf_counter()
        while len(out) < n:  # a speculative step: a + b * gamma, or with V one forward of gamma + 1 tokens besides
            verify = self.forward_s(self.gamma + 1) if len(self.costs) > 4 else 0.0
            start, drafts, qs = time.perf_counter(), [], []
            for _ in range(self.gamma):  # the draft proposes gamma tokens sampled from q
                q = self.law(self.logits(self.draft, prompt + out + drafts)[0], body, llamacpp, prompt + out + drafts)
                drafts.append(int(torch.multinomial(q, 1, generator=g)))
                qs.append(q)
            z = self.logits(self.target, prompt + out + drafts, self.gamma + 1)  # one target pass: [gamma + 1, V]
            accepted = 0
            for i, x in enumerate(drafts):  # the token rule, position by position
                p = self.law(z[i], body, llamacpp, prompt + out + drafts[:i])
                if torch.rand((), generator=g, dtype=torch.float64) < min(1.0, float(p[x] / qs[i][x])):
                    accepted += 1
                    continue
                residual = torch.clamp(p - qs[i], min=0.0)
                drafts = drafts[:i] + [int(torch.multinomial(residual / residual.sum(), 1, generator=g))]
                break
            else:  # all kept: a bonus token from p (from q under the fault)
                last = self.logits(self.draft, prompt + out + drafts)[0] if self.fault == "bonus-q" else z[-1]
                law = self.law(last, body, llamacpp, prompt + out + drafts)
                drafts.append(int(torch.multinomial(law, 1, generator=g)))
            _pace(start, verify + self.costs[2] + self.costs[3] * self.gamma)
            counters["drafts"].inc()
            counters["draft_tokens"].inc(self.gamma)
            counters["accepted"].inc(accepted)
            for i in range(accepted):
                counters["per_pos"].labels(position=str(i)).inc()
            self.clock["accepted"] += accepted
            out += drafts
        self.clock["decode_s"] = time.perf_counter() - t0
        return out[:n]


def _pace(start: float, cost: float) -> None:
    """End a step `cost` seconds after `start`: its forwards run inside the stated cost, not on top of it (a
    memoised forward takes microseconds, a fresh one milliseconds: a request's first pass over a prompt would be
    slower than its repeats, and the medians that price a plan would differ from the sums a user waits for)."""
    time.sleep(max(0.0, start + cost - time.perf_counter()))


def serve(args) -> None:
    target = AutoModelForCausalLM.from_pretrained(args.target, dtype=torch.float64).eval()
    draft = AutoModelForCausalLM.from_pretrained(args.draft, dtype=torch.float64).eval() if args.draft else None
    eos = target.config.eos_token_id
    costs = tuple(float(x) / 1e3 for x in args.step_ms.split(",")) if args.step_ms else (0.0,) * 4
    sampler = Sampler(target, draft, args.gamma, args.fault, [eos] if isinstance(eos, int) else list(eos or []), costs)
    llamacpp = args.dialect == "llamacpp"
    prefix = "llamacpp:spec_decode_" if llamacpp else "vllm:spec_decode_"
    registry = CollectorRegistry()
    counters = {"drafts": Counter(prefix + "num_drafts", "drafts", registry=registry),
                "draft_tokens": Counter(prefix + "num_draft_tokens", "draft tokens", registry=registry),
                "accepted": Counter(prefix + "num_accepted_tokens", "accepted", registry=registry),
                "per_pos": Counter(prefix + "num_accepted_tokens_per_pos", "per position", ["position"],
                                   registry=registry)}

    clock = {} if llamacpp or args.fault == "no-clock" else {  # vLLM's request histograms
        name: Histogram(f"vllm:request_{name}", name, registry=registry)
        for name in ("prefill_time_seconds", "decode_time_seconds", "prefill_kv_computed_tokens")}

    if draft is not None:  # every draft position's counter exists from the start, as vLLM's do
        for i in range(args.gamma):
            counters["per_pos"].labels(position=str(i))

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _send(self, code: int, obj, text: bool = False):
            data = obj.encode() if text else json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "text/plain" if text else "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/v1/models":
                return self._send(200, {"data": [{"id": args.name, "owned_by": "llamacpp" if llamacpp else "vllm"}]})
            if self.path == "/version" and not llamacpp:
                return self._send(200, {"version": "0.0-tests"})
            if self.path == "/props" and llamacpp:
                return self._send(200, {"default_generation_settings": {"n_ctx": 128}})
            if self.path == "/metrics" and args.fault != "no-metrics":
                return self._send(200, generate_latest(registry).decode(), text=True)
            return self._send(404, {"error": "not found"})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            path = "/completion" if llamacpp else "/v1/completions"
            if self.path != path:
                return self._send(404, {"error": {"message": "not found"}})
            prompt = body.get("prompt")
            if not isinstance(prompt, list):
                return self._send(400, {"error": {"message": "prompt must be token ids"}})
            n = int(body.get("n_predict" if llamacpp else "max_tokens", 16))
            ids, own = sampler.complete(prompt, n, body, llamacpp, counters)
            if clock:
                clock["prefill_time_seconds"].observe(own["prefill_s"])
                clock["decode_time_seconds"].observe(own["decode_s"])
                clock["prefill_kv_computed_tokens"].observe(own["prompt_n"])
            timings = {} if not llamacpp or args.fault == "no-clock" else {"timings": {
                "prompt_n": own["prompt_n"], "prompt_ms": own["prefill_s"] * 1e3, "predicted_n": len(ids),
                "predicted_ms": own["decode_s"] * 1e3} | (
                {"draft_n_accepted": own["accepted"]} if sampler.draft is not None else {})}
            if args.fault == "no-ids":
                return self._send(200, {"content": "text"} if llamacpp else {"choices": [{"text": "text"}]})
            return self._send(200, {"tokens": ids, "content": ""} | timings if llamacpp else
                              {"choices": [{"text": "", "token_ids": ids}]})

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft")
    ap.add_argument("--gamma", type=int, default=3)
    ap.add_argument("--fault", default="none")
    ap.add_argument("--dialect", choices=("vllm", "llamacpp"), default="vllm")
    ap.add_argument("--name", default="tiny")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--step-ms", help="PREFILL,PLAIN,A,B[,V]: milliseconds slept per prompt pass, plain step, and "
                                      "speculative step (A + B * gamma), so an engine's costs are known; with V a "
                                      "forward of k tokens sleeps PLAIN + V (k - 1)^2, a speculative step one of "
                                      "gamma + 1 tokens besides, and a prompt pass one of its uncached tokens")
    serve(ap.parse_args())
    sys.exit(0)
