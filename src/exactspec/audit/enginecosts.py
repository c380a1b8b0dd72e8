"""What a step of a running engine costs, measured over HTTP, and the :class:`~exactspec.speed.costmodel.CostModel`
that prices `exactspec plan --engine` with it.

**What is timed.** Requests of N tokens at batch 1 at the plan's temperature (greedy by default), one at a time,
the prompts in turn ``repeats`` times, so that each meets a server whose last prompt was another, as a user's does;
the servers take turns at each prompt (:func:`measure_servers`).
Its decoding is timed by the server's own clock where it keeps one (:mod:`exactspec.audit.engineclock`: llama.cpp's
``timings``, vLLM's request histograms); the rest of its time on the client's clock (the prompt's pass, the first
token, HTTP) is ``t_prefill``. A server without a clock: a 1-token request of the same prompt after it gives
``t_prefill`` and the decoding is the difference (that prompt now cached: the steps also carry what an uncached
pass costs more, a few per cent of a request on llama.cpp). After its first token a request of N tokens takes
``N − 1 − accepted`` engine steps (a step emits its accepted drafts plus one token), so

- a plain server gives ``t_plain``, the seconds per token after the first;
- a speculative server at γ gives ``t_step(γ)``, the seconds per step, and its tokens per step (vLLM drafts γ to
  the end and counts drafts accepted past N: there a step is a draft, one per step after the first token).

**The fit.** Speculative servers at two γ fit ``t_step(γ) = a + b·γ`` (least squares; b what one more drafted
token costs, its draft forward and the verification's growth; a the rest of a step); three γ or more fit
``a + b·γ + e·γ²`` where that curve rises for every γ ≥ 1, else the line (a step may grow faster than a line:
12.7, 13.6, 15.1, 19.3 ms at γ = 2, 3, 4, 6 in one vLLM-CPU run of round r2; two γ cannot see it, and three a
millisecond apart often see only noise: r2's fit on γ = 2, 3, 4 fell back to the line, which priced γ = 6 and 8
within 7%). A plain server gives ``t_plain``.

Tried and dropped (round r2, docs/engines.md): timing the verification's k-token forward on the plain server (a cached
prompt extended by k tokens): llama.cpp's server-timed prompt pass of k tokens cost more than a whole speculative
step verifying them (T(7) − T(1) = 2.7–4.5 ms against γ = 6 steps of 5.7–6.0 ms), and vLLM-CPU's stayed flat
within its noise, so it priced worse than the line on one engine and no better on the other.

**Pauses.** An idle vLLM-CPU server keeps its threads spinning for about a second after each request
(../shared/design/engines.md): every timed request waits ``pause`` seconds first.
"""
from __future__ import annotations

import json

import numpy as np

from exactspec.audit.client import Server
from exactspec.audit.engineclock import timed_request
from exactspec.audit.engineload import load_speedup
from exactspec.audit.engines import DIALECTS, detect
from exactspec.audit.laws import Settings

FORMAT = "exactspec.EngineProfile/2"
PAUSE_S = 1.5  # vLLM-CPU spins ~1 s after each request (measured, engines.md)
# How far one server process's speed lies from another's of the same configuration: three γ = 3 llama.cpp servers
# started together and timed in turns stepped in 4.68, 4.71 and 4.96 ms, two plain ones in 1.50 and 1.53 ms a token
# (round r3, docs/engines.md). Each measured step carries it into the fit, and a γ past those measured multiplies it.
PROCESS_SPREAD = 0.05
# Engines whose first draft runs in the prompt's step, before their decode clock starts: vLLM's model runner
# proposes the next step's γ drafts in every step that samples a token (`sample_tokens`), the prompt's too, and
# stamps the first token after it. Their rest besides decoding grows with γ: vLLM-CPU 45.6 and 55.9 ms at γ = 2
# and 4, and in the checks 65.1 and 72.5 ms at γ = 4 and 6 where the mean of γ = 2 and 3 said 59.8 (r5). llama.cpp's
# server drafts inside its decoding's timing: its rest stayed flat (19.3 to 20.6 ms at γ = 2 … 6, r5).
DRAFT_IN_PREFILL = ("vllm",)


def measure_server(url: str, prompts: list[list[int]], *, max_tokens: int = 64, repeats: int = 1,
                   pause: float | None = None, temperature: float = 0.0, progress=None) -> dict:
    """One server's timings (:func:`measure_servers`)."""
    return measure_servers([url], prompts, max_tokens=max_tokens, repeats=repeats, pause=pause,
                           temperature=temperature, progress=progress)[0]


def measure_servers(urls: list[str], prompts: list[list[int]], *, max_tokens: int = 64, repeats: int = 1,
                    pause: float | None = None, temperature: float = 0.0, progress=None) -> list[dict]:
    """Each server's timings (module docstring), the servers taking turns prompt by prompt, so that the machine's
    drift lands on all alike: timed one after the other, a slow minute made a γ = 2 server cost what γ = 3 did
    (llama.cpp, r3: 4.81 and 4.79 ms a step, then γ = 4 5.69), and a line through them missed γ = 6 by 32%.
    Per server: ``engine``, ``gamma`` (None: no speculation), ``clock`` ("server" or "client"), ``t_prefill``
    (client), ``seconds``, ``tokens`` (Σ N − 1), ``steps``, ``t_token`` or ``t_step``, ``tokens_per_step``."""
    pause = PAUSE_S if pause is None else pause
    servers = [Server(url, concurrency=1) for url in urls]
    try:
        found = [detect(s.get_json) for s in servers]
        acc = [_Timings(url, engine, model) for url, (engine, model) in zip(urls, found)]
        law = Settings(temperature)
        try:
            for r in range(repeats):
                for j, prompt in enumerate(prompts):
                    for server, a in zip(servers, acc):
                        a.add(server, prompt, max_tokens, law, pause)
                        if progress is not None:
                            progress.unit(f"{a.url} prompt {j + 1} (repeat {r + 1})")
        except KeyboardInterrupt:  # Ctrl-C keeps what was timed, once every server has a request
            if not all(a.rest for a in acc):
                raise
            return [a.result(max_tokens) | {"interrupted": True} for a in acc]
    finally:
        for s in servers:
            s.close()
    return [a.result(max_tokens) for a in acc]


class _Timings:
    """One server's requests. Its prices are medians over the requests, not sums: one stall of the machine
    (1.7 s in one of 24 requests, llama.cpp r3, T = 1) priced a plain server 35% slow by the sum."""

    def __init__(self, url: str, engine: str, model: str):
        self.url, self.engine, self.model, self.dialect = url, engine, model, DIALECTS[engine]
        self.rest, self.per, self.client = [], [], 0.0  # per request: client − decoding, decoding per step
        self.own, self.tokens, self.steps = 0.0, 0, 0
        self.gamma, self.clocked = None, True

    def add(self, server, prompt: list[int], max_tokens: int, law, pause: float) -> None:
        one = timed_request(server, self.dialect, self.model, prompt, max_tokens, law, 0, pause)
        if one.decode_s is not None:  # all but decoding: the prompt's pass, the first token, HTTP
            rest = one.client - one.decode_s
        else:  # no clock: a 1-token request of the prompt, now cached (module docstring)
            rest = timed_request(server, self.dialect, self.model, prompt, 1, law, 0, pause).client
        self.clocked = self.clocked and one.decode_s is not None
        self.gamma = one.gamma or self.gamma
        if one.accepted:
            # vLLM drafts γ to the end and counts drafts accepted past max_tokens: each of its steps after the
            # first token verifies one draft. llama.cpp caps drafts at the tokens left and steps plainly where it
            # drafts nothing: its steps are the tokens less those accepted.
            steps = int(one.drafts) if self.engine == "vllm" else one.tokens - 1 - int(one.accepted)
        else:
            steps = one.tokens - 1
        decoding = one.decode_s if one.decode_s is not None else one.client - rest
        self.rest.append(rest)
        self.per.append(decoding / max(steps, 1))
        self.client += one.client - rest
        self.own += one.decode_s or 0.0
        self.tokens += one.tokens - 1
        self.steps += steps

    def result(self, max_tokens: int) -> dict:
        out = {"url": self.url, "engine": self.engine, "model": self.model, "gamma": self.gamma,
               "requests": len(self.rest), "max_tokens": max_tokens, "clock": "server" if self.clocked else "client",
               "t_prefill": float(np.median(self.rest)), "seconds": self.own if self.clocked else self.client,
               "client_seconds": self.client, "tokens": self.tokens, "steps": self.steps,
               "tokens_per_step": self.tokens / self.steps if self.steps else None}
        out["t_token" if self.gamma is None else "t_step"] = float(np.median(self.per))
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
                         f"a step is fitted as a + b·γ (got γ {[m['gamma'] for m in spec]})")
    p = plain[0]
    g, t = _spec_steps(measured)
    b, a = np.polyfit(g, t, 1)
    if b < 0:  # a step never gets cheaper for drafting more: flat, at the steps' mean
        b, a = 0.0, float(t.mean())
    e, b, a = _curve(g, t, (0.0, max(float(b), 0.0), max(float(a), 0.0)))
    return {"format": FORMAT, "engine": engines.pop(), "model": p["model"], "t_plain": p["t_token"],
            "clock": p.get("clock", "client"), "a": a, "b": b, "e": e, "measured": measured}


def _curve(g: np.ndarray, r: np.ndarray, line: tuple) -> tuple[float, float, float]:
    """``(e, b, a)``: with three draft lengths or more, a step fitted as a + b·γ + e·γ² where it curves upwards
    (e > 0) and still costs more for every γ = 1 … 64 than for the one before (b may be negative: the curve's
    bottom lies below γ = 1); else `line` (e = 0)."""
    if len(set(g.tolist())) < 3:
        return line
    e, b, a = (float(x) for x in np.polyfit(g, r, 2))
    steps = a + b * np.arange(1, 65) + e * np.arange(1, 65) ** 2
    return (e, b, a) if e > 0 and steps[0] > 0 and (np.diff(steps) >= 0).all() else line


def _spec_steps(measured: list[dict]) -> tuple[np.ndarray, np.ndarray]:
    """``(γ, t_step)`` of the speculative servers measured, in γ's order: what :func:`fit` fits."""
    spec = sorted((m for m in measured if m["gamma"] is not None), key=lambda m: m["gamma"])
    return np.array([m["gamma"] for m in spec], float), np.array([m["t_step"] for m in spec], float)


def _weights(profile: dict, gamma: int) -> tuple[np.ndarray, np.ndarray]:
    """``(w, t)``: the speculative servers' measured steps `t` and the weights with which the fit prices γ from them,
    ``step_seconds(profile, γ) = Σ w·t`` (least squares is linear in what it fits: the line's, the curve's, or the
    flat mean's weights)."""
    g, t = _spec_steps(profile["measured"])
    if profile.get("e"):
        powers = 3
    elif profile["b"] == 0.0:  # the flat refit: the steps' mean
        return np.full(len(t), 1.0 / len(t)), t
    else:
        powers = 2
    X = np.vander(g, powers, increasing=True)  # [n, powers]: 1, γ (, γ²)
    x = np.array([float(gamma) ** k for k in range(powers)])
    return X @ np.linalg.solve(X.T @ X, x), t


def speedup_spread(profile: dict, gamma: int) -> float:
    """The relative spread of the predicted speedup at γ >= 1: PROCESS_SPREAD in each measured server's step, carried
    through the fit to γ's step (a γ three past two neighbours measured weighs them -3 and 4: five spreads), and in
    the plain server's rate."""
    w, t = _weights(profile, gamma)
    step = PROCESS_SPREAD * float(np.sqrt(np.sum((w * t) ** 2))) / step_seconds(profile, gamma)
    return float(np.hypot(step, PROCESS_SPREAD))


def step_seconds(profile: dict, gamma: int) -> float:
    """A step of the engine at γ (γ = 0: a plain step)."""
    return cost_model(profile).step_time(gamma)


def cost_model(profile: dict):
    """The profile as a CostModel: step_time(0) = t_plain, step_time(γ) = a + b·γ (+ e·γ²: then a table of the
    steps themselves, γ up to 64, as the target's times at γ + 1 tokens with a free draft)."""
    from exactspec.speed.costmodel import CostModel

    a, b, e = profile["a"], profile["b"], profile.get("e") or 0.0
    meta = {"engine": profile["engine"], "source": FORMAT}
    if e:
        return CostModel(0.0, {1: profile["t_plain"]} | {g + 1: a + b * g + e * g * g for g in range(1, 65)},
                         metadata=meta)
    return CostModel(b, {1: profile["t_plain"], 2: a, 1 << 20: a}, metadata=meta)


def save(profile: dict, path: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(profile, fh, indent=2)


def load(path: str) -> dict:
    from exactspec.verification.checks import read_json_file

    profile = read_json_file("--engine-profile", path)
    if not isinstance(profile, dict) or profile.get("format") != FORMAT:
        raise ValueError(f"--engine-profile {path!r} is not an engine profile ({FORMAT}); make one with --engine-url")
    return profile


def request_seconds(profile: dict, gamma: int, tokens_per_step: float) -> dict:
    """A whole request's predicted seconds on the plain server and on the speculative one at γ, for requests as long
    as those timed, and their rest besides decoding: each pays its prompt's pass (the speculative servers' measured
    mean: the draft has a prompt to read too; on an engine of DRAFT_IN_PREFILL the least-squares line in γ through
    them, since its first draft of γ tokens is in it), then N − 1 tokens at the plain rate or in steps of
    :func:`step_seconds`. Keys ``plain_rest_s``, ``spec_rest_s``, ``plain_request_s``, ``spec_request_s``."""
    plain = next(m for m in profile["measured"] if m["gamma"] is None)
    g, spec = (np.array(x, float) for x in zip(*((m["gamma"], m["t_prefill"]) for m in profile["measured"]
                                                  if m["gamma"] is not None)))
    slope, at0 = np.polyfit(g, spec, 1) if profile["engine"] in DRAFT_IN_PREFILL else (0.0, 0.0)
    n = plain["max_tokens"] - 1  # a slope below 0 is noise (a draft costs time): the mean, as elsewhere
    rest = {"plain_rest_s": plain["t_prefill"],
            "spec_rest_s": max(float(at0 + slope * gamma), 0.0) if slope > 0 else float(spec.mean())}
    return rest | {"plain_request_s": rest["plain_rest_s"] + n * profile["t_plain"],
                   "spec_request_s": rest["spec_rest_s"] + n / tokens_per_step * step_seconds(profile, gamma)}


def request_speedup(profile: dict, gamma: int, tokens_per_step: float) -> float:
    """A whole request's time on the plain server over the speculative one at γ (:func:`request_seconds`)."""
    t = request_seconds(profile, gamma, tokens_per_step)
    return t["plain_request_s"] / t["spec_request_s"]


def engine_costs(urls: list[str] | None, profile_path: str | None, engine: str, prompts: list[list[int]], *,
                 max_tokens: int, repeats: int = 3, temperature: float = 0.0, loads: list[int] = (),
                 progress=None) -> tuple[dict, list, list[str]]:
    """``(profile, [(1, CostModel)], notes)`` for `plan --engine`: measured at ``urls`` (at batch 1, and at each
    concurrency of `loads`: :mod:`exactspec.audit.engineload`; stored at ``profile_path`` when given), or read
    from ``profile_path``. A Ctrl-C while timing at batch 1, once every server has answered a request, or while
    timing a load, prices the plan by what was timed (``profile["interrupted"]``; nothing stored)."""
    from exactspec.audit.engineload import fit_load, measure_load

    note = ""
    if urls:
        if progress is not None:
            progress.start(len(urls) * repeats * len(prompts), f"timing {len(urls)} {engine} servers (batch 1)")
        measured = measure_servers(urls, prompts, max_tokens=max_tokens, repeats=repeats, temperature=temperature,
                                   progress=progress)
        profile = fit(measured)
        profile["loads"] = {}
        if any(m.get("interrupted") for m in measured):  # Ctrl-C: priced by what was timed, no load
            note = f" (interrupted by Ctrl-C after {sum(m['requests'] for m in measured)} requests in all; not stored)"
        for c in loads if not note else ():  # each prompt at least 3 times, and 4 waves of c requests at least
            if progress is not None:
                progress.phase(f"timing {len(urls)} {engine} servers at concurrency {c}")
            reps = max(repeats, -(-4 * c // max(len(prompts), 1)))
            try:
                profile["loads"][str(c)] = fit_load([measure_load(u, prompts, c, max_tokens=max_tokens,
                                                                  repeats=reps, temperature=temperature,
                                                                  pause=PAUSE_S) for u in urls])
            except KeyboardInterrupt:  # Ctrl-C: batch 1 and the loads done price the plan
                note = (f" (Ctrl-C while timing concurrency {c}: loads timed: {', '.join(profile['loads']) or 'none'};"
                        " not stored)")
                break
        if note:  # an interrupted profile is not stored: a later plan would take it for a whole one
            profile["interrupted"] = True
        elif profile_path:
            save(profile, profile_path)
    else:
        profile = load(profile_path)
    if profile["engine"] != engine:
        raise ValueError(f"--engine {engine}, but the servers' costs are {profile['engine']}'s")
    return profile, [(1, cost_model(profile))], [describe(profile) + note]


def describe(profile: dict) -> str:
    """One line: where the engine's prices come from."""
    gammas = sorted(m["gamma"] for m in profile["measured"] if m["gamma"] is not None)
    curve = f" + {profile['e'] * 1e3:.3f}·γ²" if profile.get("e") else ""
    return (f"priced by {profile['engine']}'s own costs, measured live (batch 1, the {profile['clock']}'s clock): plain "
            f"{1 / profile['t_plain']:.1f} tokens/s; a step at γ costs {profile['a'] * 1e3:.2f} + "
            f"{profile['b'] * 1e3:.2f}·γ{curve} ms, fitted on speculative servers at γ = {', '.join(map(str, gammas))}")


def annotate(out: dict, profile: dict) -> dict:
    """The plan's rows with the engine's tokens per second; the recommendation, "do not speculate" included."""
    plain = 1.0 / profile["t_plain"]
    out["notes"] = [n for n in out.get("notes", []) if not n.startswith("predicted speedups are priced by")]
    measured = sorted(m["gamma"] for m in profile["measured"] if m["gamma"] is not None)
    for row in out.get("rows", []):  # the plan's own speedup (its replay's step lengths) at the plain rate
        if row.get("predicted_speedup") is not None:
            row["tokens_per_second"] = row["predicted_speedup"] * plain
            row["predicted_request_speedup"] = request_speedup(profile, row["gamma"], row["expected_tokens"])
            row["speedup_spread"] = speedup_spread(profile, row["gamma"])
            row["extrapolated"] = not measured[0] <= row["gamma"] <= measured[-1]
    out["notes"].append(f"each speedup ± its spread (`speedup_spread`): one server process's speed differs from "
                        f"another's by ~{PROCESS_SPREAD:.0%} (r3), and each measured step carries that into the fit; "
                        f"a γ outside those measured ({', '.join(map(str, measured))}) extrapolates it "
                        "(`extrapolated`): time a server at the γ you will run before relying on it")
    if min(measured.count(g) for g in measured) == 1:
        out["notes"].append("one server at some γ measured: start two at each (repeat --engine-url) and the steps' "
                            "part of every spread falls by √2 (docs/engines.md, round r5)")
    top = max((r["gamma"] for r in out.get("rows", [])), default=0)
    if measured[-1] - measured[0] == 1 and top > measured[-1]:  # a line through γ₀ and γ₀ + k weighs them at G
        g0 = measured[0]  # (γ₀ + k − G) / k and (G − γ₀) / k: neighbours' weights grow twice as fast as k = 2's
        out["notes"].append(f"the γ measured are neighbours: a line through them weighs their steps {g0 + 1 - top} "
                            f"and {top - g0} at γ = {top}; servers at γ = {g0} and {g0 + 2} would weigh them "
                            f"{(g0 + 2 - top) / 2:g} and {(top - g0) / 2:g} (docs/engines.md, round r5)")
    out["engine_costs"] = {k: profile.get(k) for k in ("engine", "model", "clock", "t_plain", "a", "b", "e")} | {
        "plain_tokens_per_second": plain,
        "step_seconds": {g: step_seconds(profile, g) for g in range(0, 9)},
        "measured": [{k: m[k] for k in ("url", "gamma", "tokens_per_step", "t_prefill") if k in m} |
                     {"t": m.get("t_step", m.get("t_token"))} for m in profile["measured"]]}
    loads = profile.get("loads") or {}
    for row in out.get("rows", []):  # under load: the same tokens per step, the load's own row-step prices
        if loads and row.get("expected_tokens") is not None:
            row["load"] = {c: {"predicted_speedup": (x := load_speedup(L, row["gamma"], row["expected_tokens"])),
                               "tokens_per_second": x * L["plain_tokens_per_second"]} for c, L in loads.items()}
    if loads:
        out["engine_costs"]["loads"] = {c: {k: L[k] for k in ("u_plain", "a", "b", "plain_tokens_per_second")}
                                        for c, L in loads.items()}
        out["notes"].append("under load (--engine-load): a row-step at γ priced as a + b·γ from the speculative "
                            "servers timed at that concurrency (a line from the γ measured: measure near the γ you "
                            "will run); tokens per step as at batch 1 (exactspec.audit.engineload)")
    best = out.get("predicted_speedup")
    if best is not None and best <= 1.0:
        out["recommendation"] = (f"do not speculate on {profile['engine']}: at its measured costs no draft length "
                                 f"beats its own plain decoding ({plain:.1f} tokens/s; best predicted "
                                 f"{best:.2f}×)")
    elif best is not None:
        out["recommendation"] = (f"speculate with γ = {out['recommended_gamma']}: {best:.2f}× the engine's plain "
                                 f"decoding ({plain * best:.1f} tokens/s predicted)")
        row = next((r for r in out.get("rows", []) if r["gamma"] == out["recommended_gamma"]), None)
        if row is not None and row.get("extrapolated"):
            out["recommendation"] += (f", extrapolated past the γ measured (± {row['speedup_spread']:.0%}): time a "
                                      f"server at γ = {row['gamma']} before relying on it")
    return out
