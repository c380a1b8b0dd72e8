"""The one prediction path: the speedup a run's measured acceptance predicts under a cost model.

Used by `exactspec bench`, `exactspec demo` and planning alike, so every figure labelled "predicted" is
computed the same way: the run's per-position acceptance and the lengths it drafted, priced by
:func:`exactspec.speed.speedup.mixed_length_speedup` per step, or end to end by
:func:`exactspec.speed.speedup.end_to_end_speedup` (prefills included, a batch priced by its slowest row).
Batched runs are priced from their counts (:func:`predict_batch`): a batch waits for its slowest row, its
rows are not alike, and each step is as wide as its longest row.
"""
from __future__ import annotations

from exactspec.speed.speedup import end_to_end_speedup, mixed_length_speedup

__all__ = ["predict", "predict_batch", "predict_tree"]


def predict(stats, cost, *, n_tokens: int | None = None, prefill_plain: float = 0.0, prefill_spec: float = 0.0,
            batch_size: int = 1) -> float | None:
    """The speedup a run's measured acceptance predicts (`stats`: a GenerationStats): its per-position
    acceptance per drafted length (:meth:`GenerationStats.alphas_by_length`) and the lengths it drafted,
    priced by `cost`. Per step (:func:`mixed_length_speedup`), or end
    to end when ``n_tokens`` is given (:func:`end_to_end_speedup`, prefills and the batch's slowest row
    included). None when the run drafted nothing."""
    alphas = [acc / d for acc, d in zip(stats.position_accepted, stats.position_drafted) if d]
    if not alphas or not sum(stats.length_counts):
        return None
    by_length = len(stats.length_accepted) == len(stats.length_counts)  # (older stats: one pooled curve)
    if by_length:
        alphas = stats.alphas_by_length()
    if n_tokens is None:
        return float(mixed_length_speedup(alphas, stats.length_counts, cost, by_length=by_length))
    return float(end_to_end_speedup(alphas, stats.length_counts, cost, n_tokens, prefill_plain=prefill_plain,
                                    prefill_spec=prefill_spec, batch_size=batch_size, by_length=by_length))


def predict_tree(stats, cost, prefill: dict | None = None, name: str | None = None) -> float | None:
    """A tree run (or any run) priced by `cost` from its counts: its tokens per step (the acceptance it
    met) over a step of its mean draft calls and its calls' verified widths (t_draft per call, the cold
    extra per drafting step, T_target at each call's width, overhead). End to end with `prefill`
    ({"plain": s, name: s per call, "n_tokens": per row}). None for a run without steps. A tree's
    acceptance has no per-position curve to replay, so the run's own tokens per step stand in for it."""
    if not stats.target_calls or not stats.row_steps:
        return None
    e = stats.mean_tokens_per_step
    step = _loop_seconds(stats, cost) / stats.target_calls
    t1 = cost.t_target(1)
    if prefill is None:
        return e * t1 / step
    n = prefill["n_tokens"]
    return (prefill["plain"] + (n - 1) * t1) / (prefill[name] + n / e * step)


def predict_batch(runs, cost, *, n_tokens: int, prefill_plain: float = 0.0, prefill_spec: float = 0.0) -> float | None:
    """The speedup batched runs predict end to end (`runs`: one GenerationStats per prompt batch), against
    plain decoding of `n_tokens` per row (``prefill_plain + (n_tokens - 1) * T_target(1)`` per batch, as
    :func:`exactspec.speed.speedup.end_to_end_speedup`).

    A batch's steps are priced as the engine ran them, from the run's counts: it waited for its slowest row
    (``target_calls``: the steps until the last row was done), each call as wide as its longest live row
    (``width_counts``, T_target at each width), its draft calls (``draft_calls`` t_draft, and the cold extra
    of each step that called the draft), the per-step overhead. A replay that drew each batch's recorded
    steps at random (kept until r15) gave each row's step count the variance of independent draws, which
    the run's own rows did not have (a greedy row's steps are what its text makes them): the slowest of four
    such rows came 3-7% later than the slowest real row, and predicted gamma="auto" at batch 4 7-16% slow
    (r15). The simulation of :func:`exactspec.speed.speedup.batch_steps` stays for planning, where there is no run
    to count. None when no run drafted."""
    plain = spec = 0.0
    t1 = cost.t_target(1)
    for stats in runs:
        if not stats.target_calls:
            continue
        plain += prefill_plain + (n_tokens - 1) * t1
        spec += prefill_spec + _loop_seconds(stats, cost)
    return plain / spec if spec > 0 and any(any(s.position_drafted) for s in runs) else None


def _loop_seconds(stats, cost) -> float:
    """A run's decoding loop priced by `cost` from its counts: t_draft per draft call, the cold extra per
    step that called the draft, T_target at each call's width (``width_counts``) and the overhead per call
    (a plain step's, ``t_overhead_plain``, for the run's plain steps; per drafted length when the model has
    ``t_overhead_by_gamma``: CostModel.loop_overhead)."""
    return stats.draft_calls * cost.t_draft + stats.draft_steps * cost.t_draft_cold + \
        stats.target_calls * cost.mean_target_time(stats) + cost.loop_overhead(stats)
