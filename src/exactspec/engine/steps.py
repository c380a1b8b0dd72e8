"""What every step shares, chain or tree: the prefill that leaves the prompt's last token pending, and a
step's tokens cut at EOS and written into the output."""
from __future__ import annotations

import torch

from exactspec.backends.cache import sync as _sync
from exactspec.backends.seam import open_session, vocab_size
from exactspec.engine.drafters import DraftModelDrafter
from exactspec.engine.promptprior import prompt_evidence, prompt_positions

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


def prefill(model, drafter, ids: torch.Tensor, mask: torch.Tensor, lazy: bool = False, policy=None, spec=None,
            decide=None):
    """Both caches take the prompt `[B, P]` minus its last token, which stays pending (the first
    verification feeds it, so every target call produces >= 1 token). Returns `(session, pending [B], first,
    caps)`: the target's session of :mod:`exactspec.backends.seam` (a SlotCache on transformers' ops for a torch
    model); `first` and `caps` are None unless `decide` (below).
    `lazy`: a draft model's prompt waits for its first proposal (``DraftModelDrafter.start(lazy=True)``),
    unless `policy` asks for the prompt's evidence (``policy.wants_prompt_prior``, a fresh ``gamma="auto"``) and
    what it could say might make the first step draft (``policy.prompt_could_draft``; else ``skip_prompt``):
    then both prefills keep their last slots' logits and the policy starts from what they say of the draft
    (:mod:`exactspec.engine.promptprior`; `spec`: the run's SamplingSpec).

    `decide`: a callable returning the first step's caps `[B]` (the policy's ``next_lengths``), asked once,
    after the prompt's evidence when there is some. When they are all 0 the first step is plain, and the target
    takes the whole prompt: the logits of its last slot are that step's, `first [B, 1, V]` (one forward fewer
    than feeding the pending token alone: a whole llama.cpp decode of one token, ~1.5% of a 64-token run), and
    the pending token is already in the target's cache (still pending for the draft). With the evidence, the
    target takes the whole prompt before the decision, betting on a plain step, and gives the last slot back
    (the session's ``keep``) if the policy drafts: its evidence slots are the same either way."""
    target = open_session(model, ids.shape[0], target=True)
    if getattr(drafter, "wants_target_features", False):  # a feature draft reads the target's hidden states
        drafter.watch(target)
    plain_drafter = isinstance(drafter, DraftModelDrafter) and type(drafter).start is DraftModelDrafter.start
    m = 0
    if plain_drafter and getattr(policy, "wants_prompt_prior", False) and spec.static_only:
        m, p_len, real = prompt_positions(ids.shape[0], ids.shape[1], vocab_size(model)), ids.shape[1], mask.bool()
        valid = real[:, p_len - 1 - m: p_len - 1] & real[:, p_len - m:]  # [B, m]: slot and its next token
        n = int(valid.sum())  # (none valid: read as before, nothing counted, asked again next run)
        if m and n and not policy.prompt_could_draft(n):  # nothing it says could make the first step draft
            policy.skip_prompt(n)
            m = 0
    caps = decide() if decide is not None and not m else None  # [B]: decided before seeing the prompt
    whole = decide is not None and (m > 0 or not bool(caps.any()))
    last = p_logits = None
    if whole:  # the whole prompt: slots P-1-m .. P-2 hold the evidence, slot P-1 the first plain step's law
        logits = target.forward(ids, mask.bool(), logits_to_keep=m + 1)  # [B, m + 1, V]
        p_logits, last = logits[:, :m], logits[:, m:]
    elif ids.shape[1] > 1:
        p_logits = target.forward(ids[:, :-1], mask[:, :-1].bool(), logits_to_keep=max(m, 1))  # [B, m or 1, V]
    if plain_drafter:
        drafter.start(ids, mask, lazy=True)
        q_logits = drafter.prompt_logits(m) if m else None  # [B, m, V_draft]
        if q_logits is not None:
            policy.seed_from_prompt(*prompt_evidence(p_logits, q_logits, valid, spec))
        elif not lazy:
            drafter.feed_prompt()
    else:
        drafter.start(ids, mask)
    if caps is None and decide is not None:
        caps = decide()
    first = None
    if whole and bool(caps.any()):  # the policy drafts: the pending token leaves the target's cache again
        target.keep(target.length - 1, torch.zeros(ids.shape[0], dtype=torch.long, device=ids.device))
    elif whole:
        first = last
    _sync(ids.device)
    return target, ids[:, -1], first, caps
