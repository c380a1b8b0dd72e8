"""The checks shared by the verification rules (:mod:`exactspec.verification.rules`, :mod:`exactspec.verification.candidates`):
shapes, token ranges, and that the rows a rule reads are probability distributions (finite, non-negative,
summing to 1 within the dtype's tolerance). Failures name the caller's argument, as :mod:`exactspec.verification.checks`
does for scalars.
"""
from __future__ import annotations

from exactspec.verification.checks import (ArgumentTypeError, _is_int, _show, check_choice, check_generator,
                              check_tensor, flatten)

METHODS = ("token", "greedy", "block")
CHECKS = ("rule", "full", "none")


def _to32(x: torch.Tensor) -> torch.Tensor:
    import torch
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def _tol(x: torch.Tensor) -> float:
    # Row sums of half-precision softmax outputs drift by ~1e-3; fp32/fp64 ones by far less.
    import torch
    return 2e-2 if x.dtype in (torch.float16, torch.bfloat16) else 1e-3


def _row_sums(x: torch.Tensor) -> torch.Tensor:  # [..., V] -> [...] fp32
    import torch
    if x.dtype == torch.float32 and x.dim() == 2 and x.stride(-1) == 1:
        # A matrix-vector product (BLAS, any row stride) is a much cheaper row reduction than .sum() here.
        return torch.mv(x, torch.ones(x.shape[-1], dtype=x.dtype, device=x.device))
    if x.dtype == torch.float32 and x.is_contiguous():
        V = x.shape[-1]
        return torch.mv(x.view(-1, V), torch.ones(V, dtype=x.dtype, device=x.device)).view(x.shape[:-1])
    return x.sum(-1, dtype=torch.float32)


def _check_sums(sums: torch.Tensor, mask: torch.Tensor | None, tol: float, name: str) -> None:
    import torch
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
    import torch
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
    import torch
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
    import torch
    B, K1, V = tp.shape
    rows_t = torch.cat([valid_pos, torch.zeros(B, 1, dtype=torch.bool, device=tp.device)], 1)
    rows_t[torch.arange(B), bonus_pos] = True
    for x, rows, name in ((tp, rows_t, "target_probs"), (dp, valid_pos, "draft_probs")):
        if x is None:
            continue
        _check_rows(_to32(x[rows]), None, name, "used", tol=_tol(x))


def _validate_shapes(tp, dp, tokens, lengths, method, checks, generator=None,
                     names=("target_probs", "draft_probs")):
    """Shapes, dtypes, token ranges and the settings of a verification call; ``names`` are the probability
    arguments' names in errors (``verify_logits`` passes its logits arguments')."""
    import torch
    tn, dn = names
    check_choice("method", method, METHODS)
    check_choice("checks", checks, CHECKS)
    check_tensor(tn, tp, kind="float", dims=3, min_last=1)
    if tp.shape[1] < 1:
        raise ValueError(f"{tn} must have shape [B, K+1, V] with K+1 >= 1, got {tuple(tp.shape)}")
    check_generator("generator", generator, tp.device)
    B, K1, V = tp.shape
    K = K1 - 1
    check_tensor("draft_tokens", tokens, kind="int", dims=2)
    if tokens.shape != (B, K):
        raise ValueError(f"draft_tokens has shape {tuple(tokens.shape)}, expected [B, K] = [{B}, {K}] "
                         f"({tn} is [B, K+1, V] = {list(tp.shape)})")
    if dp is None:
        if method != "greedy":
            raise ValueError(f"{dn} is required for method={method!r}")
    else:
        check_tensor(dn, dp, kind="float", dims=3)
        if dp.shape[-1] != V:
            raise ValueError(f"{dn} vocab size {dp.shape[-1]} != {tn} vocab size {V}")
        if dp.shape[:2] != (B, K):
            raise ValueError(f"{dn} has shape {tuple(dp.shape)}, expected [B, K, V] = [{B}, {K}, {V}]")
    if lengths is None:
        L = torch.full((B,), K, dtype=torch.long, device=tp.device)
    else:
        check_tensor("draft_lengths", lengths, kind="int")
        if lengths.shape != (B,):
            raise ValueError(f"draft_lengths must have shape [B] = [{B}], got {tuple(lengths.shape)}")
        L = lengths.long()
        if bool(((L < 0) | (L > K)).any()):
            raise ValueError(f"draft_lengths must lie in [0, K] = [0, {K}], got {L.tolist()}")
    valid = torch.arange(K, device=tp.device) < L[:, None]  # [B, K]
    if bool((((tokens < 0) | (tokens >= V)) & valid).any()):
        bad = (((tokens < 0) | (tokens >= V)) & valid).nonzero()[0].tolist()
        raise ValueError(f"draft_tokens: token id {int(tokens[bad[0], bad[1]])} at row {bad[0]}, position "
                         f"{bad[1]} is out of range [0, {V})")
    return B, K, V, L, valid


# ----------------------------------------------------------------------------- candidates and trees
def _validate_candidates(tp, dp, candidates, scheme, schemes, checks, generator) -> None:
    """Arguments of ``verify_candidates``: ``tp``/``dp`` [B, V] float, ``candidates`` [B, n] int in
    [-1, V) (-1 = padding), settings."""
    check_choice("scheme", scheme, schemes)
    check_choice("checks", checks, CHECKS)
    check_tensor("target_probs", tp, kind="float", dims=2, min_last=1)
    check_generator("generator", generator, tp.device)
    B, V = tp.shape
    check_tensor("candidates", candidates, kind="int", dims=2)
    if candidates.shape[0] != B:
        raise ValueError(f"candidates has {candidates.shape[0]} rows, expected B = {B} (target_probs is "
                         f"{list(tp.shape)})")
    bad = (candidates < -1) | (candidates >= V)
    if bool(bad.any()):
        b, s = bad.nonzero()[0].tolist()
        raise ValueError(f"candidates: token id {int(candidates[b, s])} at row {b}, slot {s} is out of range "
                         f"[0, {V}) (-1 = padding)")
    pad = candidates < 0
    if candidates.shape[1] > 1 and bool((pad[:, :-1] & ~pad[:, 1:]).any()):
        b = int((pad[:, :-1] & ~pad[:, 1:]).any(1).nonzero()[0])
        raise ValueError(f"candidates: row {b} = {candidates[b].tolist()} has a candidate after padding; -1 "
                         "(no candidate) may only be trailing")
    if dp is None:
        if scheme != "deterministic":
            raise ValueError(f"draft_probs is required for scheme={scheme!r}")
    else:
        check_tensor("draft_probs", dp, kind="float")
        if dp.shape != (B, V):
            raise ValueError(f"draft_probs has shape {tuple(dp.shape)}, expected [B, V] = [{B}, {V}]"
                             + (" (vocab mismatch)" if dp.dim() and dp.shape[-1] != V else ""))


def _int_list_tensor(name: str, x) -> torch.Tensor:
    """A tensor of integers from an int tensor or nested lists of ints (no bools, floats or strings)."""
    import torch
    if isinstance(x, torch.Tensor):
        check_tensor(name, x, kind="int")
        return x.long()
    if not isinstance(x, (list, tuple)):
        raise ArgumentTypeError(f"{name} must be a list of ints or an integer tensor, got {_show(x)}")
    flat = flatten(x)
    bad = [v for v in flat if not _is_int(v)]
    if bad:
        raise ArgumentTypeError(f"{name} must contain integers only, got {_show(bad[0])} in {_show(x)}")
    try:
        return torch.as_tensor(x, dtype=torch.long)
    except (ValueError, TypeError) as exc:  # ragged nesting
        raise ValueError(f"{name} must be a rectangular list of ints, got {_show(x)}: {exc}") from None


def _validate_tree(parents, tokens) -> tuple[torch.Tensor, torch.Tensor]:
    """``TokenTree`` fields: parents [N] with -1 <= parents[i] < i, tokens [N] or [B, N] ids >= 0."""
    import torch
    parents, tokens = _int_list_tensor("parents", parents), _int_list_tensor("tokens", tokens)
    if parents.dim() != 1:
        raise ValueError(f"parents must be 1-d [N], got shape {tuple(parents.shape)}")
    N = parents.shape[0]
    bad = (parents < -1) | (parents >= torch.arange(N))
    if bool(bad.any()):
        i = int(bad.nonzero()[0])
        raise ValueError(f"parents[{i}] = {int(parents[i])}: must satisfy -1 <= parents[i] < i (topological "
                         "order, -1 = child of the root)")
    if tokens.dim() not in (1, 2) or tokens.shape[-1] != N:
        raise ValueError(f"tokens must be [N] or [B, N] with N = {N}, got shape {tuple(tokens.shape)}")
    if tokens.numel() and int(tokens.min()) < 0:
        raise ValueError(f"tokens must be token ids >= 0, got {int(tokens.min())}")
    return parents, tokens


def _validate_tree_call(tree, tree_cls, tp, dp, scheme, schemes, generator) -> None:
    """Arguments of ``verify_tree``: tp/dp [B, N+1, V], tree tokens inside the vocabulary."""
    if not isinstance(tree, tree_cls):
        raise ArgumentTypeError(f"tree must be a TokenTree, got {_show(tree)}")
    check_choice("scheme", scheme, schemes)
    N = tree.num_nodes
    check_tensor("target_probs", tp, kind="float", dims=3, min_last=1)
    if tp.shape[1] != N + 1:
        raise ValueError(f"target_probs must be [B, N+1, V] with N + 1 = {N + 1}, got {tuple(tp.shape)}")
    check_generator("generator", generator, tp.device)
    if dp is not None:
        check_tensor("draft_probs", dp, kind="float")
        if dp.shape != tp.shape:
            raise ValueError(f"draft_probs must have the shape of target_probs, {tuple(tp.shape)}, "
                             f"got {tuple(dp.shape)}")
    V = tp.shape[-1]
    if tree.tokens.numel() and int(tree.tokens.max()) >= V:
        raise ValueError(f"tree.tokens: token id {int(tree.tokens.max())} is outside the vocabulary [0, {V})")


def names_sampled_rows(names: str):
    """Decorator for the verification entry points: a bad row found by ``sample_from_probs`` (reachable
    with ``checks="none"``) is reported under the caller's argument names, not the sampler's ``probs``."""
    import functools

    def deco(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except ValueError as exc:
                if not str(exc).startswith("probs: "):
                    raise
                raise ValueError(f"{names} (a row sampled from): {str(exc)[len('probs: '):]}") from None
        return wrapper
    return deco
