"""What the prompt says of the draft before anything is drafted: a prior for ``gamma="auto"``'s acceptance model.

Why: a policy with no verdicts yet knows nothing of its pair on this text, so it explores (optimistic probes while
the evidence is thin, then re-probes at growing gaps). A seeded run must start from nothing learnt in this
process (its tokens would otherwise depend on earlier runs), so it explored anew every run, and on llama.cpp,
where a probe's two-token verification costs about two plain steps, that alone cost 8-15% against the target
alone (docs/llamacpp.md, r6). The prompt already holds the answer to "how often does the draft agree with the
target here": both models read the prompt anyway, and the last `m` positions of that prefill can hand over
their logits, where the target's row j is its law for prompt token j + 1 given the tokens before it, exactly
what verification would compare with the draft's. Teacher-forced on the prompt, the probability that the token
rule keeps a drafted token at a position is ``sum_x min(p(x), q(x))`` (1 or 0 when greedy: argmax agreement),
binned by the draft's confidence ``max_x q(x)`` as drafting bins it. Those expected verdicts seed a fresh model
at PROMPT_WEIGHT pseudo-observations each (``AcceptanceModel.count``, through ``AdaptivePolicy.seed_from_prompt``).

It is a function of the prompt and the models' logits only (no clock, no earlier run), so a seeded run that
starts from it still reproduces. It changes what is drafted, never how a draft is verified: the output's law
is the target's whatever the acceptance model believes.
"""
from __future__ import annotations

import torch

__all__ = ["PROMPT_POSITIONS", "PROMPT_WEIGHT", "prompt_positions", "prompt_evidence"]

# the prompt's last positions read: each costs both models an lm-head row; 32 read for nothing cost seeded runs
# 5-8% against the target alone on llama.cpp (smollm2, unseen_chat3, 2026-12-05) ...
PROMPT_POSITIONS = 8
PROMPT_ELEMENTS = 1 << 22  # ... fewer when B x positions x V would pass this many logits (16 MB in fp32 each)
PROMPT_WEIGHT = 0.5  # pseudo-observations per prompt position: prompt text is not the target's own text


def prompt_positions(rows: int, prompt_len: int, vocab: int) -> int:
    """How many of the prompt's last slots to read: up to PROMPT_POSITIONS, fewer for a large batch or
    vocabulary (the evidence holds a few [rows, m, vocab] fp32 tensors of at most PROMPT_ELEMENTS values), none
    for a one-token prompt or when one slot per row would pass that bound (the run then starts unseeded)."""
    return max(0, min(PROMPT_POSITIONS, prompt_len - 1, PROMPT_ELEMENTS // max(1, rows * vocab)))


def prompt_evidence(p_logits: torch.Tensor, q_logits: torch.Tensor, valid: torch.Tensor, spec) -> tuple:
    """Expected verdicts at teacher-forced prompt positions.

    `p_logits [B, m, V_t]` and `q_logits [B, m, V_d]`: the target's and the draft's logits at the prompt's last
    `m` prefill slots (slot j predicts token j + 1), `valid [B, m]` bool: the slot and the token it predicts
    are both real. `spec`: the run's :class:`~exactspec.engine.hfconfig.SamplingSpec` with row-wise processors
    only (``spec.static_only``). Returns `(confidence, accept, after)`, lists over rows then positions (valid
    ones only, flattened): the draft's top probability as the drafter computes it, the expected acceptance of
    the token rule there, and the expected acceptance of the position before (0.0 at a row's first valid slot):
    the chance that this position would be reached after an accepted one."""
    if p_logits.shape[:2] != q_logits.shape[:2] or valid.shape != p_logits.shape[:2]:
        raise ValueError(f"prompt_evidence: shapes {tuple(p_logits.shape)}, {tuple(q_logits.shape)} and "
                         f"{tuple(valid.shape)} do not agree on [B, m]")
    p = spec.probs(p_logits.float())  # [B, m, V]: one-hot argmax when greedy
    if spec.greedy:  # the drafter's token and confidence when greedy: its raw argmax and softmax (no processor)
        raw = q_logits[..., : spec.vocab_size].float()
        accept = p.gather(-1, raw.argmax(-1, keepdim=True)).squeeze(-1)  # 1 where the target's choice agrees
        conf = torch.softmax(raw, -1).amax(-1)
    else:
        q = spec.probs(q_logits.float())
        accept = torch.minimum(p, q).sum(-1).clamp(0.0, 1.0)  # [B, m]
        conf = q.amax(-1)
    before = torch.cat([torch.zeros_like(accept[:, :1]), accept[:, :-1]], 1) * valid.roll(1, 1)
    before[:, 0] = 0.0
    keep = valid.reshape(-1)
    return conf.reshape(-1)[keep].tolist(), accept.reshape(-1)[keep].tolist(), before.reshape(-1)[keep].tolist()
