"""Does `exactspec plan --engine E --engine-url ...` predict the engine's own speculation? (issue 48, docs/engines.md)

    python benchmarks/engines/plan_check.py --engine vllm|llamacpp --prompts FILE --out DIR [--temperature T]

1. Starts the engine plain and speculative at γ = 2 and 3 (the stdlib pair; tests/live/_engines.py), and runs
   `exactspec plan --engine E --pair stdlib --engine-url ×3 --engine-profile DIR/profile.json --json` (DIR/plan.json).
2. Stops the speculative servers, then for γ in 4 and 6 starts one afresh and times it against the plain server,
   interleaved prompt by prompt over 3 repetitions (a pause before each request: vLLM spins after one); the
   measured speedup is the median over repetitions of the plain server's total time over the speculative one's
   (the same number of tokens each), the tokens per step its counters' 1 + accepted / drafts.
3. Writes DIR/check.json and DIR/check.md: predicted (the rows' `predicted_request_speedup`: whole requests of
   --max-new-tokens, prompt pass included, what the interleaved timing measures) against measured.
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
from exactspec.audit.engines import DIALECTS, detect  # noqa: E402
from exactspec.audit.enginecosts import PAUSE_S, _counters  # noqa: E402
from exactspec.audit.laws import Settings  # noqa: E402


def server(engine: str, log, gamma: int | None):
    if engine == "vllm":
        return vllm(log, None if gamma is None else {"num_speculative_tokens": gamma, "draft_sample_method": "greedy"})
    return llama_server(log, draft=gamma is not None, n_max=gamma or 4)


def timed(srv: Server, dialect, model, prompt, n, temperature, seed):
    time.sleep(PAUSE_S)
    t0 = time.perf_counter()
    ids = dialect.tokens(srv.post_json(dialect.path, dialect.request(model, prompt, n, Settings(temperature), seed)))
    return time.perf_counter() - t0, len(ids)


def compare(plain_url: str, spec_url: str, prompts, n: int, temperature: float, repeats: int = 3) -> dict:
    a, b = Server(plain_url, concurrency=1), Server(spec_url, concurrency=1)
    engine, model_a = detect(a.get_json)
    _, model_b = detect(b.get_json)
    dialect = DIALECTS[engine]
    ratios, accepted, drafts, tokens = [], 0, 0, 0
    for r in range(repeats):
        ta = tb = 0.0
        for j, p in enumerate(prompts):
            before = _counters(b)
            dt, _ = timed(a, dialect, model_a, p, n, temperature, 1000 * r + j)
            ta += dt
            dt, k = timed(b, dialect, model_b, p, n, temperature, 1000 * r + j)
            tb += dt
            d = _counters(b).minus(before)
            accepted, drafts, tokens = accepted + d.accepted, drafts + d.drafts, tokens + k
        ratios.append(ta / tb)
        print(f"  repeat {r + 1}: speculative {ta / tb:.3f}x plain", flush=True)
    a.close(), b.close()
    return {"speedups": ratios, "speedup": statistics.median(ratios),
            "tokens_per_step": 1 + accepted / drafts if drafts else None, "tokens": tokens}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", choices=("vllm", "llamacpp"), required=True)
    ap.add_argument("--prompts")
    ap.add_argument("--out", required=True)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--rescore", action="store_true", help="recompute a finished run's predictions, no servers")
    args = ap.parse_args()
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
        with server(args.engine, out / "g2.log", 2) as g2, server(args.engine, out / "g3.log", 3) as g3:
            cmd = [sys.executable, "-m", "exactspec", "plan", "--engine", args.engine, "--pair", "stdlib",
                   "--prompts", args.prompts, "--max-new-tokens", str(args.max_new_tokens), "--temperature",
                   str(args.temperature), "--tree-nodes", "0", "--engine-url", plain, "--engine-url", g2,
                   "--engine-url", g3, "--engine-profile", str(out / "profile.json"), "--json"]
            if args.engine == "vllm":
                cmd += ["--draft-sample-method", "greedy"]
            plan = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
            (out / "plan.json").write_text(json.dumps(plan, indent=2))
        rows, checks = {r["gamma"]: r for r in plan["rows"]}, []
        for gamma in (4, 6):
            with server(args.engine, out / f"g{gamma}.log", gamma) as spec:
                print(f"γ = {gamma}:", flush=True)
                m = compare(plain, spec, prompts, args.max_new_tokens, args.temperature)
            row = rows[gamma]
            checks.append({"gamma": gamma, "predicted_tokens_per_step": row["expected_tokens"],
                           "measured_tokens_per_step": m["tokens_per_step"],
                           "predicted_speedup": row["predicted_request_speedup"],
                           "predicted_decode_speedup": row["predicted_speedup"], "measured_speedup": m["speedup"],
                           "measured_speedups": m["speedups"]})
    (out / "check.json").write_text(json.dumps(checks, indent=2))
    write_table(out, args.engine, args.temperature, checks)


def rescore(out: pathlib.Path) -> list[dict]:
    """The checks of a finished run, its predictions recomputed by the current code from its stored plan and
    profile (the measurements unchanged)."""
    from exactspec.audit.enginecosts import fit, request_speedup

    profile = fit(json.loads((out / "profile.json").read_text())["measured"])  # the current fit of those timings
    rows = {r["gamma"]: r for r in json.loads((out / "plan.json").read_text())["rows"]}
    checks = json.loads((out / "check.json").read_text())
    for c in checks:
        row = rows[c["gamma"]]
        c["predicted_speedup"] = request_speedup(profile, c["gamma"], row["expected_tokens"])
        c["predicted_decode_speedup"] = row["predicted_speedup"]
    (out / "check.json").write_text(json.dumps(checks, indent=2))
    return checks


def write_table(out: pathlib.Path, engine: str, temperature: float, checks: list[dict]) -> None:
    lines = [f"# plan --engine {engine} against the live engine (T = {temperature:g}, batch 1)", "",
             "| γ | tokens/step predicted | measured | error | speedup predicted | measured (median of 3) | error |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for c in checks:
        e1 = c["predicted_tokens_per_step"] / c["measured_tokens_per_step"] - 1
        e2 = c["predicted_speedup"] / c["measured_speedup"] - 1
        lines.append(f"| {c['gamma']} | {c['predicted_tokens_per_step']:.3f} | {c['measured_tokens_per_step']:.3f} | "
                     f"{e1:+.1%} | {c['predicted_speedup']:.3f} | {c['measured_speedup']:.3f} | {e2:+.1%} |")
    (out / "check.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
