"""Multi-candidate verification (multi-round rejection sampling) and a token-tree walker.

Multi-round rejection sampling (SpecInfer, Miao et al. 2024; Sequoia, Chen et al. 2024, Alg. 2): with a
running residual R (initially the target p), candidate s is accepted with prob ``min(1, R(x_s)/q_s(x_s))``
where ``q_s`` is the distribution x_s was actually drawn from; on rejection ``R <- norm(max(R - q_s, 0))``.
If every candidate is rejected the emitted token is drawn from the final R. Per scheme:

- ``"iid"``: candidates drawn i.i.d. from q, so ``q_s = q`` every round;
- ``"without_replacement"``: drawn from q without replacement, so ``q_s`` = q with the earlier candidates
  removed and renormalised;
- ``"deterministic"``: fixed candidates (e.g. top-n), so ``q_s`` = one-hot(x_s); draft_probs is unused.

The formula functions ``candidate_draft_dist``, ``mrrs_accept_prob``, ``mrrs_residual`` (built on the
token rule's ``token_accept_prob`` and ``residual_or_p``, looked up on :mod:`exactspec.verification.rules` at call time)
are what :func:`verify_candidates` and so :func:`verify_tree` run, and what :mod:`exactspec.verification.exact`
enumerates to check exactness: one definition each, so a change to one reaches both.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from exactspec.verification import rules
from exactspec.verification.sampling import sample_from_probs
from exactspec.verification.rulechecks import (_check_rows, _to32, _validate_candidates, _validate_tree, _validate_tree_call,
                              names_sampled_rows)

__all__ = [
    "SCHEMES", "verify_candidates", "TokenTree", "TreeVerdict", "verify_tree",
    "candidate_draft_dist", "mrrs_accept_prob", "mrrs_residual",
]

SCHEMES = ("iid", "without_replacement", "deterministic")


# ----------------------------------------------------------------------------- formula functions
def candidate_draft_dist(q: torch.Tensor, previous: torch.Tensor | None, x: torch.Tensor, scheme: str):
    """``q_s`` [..., V]: the distribution candidate ``x`` [...] was drawn from, given the candidates before it.

    ``previous`` [..., s] (for "without_replacement") are the earlier candidates, which are removed from q.
    """
    if scheme == "iid":
        return q
    if scheme == "deterministic":
        shape = x.shape + (q.shape[-1],) if q is not None else None
        return torch.zeros(shape, dtype=q.dtype, device=q.device).scatter_(-1, x[..., None], 1.0)
    # without_replacement
    qs = q if previous is None or previous.shape[-1] == 0 else q.scatter(-1, previous, 0.0)
    return qs / qs.sum(-1, keepdim=True)


def mrrs_accept_prob(r_x: torch.Tensor, qs_x: torch.Tensor) -> torch.Tensor:
    """min(1, R(x)/q_s(x)): the same ratio test as the token rule, against the running residual."""
    return rules.token_accept_prob(r_x, qs_x)


def mrrs_residual(r: torch.Tensor, qs: torch.Tensor) -> torch.Tensor:
    """Normalised ``max(R - q_s, 0)`` [..., V]; falls back to R where its mass is ~0 (only when R ~ q_s,
    in which case the rejection that leads here has probability ~0)."""
    res = rules.residual_or_p(r, qs)
    return res / res.sum(-1, keepdim=True)


# ----------------------------------------------------------------------------- batched rule
@names_sampled_rows("target_probs/draft_probs")
def verify_candidates(
    target_probs: torch.Tensor,  # [B, V]
    draft_probs: torch.Tensor | None,  # [B, V]; None allowed for scheme="deterministic"
    candidates: torch.Tensor,  # [B, n] int64; -1 = no candidate (padding, trailing)
    *,
    scheme: str,
    generator: torch.Generator | None = None,
    checks: str = "rule",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Multi-round rejection sampling over n candidates; the emitted token is distributed exactly as p.

    Returns ``(accepted_index [B], next_token [B])``: ``accepted_index`` is the position in ``candidates``
    of the accepted candidate or -1; ``next_token`` is the emitted token (the accepted candidate, or a
    sample from the final residual when every candidate was rejected).
    """
    _validate_candidates(target_probs, draft_probs, candidates, scheme, SCHEMES, checks, generator)
    B, V = target_probs.shape
    if scheme == "without_replacement" and candidates.shape[1] > 1:
        c = candidates
        same = (c[:, :, None] == c[:, None, :]) & (c[:, :, None] >= 0)
        same &= ~torch.eye(c.shape[1], dtype=torch.bool, device=c.device)
        if bool(same.any()):
            raise ValueError("candidates: a token repeats within a row under scheme='without_replacement'")
    R = _to32(target_probs).clone()
    if checks != "none":
        _check_rows(R, None, "target_probs", "candidate")
    q = None
    if scheme != "deterministic":
        q = _to32(draft_probs)
        if checks != "none":
            _check_rows(q, None, "draft_probs", "candidate")
    n = candidates.shape[1]
    if n == 0:  # no candidate: the emitted token is a plain sample from p
        return torch.full((B,), -1, dtype=torch.long, device=R.device), sample_from_probs(R, generator)
    cand = candidates.long()
    ar = torch.arange(B, device=R.device)
    acc = torch.full((B,), -1, dtype=torch.long, device=R.device)
    active = torch.ones(B, dtype=torch.bool, device=R.device)
    u = torch.rand(B, n, generator=generator, device=R.device)
    qs = q
    for s in range(n):
        x = cand[:, s]
        present = (x >= 0) & active
        if not bool(present.any()):
            continue
        xs = x.clamp(min=0)
        if scheme == "deterministic":
            qs = candidate_draft_dist(R, None, xs, scheme)
        elif scheme == "without_replacement" and s > 0:
            qs = candidate_draft_dist(q, cand[:, :s].clamp(min=0), xs, scheme)
        qs_x = qs[ar, xs]
        if checks != "none" and bool(((qs_x <= 0) & present).any()):
            b = int(((qs_x <= 0) & present).nonzero()[0])
            raise ValueError(
                f"candidates: candidate {s} of row {b} has draft probability 0 under scheme={scheme!r} "
                "(not drawn from draft_probs, or a repeat under without_replacement)"
            )
        a = mrrs_accept_prob(R[ar, xs], torch.where(present, qs_x, torch.ones_like(qs_x)))
        ok = present & (u[:, s] < a)
        acc = torch.where(ok, torch.full_like(acc, s), acc)
        active &= ~ok
        rej = present & ~ok
        if bool(rej.any()):
            R[rej] = mrrs_residual(R[rej], qs[rej])
    nxt = sample_from_probs(R, generator)
    nxt = torch.where(acc >= 0, cand[ar, acc.clamp(min=0)], nxt)
    return acc, nxt


# ----------------------------------------------------------------------------- token trees
@dataclass
class TokenTree:
    """A token tree with a shape shared by the batch.

    parents: ``[N]`` node parent ids, -1 = child of the root (the position after the prompt); nodes are
             topologically ordered (``parents[i] < i``). Siblings are verified in node-id order.
    tokens:  ``[N]`` (same tokens for every row) or ``[B, N]`` (per-row tokens on the shared shape).

    Probability tensors passed to :func:`verify_tree` index nodes shifted by one: row 0 is the root and
    row ``i + 1`` is node ``i``.
    """

    parents: torch.Tensor | list
    tokens: torch.Tensor | list

    def __post_init__(self):
        self.parents, self.tokens = _validate_tree(self.parents, self.tokens)

    @property
    def num_nodes(self) -> int:
        return self.parents.shape[0]

    def children(self) -> list[list[int]]:
        """children()[u + 1] = node ids whose parent is u (index 0 = the root's children)."""
        out = [[] for _ in range(self.num_nodes + 1)]
        for i, par in enumerate(self.parents.tolist()):
            out[par + 1].append(i)
        return out

    def depth(self) -> int:
        d = [0] * self.num_nodes
        for i, par in enumerate(self.parents.tolist()):
            d[i] = 1 if par < 0 else d[par] + 1
        return max(d, default=0)


@dataclass
class TreeVerdict:
    """accepted [B]: number of tree tokens kept (the depth reached); path [B, D]: node ids along the
    accepted path (-1 padded); next_token [B]: the token emitted after the path."""

    accepted: torch.Tensor
    path: torch.Tensor
    next_token: torch.Tensor

    def tokens(self, tree: TokenTree) -> list[list[int]]:
        out = []
        for b in range(self.path.shape[0]):
            nodes = [i for i in self.path[b].tolist() if i >= 0]
            toks = tree.tokens if tree.tokens.dim() == 1 else tree.tokens[b]
            out.append([int(toks[i]) for i in nodes] + [int(self.next_token[b])])
        return out


@names_sampled_rows("target_probs/draft_probs")
def verify_tree(
    tree: TokenTree,
    target_probs: torch.Tensor,  # [B, N+1, V]: row 0 root, row i+1 after node i
    draft_probs: torch.Tensor | None,  # [B, N+1, V]: row u+1 = distribution node u's children were drawn from
    *,
    scheme: str,
    generator: torch.Generator | None = None,
) -> TreeVerdict:
    """Walk the tree depth by depth: at the current node run :func:`verify_candidates` over its children;
    on acceptance descend, otherwise emit the residual sample; at a leaf emit a bonus token from p.

    Batched over B: at each depth the rows sitting at the same node are verified together.
    """
    _validate_tree_call(tree, TokenTree, target_probs, draft_probs, scheme, SCHEMES, generator)
    N = tree.num_nodes
    B, _, V = target_probs.shape
    toks = tree.tokens.expand(B, N) if tree.tokens.dim() == 1 else tree.tokens
    if toks.shape[0] != B:
        raise ValueError(f"tree.tokens has {toks.shape[0]} rows, expected B = {B}")
    kids = tree.children()
    D = tree.depth()
    dev = target_probs.device
    toks = toks.to(dev)
    node = torch.full((B,), -1, dtype=torch.long, device=dev)
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    path = torch.full((B, D), -1, dtype=torch.long, device=dev)
    nxt = torch.zeros(B, dtype=torch.long, device=dev)
    for depth in range(D + 1):
        for u in sorted(set(node[~done].tolist())):
            rows = ((node == u) & ~done).nonzero().squeeze(1)
            ch = kids[u + 1]
            if not ch:  # leaf: everything on the path was accepted, bonus token from the target
                nxt[rows] = sample_from_probs(_to32(target_probs[rows, u + 1]), generator)
                done[rows] = True
                continue
            ch_t = torch.tensor(ch, dtype=torch.long, device=dev)
            a, t = verify_candidates(
                target_probs[rows, u + 1], None if draft_probs is None else draft_probs[rows, u + 1],
                toks[rows][:, ch_t], scheme=scheme, generator=generator,
            )
            ok = a >= 0
            node[rows[ok]] = ch_t[a[ok]]
            path[rows[ok], depth] = ch_t[a[ok]]
            nxt[rows[~ok]] = t[~ok]
            done[rows[~ok]] = True
    return TreeVerdict((path >= 0).sum(-1), path, nxt)
