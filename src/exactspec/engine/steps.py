"""What every step shares, chain or tree: the prefill that leaves the prompt's last token pending, cutting a
step's tokens at EOS, and writing them into the output."""
from __future__ import annotations

import torch

from exactspec.backends.cache import sync as _sync
from exactspec.backends.seam import open_session, vocab_size
from exactspec.engine.drafters import DraftModelDrafter
from exactspec.engine.promptprior import prompt_evidence, prompt_positions

__all__ = ["cut_at_eos", "write_emitted", "prefill"]


def cut_at_eos(emitted: torch.Tensor, count: torch.Tensor, eos: torch.Tensor):
    """`emitted [B, W]` tokens of a step, `count [B]` of them emitted per row: cut each row after its first
    EOS. Returns `(count [B], ended [B] bool)`."""
    pos = torch.arange(emitted.shape[1], device=emitted.device)[None, :]
    hit = torch.isin(emitted, eos) & (pos < count[:, None])
    ended = hit.any(1)
    return torch.where(ended, hit.long().argmax(1) + 1, count), ended


def write_emitted(out, from_draft, n_gen, active, emitted, n, count) -> None:
    """Append each active row's first `count[b]` tokens of `emitted [B, W]` to `out [B0, max_new]` after
    its `n_gen[b]` tokens; the first `n[b]` of them were draft tokens (`from_draft`)."""
    pos = torch.arange(emitted.shape[1], device=emitted.device)[None, :]
    write = pos < count[:, None]  # [B, W]
    rows = active[:, None].expand_as(write)[write]
    cols = (n_gen[active][:, None] + pos).expand_as(write)[write]
    out[rows, cols] = emitted[write]
    from_draft[rows, cols] = (pos < n[:, None]).expand_as(write)[write]
    n_gen[active] += count


def prefill(model, drafter, ids: torch.Tensor, mask: torch.Tensor, lazy: bool = False, policy=None, spec=None,
            plain_first: bool = False):
    """Both caches take the prompt `[B, P]` minus its last token, which stays pending (the first
    verification feeds it, so every target call produces >= 1 token). Returns `(session, pending [B], first)`:
    the target's session of :mod:`exactspec.backends.seam` (a SlotCache on transformers' ops for a torch
    model); `first` is None unless `plain_first` (below).
    `lazy`: a draft model's prompt waits for its first proposal (``DraftModelDrafter.start(lazy=True)``),
    unless `policy` asks for the prompt's evidence (``policy.wants_prompt_prior``, a fresh ``gamma="auto"``):
    then both prefills keep their last slots' logits and the policy starts from what they say of the draft
    (:mod:`exactspec.engine.promptprior`; `spec`: the run's SamplingSpec).

    `plain_first`: the policy's first step is plain, so the target takes the whole prompt now and the
    logits of its last slot are that step's (one forward fewer than feeding the pending token alone: a
    whole llama.cpp decode of one token, ~1.5% of a 64-token run): `first [B, 1, V]` are those logits, and
    the pending token is already in the target's cache (still pending for the draft)."""
    target = open_session(model, ids.shape[0], target=True)
    if getattr(drafter, "wants_target_features", False):  # a feature draft reads the target's hidden states
        drafter.watch(target)
    plain_drafter = isinstance(drafter, DraftModelDrafter) and type(drafter).start is DraftModelDrafter.start
    m = 0
    if plain_drafter and getattr(policy, "wants_prompt_prior", False) and spec.static_only:
        m = prompt_positions(ids.shape[0], ids.shape[1], vocab_size(model))
    first = None
    if plain_first:  # (never with the prompt's evidence: a policy that wants it has not decided yet)
        first = target.forward(ids, mask.bool(), logits_to_keep=1)  # [B, 1, V]
    elif ids.shape[1] > 1:
        p_logits = target.forward(ids[:, :-1], mask[:, :-1].bool(), logits_to_keep=max(m, 1))  # [B, m or 1, V]
    if plain_drafter:
        drafter.start(ids, mask, lazy=True)
        q_logits = drafter.prompt_logits(m) if m else None  # [B, m, V_draft]
        if q_logits is not None:
            p_len, real = ids.shape[1], mask.bool()
            valid = real[:, p_len - 1 - m: p_len - 1] & real[:, p_len - m:]  # [B, m]: slot and its next token
            policy.seed_from_prompt(*prompt_evidence(p_logits, q_logits, valid, spec))
        elif not lazy:
            drafter.feed_prompt()
    else:
        drafter.start(ids, mask)
    _sync(ids.device)
    return target, ids[:, -1], first
