"""What every step shares, chain or tree: the prefill that leaves the prompt's last token pending, and a
step's tokens cut at EOS and written into the output."""
from __future__ import annotations

import torch

from exactspec.backends.cache import sync as _sync
from exactspec.backends.seam import open_session
from exactspec.engine.drafters import DraftModelDrafter

__all__ = ["emit", "emitted_counts", "prefill"]


def emit(out, from_draft, n_gen, active, rows: list[int], proposed: list[list[int]], n: list[int],
         eos: frozenset, max_new: int) -> tuple[list[list[int]], list[list[bool]], list[int], list[bool]]:
    """Append each active row's tokens of a step to `out [B0, max_new]` after its `n_gen[b]` tokens.

    `rows`: the active rows' ids in the run's batch; `proposed[b]`: what row b may emit (its first `n[b]` are
    draft tokens, then the target's own; already cut to the tokens it has left); each is cut after its first
    EOS id (`eos`). Writes `out`, `from_draft` and `n_gen` in one indexed write each, and returns `(tokens,
    from_draft, counts, done)` per row as lists (a row is done at an EOS or at `max_new` tokens).

    In Python lists, not a [B, W] tensor pipeline: a step has a handful of rows and tokens, and on a small
    target each tensor op right after a forward costs several times what it costs alone (on llama.cpp some
    30 of them took ~15% of a greedy chain step, measured), while the stream's lists needed the host copy anyway."""
    device = out.device
    gen = n_gen[active].tolist()
    tokens, flags, counts, done = [], [], [], []
    r_idx, c_idx = [], []
    for row, toks, nb, g in zip(rows, proposed, n, gen):
        c, ended = len(toks), False
        if eos:
            for i, t in enumerate(toks):
                if t in eos:
                    c, ended = i + 1, True
                    break
        tokens.append(toks[:c])
        flags.append([i < nb for i in range(c)])
        counts.append(c)
        done.append(ended or g + c >= max_new)
        r_idx += [row] * c
        c_idx += range(g, g + c)
    idx = (torch.tensor(r_idx, device=device), torch.tensor(c_idx, device=device))
    out[idx] = torch.tensor([t for r in tokens for t in r], dtype=out.dtype, device=device)
    from_draft[idx] = torch.tensor([f for r in flags for f in r], dtype=torch.bool, device=device)
    n_gen[active] = torch.tensor([g + c for g, c in zip(gen, counts)], dtype=n_gen.dtype, device=device)
    return tokens, flags, counts, done


def emitted_counts(counts: list[int], n: list[int], drafted: list[int]) -> tuple[list[int], list[int]]:
    """What a step's statistics count per row (``GenerationStats.record_step``): `(drafted, accepted)`. Row b
    emitted `counts[b]` tokens of its `n[b]` accepted drafts and the target's own; when an EOS among the accepted
    drafts ended it (counts <= n), the drafts after it were neither emitted nor, for the statistics, proposed:
    it drafted and accepted `counts[b]`. Otherwise it drafted `drafted[b]` and accepted `n[b]`."""
    return ([c if c <= a else d for c, a, d in zip(counts, n, drafted)],
            [min(c, a) for c, a in zip(counts, n)])


def prefill(model, drafter, ids: torch.Tensor, mask: torch.Tensor, lazy: bool = False, decide=None):
    """Both caches take the prompt `[B, P]` minus its last token, which stays pending (the first
    verification feeds it, so every target call produces >= 1 token). Returns `(session, pending [B], first,
    caps)`: the target's session of :mod:`exactspec.backends.seam` (a SlotCache on transformers' ops for a torch
    model); `first` and `caps` are None unless `decide` (below).
    `lazy`: a draft model's prompt waits for its first proposal (``DraftModelDrafter.start(lazy=True)``).

    `decide`: a callable returning the first step's caps `[B]` (the policy's ``next_lengths``), asked once,
    before anything is read. When they are all 0 the first step is plain, and the target takes the whole prompt:
    the logits of its last slot are that step's, `first [B, 1, V]` (one forward fewer than feeding the pending
    token alone: a whole llama.cpp decode of one token, ~1.5% of a 64-token run), and the pending token is
    already in the target's cache (still pending for the draft)."""
    target = open_session(model, ids.shape[0], target=True)
    if getattr(drafter, "wants_target_features", False):  # a feature draft reads the target's hidden states
        drafter.watch(target)
    caps = decide() if decide is not None else None  # [B]
    first = None
    if caps is not None and not bool(caps.any()):  # a plain first step: the whole prompt; its last slot, its law
        first = target.forward(ids, mask.bool(), logits_to_keep=1)  # [B, 1, V]
    elif ids.shape[1] > 1:
        target.forward(ids[:, :-1], mask[:, :-1].bool(), logits_to_keep=1)
    if isinstance(drafter, DraftModelDrafter) and type(drafter).start is DraftModelDrafter.start:
        drafter.start(ids, mask, lazy=lazy)
    else:
        drafter.start(ids, mask)
    _sync(ids.device)
    return target, ids[:, -1], first, caps
