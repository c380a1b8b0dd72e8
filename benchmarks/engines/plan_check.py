"""Does `exactspec plan --engine E --engine-url ...` predict the engine's own speculation? (issue 48, docs/engines.md)

    python benchmarks/engines/plan_check.py --engine vllm|llamacpp --prompts FILE --out DIR [--temperature T]

1. Starts the engine plain and speculative at γ = 2 and 3 (--fit; `--fit 2,2,3,3`: two servers at each) (the stdlib
   pair; tests/live/_engines.py), and runs
   `exactspec plan --engine E --pair stdlib --engine-url ×3 --engine-profile DIR/profile.json --json` (DIR/plan.json).
2. Stops the speculative servers, then for γ in 4 and 6 (--check) starts one afresh and times it against the plain server,
   interleaved prompt by prompt over 3 repetitions (a pause before each request: vLLM spins after one); the
   measured speedup is the median over repetitions of the plain server's total time over the speculative one's
   (the same number of tokens each), the tokens per step its counters' 1 + accepted / drafts.
3. Writes DIR/check.json and DIR/check.md: predicted (the rows' `predicted_request_speedup`: whole requests of
   --max-new-tokens, prompt pass included, what the interleaved timing measures) against measured.
With --concurrency C the plan also times the servers at that load (`--engine-load C`), and γ = 4 and 6 are checked
there too: plain and speculative throughput (C clients at once), alternated three times, the median ratio.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import pathlib
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "live"))

from _engines import llama_server, vllm  # noqa: E402

from exactspec.audit.client import Server  # noqa: E402
from exactspec.audit.engineclock import timed_request  # noqa: E402
from exactspec.audit.engines import DIALECTS, detect  # noqa: E402
from exactspec.audit.enginecosts import PAUSE_S, request_seconds, step_seconds  # noqa: E402
from exactspec.audit.laws import Settings  # noqa: E402


def server(engine: str, log, gamma: int | None):
    if engine == "vllm":
        return vllm(log, None if gamma is None else {"num_speculative_tokens": gamma, "draft_sample_method": "greedy"})
    return llama_server(log, draft=gamma is not None, n_max=gamma or 4)


def compare(plain_url: str, spec_url: str, prompts, n: int, temperature: float, repeats: int = 3) -> dict:
    """Whole requests on the client's clock, interleaved prompt by prompt; the speculative server's steps on its
    own clock too (its mean step, what the plan's step price predicts)."""
    a, b = Server(plain_url, concurrency=1), Server(spec_url, concurrency=1)
    engine, model_a = detect(a.get_json)
    _, model_b = detect(b.get_json)
    dialect, law = DIALECTS[engine], Settings(temperature)
    ratios, accepted, drafts, tokens, own, steps, plain_own, plain_tokens = [], 0, 0, 0, 0.0, 0, 0.0, 0
    whole, rest = {"plain": [], "spec": []}, {"plain": [], "spec": []}  # per request: client, client − decoding
    for r in range(repeats):
        ta = tb = 0.0
        for j, p in enumerate(prompts):
            base = timed_request(a, dialect, model_a, p, n, law, 1000 * r + j, PAUSE_S)
            ta += base.client
            whole["plain"].append(base.client)
            rest["plain"].append(base.client - (base.decode_s or 0.0))
            plain_own, plain_tokens = plain_own + (base.decode_s or 0.0), plain_tokens + base.tokens - 1
            one = timed_request(b, dialect, model_b, p, n, law, 1000 * r + j, PAUSE_S)
            tb += one.client
            whole["spec"].append(one.client)
            rest["spec"].append(one.client - (one.decode_s or 0.0))
            accepted, drafts, tokens = accepted + (one.accepted or 0), drafts + (one.drafts or 0), tokens + one.tokens
            own += one.decode_s or 0.0
            steps += int(one.drafts or 0) if engine == "vllm" else one.tokens - 1 - int(one.accepted or 0)
        ratios.append(ta / tb)
        print(f"  repeat {r + 1}: speculative {ta / tb:.3f}x plain", flush=True)
    a.close(), b.close()
    return {"speedups": ratios, "speedup": statistics.median(ratios),
            "tokens_per_step": 1 + accepted / drafts if drafts else None, "tokens": tokens,
            "t_step": own / steps if own and steps else None,
            "plain_t_token": plain_own / plain_tokens if plain_own and plain_tokens else None,
            **{f"{k}_request_s": statistics.mean(v) for k, v in whole.items()},
            **{f"{k}_rest_s": statistics.mean(v) for k, v in rest.items()}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", choices=("vllm", "llamacpp"), required=True)
    ap.add_argument("--prompts")
    ap.add_argument("--out", required=True)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=0,
                    help="also time the servers at this load (plan --engine-load) and check γ = 4 and 6 there")
    ap.add_argument("--fit", default="2,3", help="the speculative servers' γ the plan is fitted on, a server each "
                    "(default 2,3; 2,2,3,3: two at each)")
    ap.add_argument("--check", default="4,6", help="the γ started afterwards and checked (default 4,6)")
    ap.add_argument("--rescore", action="store_true", help="recompute a finished run's predictions, no servers")
    args = ap.parse_args()
    fit_g, check_g = ([int(g) for g in x.split(",")] for x in (args.fit, args.check))
    out = pathlib.Path(args.out)
    if args.rescore:
        return write_table(out, args.engine, args.temperature, rescore(out))
    out.mkdir(parents=True, exist_ok=True)
    from exactspec.cli.plan import read_prompts
    from exactspec.pairs.load import load_pair

    tok = load_pair("stdlib")[2]
    prompts = [tok(p)["input_ids"] for p in read_prompts(args.prompts)]
    with contextlib.ExitStack() as stack:
        plain = stack.enter_context(server(args.engine, out / "plain.log", None))
        with contextlib.ExitStack() as fitted:
            # --fit may name a γ twice (two servers at it, their process spreads averaged): a log each
            urls = [fitted.enter_context(server(args.engine, out / f"g{g}_{i}.log", g)) for i, g in enumerate(fit_g)]
            cmd = [sys.executable, "-m", "exactspec", "plan", "--engine", args.engine, "--pair", "stdlib",
                   "--prompts", args.prompts, "--max-new-tokens", str(args.max_new_tokens), "--temperature",
                   str(args.temperature), "--tree-nodes", "0", "--engine-url", plain,
                   *[x for u in urls for x in ("--engine-url", u)], "--engine-profile", str(out / "profile.json"),
                   "--json"]
            if args.engine == "vllm":
                cmd += ["--draft-sample-method", "greedy"]
            if args.concurrency:
                cmd += ["--engine-load", str(args.concurrency)]
            plan = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
            (out / "plan.json").write_text(json.dumps(plan, indent=2))
        rows, checks = {r["gamma"]: r for r in plan["rows"]}, []
        for gamma in check_g:
            with server(args.engine, out / f"g{gamma}.log", gamma) as spec:
                print(f"γ = {gamma}:", flush=True)
                m = compare(plain, spec, prompts, args.max_new_tokens, args.temperature)
                if args.concurrency:
                    from exactspec.audit.engineload import ratio_runs

                    c = args.concurrency
                    loaded = ratio_runs(plain, spec, prompts, c, max_tokens=args.max_new_tokens,
                                        temperature=args.temperature, waves=max(1, -(-2 * c // len(prompts))),
                                        pause=PAUSE_S)
                    print(f"  at concurrency {c}: {loaded['speedups']}", flush=True)
            row = rows[gamma]
            profile = json.loads((out / "profile.json").read_text())
            checks.append({"gamma": gamma, "predicted_t_step": step_seconds(profile, gamma),
                           "measured_t_step": m["t_step"], "profile_t_plain": profile["t_plain"],
                           "measured_t_plain": m["plain_t_token"], "predicted_tokens_per_step": row["expected_tokens"],
                           "measured_tokens_per_step": m["tokens_per_step"],
                           "predicted_speedup": row["predicted_request_speedup"],
                           "predicted_decode_speedup": row["predicted_speedup"], "measured_speedup": m["speedup"],
                           "measured_speedups": m["speedups"], **requests(profile, row, m)})
            if args.concurrency:
                checks[-1]["load"] = {"concurrency": args.concurrency,
                                      "predicted_speedup": row["load"][str(args.concurrency)]["predicted_speedup"],
                                      "measured_speedup": loaded["speedup"], "measured_speedups": loaded["speedups"]}
    (out / "check.json").write_text(json.dumps(checks, indent=2))
    write_table(out, args.engine, args.temperature, checks)


def requests(profile: dict, row: dict, m: dict) -> dict:
    """A whole request's seconds, predicted (enginecosts.request_seconds) and measured, on each server; and its rest
    besides decoding (the prompt's pass, the first token, HTTP): where a speedup's error sits."""
    keys = ("plain_request_s", "spec_request_s", "plain_rest_s", "spec_rest_s")
    predicted = request_seconds(profile, row["gamma"], row["expected_tokens"])
    return {f"predicted_{k}": v for k, v in predicted.items()} | {k: m[k] for k in keys if k in m}


def rescore(out: pathlib.Path) -> list[dict]:
    """The checks of a finished run, its predictions recomputed by the current code from its stored plan and
    profile (the measurements unchanged)."""
    from exactspec.audit.enginecosts import fit, request_seconds

    profile = fit(json.loads((out / "profile.json").read_text())["measured"])  # the current fit of those timings
    # (records of EngineProfile/1 hold no forward probes: the line's pricing)
    rows = {r["gamma"]: r for r in json.loads((out / "plan.json").read_text())["rows"]}
    checks = json.loads((out / "check.json").read_text())
    for c in checks:
        row = rows[c["gamma"]]
        parts = request_seconds(profile, c["gamma"], row["expected_tokens"])
        c["predicted_speedup"] = parts["plain_request_s"] / parts["spec_request_s"]
        if "spec_request_s" in c:  # the whole requests' parts, where the run measured them
            c.update({f"predicted_{k}": v for k, v in parts.items()})
        c["predicted_t_step"] = step_seconds(profile, c["gamma"])
        c["predicted_decode_speedup"] = row["predicted_speedup"]
    (out / "check.json").write_text(json.dumps(checks, indent=2))
    return checks


def write_table(out: pathlib.Path, engine: str, temperature: float, checks: list[dict]) -> None:
    lines = [f"# plan --engine {engine} against the live engine (T = {temperature:g}, batch 1)", "",
             "| γ | step ms predicted | measured (server) | tokens/step predicted | measured | error | speedup predicted "
             "| measured (median of 3) | error |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c in checks:
        e1 = c["predicted_tokens_per_step"] / c["measured_tokens_per_step"] - 1
        e2 = c["predicted_speedup"] / c["measured_speedup"] - 1
        step = c.get("measured_t_step")
        lines.append(f"| {c['gamma']} | {c.get('predicted_t_step', float('nan')) * 1e3:.2f} | "
                     f"{'—' if step is None else f'{step * 1e3:.2f}'} | "
                     f"{c['predicted_tokens_per_step']:.3f} | {c['measured_tokens_per_step']:.3f} | "
                     f"{e1:+.1%} | {c['predicted_speedup']:.3f} | {c['measured_speedup']:.3f} | {e2:+.1%} |")
    parts = [c for c in checks if "spec_request_s" in c]
    if parts:
        lines += ["", "Whole requests, ms (predicted / measured); their rest besides decoding in brackets:", "",
                  "| γ | plain | speculative |", "|---:|---|---|"]
        for c in parts:
            ms = lambda k: f"{c['predicted_' + k] * 1e3:.1f} / {c[k] * 1e3:.1f}"  # noqa: E731
            lines.append(f"| {c['gamma']} | {ms('plain_request_s')} ({ms('plain_rest_s')}) | "
                         f"{ms('spec_request_s')} ({ms('spec_rest_s')}) |")
    loads = [c for c in checks if "load" in c]
    if loads:
        lines += ["", "| γ | concurrency | speedup predicted | measured (median of 3) | error |", "|---:|---:|---:|---:|---:|"]
        for c in loads:
            ld = c["load"]
            lines.append(f"| {c['gamma']} | {ld['concurrency']} | {ld['predicted_speedup']:.3f} | "
                         f"{ld['measured_speedup']:.3f} | {ld['predicted_speedup'] / ld['measured_speedup'] - 1:+.1%} |")
    (out / "check.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
