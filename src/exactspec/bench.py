"""Side-by-side benchmark: target alone, Hugging Face assisted generation, exactspec's rules and drafters.

Every system decodes the same prompts with the same settings; runs are interleaved (A B C A B C ...) so that a
noisy, shared machine slows all systems alike, and per-system medians over repeats are reported. EOS does not
stop any system (all produce exactly `max_new_tokens` per row), so tokens/s compare like with like.

For each exactspec system the speedup *predicted* from a `CostModel` and the run's measured per-position
acceptance, E(alpha_1..alpha_g) * T_target(1) / (g * t_draft + T_target(g + 1) + t_overhead), is put next to
the measured one, twice:

- ``predicted_speedup``: the cost model calibrated on one untimed run of the loop before the timed runs
  (`CostModel.calibrate`: a draft step as it costs inside the loop, and the loop's per-step overhead);
- ``predicted_speedup_forwards``: bare forward passes only (`CostModel.measure`), as the paper's analysis
  prices a step. The gap between the two is what our loop adds to the forward passes.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from exactspec.sampling import probs_from_logits, sample_from_probs
from exactspec.stats import GenerationStats

BASELINE = "target (HF generate)"
LOOP = "target (exactspec loop)"


@dataclass
class BenchConfig:
    """What to run. `systems=None` runs every system that applies to the batch size."""

    prompts: list[str]
    max_new_tokens: int = 64
    temperature: float = 0.0
    gamma: int | str = 4
    batch_size: int = 1
    repeats: int = 3
    seed: int = 0
    systems: list[str] | None = None
    trees: tuple = ("auto",)  # tree speculation systems: branching tuples, node budgets, "auto"


@dataclass
class SystemResult:
    name: str
    times: list[float] = field(default_factory=list)  # seconds per repeat (all prompt batches)
    tokens: list[int] = field(default_factory=list)  # new tokens per repeat
    stats: list = field(default_factory=list)  # exactspec GenerationStats per call (last repeat)

    @property
    def tokens_per_second(self) -> float:
        return statistics.median(n / t for n, t in zip(self.tokens, self.times))


def _batches(tokenizer, prompts: list[str], batch_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    tokenizer.padding_side = "left"
    out = []
    for i in range(0, len(prompts), batch_size):
        enc = tokenizer(prompts[i:i + batch_size], return_tensors="pt", padding=True)
        out.append((enc["input_ids"], enc["attention_mask"]))
    return out


@torch.inference_mode()
def target_alone_loop(target, input_ids, attention_mask, *, max_new_tokens, temperature, seed, timings=None):
    """Plain autoregressive decoding with exactspec's own sampling path and an HF KV cache.

    The baseline the cost model assumes (one target call of one token per new token), to separate the
    speedup of speculation from the overhead of our Python loop. `timings` (a dict), if given, receives
    the seconds of the prefill under "prefill".
    """
    gen = torch.Generator().manual_seed(seed)
    mask = attention_mask
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    t0 = time.perf_counter()
    out = target(input_ids=input_ids, attention_mask=mask, position_ids=pos, use_cache=True)
    if timings is not None:
        timings["prefill"] = time.perf_counter() - t0
    cache, tokens = out.cache, []
    for step in range(max_new_tokens):
        probs = probs_from_logits(out.logits[:, -1], temperature=temperature)  # [B, V]
        nxt = probs.argmax(-1) if temperature == 0 else sample_from_probs(probs, gen)
        tokens.append(nxt)
        if step == max_new_tokens - 1:  # the last token needs no forward pass
            break
        mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)
        pos = pos[:, -1:] + 1
        out = target(input_ids=nxt[:, None], attention_mask=mask, position_ids=pos, cache=cache, use_cache=True)
        cache = out.cache
    return torch.stack(tokens, 1)


def _hf_kwargs(cfg: BenchConfig, tokenizer) -> dict:
    sample = cfg.temperature > 0
    kw = dict(max_new_tokens=cfg.max_new_tokens, min_new_tokens=cfg.max_new_tokens, do_sample=sample,
              pad_token_id=tokenizer.pad_token_id)
    if sample:
        kw.update(temperature=cfg.temperature, top_k=0, top_p=1.0)
    return kw


def build_systems(target, draft, tokenizer, cfg: BenchConfig, cost_model) -> dict[str, Callable]:
    """name -> fn(input_ids, attention_mask, call_seed) returning (new_tokens, GenerationStats or None)."""
    from exactspec.decoding import SpeculativeGenerator

    hf_kw = _hf_kwargs(cfg, tokenizer)
    gamma_n = cfg.gamma if isinstance(cfg.gamma, int) else 4
    spec_kw = dict(max_new_tokens=cfg.max_new_tokens, do_sample=cfg.temperature > 0,
                   temperature=max(cfg.temperature, 0.0), eos_token_id=[], pad_token_id=tokenizer.pad_token_id)
    with_draft = SpeculativeGenerator(target, draft, cost_model=cost_model)
    lookup = SpeculativeGenerator(target, drafter="prompt_lookup")

    def hf(ids, mask, seed, **extra):
        torch.manual_seed(seed)
        out = target.generate(ids, attention_mask=mask, **hf_kw, **extra)
        return (out.shape[1] - ids.shape[1]) * ids.shape[0], None

    def ours(gen, **extra):
        def run(ids, mask, seed):
            out = gen.generate(ids, attention_mask=mask, seed=seed, **spec_kw, **extra)
            return out.stats.new_tokens, out.stats
        return run

    def loop(ids, mask, seed):
        toks = target_alone_loop(target, ids, mask, max_new_tokens=cfg.max_new_tokens,
                                 temperature=cfg.temperature, seed=seed)
        return toks.numel(), None

    systems = {
        BASELINE: hf,
        LOOP: loop,
        f"HF assisted (γ={gamma_n})": lambda ids, mask, seed: hf(
            ids, mask, seed, assistant_model=draft, num_assistant_tokens=gamma_n,
            num_assistant_tokens_schedule="constant", assistant_confidence_threshold=0.0),
        f"exactspec token (γ={gamma_n})": ours(with_draft, gamma=gamma_n, method="token"),
        f"exactspec block (γ={gamma_n})": ours(with_draft, gamma=gamma_n, method="block"),
        "exactspec token (γ=auto)": ours(with_draft, gamma="auto", method="token"),
        f"exactspec prompt lookup (γ={gamma_n})": ours(lookup, gamma=gamma_n, method="token"),
    }
    for tree in cfg.trees:
        systems[tree_system_name(tree)] = ours(with_draft, tree=tree)
    if cfg.batch_size > 1:  # HF assisted generation only supports batch size 1
        systems = {k: v for k, v in systems.items() if not k.startswith("HF assisted")}
    if cfg.systems:
        systems = {k: v for k, v in systems.items() if any(s.lower() in k.lower() for s in cfg.systems)}
        systems.setdefault(BASELINE, hf)
    return systems


def tree_system_name(tree) -> str:
    """"exactspec tree (3,2,1,1)", "exactspec tree (n=12)" (dynamic) or "exactspec tree (auto)"."""
    label = ",".join(map(str, tree)) if isinstance(tree, tuple) else f"n={tree}" if isinstance(tree, int) else tree
    return f"exactspec tree ({label})"


def _tree_predicted(stats, cost_model, prefill: dict | None, name: str) -> float | None:
    """A tree run priced by the cost model: its tokens per step (the acceptance it met) over a step of the
    run's mean draft calls and mean verified width (t_draft per call, T_target(width), overhead)."""
    if not stats.target_calls or not stats.row_steps:
        return None
    e = stats.mean_tokens_per_step
    calls = stats.draft_calls / stats.target_calls
    width = stats.target_positions / stats.target_calls
    step = calls * cost_model.t_draft + (cost_model.t_draft_cold if calls else 0.0) + \
        cost_model.t_target(width) + cost_model.t_overhead
    t1 = cost_model.t_target(1)
    if prefill is None:
        return e * t1 / step
    n = prefill["n_tokens"]
    return (prefill["plain"] + (n - 1) * t1) / (prefill[name] + n / e * step)


def predicted_speedup(name: str, stats, cost_model, prefill: dict | None = None) -> float | None:
    """Cost-model prediction from a run's measured per-position acceptance and the lengths it drafted
    (`stats`: merged GenerationStats; see `exactspec.speedup.mixed_length_speedup`); None if nothing
    was drafted. With `prefill` ({"plain": s, name: s per call, "n_tokens": per row}) the prediction is
    end to end, prefills included (`exactspec.speedup.end_to_end_speedup`), like the measured tokens/s;
    `cost_model` is then that system's calibrated model, used as is."""
    from exactspec.speedup import end_to_end_speedup, mixed_length_speedup

    if name.startswith("exactspec tree"):
        return _tree_predicted(stats, cost_model, prefill, name)
    alphas = [a / d for a, d in zip(stats.position_accepted, stats.position_drafted) if d]
    if not alphas or not sum(stats.length_counts):
        return None
    if prefill is None:
        if "prompt lookup" in name:  # a model-free drafter costs (almost) nothing per token
            cost_model = cost_model.without_draft()
        return float(mixed_length_speedup(alphas, stats.length_counts, cost_model))
    return float(end_to_end_speedup(alphas, stats.length_counts, cost_model, prefill["n_tokens"],
                                    prefill_plain=prefill["plain"], prefill_spec=prefill[name]))


def run_bench(target, draft, tokenizer, cfg: BenchConfig, progress=None) -> dict:
    """Run every system on every prompt batch, `cfg.repeats` times, interleaved; return the report dict.

    `progress(done, total)` is called after each timed call (the CLI passes a rich progress bar).
    """
    from exactspec.costmodel import CostModel

    batches = _batches(tokenizer, cfg.prompts, cfg.batch_size)
    # Calibrate at the bench's own batch size and typical prompt length.
    prompt_len = int(statistics.median(int(m.sum(1).max()) for _, m in batches))
    cost_model = CostModel.measure(target, draft, repeats=5, batch_size=cfg.batch_size, prompt_len=prompt_len)
    systems = build_systems(target, draft, tokenizer, cfg, cost_model)
    results = {name: SystemResult(name) for name in systems}
    total, done = cfg.repeats * len(batches) * len(systems), 0
    for fn in systems.values():  # warm-up: first calls pay for allocation and lazy initialisation
        fn(*batches[0], cfg.seed)
    loop_costs, prefill = _calibrated(target, systems, batches, cfg, cost_model)
    for r in range(cfg.repeats):
        totals = {name: [0.0, 0] for name in systems}
        for b, (ids, mask) in enumerate(batches):
            for name, fn in systems.items():  # interleaved: A B C A B C ...
                t0 = time.perf_counter()
                n, stats = fn(ids, mask, cfg.seed + 1000 * r + b)
                totals[name][0] += time.perf_counter() - t0
                totals[name][1] += n
                if stats is not None and r == cfg.repeats - 1:
                    results[name].stats.append(stats)
                done += 1
                if progress:
                    progress(done, total)
        for name, (t, n) in totals.items():
            results[name].times.append(t)
            results[name].tokens.append(n)
    return _report(results, cfg, cost_model, loop_costs, prefill)


def _calibrated(target, systems: dict, batches, cfg: BenchConfig, cost_model) -> tuple[dict, dict]:
    """Per exactspec system, the cost model re-priced on that system's own untimed pass over every prompt
    batch (seeds apart from the timed runs'), and the prefill seconds per call of plain decoding and of
    that system.

    The pass interleaves, batch by batch, every exactspec system (its statistics price its draft step and
    its per-step overhead inside the loop: block verification costs more than the token rule, prompt
    lookup drafts in Python) with our target-alone loop (its time per step prices plain decoding), so a
    machine that speeds up or slows down shifts both sides alike, as in the timed runs.
    """
    names = [k for k in systems if k.startswith("exactspec")]
    if not names:
        return {}, {}
    stats: dict[str, list] = {k: [] for k in names}
    plain_s, plain_prefill, n = 0.0, 0.0, cfg.max_new_tokens
    for b, (ids, mask) in enumerate(batches):
        for name in names:
            stats[name].append(systems[name](ids, mask, cfg.seed - 1 - b)[1])
        timings: dict = {}
        t0 = time.perf_counter()
        target_alone_loop(target, ids, mask, max_new_tokens=n, temperature=cfg.temperature,
                          seed=cfg.seed - 1 - b, timings=timings)
        plain_s += time.perf_counter() - t0
        plain_prefill += timings["prefill"]
    # One decoding step of plain decoding (the batch's step when batch_size > 1); the prefill gives the
    # first token, so a call of n tokens takes n - 1 steps.
    plain_time = (plain_s - plain_prefill) / (len(batches) * (n - 1)) if n > 1 else None
    costs, prefill = {}, {"plain": plain_prefill / len(batches), "n_tokens": n}
    for name in names:
        base = cost_model.without_draft() if "prompt lookup" in name else cost_model
        costs[name] = base.calibrate(stats[name], plain_time=plain_time)
        prefill[name] = sum(s.prefill_time for s in stats[name]) / len(stats[name])
    return costs, prefill


def _report(results: dict[str, SystemResult], cfg: BenchConfig, cost_model, loop_costs: dict,
            prefill: dict) -> dict:
    base = results[BASELINE].tokens_per_second
    loop = results.get(LOOP)
    assisted = next((r for k, r in results.items() if k.startswith("HF assisted")), None)
    rows = []
    for name, res in results.items():
        tps = res.tokens_per_second
        st = GenerationStats.merge(res.stats) if res.stats else None
        rows.append({
            "system": name,
            "tokens_per_second": tps,
            "speedup_vs_target": tps / base,
            "speedup_vs_exactspec_loop": tps / loop.tokens_per_second if loop else None,
            "speedup_vs_assisted": tps / assisted.tokens_per_second if assisted else None,
            "acceptance_rate": st.acceptance_rate if st else None,
            "mean_accepted_per_step": st.mean_accepted_per_step if st else None,
            "mean_tokens_per_step": st.mean_tokens_per_step if st else None,
            "tokens_per_target_call": st.tokens_per_target_call if st else None,
            "per_position_acceptance": [a / d if d else None for a, d in
                                        zip(st.position_accepted, st.position_drafted)] if st else [],
            "length_counts": st.length_counts if st else [],
            "predicted_speedup": predicted_speedup(name, st, loop_costs[name], prefill)
            if st and name in loop_costs else None,
            "predicted_speedup_forwards": predicted_speedup(name, st, cost_model) if st else None,
            # Where a step's time goes inside the loop (ms per target call): what the cost model prices
            # (draft and target forwards) against what it does not (sampling, verification, bookkeeping).
            "ms_per_step": {part: 1e3 * getattr(st, f"{part}_time") / st.target_calls
                            for part in ("draft", "target", "verify")} if st and st.target_calls else None,
            "times": res.times,
            "tokens": res.tokens,
        })
    return {
        "config": {k: v for k, v in vars(cfg).items() if k != "prompts"} | {"num_prompts": len(cfg.prompts)},
        "threads": torch.get_num_threads(),
        "cost_model": cost_model.to_dict(),
        "cost_ratio": cost_model.cost_ratio,
        "calibrated_cost_models": {name: cm.to_dict() for name, cm in loop_costs.items()},
        "calibrated_prefill_seconds": prefill,
        "rows": rows,
        "notes": ["HF assisted generation supports batch size 1 only"] if cfg.batch_size > 1 else [],
    }
