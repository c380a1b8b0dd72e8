"""The plain step: the target alone decodes one token per active row, no draft to verify.

``gamma="auto"`` takes plain steps whenever no draft length pays, so with a draft that cannot help nearly
every step is one, and the loop must then run about as fast as target-alone decoding. The speculative
path's emit-and-count machinery (a scatter of accepted drafts and bonus tokens, the EOS cut over a
[B, K+1] block, per-position statistics, from_draft writes) costs tens of tiny tensor ops per step, which
on a CPU is a measurable share of a small target's forward. A plain step needs none of it: one token per
row, never a draft token, so this path writes that token and counts the step directly.

It draws the token exactly as the speculative path's plain branch did (the same law, argmax or
``spec.sample`` from the same generator), so a seeded run emits the same tokens either way.

A plain *streak*: once ``gamma="auto"`` has decided that no length pays, nothing changes its mind until the
next probe (plain steps verify nothing, so its acceptance model stays as it is), and it says how many steps
that is (``policy.plain_streak()``). The loop then runs up to :data:`PLAIN_RUN` of them here in one go, a
StreamStep of several tokens, so that the loop's per-step work (the policy's question, the drafter's
bookkeeping, the stream's hand-over) is paid once per streak: with a draft that never helps, the loop
otherwise ran at 0.87-0.88x the target alone on llama.cpp, where a step is a 2 ms forward. The same tokens
come out, drawn in the same order, and every step is counted as before (one target call each). Not with a
feature drafter, which is fed the target's features of each forward and keeps only the last one's.
"""
from __future__ import annotations

import torch

from exactspec.engine.hfconfig import Prefixes, SamplingSpec
from exactspec.engine.output import StreamStep

__all__ = ["plain_step", "PLAIN_RUN"]

# The most plain steps handed over as one StreamStep: a stream still shows text every few tokens.
PLAIN_RUN = 8


def plain_step(target, spec: SamplingSpec, pending: torch.Tensor, prefixes: Prefixes, eos: torch.Tensor,
               max_new: int, stats, steps: int = 1) -> tuple[torch.Tensor, torch.Tensor, StreamStep]:
    """Feed `pending [B]` to the target session `target`, emit one token per active row into
    `prefixes.out` / `.n_gen`, and count the step in `stats`; `steps` > 1 (a plain streak the policy
    committed to) goes on feeding each new token for up to `steps` steps, ending early when a row finishes,
    and hands them over as one StreamStep. Returns `(tokens [B, m], done [B] bool, the StreamStep)`: the
    m <= `steps` tokens of each row, the last one its new pending token."""
    b = pending.shape[0]
    device = pending.device
    ones, no_drafts, no_lengths = (torch.ones(b, 1, dtype=torch.bool, device=device),
                                   pending.new_zeros(b, 0), pending.new_zeros(b))
    active, n_gen = prefixes.active, prefixes.n_gen
    rows = active.tolist()
    made = []
    for i in range(steps):
        logits = target.forward(pending[:, None], ones)  # [B, 1, V]
        # p at the one position, through transformers' processors with the row's prefix (no drafts)
        law = spec.target_law(logits, no_drafts, no_lengths, prefixes)[:, 0]
        nxt = law.argmax(-1) if spec.greedy else spec.sample(law)  # [B]
        cols = n_gen[active]
        prefixes.out[active, cols] = nxt  # (from_draft stays False: the target's own token)
        n_gen[active] = cols + 1
        done = cols + 1 >= max_new
        if eos.numel():
            done |= torch.isin(nxt, eos)
        stats.record_plain(b, rows)
        made.append(nxt)
        pending = nxt
        if i + 1 < steps and bool(done.any()):  # a finished row leaves the batch: the loop's job
            break
    tokens = torch.stack(made, 1)  # [B, m]
    m, finished = len(made), done.tolist()
    step = StreamStep(rows=rows, tokens=tokens.tolist(), from_draft=[[False] * m for _ in rows],
                      finished=finished, gamma=0, drafted=[0] * b)
    return tokens, done, step
