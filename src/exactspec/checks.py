"""Input checks shared by the verification rules: shapes, token ranges, and that the rows a rule reads are
probability distributions (finite, non-negative, summing to 1 within the dtype's tolerance).

Every failure is a ValueError naming the offending argument: a rule must never turn bad input into a
silently wrong distribution.
"""
from __future__ import annotations

import torch

METHODS = ("token", "greedy", "block")
CHECKS = ("rule", "full", "none")


def _to32(x: torch.Tensor) -> torch.Tensor:
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def _tol(x: torch.Tensor) -> float:
    # Row sums of half-precision softmax outputs drift by ~1e-3; fp32/fp64 ones by far less.
    return 2e-2 if x.dtype in (torch.float16, torch.bfloat16) else 1e-3


def _row_sums(x: torch.Tensor) -> torch.Tensor:  # [..., V] -> [...] fp32
    if x.dtype == torch.float32 and x.dim() == 2 and x.stride(-1) == 1:
        # A matrix-vector product (BLAS, any row stride) is a much cheaper row reduction than .sum() here.
        return torch.mv(x, torch.ones(x.shape[-1], dtype=x.dtype, device=x.device))
    if x.dtype == torch.float32 and x.is_contiguous():
        V = x.shape[-1]
        return torch.mv(x.view(-1, V), torch.ones(V, dtype=x.dtype, device=x.device)).view(x.shape[:-1])
    return x.sum(-1, dtype=torch.float32)


def _check_sums(sums: torch.Tensor, mask: torch.Tensor | None, tol: float, name: str) -> None:
    bad = ~((sums - 1.0).abs() <= tol)  # also catches NaN / inf
    if mask is not None:
        bad &= mask
    if bool(bad.any()):
        where = tuple(bad.nonzero()[0].tolist())
        raise ValueError(
            f"{name}: row {where} sums to {float(sums[where]):.6g}, not 1 (or has NaN/inf): "
            "not a probability distribution"
        )


def _check_rows(rows: torch.Tensor, mask: torch.Tensor | None, name: str, what: str,
                tol: float | None = None) -> None:
    """Finite, non-negative, normalised rows [N, V] (the rows a rule samples from); ``mask`` [N] selects
    the rows that matter; ``tol`` defaults to the rows' own dtype's (pass the source's for upcast rows)."""
    if rows.numel() == 0:
        return
    # NaN / inf propagate into the row sums, so the sum check covers them; min catches negatives.
    neg = rows.amin(-1) < 0
    if mask is not None:
        neg &= mask
    if bool(neg.any()):
        raise ValueError(f"{name}: {what} row has negative probabilities")
    _check_sums(_row_sums(rows), mask, _tol(rows) if tol is None else tol, f"{name} ({what})")


def _check_gathered(p_x, q_x, valid, need_q: bool) -> None:
    if not bool((torch.isfinite(p_x) & (p_x >= 0) & (p_x <= 1.0 + 1e-3) | ~valid).all()):
        raise ValueError("target_probs: NaN, negative or > 1 probability at a drafted token")
    if need_q:
        if not bool((torch.isfinite(q_x) & (q_x >= 0) & (q_x <= 1.0 + 1e-3) | ~valid).all()):
            raise ValueError("draft_probs: NaN, negative or > 1 probability at a drafted token")
        if bool(((q_x <= 0) & valid).any()):
            b, i = (((q_x <= 0) & valid).nonzero()[0]).tolist()
            raise ValueError(
                f"draft_probs: drafted token at row {b}, position {i} has draft probability 0 "
                "(it cannot have been drawn from draft_probs)"
            )


def _check_full(tp, dp, valid_pos, bonus_pos) -> None:
    """Every element of every row in use: the opt-in `checks="full"` mode."""
    B, K1, V = tp.shape
    rows_t = torch.cat([valid_pos, torch.zeros(B, 1, dtype=torch.bool, device=tp.device)], 1)
    rows_t[torch.arange(B), bonus_pos] = True
    for x, rows, name in ((tp, rows_t, "target_probs"), (dp, valid_pos, "draft_probs")):
        if x is None:
            continue
        _check_rows(_to32(x[rows]), None, name, "used", tol=_tol(x))


def _validate_shapes(tp, dp, tokens, lengths, method, checks):
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    if checks not in CHECKS:
        raise ValueError(f"checks must be one of {CHECKS}, got {checks!r}")
    if not isinstance(tp, torch.Tensor) or tp.dim() != 3 or not tp.is_floating_point():
        raise ValueError("target_probs must be a float tensor of shape [B, K+1, V]")
    B, K1, V = tp.shape
    K = K1 - 1
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.dtype.is_floating_point:
        raise ValueError("draft_tokens must be an integer tensor of shape [B, K]")
    if tokens.shape != (B, K):
        raise ValueError(f"draft_tokens has shape {tuple(tokens.shape)}, expected [B, K] = [{B}, {K}] "
                         "(target_probs is [B, K+1, V])")
    if dp is None:
        if method != "greedy":
            raise ValueError(f"draft_probs is required for method={method!r}")
    else:
        if not isinstance(dp, torch.Tensor) or dp.dim() != 3 or not dp.is_floating_point():
            raise ValueError("draft_probs must be a float tensor of shape [B, K, V]")
        if dp.shape[-1] != V:
            raise ValueError(f"draft_probs vocab size {dp.shape[-1]} != target_probs vocab size {V}")
        if dp.shape[:2] != (B, K):
            raise ValueError(f"draft_probs has shape {tuple(dp.shape)}, expected [B, K, V] = [{B}, {K}, {V}]")
    if lengths is None:
        L = torch.full((B,), K, dtype=torch.long, device=tp.device)
    else:
        if not isinstance(lengths, torch.Tensor) or lengths.shape != (B,) or lengths.dtype.is_floating_point:
            raise ValueError(f"draft_lengths must be an integer tensor of shape [B] = [{B}]")
        L = lengths.long()
        if bool(((L < 0) | (L > K)).any()):
            raise ValueError(f"draft_lengths must lie in [0, K] = [0, {K}], got {L.tolist()}")
    valid = torch.arange(K, device=tp.device) < L[:, None]  # [B, K]
    if bool((((tokens < 0) | (tokens >= V)) & valid).any()):
        raise ValueError(f"draft_tokens: token id out of range [0, {V}) at a used position")
    return B, K, V, L, valid
