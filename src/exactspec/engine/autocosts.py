"""What ``gamma="auto"`` prices its decisions with, and how a generator re-prices them between runs.

A :class:`~exactspec.engine.decoding.SpeculativeGenerator` asks :func:`base_cost` for the cost model a run starts
from and hands each finished ``gamma="auto"`` run to :func:`learn_costs`; the policy
(:mod:`exactspec.engine.policy`) only reads the result, fixed for the run, so that no run's decisions hang on
timings taken inside it and a seeded run reproduces.
"""
from __future__ import annotations

import weakref

from exactspec.engine.drafters import DraftModelDrafter
from exactspec.speed.costmodel import CostModel
from exactspec.speed.stats import GenerationStats

__all__ = ["base_cost", "learn_costs"]

# Bare cost models measured once per (target, draft, batch size) in the process; weak refs so models can be freed.
_COST_MODELS: dict[tuple[int, int, int], tuple] = {}
_POOL_STEPS = 16  # speculative steps a re-pricing pools at least: the current drafting run ...
_POOL_RUNS = 8  # ... and at most this many drafting runs before it


def base_cost(gen, batch_size: int, sampled: bool | None = None, fresh=None) -> CostModel:
    """The generator's given cost model, else the stored profile (:mod:`exactspec.speed.profiles`) at this
    batch size, priced as the engine's loop runs in its sampling mode (`sampled`;
    :mod:`exactspec.engine.loopcosts`, measured with the generator `fresh()` returns) when a plain draft model
    drafts; else (trees, prompt lookup, a feature draft) one of the bare forwards: a seeded run's stored, an
    unseeded run's measured once per pair and batch size in the process, so that fresh generators on the same
    models price alike.

    Unseeded runs take the loop-priced profile too: the bare T_target(1) (a forward after 200 cached tokens)
    priced a plain step above what the loop's plain steps took, and with no plain step measured yet
    gamma="auto" drafted at a loss (llama.cpp, T = 1, unseen7: 0.70x our loop, 2026-12-04); what each run
    measures re-prices it from then on (:func:`learn_costs`)."""
    if gen.cost_model is not None:
        return gen.cost_model
    draft = gen.draft if gen.draft is not None else gen.target
    if gen.draft is not None and sampled is not None and type(gen.drafter) is DraftModelDrafter and fresh:
        from exactspec.engine.loopcosts import loop_priced
        from exactspec.speed.profiles import stored_cost_model

        return stored_cost_model(gen.target, draft, batch_size, loop="sampled" if sampled else "greedy",
                                 measure=lambda: loop_priced(fresh(), batch_size, sampled=bool(sampled)))
    if gen._stored_costs:  # a seeded run: the profile on disk, the same in every process
        from exactspec.speed.profiles import stored_cost_model

        cm = stored_cost_model(gen.target, draft, batch_size)
        return cm.without_draft() if gen.draft is None else cm
    key = (id(gen.target), id(draft), batch_size)
    hit = _COST_MODELS.get(key)
    if hit is not None and hit[0]() is gen.target and hit[1]() is draft:
        return hit[2]
    cm = CostModel.measure(gen.target, draft, batch_size=batch_size)
    if gen.draft is None:  # model-free drafter: drafting costs (almost) nothing next to the target
        cm = cm.without_draft()
    _COST_MODELS[key] = (weakref.ref(gen.target), weakref.ref(draft), cm)
    return cm


def learn_costs(gen, stats: GenerationStats, batch_size: int, sampled: bool) -> None:
    """After a gamma="auto" run of `gen`: price its later runs at this batch size as this loop ran (a draft step
    with caches the target just evicted, the per-step overhead of a speculative and of a plain step). Only
    between runs. A model-free drafter (prompt lookup) is re-priced too: the bare table alone put a width-2
    step at the price of a plain one and it drafted at a loss (T = 1). A run that verified no draft keeps what
    the model it ran with knew of drafting steps.

    A run that drafted is priced pooled with the drafting runs before it in the same sampling mode, back to
    _POOL_STEPS speculative steps (the run and at most _POOL_RUNS earlier ones): a run that drafted once or
    twice (a probe) priced a speculative step's overhead from those alone, which swung between 0.9 and 2.3 ms
    from run to run on llama.cpp, and a cheap swing made the next run draft at a loss (T = 1, unseen5: 23
    drafting steps of 27, 2026-12-04). The re-priced model itself is kept per batch size, as before: a
    generator that alternates greedy and sampled runs prices each with what the last one measured."""
    if not (gen.calibrate and stats.target_calls):
        return
    drafted = stats.target_calls > stats.plain_steps
    pool = [stats]
    if drafted:  # (runs that did not draft say nothing of drafting)
        runs = gen._recent.setdefault((batch_size, sampled), [])
        spec = stats.target_calls - stats.plain_steps
        for run in reversed(runs):
            if spec >= _POOL_STEPS:
                break
            pool.append(run)
            spec += run.target_calls - run.plain_steps
        runs.append(stats)
        del runs[:-_POOL_RUNS]
    base = gen._base_cost(batch_size, sampled) if drafted else gen._cost_model(batch_size, sampled)
    # (what earlier runs measured of a plain step stays known when these made too few to price; before any
    # did, a plain step is priced as the base model prices it, the bare forward alone when unknown)
    plain = base.measured_plain_overhead
    gen._calibrated[batch_size] = base.calibrate(pool if len(pool) > 1 else stats).keeping_plain_price(
        gen._calibrated.get(batch_size), default=0.0 if plain is None else plain)
