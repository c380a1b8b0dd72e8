"""The one prediction path: the speedup a run's measured acceptance predicts under a cost model.

Used by `exactspec bench`, `exactspec demo` and planning alike, so every figure labelled "predicted" is
computed the same way: the run's per-position acceptance and the lengths it drafted, priced by
:func:`exactspec.speedup.mixed_length_speedup` per step, or end to end by
:func:`exactspec.speedup.end_to_end_speedup` (prefills included, a batch priced by its slowest row).
Batched runs with per-row counts are predicted row by row (:func:`predict_batch`): a batch's rows are
not alike, and each step is as wide as its longest row.
"""
from __future__ import annotations

import numpy as np

from exactspec.speedup import end_to_end_speedup, mixed_length_speedup

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
    calls = stats.draft_calls / stats.target_calls
    step = calls * cost.t_draft + cost.t_draft_cold * stats.draft_steps / stats.target_calls + \
        cost.mean_target_time(stats) + cost.t_overhead
    t1 = cost.t_target(1)
    if prefill is None:
        return e * t1 / step
    n = prefill["n_tokens"]
    return (prefill["plain"] + (n - 1) * t1) / (prefill[name] + n / e * step)


def predict_batch(runs, cost, *, n_tokens: int, prefill_plain: float = 0.0, prefill_spec: float = 0.0,
                  sims: int = 500, seed: int = 0) -> float | None:
    """The speedup batched runs predict end to end (`runs`: one GenerationStats per prompt batch, with
    per-row counts), against plain decoding of `n_tokens` per row (``prefill_plain + (n_tokens - 1) *
    T_target(1)`` per batch, as :func:`exactspec.speedup.end_to_end_speedup`).

    Each batch is replayed from its own steps (``step_rows``: every row's drafted k and accepted a, per
    step): a simulated step draws one recorded step, whole, so the rows keep what they had in common (a
    model draft's rows share the step's length) and what set them apart (prompt lookup finds repeats in one
    row and none in another); a row that had left by then draws one of its own row-steps instead. Each
    live row emits a + 1 tokens, until it has the tokens it emitted (``row_tokens``; EOS ends rows early),
    its draft capped at the tokens it has left minus one, as the engine caps it; the row-steps the run's
    own caps or an EOS cut short are left out of the draws (drawn in mid-run, they emitted too little and
    the prediction came out 4-10% slow at batch 4, r14).
    The step is priced as the engine runs it, every row at the longest live row's width: k draft calls
    (scaled by the run's draft calls per drafted position, which counts the calls whose position the
    policy then declined) and the cold extra, T_target(k + 1), the overhead; k = 0 is a plain step. The
    prediction is the mean batch time over `sims` seeded simulations. Replaying the pooled rates as if
    every row were alike, and pricing each row-step at its own length
    (:func:`exactspec.speedup.batch_steps`), predicted prompt lookup 11-19% too fast at batch 4 (r13);
    drawing each row's k on its own made gamma="auto"'s steps as wide as the longest of four independent
    draws and predicted it 14% too slow (r14). None when no run has per-row counts or no run drafted."""
    rng = np.random.default_rng(seed)
    plain = spec = 0.0
    t1 = cost.t_target(1)
    for stats in runs:
        if not stats.step_rows or not any(n > 0 for n in stats.row_tokens):
            continue
        positions = stats.target_positions - stats.target_calls  # positions drafted, summed over calls
        ratio = stats.draft_calls / positions if positions and stats.draft_calls else 1.0
        plain += prefill_plain + (n_tokens - 1) * t1
        spec += prefill_spec + _batch_time(stats.step_rows, stats.row_tokens, cost, ratio, sims, rng)
    return plain / spec if spec > 0 and any(any(s.position_drafted) for s in runs) else None


def _batch_time(steps, tokens, cost, calls_per_position: float, sims: int, rng) -> float:
    """Mean seconds of a batch replayed from its recorded `steps` (lists of [row, k, a]) until every row r
    has emitted `tokens[r]`."""
    n_rows = len(tokens)
    k_of, a_of = np.full((len(steps), n_rows), -1), np.zeros((len(steps), n_rows))  # [S, R]; -1: row absent
    own: list[list[tuple[int, int]]] = [[] for _ in range(n_rows)]
    emitted, total_of = [0] * n_rows, [0] * n_rows
    for rows in steps:
        for r, _, a in rows:
            total_of[r] += a + 1  # what the row's recorded steps emitted (its tokens, up to an EOS cut)
    for s, rows in enumerate(steps):
        for r, k, a in rows:
            # A row's last steps were cut short (drafts capped at the tokens left, or an EOS): drawn in
            # mid-run they would emit too little. The replay caps its own last steps, so they stand out.
            if emitted[r] + k + 1 < total_of[r]:
                k_of[s, r], a_of[s, r] = k, a
                own[r].append((k, a))
            emitted[r] += a + 1
    for r, rows in enumerate(own):  # (a row that ran a single step keeps it)
        if not rows:
            own[r] = [(k, a) for st in steps for rr, k, a in st if rr == r] or [(0, 0)]
    need = np.asarray(tokens, float)  # [R]
    kmax = max(k for rows in own for k, _ in rows)  # (own holds every length the draws can give)
    # CostModel.step_time, with the calls a drafted position took
    price = np.array([cost.step_time(k) + (calls_per_position - 1.0) * k * cost.t_draft for k in range(kmax + 1)])
    done, total = np.zeros((sims, n_rows)), np.zeros(sims)
    while (live := done < need).any():
        pick = rng.integers(len(steps), size=sims)  # [sims] one recorded step each
        k, a = k_of[pick], a_of[pick]  # [sims, R]
        for r in range(n_rows):  # a row absent from the drawn step: one of its own row-steps
            gap = k[:, r] < 0
            if gap.any():
                mine = np.asarray(own[r])[rng.integers(len(own[r]), size=int(gap.sum()))]
                k[gap, r], a[gap, r] = mine[:, 0], mine[:, 1]
        left = need - done  # [sims, R] as the engine caps a row's draft: at the tokens it has left - 1
        k = np.minimum(np.maximum(k, 0), np.maximum(left - 1, 0)).astype(int)
        a = np.minimum(a, k)
        wide = (k * live).max(1)  # [sims] the longest live row's draft
        total += live.any(1) * price[wide]
        done += live * (a + 1)
    return float(total.mean())
