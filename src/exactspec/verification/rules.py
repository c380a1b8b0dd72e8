"""Verification rules for speculative decoding: pure, batched, randomness injected.

Indexing (0-based tensor positions). ``target_probs[:, i]`` is the target distribution after the prompt
and the first ``i`` draft tokens, ``i = 0..K``; ``draft_tokens[:, i]`` was drawn from ``draft_probs[:, i]``
and is checked against ``target_probs[:, i]``; ``target_probs[:, K]`` (or ``[:, L_b]`` for a ragged row)
is the bonus position.

Every quantity that decides the output distribution is computed by one of the formula functions below,
and nowhere else: the acceptance probabilities (``token_accept_prob``, ``block_weights``,
``block_masses``, ``block_accept_probs``), how many draft tokens a rule keeps given its coins
(``token_keep_count``, ``block_keep_count``) and the distribution of the token after them (``residual``,
with its zero-mass fallback ``residual_or_p``). ``verify``, ``verify_logits``, the multi-candidate rule
and the tree walk call them on the running path (in place where speed needs it, through their ``out=``
argument), and :mod:`exactspec.verification.exact` enumerates every outcome with the very same functions, looked up
on this module at call time. So the enumeration proves the code that runs, and a change to a formula
(or a test's monkeypatch of one) reaches both: they are in lock-step by construction.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from exactspec.verification.rulechecks import (METHODS, _check_full, _check_gathered, _check_rows, _row_sums, _to32, _tol,
                              _validate_shapes, names_sampled_rows)
from exactspec.verification.rowwork import _parallel_map, _rows
from exactspec.verification.sampling import _one_thread, sample_from_probs

__all__ = [
    "Verdict", "verify", "verify_logits", "token_accept_prob", "token_keep_count", "residual",
    "residual_or_p", "residual_is_empty", "block_weights", "block_masses", "block_accept_probs",
    "block_keep_count", "block_tau_probs", "greedy_verdict", "METHODS",
]



# ----------------------------------------------------------------------------- formula functions
def token_accept_prob(p_x: torch.Tensor, q_x: torch.Tensor) -> torch.Tensor:
    """min(1, p(x)/q(x)) elementwise (Leviathan et al. 2023, Alg. 1). ``q_x > 0`` is the caller's job."""
    return torch.clamp(p_x / q_x, max=1.0)


def token_keep_count(ok: torch.Tensor) -> torch.Tensor:  # [..., K] bool -> [...] int64
    """Draft tokens the token rule keeps given its coins (``ok[..., i]``: the coin of position i came up
    "accept"): the leading run of successes, as the first rejection ends the step."""
    return ok.long().cumprod(-1).sum(-1)


def residual(p: torch.Tensor, q: torch.Tensor, weight: torch.Tensor | float = 1.0,
             out: torch.Tensor | None = None) -> torch.Tensor:
    """Unnormalised residual ``max(weight * p - q, 0)`` over the last axis (``weight`` = 1 for "token",
    ``w_i`` broadcast against p for "block"). ``out`` (may alias ``q``) avoids a fresh [B, V] buffer."""
    if isinstance(weight, torch.Tensor):
        r = torch.addcmul(q, p, weight, value=-1.0, out=out).neg_()  # -(q - w p), one fused pass
    else:
        r = torch.sub(p if weight == 1.0 else p * weight, q, out=out)
    return r.clamp_(min=0.0)


def _mass(x: torch.Tensor) -> torch.Tensor:  # [..., V] -> [...]
    """Sums over the last axis: fp32 through BLAS (a much cheaper reduction than .sum() here); other
    dtypes keep their own precision (fp64 in exact.py)."""
    return _row_sums(x) if x.dtype == torch.float32 else x.sum(-1)


def residual_is_empty(mass: torch.Tensor) -> torch.Tensor:
    """Where a residual's mass is numerically zero (<= 16 eps of its dtype). That only happens when
    w p ~ q, where the rejection leading to the residual has probability ~0; every rule then samples p
    instead of dividing 0 by 0."""
    return mass <= 16 * torch.finfo(mass.dtype).eps


def residual_or_p(p: torch.Tensor, q: torch.Tensor, weight: torch.Tensor | float = 1.0,
                  out: torch.Tensor | None = None) -> torch.Tensor:
    """``residual(p, q, weight)``, or ``p`` itself in rows where that has ~zero mass: the distribution
    (unnormalised, [..., V]) every rule samples after a rejection. ``out`` as in :func:`residual`."""
    res = residual(p, q, weight, out=out)
    empty = residual_is_empty(_mass(res))  # [...]
    if bool(empty.any()):
        res[empty] = p.expand_as(res)[empty]
    return res


def block_weights(p_x: torch.Tensor, q_x: torch.Tensor) -> torch.Tensor:  # [..., K] -> [..., K+1]
    """Running weights of block verification (Sun et al. 2024, Alg. 2).

    ``w_0 = 1``, ``w_i = min(1, w_{i-1} * p_{i-1}(x_i) / q_{i-1}(x_i))`` where ``p_x[..., i-1]`` and
    ``q_x[..., i-1]`` are the target/draft probabilities of draft token ``x_i`` (drawn at position i-1).
    """
    ratio = p_x / q_x
    w = [torch.ones(ratio.shape[:-1], dtype=ratio.dtype, device=ratio.device)]
    for i in range(ratio.shape[-1]):  # K is small; the clamp at each step forbids a plain cumprod
        w.append(torch.clamp(w[-1] * ratio[..., i], max=1.0))
    return torch.stack(w, dim=-1)


def block_masses(p: torch.Tensor, q: torch.Tensor, w: torch.Tensor,
                 with_sums: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Residual masses of block verification: ``Z_i = sum_y max(w_i p_i(y) - q_i(y), 0)`` (the mass of
    ``residual(p_i, q_i, w_i)``) from p, q ``[..., V]`` and w ``[...]``; returns ``(Z, S or None)``, each
    ``[...]``.

    ``S_i = sum_y (q_i(y) - w_i p_i(y))``, wanted by the input checks (it must equal ``1 - w_i``), comes
    from the same difference: one read of both rows, whose cost dominates the rule. Large batches
    ``[B, K-1, V]`` go row by row on worker threads (see :func:`_parallel_map`), so that each row's
    difference is still in cache for the passes that sum it; the arithmetic is the same.
    """
    if p.dim() != 3 or p.shape[0] < 2 or p[0].numel() < 2**16 or p.device.type != "cpu":
        return _block_masses_pass(p, q, w, with_sums)  # small rows: one batched pass
    B = p.shape[0]
    z = torch.empty(w.shape, dtype=torch.promote_types(torch.promote_types(p.dtype, q.dtype), w.dtype))
    s = torch.empty_like(z) if with_sums else None

    def rows(bs):
        for b in bs:
            zb, sb = _block_masses_pass(p[b], q[b], w[b], with_sums)
            z[b] = zb
            if s is not None:
                s[b] = sb

    n = max(1, min(B, torch.get_num_threads()))
    _parallel_map(rows, [range(i, B, n) for i in range(n)], n)
    return z, s


def _block_masses_pass(p, q, w, with_sums):  # [..., V] x2, [...] -> [...], [...] or None
    diff = torch.addcmul(q, w[..., None], p, value=-1.0)  # q - w p
    s = _mass(diff) if with_sums else None
    return -_mass(diff.clamp_(max=0.0)), s


def block_accept_probs(w: torch.Tensor, z: torch.Tensor,
                       lengths: torch.Tensor | None = None) -> torch.Tensor:
    """Coin probabilities ``h_1..h_K`` of block verification: ``[..., K]`` from ``w [..., K+1]``.

    ``z[..., i-1] = Z_i`` (:func:`block_masses`) for ``i = 1..K-1`` (shape ``[..., K-1]``).
    ``h_i = Z_i / (Z_i + 1 - w_i)`` (1 when the denominator is 0) for ``i < L`` and ``h_L = w_L``, where
    the block has ``L = K`` tokens, or ``lengths [...]`` for ragged rows (their coins past L are 0).
    """
    wi = w[..., 1:-1]
    den = z + (1.0 - wi)
    h = torch.where(den > 0, z / torch.where(den > 0, den, torch.ones_like(den)), torch.ones_like(den))
    h = torch.cat([h.clamp(0.0, 1.0), w[..., -1:]], dim=-1)
    if lengths is None:
        return h
    cols = torch.arange(1, h.shape[-1] + 1, device=h.device)  # column i-1 holds coin i
    L = lengths[..., None]
    return torch.where(cols < L, h, torch.where(cols == L, w[..., 1:], torch.zeros_like(h)))


def block_keep_count(ok: torch.Tensor) -> torch.Tensor:  # [..., K] bool -> [...] int64
    """Draft tokens block verification keeps given its coins (``ok[..., i-1]``: coin ``h_i`` succeeded):
    tau = the LAST i in 1..K whose coin succeeded, 0 if none (a failed coin does not end the block)."""
    if ok.shape[-1] == 0:
        return torch.zeros(ok.shape[:-1], dtype=torch.long, device=ok.device)
    return (ok.long() * torch.arange(1, ok.shape[-1] + 1, device=ok.device)).amax(-1)


def block_tau_probs(h: torch.Tensor) -> torch.Tensor:  # [..., K] -> [..., K+1]
    """P(tau = i), i = 0..K, where tau is the LAST i in 1..K whose coin (prob ``h_i``) succeeds, else 0:
    the law of :func:`block_keep_count` in closed form (:mod:`exactspec.verification.exact` enumerates the coins)."""
    fail_after = torch.ones_like(h[..., :1])
    out = [None] * (h.shape[-1] + 1)
    for i in range(h.shape[-1], 0, -1):
        out[i] = h[..., i - 1 : i] * fail_after
        fail_after = fail_after * (1.0 - h[..., i - 1 : i])
    out[0] = fail_after
    return torch.cat(out, dim=-1)


# ----------------------------------------------------------------------------- verdict
@dataclass
class Verdict:
    """Outcome of one verification step for a batch.

    accepted:     ``[B]`` int64, number of draft tokens kept (``0..L_b``).
    next_token:   ``[B]`` int64, token emitted after them (residual sample, bonus, or greedy argmax).
    accept_probs: ``[B, K]`` float32, per-position probability of the rule's coin: ``min(1, p/q)`` for
                  "token", ``h_i`` for "block", 1/0 (draft == argmax) for "greedy"; 0 past ``L_b``.
    """

    accepted: torch.Tensor
    next_token: torch.Tensor
    accept_probs: torch.Tensor

    def tokens(self, draft_tokens: torch.Tensor) -> list[list[int]]:
        """Emitted tokens per row: the kept draft prefix followed by ``next_token``."""
        return [
            draft_tokens[b, : int(n)].tolist() + [int(t)]
            for b, (n, t) in enumerate(zip(self.accepted.tolist(), self.next_token.tolist()))
        ]


# ----------------------------------------------------------------------------- the rules
def _emit(tp, dp, pos, weight, use_q, generator, checks) -> torch.Tensor:
    """Sample the token after the kept prefix: from ``residual_or_p(p, q, weight)`` where ``use_q`` (a
    rejection), else from ``p`` (bonus). ``pos`` [B] is the position per row, ``weight`` [B] or None.

    Works in per-thread scratch rows (no multi-MB allocations) on the calling thread only."""
    with _one_thread():
        p_rows = _to32(_rows(tp, pos, slot="p"))  # [B, V]
        if checks != "none":
            _check_rows(p_rows, None, "target_probs", "sampled", tol=_tol(tp))
        if dp is None or not bool(use_q.any()):
            return sample_from_probs(p_rows, generator)
        q_rows = _to32(_rows(dp, pos.clamp(max=dp.shape[1] - 1), slot="q")).to(p_rows.dtype)  # [B, V]
        if checks != "none":
            # Rows ending in a bonus token do not read q (their position may even be padding).
            _check_rows(q_rows, use_q, "draft_probs", "residual", tol=_tol(dp))
        # The rules' residual (and its zero-mass fallback to p), in place in the q scratch
        r = residual_or_p(p_rows, q_rows, 1.0 if weight is None else weight[:, None], out=q_rows)
        bonus = ~use_q  # these rows sample p itself
        if bool(bonus.any()):
            idx = bonus.nonzero().squeeze(1)
            r.index_copy_(0, idx, p_rows.index_select(0, idx).clamp_(min=0.0))
        return sample_from_probs(r, generator)


def greedy_verdict(scores: torch.Tensor, tokens: torch.Tensor, valid: torch.Tensor, *,
                   check: bool = True) -> "Verdict":
    """The greedy rule: keep draft tokens while each equals the target's argmax; emit the argmax after them.

    `scores [B, K+1, V]` (probabilities or logits: only the argmax is read, lowest id among ties),
    `tokens [B, K]` int64 (any value where `valid [B, K]` is False), `valid` a prefix per row. `check`:
    a NaN or inf among the maxima the rule reads is a ValueError. The engine's greedy steps call this
    directly (a handful of tensor ops; ``verify``'s argument checks cost as much again after a forward
    has evicted the caches), and ``verify(method="greedy")`` calls it after its own checks.
    """
    b, k = tokens.shape
    vals, am = scores.max(-1)  # [B, K+1]; max returns the lowest index among ties
    if check and not bool(torch.isfinite(vals).all()):  # (one op when all is well: the engine's every step)
        used = torch.cat([valid, valid.new_ones(b, 1)], 1)
        if not bool((torch.isfinite(vals) | ~used).all()):
            raise ValueError("target_probs: NaN or inf in a row the greedy rule reads")
    match = (tokens == am[:, :k]) & valid
    accepted = token_keep_count(match)
    return Verdict(accepted, am.gather(1, accepted[:, None]).squeeze(1), match.float())


@names_sampled_rows("target_probs/draft_probs")
def verify(
    target_probs: torch.Tensor,  # [B, K+1, V]
    draft_probs: torch.Tensor | None,  # [B, K, V]
    draft_tokens: torch.Tensor,  # [B, K] int64
    *,
    method: str = "token",
    draft_lengths: torch.Tensor | None = None,  # [B] int, 0..K
    generator: torch.Generator | None = None,
    checks: str = "rule",
) -> Verdict:
    """Verify a batch of drafts against the target; the output is distributed exactly as the target.

    Args:
        target_probs: ``[B, K+1, V]``; position i = target after the first i draft tokens; K = bonus.
        draft_probs: ``[B, K, V]``; the distribution draft token i was drawn from (one-hot for
            deterministic drafters). May be ``None`` for ``method="greedy"``.
        draft_tokens: ``[B, K]`` integer.
        method: ``"token"`` (Leviathan/Chen), ``"block"`` (Sun et al. 2024, Alg. 2) or ``"greedy"``.
            "greedy" reads only each row's argmax (lowest id among ties), so with ``checks="rule"`` or
            ``"none"`` target logits may be passed in place of probabilities there.
        draft_lengths: optional ``[B]``; row b uses its first ``L_b`` tokens, position ``L_b`` is its bonus
            position (``L_b = 0``: plain sampling from ``target_probs[b, 0]``). Tokens past ``L_b`` are
            ignored (any padding value).
        generator: the only source of randomness.
        checks: ``"rule"`` (default) validates what the rule reads: shapes, token range, the gathered
            ``p_i(x_i)``, ``q_i(x_i)`` (q = 0 for a drafted token is an error), every row it samples from
            (NaN/inf, negative entries, row sums), and for "block" each row pair its masses Z_i read,
            through ``sum(q_i) - w_i sum(p_i) = 1 - w_i`` and NaN/inf propagating into Z_i. Elements the
            rule never reads are not scanned (the verdict is exact for any valid rows agreeing on what
            was read); ``"full"`` also scans every used row element by element (one more pass over both
            tensors); ``"none"`` only checks shapes.

    fp16/bf16 inputs are computed in fp32. Raises ValueError naming the offending argument (a wrong type:
    ``checks.ArgumentTypeError``, a TypeError that is also a ValueError).
    """
    tp, dp = target_probs, draft_probs
    B, K, V, L, valid = _validate_shapes(tp, dp, draft_tokens, draft_lengths, method, checks, generator)
    if checks == "full":
        _check_full(tp, dp, valid, L)
    if K == 0:  # nothing drafted: plain sampling from the target
        z0 = torch.zeros(B, dtype=torch.long, device=tp.device)
        if method == "greedy":
            return Verdict(z0, tp[:, 0].argmax(-1), torch.zeros(B, 0))
        return Verdict(z0, _emit(tp, None, z0, None, None, generator, checks), torch.zeros(B, 0))
    tok = draft_tokens.long()
    if draft_lengths is not None:
        tok = tok.masked_fill(~valid, 0)  # padding may be any value; gather a harmless id
    ar = torch.arange(B, device=tp.device)

    if method == "greedy":
        return greedy_verdict(tp, tok, valid, check=checks != "none")

    idx = tok[..., None]
    p_x = _to32(tp[:, :K].gather(-1, idx).squeeze(-1))  # [B, K]
    q_x = _to32(dp.gather(-1, idx).squeeze(-1))  # [B, K]
    if checks != "none":
        _check_gathered(p_x, q_x, valid, need_q=True)
    q_safe = torch.where(valid, q_x, torch.ones_like(q_x))
    u = torch.rand(B, K, generator=generator, device=tp.device)

    if method == "token":
        a = token_accept_prob(p_x, q_safe) * valid
        accepted = token_keep_count(u < a)  # u in [0, 1): P(u < a) = a
        rejected = accepted < L
        nxt = _emit(tp, dp, accepted, None, rejected, generator, checks)
        return Verdict(accepted, nxt, a)

    # method == "block"
    w = block_weights(torch.where(valid, p_x, torch.zeros_like(p_x)), q_safe)  # [B, K+1]
    if K > 1:
        # All positions in one batched pass (a [B, K-1, V] temporary): a few large ops parallelise well,
        # and measured interleaved against per-position worker threads they are as fast. S_i is the
        # row-sum check of the rows Z_i reads; NaN / inf propagate into Z_i.
        z, s = block_masses(_to32(tp[:, 1:K]), _to32(dp[:, 1:K]), w[:, 1:K], with_sums=checks != "none")
        if checks != "none":
            used = valid[:, 1:]  # positions 1..K-1 that are < L_b
            wi = w[:, 1:K]
            tol = max(_tol(tp), _tol(dp))
            bad = ~((s - (1.0 - wi)).abs() <= tol * (1.0 + wi)) & used  # also NaN / inf
            if bool(bad.any()):
                b, i = bad.nonzero()[0].tolist()
                raise ValueError(
                    f"target_probs/draft_probs: at row {b}, position {i + 1} sum(q) - w*sum(p) = "
                    f"{float(s[b, i]):.6g}, expected 1 - w = {float(1 - wi[b, i]):.6g}: the rows the block "
                    "rule reads are not probability distributions (or contain NaN/inf)")
            if not bool((torch.isfinite(z) | ~used).all()):
                raise ValueError("target_probs/draft_probs: NaN or inf in a row the block rule reads")
    else:
        z = torch.zeros(B, 0, device=tp.device)
    h = block_accept_probs(w, z, L)  # [B, K]
    tau = block_keep_count(u < h)
    rejected = tau < L
    nxt = _emit(tp, dp, tau, w[ar, tau], rejected, generator, checks)
    return Verdict(tau, nxt, h)


@names_sampled_rows("target_logits/draft_logits")
def verify_logits(
    target_logits: torch.Tensor,  # [B, K+1, V]
    draft_logits: torch.Tensor | None,  # [B, K, V]
    draft_tokens: torch.Tensor,  # [B, K] int64
    *,
    method: str = "token",
    draft_lengths: torch.Tensor | None = None,  # [B]
    generator: torch.Generator | None = None,
    checks: str = "rule",
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    min_p: float = 0.0,
) -> Verdict:
    """:func:`verify` starting from logits: both sides go through the same
    :func:`~exactspec.verification.sampling.probs_from_logits` transform (the draft tokens must have been drawn from
    ``probs_from_logits(draft_logits, same settings)``).

    For ``method="token"`` probabilities are computed lazily, position by position, only for the rows
    still accepting (the token rule never reads a position after its first rejection): on a typical
    draft this skips most of the softmax work. Same distribution of outcomes as ``verify`` on the full
    probabilities. "block" and "greedy" read every position, so they compute everything and call
    :func:`verify`.
    """
    from exactspec.verification.sampling import _check_args, probs_from_logits

    def probs(x, name="target_logits or draft_logits"):
        try:
            return probs_from_logits(x, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p)
        except ValueError as exc:  # only NaN / +inf / all -inf rows get here (settings are checked first)
            raise ValueError(f"{name}: {exc}") from None

    tl, dl = target_logits, draft_logits
    # Errors name the logits arguments (these are what the caller passed), before any softmax is spent.
    _check_args(temperature, top_k, top_p, min_p)
    B, K, V, L, valid = _validate_shapes(tl, dl, draft_tokens, draft_lengths, method, checks, generator,
                                         names=("target_logits", "draft_logits"))
    if method != "token":
        try:
            dp = None if dl is None else probs(dl, "draft_logits")
            return verify(probs(tl, "target_logits"), dp, draft_tokens, method=method, draft_lengths=draft_lengths,
                          generator=generator, checks=checks)
        except ValueError as exc:  # say which logits argument, after the transform
            msg = str(exc)
            for a, b in (("target_probs", "target_logits"), ("draft_probs", "draft_logits")):
                msg = msg.replace(a, f"{b} (after the sampling transform)")
            raise ValueError(msg) from None
    dev = tl.device
    tok = draft_tokens.long().masked_fill(~valid, 0)
    workers = torch.get_num_threads()
    # Row gathers and bookkeeping on this thread only (no per-op barriers); the softmaxes go to workers.
    with _one_thread():
        u = torch.rand(B, K, generator=generator, device=dev)  # same draws as verify()
        a_all = torch.zeros(B, K, device=dev)
        coins = torch.zeros(B, K, dtype=torch.bool, device=dev)  # False where never read
        active = torch.ones(B, dtype=torch.bool, device=dev)
        r = torch.empty(B, V, device=dev)  # the row each batch row finally samples from
        for i in range(K):
            rows = (active & valid[:, i]).nonzero().squeeze(1)
            if rows.numel() == 0:
                break
            # [n, V], only where position i is read; target and draft side by side on two threads
            pos = torch.full_like(rows, i)
            gathered = [_rows(tl, pos, rows, slot="lp"), _rows(dl, pos, rows, slot="lq")]
            P, Q = _parallel_map(probs, gathered, workers)
            x = tok[rows, i : i + 1]
            p_x, q_x = P.gather(1, x).squeeze(1), Q.gather(1, x).squeeze(1)
            if checks != "none" and bool((q_x <= 0).any()):
                b = int(rows[(q_x <= 0).nonzero()[0]])
                raise ValueError(f"draft_logits: drafted token at row {b}, position {i} has draft "
                                 "probability 0 after the sampling transform (not drawn from it)")
            a = token_accept_prob(p_x, q_x.clamp(min=torch.finfo(q_x.dtype).tiny))
            a_all[rows, i] = a
            ok = u[rows, i] < a
            coins[rows, i] = ok
            rej = ~ok
            if bool(rej.any()):
                r[rows[rej]] = residual_or_p(P[rej], Q[rej])
                active[rows[rej]] = False
        done = active.nonzero().squeeze(1)  # everything kept: bonus token at position L_b
        if done.numel():
            r[done] = probs(_rows(tl, L[done], done))
        # Coins past a row's first rejection (or its L_b) stay False: the count is the same as verify's.
        return Verdict(token_keep_count(coins), sample_from_probs(r, generator), a_all)
