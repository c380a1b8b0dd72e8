"""Sampling transforms (logits -> probabilities) and a fast inverse-CDF sampler.

The *same* transform must be applied to the target and to the draft: speculative decoding is exact with
respect to whatever distributions it is handed, so a mismatch here silently changes what is sampled.

Filters are applied in the Hugging Face order: temperature -> top-k -> top-p -> min-p, each on the
distribution renormalised over the survivors of the previous one.

Tie rule (one total order, used everywhere): tokens are ranked by probability, higher first, and equal
probabilities are ranked by *lower token id first*. Hence

- temperature 0 is the one-hot argmax, lowest id among ties (what ``torch.argmax`` returns);
- ``top_k=k`` keeps exactly ``min(k, V)`` tokens: the k first in that order (ties at the k-th place are
  broken towards lower ids, not all kept);
- ``top_p=p`` keeps the shortest prefix of that order whose mass reaches ``p``; ``top_p=0`` keeps only the
  first token (= the argmax), ``top_p=1`` keeps everything;
- ``min_p=m`` keeps tokens with probability >= m * max probability (no ordering needed; ties all kept).
"""
from __future__ import annotations

import math
from contextlib import contextmanager

import numpy as np
import torch

from exactspec.verification.checks import check_generator, check_int, check_prob, check_real, check_tensor

__all__ = ["probs_from_logits", "sample_from_probs", "sample_from_cdf"]


_TINY_TEMPERATURE = 1e-20  # below it, every fp32 logit gap / T is beyond float range


def _check_args(temperature, top_k, top_p, min_p) -> None:
    check_real("temperature", temperature, min=0.0)
    check_int("top_k", top_k, min=0)
    check_prob("top_p", top_p)
    check_prob("min_p", min_p)


def _top_k_mask(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Boolean mask [..., V] of the k first tokens in the (prob desc, id asc) order."""
    kth = torch.topk(scores, k, dim=-1).values[..., -1:]  # [..., 1]
    above = scores > kth
    ties = scores == kth
    # Among tokens tied with the k-th value, keep the lowest ids until k tokens are kept.
    need = k - above.sum(-1, keepdim=True)
    return above | (ties & (ties.cumsum(-1) <= need))


def _top_p_mask(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    # Stable descending sort ranks equal probabilities by lower id first (the documented tie rule).
    sorted_p, order = torch.sort(probs, dim=-1, descending=True, stable=True)
    mass_before = sorted_p.cumsum(-1) - sorted_p  # [..., V] mass strictly ahead of each token
    keep_sorted = mass_before < top_p
    keep_sorted[..., 0] = True  # the first token is always kept (top_p = 0 -> argmax)
    return torch.zeros_like(keep_sorted).scatter_(-1, order, keep_sorted)


def probs_from_logits(
    logits: torch.Tensor,  # [..., V]
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    min_p: float = 0.0,
) -> torch.Tensor:  # [..., V] float32
    """Turn logits into the sampling distribution (fp32), applying temperature, top-k, top-p, min-p.

    Args:
        logits: ``[..., V]`` any float dtype; computed in fp32.
        temperature: ``>= 0``; ``0`` gives the one-hot argmax (lowest id among ties); ``0 < T < 1e-20``
            the T -> 0+ limit (uniform over tied maxima; one-hot without ties).
        top_k: ``0`` disables; ``top_k >= V`` keeps everything.
        top_p: in ``[0, 1]``; ``1`` disables, ``0`` keeps only the top token.
        min_p: in ``[0, 1]``; ``0`` disables.

    Raises:
        ValueError naming the argument for a bad setting, or ``logits`` for a row containing NaN / +inf
        or made only of -inf (its distribution is undefined).
    """
    _check_args(temperature, top_k, top_p, min_p)
    check_tensor("logits", logits, kind="float", min_last=1)
    temperature, top_k, top_p, min_p = float(temperature), int(top_k), float(top_p), float(min_p)
    V = logits.shape[-1]
    if temperature == 0:
        idx = logits.argmax(-1, keepdim=True)
        out = torch.zeros(logits.shape, dtype=torch.float32, device=logits.device).scatter_(-1, idx, 1.0)
        # argmax would silently pick a NaN; check the picked values only (cheap).
        picked = logits.gather(-1, idx).float()
        if not bool(torch.isfinite(picked).all()):
            raise ValueError("logits contain NaN or inf in a row (temperature=0 argmax undefined)")
        return out
    scores = logits.float()
    if temperature < _TINY_TEMPERATURE:
        # logits / T overflows (inf - inf = NaN in the softmax); the T -> 0+ limit is uniform over the
        # row's maximal logits, which is what these scores give (ties are as good as exact at such T).
        scores = torch.where(scores == scores.amax(-1, keepdim=True), 0.0, float("-inf"))
    elif temperature != 1.0:
        scores = scores / temperature
    if 0 < top_k < V:
        scores = scores.masked_fill(~_top_k_mask(scores, top_k), float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    if top_p < 1.0:
        probs = probs * _top_p_mask(probs, float(top_p))
        probs = probs / probs.sum(-1, keepdim=True)
    if min_p > 0.0:
        keep = probs >= min_p * probs.amax(-1, keepdim=True)
        probs = probs * keep
        probs = probs / probs.sum(-1, keepdim=True)
    # NaN / +inf logits and all -inf rows make the *whole* softmax row NaN, so the first column tells.
    if not bool(torch.isfinite(probs[..., 0]).all()):
        raise ValueError("logits contain NaN or +inf, or a row that is entirely -inf")
    return probs


@contextmanager
def _one_thread():
    """Run O(B*V) tail work on the calling thread only.

    These ops (a few rows of V) are too small to gain from intra-op parallelism, while each parallel op
    pays a fork/join that becomes a whole scheduler slice (~10 ms) when another process holds the other
    core (measured on the shared 2-core machine). With the OpenMP backend the setting is per-thread.
    """
    n = torch.get_num_threads()
    if n == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


def sample_from_probs(
    probs: torch.Tensor,  # [..., V] non-negative, need not be normalised
    generator: torch.Generator | None = None,
) -> torch.Tensor:  # [...] int64
    """Draw one token per row by inverse CDF with exactly one uniform per row.

    Rows need not be normalised (the uniform is scaled by the row total), which lets callers sample a
    residual ``max(p - q, 0)`` without dividing. A token with probability 0 is never returned.

    Raises ValueError naming ``probs`` for a row with a negative entry, NaN / inf, or no mass (all zero):
    checked on every call (one ``amin`` pass, ~40% of the sampler's own time, measured), since such a
    row would otherwise return a token it gives no probability. TypeError for a non-float tensor or a
    ``generator`` that is not a ``torch.Generator``.

    Large rows are searched in two levels: the uniform first picks a block of ``_BLOCK`` tokens from the
    block sums (one vectorised reduction instead of a full-row cumulative sum), then a token inside that
    block from the block's own cumulative sum (float64). Block sums are fp32 sums of 256 values, so
    token probabilities are reproduced up to ~1e-7 relative.

    A few rows on the CPU (at most ``_NUMPY_ROWS``: one token per row of a batch-1 step, a draft's next
    token) take the same two levels in NumPy, row by row: the torch path's ~20 small ops cost ~140 us
    there whatever V, about 6% of a 2 ms llama.cpp step, against ~55-70 us (measured, V = 4096-49152). The same
    block sums (one torch op), the same uniform, the same search: the same token.
    """
    check_tensor("probs", probs, kind="float", min_last=1)
    check_generator("generator", generator, probs.device)
    if probs.device.type == "cpu" and probs.numel() <= _NUMPY_ROWS * probs.shape[-1]:
        return _sample_numpy(probs, generator)
    with _one_thread():  # one light pass over the rows: fork/join would cost more than it saves
        _check_mass(probs)
        return _sample(probs, generator)


_NUMPY_ROWS = 4  # a Python loop over rows; set on a first version where 5 rows ran about even with the torch
# path (this one, measured: 4-5 rows at 0.5-0.65x the torch path's time, V = 4096-49152)


def _sample_numpy(probs: torch.Tensor, generator) -> torch.Tensor:
    """:func:`_sample` for a few CPU rows: the block sums by the same torch op (so the same float32 sums), the
    searches in NumPy; one uniform per row from `generator`, drawn after the rows are checked, as there."""
    lead, V = probs.shape[:-1], probs.shape[-1]
    flat = probs.detach().reshape(-1, V)
    a = (flat if flat.dtype in (torch.float32, torch.float64) else flat.float()).numpy()  # [N, V] (no bfloat16)
    if a.size and not a.min() >= 0:  # a negative entry or a NaN (NaN fails every comparison)
        _check_mass(probs)  # raises, naming the row
    if V <= 4 * _BLOCK:
        bsum, bcdf = None, a.cumsum(1, dtype=np.float64)  # [N, V]
    else:
        # (one output's 256 values are summed in the same order whatever the thread count: each by one thread)
        bsum = _block_sums(flat if flat.stride(-1) == 1 else flat.contiguous()).numpy()  # [N, nb] float64
        bcdf = bsum.cumsum(1)
    total = bcdf[:, -1].tolist()  # [N]
    if not all(0.0 < t < math.inf for t in total):
        _check_total(torch.tensor(total, dtype=torch.float64))  # raises, naming the row
    u = torch.rand(a.shape[0], generator=generator, dtype=torch.float64, device=probs.device).tolist()  # [N]
    out = []
    for r, row in enumerate(a):
        x = min(u[r] * total[r], total[r] * (1.0 - 1e-12))  # strictly below the total: a token with mass
        hit = min(int(bcdf[r].searchsorted(x, "right")), bcdf.shape[1] - 1)
        if bsum is None:
            out.append(hit)
            continue
        icdf = row[hit * _BLOCK : (hit + 1) * _BLOCK].cumsum(dtype=np.float64)  # within block `hit`
        x_in = min(max(x - (float(bcdf[r, hit]) - float(bsum[r, hit])), 0.0), float(icdf[-1]) * (1.0 - 1e-12))
        out.append(hit * _BLOCK + min(int(icdf.searchsorted(x_in, "right")), len(icdf) - 1))
    return torch.tensor(out, dtype=torch.long).reshape(lead)


def _check_mass(probs: torch.Tensor) -> None:
    """No negative or NaN entry in any row [..., V] (one amin pass; NaN propagates into it). Rows of
    zero or infinite total are caught by :func:`_check_total` from the sums the sampler computes anyway."""
    if probs.numel() and not bool((probs.reshape(-1, probs.shape[-1]).amin(-1) >= 0).all()):
        lo = probs.reshape(-1, probs.shape[-1]).amin(-1)
        r = int((~(lo >= 0)).nonzero()[0])
        raise ValueError(f"probs: row {r} has a {'NaN' if lo[r].isnan() else 'negative'} entry; every row "
                         "must be non-negative with a positive finite total")


def _check_total(total: torch.Tensor) -> None:  # [N] or [N, 1] float64 row totals
    bad = ~(total > 0) | ~torch.isfinite(total)
    if bool(bad.any()):
        r = int(bad.reshape(-1).nonzero()[0])
        raise ValueError(f"probs: row {r} has total mass {float(total.reshape(-1)[r])} (all zero or inf); "
                         "every row must be non-negative with a positive finite total")


def _sample(probs: torch.Tensor, generator) -> torch.Tensor:
    lead, V = probs.shape[:-1], probs.shape[-1]
    flat = probs.reshape(-1, V)
    if flat.shape[0] == 0:
        return torch.zeros(lead, dtype=torch.long, device=probs.device)
    if V <= 4 * _BLOCK:
        cdf = torch.cumsum(flat, -1, dtype=torch.float64)
        _check_total(cdf[:, -1])
        return sample_from_cdf(cdf, generator).reshape(lead)
    if flat.stride(-1) != 1:
        flat = flat.contiguous()
    N = flat.shape[0]
    bsum = _block_sums(flat)  # [N, nb]
    bcdf = bsum.cumsum(-1)  # [N, nb]
    total = bcdf[:, -1:]
    _check_total(total)
    u = torch.rand(N, 1, generator=generator, dtype=torch.float64, device=flat.device) * total
    # u < total strictly, so the first block whose CDF exceeds u has positive mass.
    u = torch.minimum(u, total * (1.0 - 1e-12))
    k = torch.searchsorted(bcdf, u, right=True).clamp_(max=bcdf.shape[1] - 1)  # [N, 1]
    u_in = u - (bcdf.gather(1, k) - bsum.gather(1, k))  # position of u inside block k
    cols = k * _BLOCK + torch.arange(_BLOCK, device=flat.device)  # [N, _BLOCK]
    vals = flat.gather(1, cols.clamp(max=V - 1)).double() * (cols < V)
    icdf = vals.cumsum(-1)
    # Rounding between the fp32 block sum and this cumsum must not push u past the block's last token.
    u_in = torch.minimum(u_in.clamp(min=0.0), icdf[:, -1:] * (1.0 - 1e-12))
    j = torch.searchsorted(icdf, u_in, right=True).clamp_(max=_BLOCK - 1)
    return (k * _BLOCK + j).squeeze(1).reshape(lead)


_BLOCK = 256


def _block_sums(flat: torch.Tensor) -> torch.Tensor:
    """`flat [N, V]` (last dim contiguous) -> float64 sums of its blocks of ``_BLOCK`` tokens `[N, ceil(V / 256)]`,
    each summed in fp32 (fp64 for fp64 rows). Both samplers' paths take them from here, so they agree."""
    V = flat.shape[-1]
    nb_full = V // _BLOCK
    # Half inputs are summed in fp32 (passing dtype= for fp32 itself takes a much slower kernel).
    acc = {} if flat.dtype in (torch.float32, torch.float64) else {"dtype": torch.float32}
    bsum = flat.as_strided((flat.shape[0], nb_full, _BLOCK), (flat.stride(0), _BLOCK, 1)).sum(-1, **acc)
    if V % _BLOCK:
        bsum = torch.cat([bsum, flat[:, nb_full * _BLOCK :].sum(-1, keepdim=True, **acc)], 1)
    return bsum.double()


def sample_from_cdf(cdf: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Inverse-CDF draw from unnormalised cumulative sums ``cdf [N, V]`` (float64); one uniform per row."""
    u = torch.rand(cdf.shape[0], 1, generator=generator, dtype=torch.float64, device=cdf.device)
    # right=True: first index whose CDF is > u * total; zero-probability tokens share their left
    # neighbour's CDF value and so can never be that first index.
    total = cdf[:, -1:]
    idx = torch.searchsorted(cdf, torch.minimum(u * total, total * (1.0 - 1e-12)), right=True)
    return idx.clamp_(max=cdf.shape[-1] - 1).squeeze(1)
