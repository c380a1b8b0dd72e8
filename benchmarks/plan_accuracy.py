"""Does `exactspec plan` predict what `generate` measures? (issue 13, section 3)

1. Per-position acceptance: the offline measurement (target writes, one teacher-forced pass, loop replayed in
   expectation) against SpeculativeGenerator.generate on the same demo prompts, gamma = 4, greedy (same texts:
   should agree exactly) and T = 1 (independent samples: agree within noise; several seeds each).
2. Block verification and trees (`blocktree`): the plan's block per-position acceptance against
   generate(method="block") at T = 1, and its tree tokens per target call (the acceptance table per depth and
   sibling rank, exactspec.deploy.offlinetrees) against generate(tree=shape), greedy and T = 1.
3. Speedup: a profile measured here (`CostProfile.measure(calibrate=True)`, batch 1) prices the offline
   acceptance; compare with `exactspec bench --num-prompts 6 --max-new-tokens 64 --repeats 3` (pass its
   bench.json path as argv[1]).

    PYTHONPATH=src python benchmarks/plan_accuracy.py acceptance
    PYTHONPATH=src python benchmarks/plan_accuracy.py blocktree
    exactspec bench --num-prompts 6 --max-new-tokens 64 --repeats 3 --out bench-out
    PYTHONPATH=src python benchmarks/plan_accuracy.py speedup bench-out/bench.json
"""
import json
import sys
import time

import torch

from exactspec import SpeculativeGenerator, load_demo_pair
from exactspec.deploy.costprofile import CostProfile
from exactspec.pairs.stdlib import demo_prompts
from exactspec.deploy.offline import measure_acceptance
from exactspec.deploy.plan import engine_configs, plan_offline
from exactspec.speed.stats import GenerationStats

torch.set_num_threads(2)
N_PROMPTS, NEW, GAMMA = 6, 64, 4
target, draft, tok = load_demo_pair()
prompts = demo_prompts()[:N_PROMPTS]
gen = SpeculativeGenerator(target, draft)


def generated(temperature: float, seeds: int, **kw) -> GenerationStats:
    runs = []
    kw = {"gamma": GAMMA} | kw
    for s in range(seeds):
        for i, p in enumerate(prompts):
            ids = tok(p, return_tensors="pt")["input_ids"]
            runs.append(gen.generate(ids, max_new_tokens=NEW, do_sample=temperature > 0,
                                     temperature=temperature or 1.0, eos_token_id=[],
                                     seed=1000 * s + i, **kw).stats)
    return GenerationStats.merge(runs)


def block_and_trees() -> dict:
    from exactspec.deploy.offlinetrees import tree_acceptance
    from exactspec.speed.treemath import expected_tokens_tree

    out = {}
    for temperature, seeds in ((0.0, 1), (1.0, 4)):
        t0 = time.perf_counter()
        acc = measure_acceptance(target, tok, prompts * seeds, draft=draft, max_new_tokens=NEW,
                                 temperature=temperature, max_gamma=8, stop_at_eos=False, seed=7, tree_ranks=4)
        entry = {"prompts_x_seeds": f"{N_PROMPTS} x {seeds}", "plan_seconds": time.perf_counter() - t0}
        if temperature > 0:
            planned = acc.replay(GAMMA, "block")
            st = generated(temperature, seeds, method="block")
            entry["block"] = {"plan": planned.per_position_acceptance, "generate": st.per_position_acceptance,
                              "generate_steps_reaching_position": st.position_drafted,
                              "max_abs_diff": max(abs(a - b) for a, b in zip(planned.per_position_acceptance,
                                                                            st.per_position_acceptance)),
                              "plan_mean_accepted_per_step": float(planned.position_accepted.sum() / planned.steps),
                              "generate_mean_accepted_per_step": st.mean_accepted_per_step}
        table = tree_acceptance(acc, 6)
        entry["tree_acceptance"] = table.round(4).tolist()
        entry["trees"] = []
        for shape in ((1, 1, 1, 1), (2, 1, 1, 1), (3, 2, 1, 1), (4, 2, 2, 1)):
            st = generated(temperature, seeds, tree=shape)
            planned, measured = expected_tokens_tree(shape, table), st.new_tokens / st.target_calls
            entry["trees"].append({"shape": list(shape), "plan_tokens_per_call": planned,
                                   "generate_tokens_per_call": measured, "rel_diff": planned / measured - 1})
        out[f"T={temperature:g}"] = entry
        print(json.dumps(entry), flush=True)
    return out


report = {}
part = sys.argv[1] if len(sys.argv) > 1 else "acceptance"
if part == "blocktree":
    json.dump(block_and_trees(), open("/tmp/plan_accuracy_blocktree.json", "w"), indent=1)
    sys.exit(0)
for temperature, seeds in ((0.0, 1), (1.0, 4)) if part == "acceptance" else ((0.0, 0),):
    if seeds == 0:  # the speedup part needs only the greedy acceptance
        greedy_acc = measure_acceptance(target, tok, prompts, draft=draft, max_new_tokens=NEW, max_gamma=8,
                                        stop_at_eos=False, seed=7)
        break
    t0 = time.perf_counter()
    acc = measure_acceptance(target, tok, prompts * seeds, draft=draft, max_new_tokens=NEW, temperature=temperature,
                             max_gamma=8, stop_at_eos=False, seed=7)
    t_plan = time.perf_counter() - t0
    rep = acc.replay(GAMMA)
    t0 = time.perf_counter()
    st = generated(temperature, seeds)
    t_gen = time.perf_counter() - t0
    planned, measured = rep.per_position_acceptance, st.per_position_acceptance
    report[f"T={temperature:g}"] = {
        "prompts_x_seeds": f"{N_PROMPTS} x {seeds}", "tokens_per_side": acc.tokens,
        "plan": planned, "generate": measured,
        "max_abs_diff": max(abs(a - b) for a, b in zip(planned, measured)),
        "generate_steps_reaching_position": st.position_drafted,
        "plan_seconds": t_plan, "generate_seconds": t_gen,
        "plan_mean_accepted_per_step": float(rep.position_accepted.sum() / rep.steps),
        "generate_mean_accepted_per_step": st.mean_accepted_per_step,
    }
    if temperature == 0:
        greedy_acc = acc
    print(json.dumps(report[f"T={temperature:g}"]), flush=True)

if part == "acceptance":
    json.dump(report, open("/tmp/plan_accuracy_acceptance.json", "w"), indent=1)
    sys.exit(0)
# 2. speedup: profile measured here, calibrated on exactspec's loop with the same prompts
ids = [tok(p)["input_ids"] for p in prompts]
bare = CostProfile.measure(target, draft, batch_sizes=[1], prompt_len=max(len(i) for i in ids), repeats=5)
try:
    prof = CostProfile.measure(target, draft, batch_sizes=[1], prompt_len=max(len(i) for i in ids), repeats=5,
                               calibrate=True, prompt_ids=ids, max_new_tokens=NEW, gamma=GAMMA)
except ValueError as exc:  # a machine that changed speed mid-measurement makes calibration inconsistent
    print(f"calibration failed ({exc}); using the bare profile", flush=True)
    prof = bare
cfg = lambda g: engine_configs(g)
plan = plan_offline(greedy_acc, [(1, prof.cost(1))], cfg)
plan_bare = plan_offline(greedy_acc, [(1, bare.cost(1))], cfg)
pred = plan["rows"][GAMMA - 1]["predicted_speedup"]
report["speedup"] = {"predicted_gamma4_calibrated_profile": pred,
                     "predicted_gamma4_bare_profile": plan_bare["rows"][GAMMA - 1]["predicted_speedup"],
                     "recommended_gamma": plan["recommended_gamma"],
                     "predicted_at_recommended": plan["predicted_speedup"], "calibrated": prof is not bare,
                     "profile": prof.to_dict()}
if len(sys.argv) > 2:
    with open(sys.argv[2]) as fh:
        bench = json.load(fh)
    row = next(r for r in bench["rows"] if r["system"].startswith("exactspec token (γ=4)"))
    report["speedup"] |= {"bench_vs_hf_generate": row["speedup_vs_target"],
                          "bench_vs_exactspec_loop": row["speedup_vs_exactspec_loop"],
                          "bench_own_prediction": row["predicted_speedup"],
                          "plan_vs_bench_hf": pred / row["speedup_vs_target"] - 1,
                          "plan_vs_bench_loop": pred / row["speedup_vs_exactspec_loop"] - 1}
print(json.dumps(report["speedup"] | {"profile": None}, indent=1))
json.dump(report, open("/tmp/plan_accuracy_speedup.json", "w"), indent=1)
