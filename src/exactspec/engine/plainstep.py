"""The plain step: the target alone decodes one token per active row, no draft to verify.

``gamma="auto"`` takes plain steps whenever no draft length pays, so with a draft that cannot help nearly
every step is one, and the loop must then run about as fast as target-alone decoding. The speculative
path's emit-and-count machinery (a scatter of accepted drafts and bonus tokens, the EOS cut over a
[B, K+1] block, per-position statistics, from_draft writes) costs tens of tiny tensor ops per step, which
on a CPU is a measurable share of a small target's forward. A plain step needs none of it: one token per
row, never a draft token, so this path writes that token and counts the step directly.

It draws the token exactly as the speculative path's plain branch did (the same law, argmax or
``spec.sample`` from the same generator), so a seeded run emits the same tokens either way.
"""
from __future__ import annotations

import torch

from exactspec.engine.hfconfig import Prefixes, SamplingSpec
from exactspec.engine.output import StreamStep

__all__ = ["plain_step"]


def plain_step(target, spec: SamplingSpec, pending: torch.Tensor, prefixes: Prefixes, eos: torch.Tensor,
               max_new: int, stats) -> tuple[torch.Tensor, torch.Tensor, StreamStep]:
    """Feed `pending [B]` to the target cache `target` (a SlotCache), emit one token per active row into
    `prefixes.out` / `.n_gen`, and count the step in `stats`. Returns `(next_token [B], done [B] bool,
    the StreamStep)`; the token is the row's new pending one."""
    b = pending.shape[0]
    logits = target.forward(pending[:, None], torch.ones(b, 1, dtype=torch.bool, device=pending.device))  # [B, 1, V]
    # p at the one position, through transformers' processors with the row's prefix (no drafts)
    law = spec.target_law(logits, pending.new_zeros(b, 0), pending.new_zeros(b), prefixes)[:, 0]
    nxt = law.argmax(-1) if spec.greedy else spec.sample(law)  # [B]
    active, n_gen = prefixes.active, prefixes.n_gen
    cols = n_gen[active]
    prefixes.out[active, cols] = nxt  # (from_draft stays False: the target's own token)
    n_gen[active] = cols + 1
    done = cols + 1 >= max_new
    if eos.numel():
        done |= torch.isin(nxt, eos)
    rows = active.tolist()
    stats.record_plain(b, rows)
    tokens, finished = nxt.tolist(), done.tolist()
    step = StreamStep(rows=rows, tokens=[[t] for t in tokens], from_draft=[[False] for _ in tokens],
                      finished=finished, gamma=0, drafted=[0] * b)
    return nxt, done, step
