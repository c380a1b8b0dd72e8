"""Token trees on llama.cpp: a tree attention mask written as sets of sequence ids.

llama.cpp takes no attention mask. With one KV cache for all sequences (``kv_unified``), the query of a token
at position p whose first sequence id is s sees the cached cells that belong to s at positions <= p, and a
cell may belong to several sequences. So a tree is verified in one decode by giving every branch an id:

- a node continues its parent's branch (takes its id) when it is the parent's first child fed; any other
  child forks a fresh id, which first takes the parent's cached context, ``seq_cp(parent's id -> fresh,
  positions < pos(parent) + 1)`` (the row's tokens before the tree, and ancestors fed by earlier calls);
- a node is fed with its own branch id first, then the ids of its descendants fed in the same call;
- so node j's query sees the row's tokens before the tree, its ancestors and itself, and nothing else: a cell
  of j's branch at a position <= pos(j) lies on j's path, and a sibling at the same position carries other ids.

The mask asked for (``attend``, as :meth:`exactspec.backends.cache.SlotCache.forward_tree` takes it) is
checked to be such a tree, with positions one past the parent's; anything else is a ValueError.
Keeping the accepted path (:func:`keep_path`): the row's own sequence drops the tree's positions and takes the
cells of the deepest kept node's branch up to its position (one ``seq_cp``, nothing recomputed); every fresh id
is then removed, which frees the cells of the rejected nodes.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["Episode", "feed_tree", "keep_path"]


class Episode:
    """The tree slots fed since `base` (the session's slot count when the tree began), per row:
    position, branch id (-1: an invalid slot, never fed), parent slot (-1: the row's tokens before the tree),
    whether a child already continues the branch, and `chain [T, T]` (a slot's ancestors and itself)."""

    def __init__(self, base: int, rows: int, start: np.ndarray):
        self.base, self.start = base, start.copy()  # start [B]: the position of a depth-1 slot per row
        self.pos = [np.zeros(0, np.int64) for _ in range(rows)]
        self.bid = [np.zeros(0, np.int64) for _ in range(rows)]
        self.parent = [np.zeros(0, np.int64) for _ in range(rows)]
        self.taken = [[] for _ in range(rows)]
        self.root_taken = [False] * rows
        self.chain = [np.zeros((0, 0), bool) for _ in range(rows)]
        self.fresh = [[] for _ in range(rows)]  # ids forked in this tree, freed by keep_path


class _Plan(NamedTuple):
    """One row's new slots, planned before anything changes (:func:`_plan_row`)."""

    par: np.ndarray  # [S] parent slot of each new slot (-1: the row's tokens before the tree)
    chain: np.ndarray  # [T+S, T+S] each slot's ancestors and itself
    vis: np.ndarray  # [S, T+S] the slots each new slot sees besides itself
    bid: np.ndarray  # [T+S] branch ids
    taken: list  # [T+S] whether a child continues each slot's branch
    root_taken: bool
    fresh: list  # new slots that fork a fresh id
    copies: list  # (owner, fresh id, end): the forks' seq_cp calls


def _row(ep: Episode, b: int, att: np.ndarray, ok: np.ndarray, pos: np.ndarray):
    """Parents and the chain of row b's new slots; ValueError unless `att [S, T+S]` is a tree."""
    t, s = len(ep.bid[b]), len(ok)
    okall = np.concatenate([ep.bid[b] >= 0, ok])
    vis = att & okall[None, :]
    vis[np.arange(s), t + np.arange(s)] = False  # a query sees itself in any case
    vis[~ok] = False
    posall = np.concatenate([ep.pos[b], pos])
    score = np.where(vis, posall[None, :], -1)  # [S, T+S]
    par = score.argmax(1)
    par[score.max(1, initial=-1) < 0] = -1
    chain = np.zeros((t + s, t + s), bool)
    chain[:t, :t] = ep.chain[b]
    chain[t:] = vis
    chain[t + np.arange(s), t + np.arange(s)] = True
    has = par >= 0
    want = np.where(has[:, None], chain[np.maximum(par, 0)], False)
    expect = np.where(has, posall[np.maximum(par, 0)] + 1, ep.start[b])
    bad = ok & ((vis != want).any(1) | (par >= t + np.arange(s)) | (pos != expect))
    if bad.any():
        j = int(np.flatnonzero(bad)[0])
        raise ValueError(f"the llama.cpp backend verifies trees whose every node sees the row's tokens, its "
                         f"ancestors and itself, at one position past its parent (row {b}, new slot {j} is not "
                         "such a node)")
    return par, chain, vis


def feed_tree(session, tokens: np.ndarray, valid: np.ndarray, pos: np.ndarray, attend: np.ndarray):
    """Append `tokens [B, S]` as tree slots (`valid [B, S]`, `pos [B, S]`, `attend [B, S, T+S]` over the
    episode's slots and the new ones) in one decode. Returns the logits of the valid slots `[n_valid, V]`,
    row-major. The session holds `_tree` (the :class:`Episode`), `_free` (spare ids), `seq`, `_ctx`.
    Everything is checked before anything changes: a ValueError leaves the session as it was."""
    ep, ctx = session._tree, session._ctx
    b, s = tokens.shape
    free = list(session._free)
    plans = [_plan_row(ep, r, attend[r], valid[r], pos[r], int(session.seq[r]), free, ctx.n_seq)
             for r in range(b)]
    copies, sets = [], []
    for r, plan in enumerate(plans):
        t, bid = len(ep.bid[r]), plan.bid
        for j in np.flatnonzero(valid[r]):  # own id first, then the ids forked below it in this call
            sets.append([int(bid[t + j])] + [int(bid[t + d]) for d in plan.fresh if plan.vis[d, t + j]])
        copies += plan.copies
    n = len(sets)  # tokens fed
    raw = np.empty((0, session._vocab), np.float32)
    try:
        for src, dst, end in copies:  # before the decode: the forks take the cells cached so far
            ctx.copy(src, dst, end)
        if n:
            ids = np.zeros((n, max(len(x) for x in sets)), np.int32)
            counts = np.array([len(x) for x in sets], np.int32)
            for i, x in enumerate(sets):
                ids[i, :len(x)] = x
            raw = ctx.decode(tokens[valid].astype(np.int32), pos[valid].astype(np.int32), ids,
                             np.ones(n, np.int8), counts)
    except BaseException:  # nothing of this call stays: its forks own no cell, their ids stay free
        for _, dst, _ in copies:
            ctx.remove(dst, 0)
        raise
    session._free = free  # the call happened: record it
    for r, plan in enumerate(plans):
        t = len(ep.bid[r])
        ep.pos[r] = np.concatenate([ep.pos[r], pos[r]])
        ep.parent[r] = np.concatenate([ep.parent[r], plan.par])
        ep.bid[r], ep.taken[r], ep.chain[r], ep.root_taken[r] = plan.bid, plan.taken, plan.chain, plan.root_taken
        ep.fresh[r] += [int(plan.bid[t + d]) for d in plan.fresh]
    return raw


def _plan_row(ep: Episode, r: int, att, ok, pos, row_seq: int, free: list, n_seq: int) -> _Plan:
    """Row r's new slots: parents, chain, visibility (checked by :func:`_row`), then branch ids (taken from
    `free`) and the copies that give each fork its parent's cached context."""
    par, chain, vis = _row(ep, r, att, ok, pos)
    t, s = len(ep.bid[r]), len(ok)
    bid = np.concatenate([ep.bid[r], np.full(s, -1, np.int64)])
    taken, root_taken = ep.taken[r] + [False] * s, ep.root_taken[r]
    fresh, copies = [], []
    for j in np.flatnonzero(ok):
        p = int(par[j])
        owner = row_seq if p < 0 else int(bid[p])
        if not (root_taken if p < 0 else taken[p]):  # the first child continues the branch
            bid[t + j] = owner
        else:  # a fork sees what its parent sees: owner's cells up to the parent's position
            if not free:
                raise ValueError("tree: llama.cpp ran out of sequence ids for this tree's branches "
                                 f"({n_seq} in the context); a smaller tree or fewer rows")
            bid[t + j] = free.pop()
            end = int(ep.start[r]) if p < 0 else int(ep.pos[r][p] if p < t else pos[p - t]) + 1
            copies.append((owner, int(bid[t + j]), end))
            fresh.append(j)
        if p < 0:
            root_taken = True
        else:
            taken[p] = True
    return _Plan(par, chain, vis, bid, taken, root_taken, fresh, copies)


def keep_path(session, start: int, idx: np.ndarray, counts: list) -> tuple[np.ndarray, np.ndarray]:
    """Row r keeps the slots `idx[r, :counts[r]]` (`idx [B, W]`) of the episode that began at slot `start`: a
    path from the tree's first depth down. Returns the new lengths `[B]` and `keep [B, W]` (the entries kept);
    the episode's ids go back to the pool. Every row is checked before any cell changes: a ValueError leaves
    the session as it was."""
    ep, ctx = session._tree, session._ctx
    if idx.ndim != 2 or idx.shape[0] != len(session.seq) or max(counts, default=0) > idx.shape[1]:
        raise ValueError(f"keep: path must be [B, W] with B = {len(session.seq)} rows and W >= counts, got "
                         f"{list(idx.shape)} for counts {counts}")
    if start != ep.base:
        raise ValueError(f"keep: the open tree began at slot {ep.base}, not {start}")
    keep = np.arange(idx.shape[1])[None, :] < np.asarray(counts, dtype=np.int64)[:, None]  # [B, W]
    paths = []
    for r in range(len(session.seq)):
        path = idx[r, :int(counts[r])]
        if len(path) and ((path < 0).any() or (path >= len(ep.bid[r])).any()):
            raise ValueError("keep: a kept slot is not a slot of this tree")
        if not all(int(ep.parent[r][x]) == (int(path[i - 1]) if i else -1) and int(ep.bid[r][x]) >= 0
                   for i, x in enumerate(path.tolist())):
            raise ValueError("keep: the kept slots are not a path from the tree's top (the llama.cpp "
                             "backend keeps a root-to-node path of a tree)")
        paths.append(path)
    n = session.n.copy()
    for r, path in enumerate(paths):
        seq, p0, c = int(session.seq[r]), int(ep.start[r]), len(path)  # p0: the tree's first position
        if c == 0:
            ctx.remove(seq, p0)
        else:
            owner = int(ep.bid[r][int(path[-1])])
            if owner == seq:  # the kept path is the row's own branch: drop what lies beyond it
                ctx.remove(seq, p0 + c)
            else:  # the row's sequence takes the kept branch's cells (below `p0` they are its own already)
                ctx.remove(seq, p0)
                ctx.copy(owner, seq, p0 + c)
        for f in ep.fresh[r]:
            ctx.remove(f, 0)
            session._free.append(f)
        n[r] = p0 + c
    return n, keep
