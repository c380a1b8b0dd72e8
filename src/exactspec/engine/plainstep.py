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
that is (``policy.plain_streak()``). The loop then runs up to :data:`PLAIN_RUN` of them (for at most
:data:`PLAIN_SECONDS`) here in one go, a StreamStep of several tokens, so that the loop's per-step work (the
policy's question, the drafter's bookkeeping, the stream's hand-over) is paid once per streak: with a draft
that never helps, the loop otherwise ran at 0.87-0.88x the target alone on llama.cpp, where a step is a 2 ms
forward. The same tokens come out, drawn in the same order, and every step is counted as before (one target
call each). Not with a feature drafter, which is fed the target's features of each forward and keeps only the
last one's.
"""
from __future__ import annotations

import time

import torch

from exactspec.engine.hfconfig import Prefixes, SamplingSpec
from exactspec.engine.output import StreamStep

__all__ = ["plain_step", "tell_drafter", "PLAIN_RUN", "PLAIN_SECONDS"]

# The most plain steps handed over as one StreamStep, and the longest a streak runs before it hands over what it
# has: a stream still shows text ten times a second. (Each hand-over pauses the target between two decodes:
# on llama.cpp, streaks of 64 ran 1-2% faster than streaks of 8, measured.)
PLAIN_RUN = 64
PLAIN_SECONDS = 0.1


def plain_step(target, spec: SamplingSpec, pending: torch.Tensor, prefixes: Prefixes, eos: torch.Tensor,
               max_new: int, stats, steps: int = 1, first: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, StreamStep]:
    """Feed `pending [B]` to the target session `target`, emit one token per active row into
    `prefixes.out` / `.n_gen`, and count the step in `stats`; `steps` > 1 (a plain streak the policy
    committed to) goes on feeding each new token for up to `steps` steps, ending early when a row finishes
    or after :data:`PLAIN_SECONDS`, and hands them over as one StreamStep. Returns `(tokens [B, m], the
    StreamStep)`: the m <= `steps` tokens of each row, the last one its new pending token (which rows
    finished: the step's `finished`). `first [B, 1, V]`: the first step's logits, already computed with `pending` in the cache (the
    prefill's, when it decided the first step plain: ``steps.prefill(decide=...)``).

    Between two forwards of a streak only the law and the draw run (and an EOS test when there are EOS
    ids): the output, the counts and the statistics are written once, after it. Not just to save the ops:
    llama.cpp's worker threads poll for the next decode a short while and then sleep, so a longer pause
    between decodes costs more than itself (a 300 us pause per token cost 380 us, measured)."""
    deadline = time.perf_counter() + PLAIN_SECONDS
    b = pending.shape[0]
    device = pending.device
    ones, no_drafts, no_lengths = (torch.ones(b, 1, dtype=torch.bool, device=device),
                                   pending.new_zeros(b, 0), pending.new_zeros(b))
    active, n_gen = prefixes.active, prefixes.n_gen
    cols = n_gen[active]  # [B] tokens each row has
    # No row reaches max_new inside the streak, only at its last step: lengths are checked once, after it.
    steps = max(1, min(steps, max_new - int(cols.max())))
    by_prefix, has_eos = not spec.static_only, bool(eos.numel())
    made = []
    for i in range(steps):
        logits = first if i == 0 and first is not None else target.forward(pending[:, None], ones)  # [B, 1, V]
        # p at the one position, through transformers' processors with the row's prefix (no drafts)
        law = spec.target_law(logits, no_drafts, no_lengths, prefixes)[:, 0]
        pending = law.argmax(-1) if spec.greedy else spec.sample(law)  # [B]
        made.append(pending)
        if by_prefix:  # the next position's processors read the tokens so far (from_draft stays False)
            prefixes.out[active, cols + i] = pending
            n_gen[active] = cols + i + 1
        if i + 1 < steps and (has_eos and bool(torch.isin(pending, eos).any())  # a finished row leaves
                              or time.perf_counter() >= deadline):  # the batch: the loop's job
            break
    tokens = torch.stack(made, 1)  # [B, m]
    m = tokens.shape[1]
    prefixes.out[active[:, None], cols[:, None] + torch.arange(m, device=device)] = tokens
    n_gen[active] = cols + m
    done = cols + m >= max_new
    if has_eos:
        done |= torch.isin(pending, eos)
    rows = active.tolist()
    for _ in range(m):
        stats.record_plain(b, rows)
    step = StreamStep(rows=rows, tokens=tokens.tolist(), from_draft=[[False] * m for _ in rows],
                      finished=done.tolist(), gamma=0, drafted=[0] * b)
    return tokens, step


def tell_drafter(drafter, accepted: torch.Tensor, made: torch.Tensor, draft) -> None:
    """A plain streak emitted `made [B, m]`: each token is its own step for the drafter (``update`` with
    nothing accepted), told at once where the drafter takes a block (``update_plain``) and `draft` called no
    model (a draft call whose tokens the policy then dropped fed the pending tokens: ``update`` rolls back)."""
    if not draft.calls and _takes_blocks(drafter):
        drafter.update_plain(made)
        return
    for j in range(made.shape[1]):
        drafter.update(accepted, made[:, j], draft)


def _takes_blocks(drafter) -> bool:
    """The class that defines the drafter's ``update`` defines ``update_plain`` too: a subclass that overrides
    ``update`` alone (a feature draft pairs each token with its forward's features) is told token by token."""
    for klass in type(drafter).__mro__:
        if "update" in vars(klass):
            return callable(vars(klass).get("update_plain"))
    return False
