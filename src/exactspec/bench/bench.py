"""Side-by-side benchmark: target alone, Hugging Face assisted generation, exactspec's rules and drafters.

Every system decodes the same prompts with the same settings; runs are interleaved (A B C A B C ...) so that a
noisy, shared machine slows all systems alike; tokens/s are per-system medians over repeats, and every
speedup is the median over repeats of the ratio within a repeat (paired, so drift between repeats cancels). EOS does not
stop any system (all produce exactly `max_new_tokens` per row), so tokens/s compare like with like.

Systems are typed records (:class:`System`: kind, gamma, rule, drafter), never parsed back from their
display names. A sweep of fixed draft lengths (``gammas``) runs next to ``gamma="auto"``, and the report's
``summary`` puts the best fixed gamma beside auto.

For each exactspec system the speedup *predicted* from a `CostModel` and the run's measured per-position
acceptance (:func:`exactspec.speed.prediction.predict`, the one prediction path) is put next to the measured one,
twice:

- ``predicted_speedup``: the cost model calibrated on untimed calls of the loop (`CostModel.calibrate`: a
  draft step as it costs inside the loop, and the loop's per-step overhead), each made just before the
  timed call it prices; one prediction per repeat, and their median;
- ``predicted_speedup_forwards``: bare forward passes only (`CostModel.measure`), as the paper's analysis
  prices a step. The gap between the two is what our loop adds to the forward passes.
"""
from __future__ import annotations

import json
import pathlib
import statistics
import time
import types
from dataclasses import dataclass, field
from typing import Callable

import torch

from exactspec.bench.benchcalibration import plain_calibration_call
from exactspec.bench.benchrows import BASELINE, LOOP, SystemResult, feature_draft as _feature, finish_report
from exactspec.engine.baseline import target_alone_loop



@dataclass
class BenchConfig:
    """What to run. `systems=None` runs every system that applies to the batch size; `gammas` are the fixed
    draft lengths of the token rule's sweep (default: `gamma`, or 4 when `gamma` is "auto")."""

    prompts: list[str]
    max_new_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0  # nucleus filter of every system when sampling (1 = off)
    gamma: int | str = 4
    batch_size: int = 1
    repeats: int = 3
    seed: int = 0
    systems: list[str] | None = None
    gammas: tuple[int, ...] | None = None
    trees: tuple = ("auto",)  # tree speculation systems: branching tuples, node budgets, "auto"
    peers: bool = False  # a llama.cpp target: also llama.cpp's own binaries (exactspec.bench.llamacpp_peers)


@dataclass
class System:
    """One benchmarked system. `kind`: "hf" (transformers generate), "loop" (our target-alone loop),
    "assisted" (transformers assisted generation), "hf_lookup" (its prompt lookup) or "exactspec"; `drafter`: "model" or "prompt_lookup";
    `tree`: set for tree speculation (replaces gamma); `run(input_ids, attention_mask, seed) -> (new tokens,
    GenerationStats or None, the new token ids [B, N])`, and for a "peer" (llama.cpp's own binary, run in a
    process of its own) a 4th item: the seconds of its generation phase by its own clock (its process start,
    model load and prompt are not generation)."""

    name: str
    kind: str
    run: Callable = field(repr=False, compare=False)
    gamma: int | str | None = None
    method: str | None = None
    drafter: str | None = None
    tree: tuple | int | str | None = None  # tree speculation: branching factors, a node budget or "auto"


def load_prompts(path: str | pathlib.Path) -> list[str]:
    """Prompts from a file: JSON (a list of strings, or {"prompts": [str | {"text": str}]}), JSONL (Spec-Bench's
    question.jsonl: each row's first turn; :mod:`exactspec.deploy.prompts`) or plain text with one prompt per
    blank-line-separated block."""
    if str(path).endswith(".jsonl"):
        from exactspec.deploy.prompts import read_prompt_file

        return list(read_prompt_file(str(path)))
    text = pathlib.Path(path).read_text(encoding="utf-8")
    if str(path).endswith(".json"):
        data = json.loads(text)
        items = data["prompts"] if isinstance(data, dict) else data
        prompts = [p["text"] if isinstance(p, dict) else p for p in items]
    else:
        prompts = [b.strip("\n") for b in text.split("\n\n") if b.strip()]
    if not prompts or not all(isinstance(p, str) and p.strip() for p in prompts):
        raise ValueError(f"--prompts {path}: no prompts, or an empty one")
    return prompts


def _batches(tokenizer, prompts: list[str], batch_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    tokenizer.padding_side = "left"
    out = []
    for i in range(0, len(prompts), batch_size):
        enc = tokenizer(prompts[i:i + batch_size], return_tensors="pt", padding=True)
        out.append((enc["input_ids"], enc["attention_mask"]))
    return out


def _hf_kwargs(cfg: BenchConfig, tokenizer) -> dict:
    sample = cfg.temperature > 0
    kw = dict(max_new_tokens=cfg.max_new_tokens, min_new_tokens=cfg.max_new_tokens, do_sample=sample,
              pad_token_id=tokenizer.pad_token_id)
    if sample:
        kw.update(temperature=cfg.temperature, top_k=0, top_p=cfg.top_p)
    return kw


def system_names(gamma_n: int, gammas=None, trees=()) -> list[str]:
    """Every system's name, in the order :func:`build_systems` runs them (all batch sizes)."""
    return [BASELINE, LOOP, f"HF assisted (γ={gamma_n})", f"HF prompt lookup (γ={gamma_n})"] + \
        [f"exactspec token (γ={g})" for g in (gammas or (gamma_n,))] + \
        [f"exactspec block (γ={gamma_n})", "exactspec token (γ=auto)", "exactspec block (γ=auto)",
         f"exactspec prompt lookup (γ={gamma_n})", "exactspec prompt lookup (γ=auto)"] + \
        [tree_system_name(t) for t in trees]


def build_systems(target, draft, tokenizer, cfg: BenchConfig, cost_model) -> dict[str, System]:
    """name -> :class:`System`, in the order they run (interleaved)."""
    from exactspec.engine.decoding import SpeculativeGenerator

    hf_kw = _hf_kwargs(cfg, tokenizer)
    gamma_n = cfg.gamma if isinstance(cfg.gamma, int) else 4
    gammas = cfg.gammas or (gamma_n,)
    spec_kw = dict(max_new_tokens=cfg.max_new_tokens, do_sample=cfg.temperature > 0,
                   temperature=max(cfg.temperature, 0.0), top_k=0, top_p=cfg.top_p,  # as hf_kw
                   eos_token_id=[], pad_token_id=tokenizer.pad_token_id)

    def hf(ids, mask, seed, **extra):
        torch.manual_seed(seed)
        out = target.generate(ids, attention_mask=mask, **hf_kw, **extra)
        return (out.shape[1] - ids.shape[1]) * ids.shape[0], None, out[:, ids.shape[1]:]

    def loop(ids, mask, seed, timings=None):
        toks = target_alone_loop(target, ids, mask, max_new_tokens=cfg.max_new_tokens,
                                 temperature=cfg.temperature, seed=seed, top_p=cfg.top_p, timings=timings)
        return toks.numel(), None, toks

    def ours(name, gamma, method="token", drafter="model", tree=None):
        # One generator per system: gamma="auto" carries what it learns from run to run per generator.
        gen = SpeculativeGenerator(target, draft, cost_model=cost_model) if drafter == "model" else \
            SpeculativeGenerator(target, drafter="prompt_lookup")

        def run(ids, mask, seed):
            out = gen.generate(ids, attention_mask=mask, method=method, **spec_kw,  # a generator, not seed=: the
                               generator=torch.Generator(ids.device).manual_seed(seed),  # loop keeps learning
                               **({"tree": tree} if tree is not None else {"gamma": gamma}))
            return out.stats.new_tokens, out.stats, out.sequences[:, ids.shape[1]:]
        return System(name, "exactspec", run, gamma, method, drafter, tree)

    backend = getattr(target, "backend", None)  # a model of another backend: no transformers generate
    systems = [System(BASELINE, "hf", hf)] if backend is None else []
    systems.append(System(LOOP, "loop", loop))
    if backend == "llamacpp" and cfg.peers:
        from exactspec.bench.llamacpp_peers import peer_systems

        systems += [System(name, "peer", run, gamma, None, "model") for name, run, gamma in
                    peer_systems(target, draft, tokenizer, cfg, gamma_n)]
    if cfg.batch_size == 1 and not _feature(draft) and backend is None:  # HF assisted: batch 1, token drafts
        systems.append(System(f"HF assisted (γ={gamma_n})", "assisted", lambda ids, mask, seed: hf(
            ids, mask, seed, assistant_model=draft, num_assistant_tokens=gamma_n,
            num_assistant_tokens_schedule="constant", assistant_confidence_threshold=0.0), gamma_n))
        systems.append(System(f"HF prompt lookup (γ={gamma_n})", "hf_lookup", lambda ids, mask, seed: hf(
            ids, mask, seed, prompt_lookup_num_tokens=gamma_n), gamma_n, drafter="prompt_lookup"))
    systems += [ours(f"exactspec token (γ={g})", g) for g in gammas]
    systems += [ours(f"exactspec block (γ={gamma_n})", gamma_n, "block"),
                ours("exactspec token (γ=auto)", "auto"),
                ours("exactspec block (γ=auto)", "auto", "block"),
                ours(f"exactspec prompt lookup (γ={gamma_n})", gamma_n, drafter="prompt_lookup"),
                ours("exactspec prompt lookup (γ=auto)", "auto", drafter="prompt_lookup")]
    systems += [ours(tree_system_name(t), None, tree=t) for t in cfg.trees if not _feature(draft)]
    if cfg.systems:  # (the baseline, the first system, always runs)
        systems = systems[:1] + [s for s in systems[1:] if any(x.lower() in s.name.lower() for x in cfg.systems)]
    return {s.name: s for s in systems}


def tree_system_name(tree) -> str:
    """"exactspec tree (3,2,1,1)", "exactspec tree (n=12)" (dynamic) or "exactspec tree (auto)"."""
    label = ",".join(map(str, tree)) if isinstance(tree, tuple) else f"n={tree}" if isinstance(tree, int) else tree
    return f"exactspec tree ({label})"


def run_bench(target, draft, tokenizer, cfg: BenchConfig, progress=None, events=None) -> dict:
    """Run every system on every prompt batch, `cfg.repeats` times, interleaved; return the report dict.

    `progress(done, total)` is called after each timed call (the CLI passes a rich progress bar). `events(info)`,
    when given, hears each phase as it begins (``{"phase": "cost model" | "warm-up" | "timed calls"}``, the
    last with ``"total"``) and each timed call as it ends (``{"done", "total", "repeat", "batch", "prompts"
    (indices), "system", "seconds"}``). A KeyboardInterrupt (Ctrl-C) propagates as :class:`~exactspec.bench.benchpartial.BenchInterrupted`,
    carrying the report of what was measured before it.
    """
    run = types.SimpleNamespace(cfg=cfg, draft=draft, cost_model=None, systems={}, results={}, passes=[],
                                completed=0, done=0, total=None, batches=None, equal=None, compared={},
                                at_call=None, at_batch=None, gaps={})
    try:
        return _run_bench(target, draft, tokenizer, cfg, progress, events or (lambda info: None), run)
    except KeyboardInterrupt as exc:
        from exactspec.bench.benchpartial import BenchInterrupted, partial_report

        try:
            report = partial_report(run)
        except Exception:  # a failure to summarise must not turn Ctrl-C into another error
            report = None
        raise BenchInterrupted(report) from exc


def _run_bench(target, draft, tokenizer, cfg: BenchConfig, progress, events, run) -> dict:
    """:func:`run_bench`, keeping in `run` what a partial report needs: the repeats completed and, in the
    repeat under way, copies of its records after each timed call (``at_call``) and each prompt batch
    (``at_batch``), taken once every record of that call is written."""
    from exactspec.bench.benchpartial import snapshot
    from exactspec.speed.costmodel import CostModel
    from exactspec.pairs.featuredraft import timed_model

    batches = run.batches = _batches(tokenizer, cfg.prompts, cfg.batch_size)
    # Calibrate at the bench's own batch size and typical prompt length.
    prompt_len = int(statistics.median(int(m.sum(1).max()) for _, m in batches))
    events({"phase": "cost model"})
    cost_model = run.cost_model = CostModel.measure(target, timed_model(draft), repeats=5,
                                                    batch_size=cfg.batch_size, prompt_len=prompt_len)
    systems = run.systems = build_systems(target, draft, tokenizer, cfg, cost_model)
    results = run.results = {name: SystemResult(name) for name in systems}
    total, done = cfg.repeats * len(batches) * len(systems), 0
    run.total = total
    # Greedy: every system's tokens must equal target-alone `generate`'s, prompt by prompt (last repeat),
    # up to the row's first end-of-sequence token: `generate` runs with min_new_tokens (equal lengths), which
    # bans EOS, while exactspec's systems run with no EOS and keep the target's argmax, EOS included. Where
    # the row's first EOS is, our target-alone loop says (it bans nothing), so a system that ends early
    # still differs from `generate` there.
    equal = run.equal = {name: True for name in systems} if cfg.temperature == 0 else None
    compared = run.compared = {name: 0 for name in systems}
    eos = eos_ids(target, tokenizer)
    events({"phase": "warm-up"})
    for system in systems.values():  # warm-up: first calls pay for allocation and lazy initialisation
        system.run(*batches[0], cfg.seed)
    events({"phase": "timed calls", "total": total})
    passes = run.passes  # per repeat: the untimed calibration calls (exactspec systems' statistics, plain seconds)
    spec_names = [k for k, s in systems.items() if s.kind == "exactspec"]
    # Plain decoding is priced by our loop's timed call; a bench without it makes an untimed one instead.
    plain_before = None if any(s.kind == "loop" for s in systems.values()) else \
        spec_names[0] if spec_names else None
    for r in range(cfg.repeats):
        totals = {name: [0.0, 0] for name in systems}
        cal = {"stats": {k: [] for k in spec_names}, "plain": 0.0, "plain_prefill": 0.0, "calls": 0}
        for b, (ids, mask) in enumerate(batches):
            cal_seed = cfg.seed - 1 - r * len(batches) - b
            for i, (name, system) in enumerate(systems.items()):  # interleaved: A B C A B C ...
                # Each timed call of ours follows its own untimed calibration call, back to back, so the
                # prediction prices the loop at the machine's speed of that moment: this VM's speed drifts
                # by up to 25% within a bench, and a pass made apart from the timed call missed that.
                if name == plain_before:  # plain decoding's price, once per batch, when no loop call is timed
                    plain_calibration_call(target, ids, mask, cfg, cal_seed, cal)
                if system.kind == "exactspec":
                    cal["stats"][name].append(system.run(ids, mask, cal_seed)[1])
                timings: dict = {}
                t0 = time.perf_counter()
                n, stats, new, *own = system.run(ids, mask, cfg.seed + 1000 * r + b,
                                                 **({"timings": timings} if system.kind == "loop" else {}))
                seconds = own[0] if own else time.perf_counter() - t0
                if system.kind == "loop":  # plain decoding's price: this very call
                    plain_calibration_call(target, ids, mask, cfg, cal_seed, cal, seconds, timings)
                if equal is not None and r == cfg.repeats - 1:
                    if i == 0:  # the first system: transformers' generate, or on another backend our loop
                        reference, cut_from = new, None
                    if name == LOOP:
                        cut_from = new
                    ok, n_cmp = greedy_prefix_equal(new, reference, eos, cut_from)
                    if not ok and name not in run.gaps:  # where it first differs, and by how much p did
                        run.gaps[name] = first_divergence(target, ids, mask, new, reference, prompt=b * cfg.batch_size)
                    equal[name] &= ok
                    compared[name] += n_cmp
                totals[name][0] += seconds if own else time.perf_counter() - t0
                totals[name][1] += n
                if stats is not None:
                    results[name].stats_by_repeat.setdefault(r, []).append(stats)
                done += 1
                run.done = done
                run.at_call = snapshot(r, b, i, totals, cal, results)
                if i == len(systems) - 1:
                    run.at_batch = run.at_call
                if progress:
                    progress(done, total)
                events({"done": done, "total": total, "repeat": r, "batch": b, "system": name, "seconds": seconds,
                        "prompts": list(range(b * cfg.batch_size, min((b + 1) * cfg.batch_size, len(cfg.prompts))))})
        passes.append(cal)
        for name, (t, n) in totals.items():
            results[name].times.append(t)
            results[name].tokens.append(n)
        run.completed = r + 1
    report = finish_report(results, systems, passes, cfg, cost_model, draft, equal, compared)
    for row in report["rows"]:
        row["greedy_first_divergence"] = run.gaps.get(row["system"])
    return report


def eos_ids(target, tokenizer) -> set:
    """Every end-of-sequence id of the pair: the target's generation config's and the tokenizer's."""
    eos = target.generation_config.eos_token_id
    return set([eos] if isinstance(eos, int) else eos or []) | ({tokenizer.eos_token_id} - {None})


def first_divergence(target, ids: torch.Tensor, mask: torch.Tensor, new: torch.Tensor, reference: torch.Tensor,
                     prompt: int = 0) -> dict | None:
    """Where greedy output `new [B, N]` first differs from `reference [B, N]` (the row, the position) and the
    target's logit gap there: its logit of the reference token minus that of the system's token, from one
    forward over the prompt and the reference's tokens before that position (a near-tie is a small gap: a
    batched verification pass rounding otherwise than a one-token call can flip it). `prompt`: the index of
    row 0's prompt in the bench's list."""
    from exactspec.backends.seam import open_session

    if new.shape != reference.shape:
        return None
    diff = (new != reference).nonzero()
    if not diff.numel():
        return None
    b, j = (int(x) for x in diff[0])
    ref_tok, own = int(reference[b, j]), int(new[b, j])
    prefix = torch.cat([ids[b][mask[b].bool()], reference[b, :j]])[None]  # [1, P + j]
    with torch.inference_mode():
        logits = open_session(target, 1, target=True).forward(prefix, torch.ones_like(prefix, dtype=torch.bool),
                                                              logits_to_keep=1)[0, -1].float()
    gap = float(logits[ref_tok] - logits[own]) if 0 <= own < logits.shape[0] else None
    return {"prompt": prompt + b, "position": j, "reference_token": ref_tok, "system_token": own, "logit_gap": gap}


def greedy_prefix_equal(new: torch.Tensor, reference: torch.Tensor, eos: set,
                         cut_from: torch.Tensor | None = None) -> tuple[bool, int]:
    """Whether `new` [B, N] equals `reference` [B, N] in every row up to the row's first EOS in `cut_from`
    [B, N] (default: `new`; exclusive), and how many tokens were compared."""
    if new.shape != reference.shape or (cut_from is not None and cut_from.shape != new.shape):
        return False, 0
    ok, n = True, 0
    cuts = (cut_from if cut_from is not None else new).tolist()
    for a, b, c in zip(new.tolist(), reference.tolist(), cuts):
        cut = next((i for i, t in enumerate(c) if t in eos), len(c))
        ok &= a[:cut] == b[:cut]
        n += cut
    return ok, n
