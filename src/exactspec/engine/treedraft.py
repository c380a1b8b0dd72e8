"""Drafting a token tree with a draft model: one draft forward per depth, over that depth's whole frontier.

The draft's session (its KV cache: :mod:`exactspec.backends.seam`) first takes the pending tokens (as in chain
drafting), giving q at the root. Then, depth by depth, the frontier nodes are fed in ONE forward with a
tree attention mask (each sees the row's real tokens, its ancestors already in the cache, and itself)
and position ids by depth; their children are drawn from the q each of them produces:

- greedy: the draft's top-c tokens (any candidates are exact under the greedy rule);
- sampling: c tokens drawn WITHOUT replacement from q, in draw order (an exponential race: the order of
  ``q(x) / E_x`` with E_x ~ Exp(1) is a sequential without-replacement sample). Tokens with q = 0 cannot
  be drawn; their ranks become invalid nodes (-1). Verification then runs the multi-round rule with the
  ``"without_replacement"`` residuals (:func:`exactspec.verification.candidates.verify_tree`).

A dynamic tree (EAGLE-2) expands, at each depth, the ``width`` frontier nodes with the highest score and
keeps the best ``n`` nodes at the end. The score of a node is its parent's score times the ``rank``-th
largest q of its parent, not q of its own token: with sampling, whether a drawn token is kept must not
depend on the token itself (that would bias the candidates away from q), and since scores fall along a
path and ties go to earlier-created nodes, the nodes ranked before a node never depend on its token or
its subtree. In greedy mode the rank-th largest q is exactly q of the rank-th child, as in EAGLE-2.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from exactspec.backends.cache import sync

__all__ = ["DraftTree", "draft_tree", "ancestors"]


@dataclass
class DraftTree:
    """One step's token tree, per row on a node axis of N (nodes in topological order).

    tokens [B, N] int64 (-1 = invalid node: no token, never verified), parents [B, N] (-1 = root),
    depth [B, N] (1..D), rank [B, N] (order among siblings), q [B, N+1, V] fp32 or None (greedy): row 0 the
    distribution the root's children were drawn from, row i+1 node i's; dslot [B, N]: the node's slot
    among the draft cache's tree slots (-1: never fed), base: the draft cache's first tree slot;
    shared: every row has the same parents (a static tree).
    """

    tokens: torch.Tensor
    parents: torch.Tensor
    depth: torch.Tensor
    rank: torch.Tensor
    q: torch.Tensor | None
    dslot: torch.Tensor
    base: int
    shared: bool

    @property
    def num_nodes(self) -> int:
        return self.tokens.shape[1]


def ancestors(parents: torch.Tensor) -> torch.Tensor:
    """`parents [B, N]` -> `[B, N, N]` bool: anc[b, i, j] = node j is a proper ancestor of node i."""
    b, n = parents.shape
    if n == 0:
        return torch.zeros(b, 0, 0, dtype=torch.bool, device=parents.device)
    step = torch.zeros(b, n, n + 1, device=parents.device)
    step.scatter_(2, (parents + 1)[:, :, None], 1.0)
    step = step[:, :, 1:]  # [B, N, N] one-hot parent (root dropped)
    anc, power = step.clone(), step
    for _ in range(n - 1):
        power = torch.bmm(power, step)
        if not bool(power.any()):
            break
        anc += power
    return anc > 0


def _children(logits: torch.Tensor, count: int, spec) -> tuple:
    """Draw `count` ranked children from each frontier node's logits `[B, F, Vd]`.

    Returns tokens [B, F, c] (-1 invalid), proxy [B, F, c] (the rank-th largest q, the score factor),
    q [B, F, V] fp32 (None in greedy mode).
    """
    v = spec.vocab_size
    if spec.greedy:  # top-c of the draft's own softmax (temperature 1) for ranking, lowest id first on ties
        p = torch.softmax(logits[..., :v].float(), -1)
        proxy, tok = p.topk(count, -1)
        return tok, proxy, None
    q = spec.probs(logits)  # [B, F, V]
    noise = torch.empty_like(q).exponential_(generator=spec.generator)
    # Draw order of a without-replacement sample (exponential race); q = 0 (e.g. outside a draft head's token
    # subset) ranks last, also when the noise is exactly 0 (0/0 would be NaN, which topk ranks first).
    tok = torch.where(q > 0, q / noise, -1.0).topk(count, -1).indices
    ok = q.gather(-1, tok) > 0
    proxy = q.topk(count, -1).values  # value-free score: the rank-th largest q, not q of the token drawn
    return torch.where(ok, tok, torch.full_like(tok, -1)), torch.where(ok, proxy, -torch.ones_like(proxy)), q


def _at(x: torch.Tensor, idx: torch.Tensor, root) -> torch.Tensor:
    """x[b, idx[b, j]] per row, and `root` where idx is -1 (the root, which has no entry in x)."""
    if x.shape[1] == 0:
        return torch.full(idx.shape, root, dtype=x.dtype, device=idx.device)
    fill = torch.full((), root, dtype=x.dtype, device=idx.device)
    return torch.where(idx >= 0, x.gather(1, idx.clamp(min=0)), fill)


class _Builder:
    """Nodes created so far, per row (arrays [B, n] grown depth by depth), and the draft cache feeding."""

    def __init__(self, drafter, spec, capacity: int):
        self.drafter, self.spec = drafter, spec
        self.state = drafter.state
        b = drafter.pending.shape[0]
        dev = drafter.pending.device
        self.b, self.dev = b, dev
        self.tokens = torch.zeros(b, 0, dtype=torch.long, device=dev)
        self.parents, self.depth, self.rank = (torch.zeros_like(self.tokens) for _ in range(3))
        self.score = torch.zeros(b, 0, device=dev)
        self.dslot = torch.zeros_like(self.tokens)
        self.q = None if spec.greedy else torch.zeros(b, capacity + 1, spec.vocab_size, device=dev)
        self.fed = torch.zeros_like(self.tokens)  # node id of each fed tree slot
        self.calls = 0

    def root(self) -> torch.Tensor:
        """Feed the pending tokens; return the root's logits [B, 1, Vd]."""
        t0 = time.perf_counter()
        logits = self.state.forward(self.drafter.pending, self.drafter.pending_valid, logits_to_keep=1)
        self._count(t0, logits)
        self.base = self.state.length
        self.n0 = self.state.n_real  # [B]: a depth-d node sits at position n0 + d - 1
        return logits[:, -1:]

    def _count(self, t0, logits):
        if self.calls == 0:  # the first call's iteration runs until the next call starts (feed)
            self.t_first = t0
        elif self.calls == 1:  # (a step of one call: the caller counts its whole draft time)
            self.drafter.first_call_time += t0 - self.t_first
        self.calls += 1
        self.drafter.forward_calls += 1

    def feed(self, nodes: torch.Tensor) -> torch.Tensor:
        """Feed frontier nodes `[B, F]` (node ids) in one forward; return their logits [B, F, Vd]."""
        if self.calls == 1:  # the first call's iteration ends here: its kernels finished
            sync(self.dev)
        t0 = time.perf_counter()
        tok = self.tokens.gather(1, nodes)
        dep = self.depth.gather(1, nodes)
        anc = ancestors(self.parents)  # [B, n, n]
        rows = anc.gather(1, nodes[:, :, None].expand(-1, -1, anc.shape[2]))  # [B, F, n]
        f = nodes.shape[1]
        in_cache = rows.gather(2, self.fed[:, None, :].expand(-1, f, -1))  # ancestors among fed slots
        attend = torch.cat([in_cache, torch.zeros(self.b, f, f, dtype=torch.bool, device=self.dev)], 2)
        logits = self.state.forward_tree(tok, tok >= 0, self.n0[:, None] + dep - 1, attend, base=self.base)
        self._count(t0, logits)
        self.dslot.scatter_(1, nodes, torch.arange(self.fed.shape[1], self.fed.shape[1] + f,
                                                   device=self.dev).expand(self.b, -1))
        self.fed = torch.cat([self.fed, nodes], 1)
        return logits

    def add(self, parent_nodes: torch.Tensor, logits: torch.Tensor, counts: list[int]) -> None:
        """Children of `parent_nodes [B, F]` (-1 = root) drawn from `logits [B, F, Vd]`; node f gets
        `counts[f]` children (shared over rows)."""
        c = max(counts)
        if c == 0:
            return
        tok, proxy, q = _children(logits, c, self.spec)
        f = parent_nodes.shape[1]
        if q is not None:  # row u + 1 of q: the distribution node u's children come from
            self.q.scatter_(1, (parent_nodes + 1)[:, :, None].expand(-1, -1, q.shape[-1]), q)
        keep = [(j, r) for j in range(f) for r in range(counts[j])]  # breadth-first: by parent, then rank
        jj = torch.tensor([j for j, _ in keep], device=self.dev)
        rr = torch.tensor([r for _, r in keep], device=self.dev)
        par = parent_nodes[:, jj]
        par_ok = _at(self.tokens, par, 0) >= 0  # an empty node's children are empty too
        new_tok = torch.where(par_ok, tok[:, jj, rr], torch.full_like(par, -1))
        score = _at(self.score, par, 1.0) * proxy[:, jj, rr]
        new_score = torch.where(new_tok >= 0, score, -torch.ones_like(score))
        par_depth = _at(self.depth, par, 0)
        self.tokens = torch.cat([self.tokens, new_tok], 1)
        self.parents = torch.cat([self.parents, par], 1)
        self.depth = torch.cat([self.depth, par_depth + 1], 1)
        self.rank = torch.cat([self.rank, rr.expand(self.b, -1)], 1)
        self.score = torch.cat([self.score, new_score], 1)
        self.dslot = torch.cat([self.dslot, torch.full_like(par, -1)], 1)

    def result(self, select: torch.Tensor | None, shared: bool) -> DraftTree:
        """The tree of the nodes `select [B, n]` (ascending node ids, closed under parents), or of all."""
        if select is None:
            t, p, d, r, s = self.tokens, self.parents, self.depth, self.rank, self.dslot
            qsel = self.q
        else:
            remap = torch.full((self.b, self.tokens.shape[1] + 1), -1, dtype=torch.long, device=self.dev)
            remap[:, 1:].scatter_(1, select, torch.arange(select.shape[1], device=self.dev).expand(self.b, -1))
            t, d, r, s = (x.gather(1, select) for x in (self.tokens, self.depth, self.rank, self.dslot))
            p = remap.gather(1, self.parents.gather(1, select) + 1)
            rows = torch.cat([torch.zeros_like(select[:, :1]), select + 1], 1)  # the root's q, then the nodes'
            qsel = None if self.q is None else self.q.gather(1, rows[:, :, None].expand(-1, -1, self.q.shape[2]))
        if qsel is not None:
            qsel = qsel[:, : t.shape[1] + 1]
        return DraftTree(t, p, d, r, qsel, s, self.base, shared)


def draft_tree(drafter, spec, plan, depth_limit: int) -> DraftTree | None:
    """Draft one step's tree. `plan`: ``("static", parents)`` (breadth-first parent ids shared by every
    row) or ``("dynamic", n, width, branch, max_depth)``. The tree is cut at `depth_limit` (tokens left);
    None when that is 0 (nothing is fed: the step verifies the pending token alone)."""
    if depth_limit <= 0:
        return None
    if plan[0] == "static":
        parents = [p for p, d in zip(plan[1], _depths(plan[1])) if d <= depth_limit]
        return _static(drafter, spec, parents)
    _, n, width, branch, max_depth = plan
    return _dynamic(drafter, spec, n, width, branch, min(max_depth, depth_limit))


def _depths(parents) -> list[int]:
    d = []
    for p in parents:
        d.append(1 if p < 0 else d[p] + 1)
    return d


def _static(drafter, spec, parents: list[int]) -> DraftTree:
    bld = _Builder(drafter, spec, len(parents))
    depths = _depths(parents)
    kids = [0] * (len(parents) + 1)
    for p in parents:
        kids[p + 1] += 1
    logits = bld.root()
    root = torch.full((bld.b, 1), -1, dtype=torch.long, device=bld.dev)
    bld.add(root, logits, [kids[0]])
    for d in range(1, max(depths, default=0)):
        front = [i for i, di in enumerate(depths) if di == d and kids[i + 1] > 0]
        if not front:
            break
        nodes = torch.tensor(front, device=bld.dev).expand(bld.b, -1)
        bld.add(nodes, bld.feed(nodes), [kids[i + 1] for i in front])
    return bld.result(None, shared=True)


def _dynamic(drafter, spec, n: int, width: int, branch: int, max_depth: int) -> DraftTree:
    cap = branch + (max_depth - 1) * width * branch
    bld = _Builder(drafter, spec, cap)
    logits = bld.root()
    bld.add(torch.full((bld.b, 1), -1, dtype=torch.long, device=bld.dev), logits, [branch])
    start = 0
    for _ in range(1, max_depth):
        layer = bld.score[:, start:]  # this depth's nodes, in creation order
        w = min(width, layer.shape[1])
        order = torch.sort(layer, dim=1, descending=True, stable=True).indices[:, :w]  # ties: created first
        nodes = order + start
        start = bld.tokens.shape[1]
        bld.add(nodes, bld.feed(nodes), [branch] * w)
    total = bld.tokens.shape[1]
    keep = min(n, total)
    best = torch.sort(bld.score, dim=1, descending=True, stable=True).indices[:, :keep]
    select = best.sort(1).values  # creation order is topological
    return bld.result(select, shared=False)
