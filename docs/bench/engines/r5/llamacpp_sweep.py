"""Round r5: llama.cpp's server, speculative steps by γ = 1..8 (two servers each) and a plain one, all up together,
timed in turns (enginecosts.measure_servers). `.venv/bin/python docs/bench/engines/r5/llamacpp_sweep.py DIR 0`"""
import json, pathlib, sys, contextlib
ROOT = pathlib.Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT / "tests" / "live"))
from _engines import llama_server
from exactspec.audit import enginecosts
from transformers import AutoTokenizer
OUT = pathlib.Path(sys.argv[1]); OUT.mkdir(exist_ok=True, parents=True)
temp = float(sys.argv[2])
tok = AutoTokenizer.from_pretrained(str(ROOT / "src/exactspec/pairs/demo_pair/target"))
prompts = [tok.encode(p) for p in json.load(open(ROOT / "benchmarks/prompts/engines/unseen_engines3.json"))["prompts"]]
gammas = [None, 1, 2, 3, 4, 5, 6, 8, 1, 2, 3, 4, 5, 6, 8]
with contextlib.ExitStack() as st:
    urls = [st.enter_context(llama_server(OUT / f"s{i}_{g}.log", draft=g is not None, n_max=g or 4)) for i, g in enumerate(gammas)]
    ms = enginecosts.measure_servers(urls, prompts, max_tokens=64, repeats=2, temperature=temp, pause=0.2)
res = [{k: m.get(k) for k in ("gamma", "t_step", "t_token", "tokens_per_step", "t_prefill")} for m in ms]
for r in sorted(res, key=lambda r: r["gamma"] or 0):
    print(r["gamma"], round(1e3 * (r["t_step"] or r["t_token"]), 3), round(r["tokens_per_step"], 3))
json.dump(res, open(OUT / f"sweep_t{temp:g}.json", "w"), indent=1)
