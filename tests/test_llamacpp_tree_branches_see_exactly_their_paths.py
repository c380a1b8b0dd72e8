"""Trees on the llama.cpp backend, without llama.cpp: a fake context that keeps KV cells as llama.cpp does (a
cell: a position and a set of sequence ids; a query sees the cells of its first id at positions <= its own)
and applies llama.cpp's batch checks. Over hundreds of random trees, fed in one call (as the target verifies
them) or depth by depth (as the draft grows them), on ragged rows that leave: every node sees exactly the
row's tokens, its ancestors and itself; the kept path becomes the row's sequence, and no cell is left over."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from exactspec.backends.llamacpp import LlamaCppSession


class _Model:
    vocab_size, n_ctx = 20_000, 10**6  # token ids are the labels of the cells: all below vocab_size


class _Cells:
    """A unified KV cache of labelled cells; `seen` records, per fed token, the labels its query sees."""

    def __init__(self, n_seq, n_batch=512):
        self.n_seq, self.n_batch, self.cells, self.seen = n_seq, n_batch, [], []
        self.fail = False  # the next decode fails (as llama_decode may, e.g. with no cell left)

    def _max(self, s):
        return max((p for p, ids, _ in self.cells if s in ids), default=-1)

    def _min(self, s):
        return min((p for p, ids, _ in self.cells if s in ids), default=-1)

    def decode(self, tokens, pos, seq, flags, counts=None):
        if self.fail:
            self.fail = False
            raise RuntimeError("llama_decode returned 1")
        assert counts is None or len(tokens) <= self.n_batch, "sets of ids are fed in one decode"
        sets = [[int(s)] for s in seq] if counts is None else [list(map(int, r[:c])) for r, c in zip(seq, counts)]
        # llama.cpp's batch checks (llama_batch_allocr::init)
        for s in {x for st in sets for x in st}:
            mine = sorted(int(p) for p, st in zip(pos, sets) if s in st)
            assert mine[0] == self._max(s) + 1, f"sequence {s}: Y = X + 1"
            assert mine[-1] - mine[0] + 1 == len(set(mine)), f"sequence {s}: positions continuous"
        for st in sets:
            for s1 in st[1:]:
                assert (self._min(st[0]), self._max(st[0])) == (self._min(s1), self._max(s1)), "coupled, diverged"
        last = {}
        for p, st in zip(pos, sets):
            for s in st:
                assert p >= last.get(s, -1), "positions decreasing"
                last[s] = p
        for t, p, st in zip(tokens, pos, sets):
            self.cells.append((int(p), set(st), int(t)))
        for t, p, st in zip(tokens, pos, sets):
            self.seen.append(sorted(lab for q, ids, lab in self.cells if st[0] in ids and q <= p))
        return np.zeros((int(np.count_nonzero(flags)), _Model.vocab_size), np.float32)

    def decode_rows(self, tokens, pos, seq, flags, shape):  # the session's lean path (one id per token)
        return self.decode(tokens, pos, seq, flags).reshape(shape)

    def copy(self, src, dst, end):
        for p, ids, _ in self.cells:
            if src in ids and p < end:
                ids.add(dst)

    def remove(self, seq, start):
        for p, ids, _ in self.cells:
            if p >= start:
                ids.discard(int(seq))
        self.cells = [c for c in self.cells if c[1]]


def _session(rows, n_batch=512):
    ctx = _Cells(rows * 9, n_batch)
    return LlamaCppSession(_Model(), ctx, rows), ctx


def _random_tree(rng, n):
    parents = [-1]  # node 0: the pending token (target) or a first-depth node
    for i in range(1, n):
        parents.append(int(rng.integers(-1 if rng.random() < 0.2 else 0, i)))
    return parents


def _depth(parents, i):
    return 0 if parents[i] < 0 else 1 + _depth(parents, parents[i])


def _path(parents, i):
    return ([] if parents[i] < 0 else _path(parents, parents[i])) + [i]


@pytest.mark.parametrize("by_depth", [False, True])
def test_every_node_sees_its_row_its_ancestors_and_itself_and_the_kept_path_stays(by_depth):
    rng = np.random.default_rng(7 + by_depth)
    rows = 3
    s, ctx = _session(rows)
    label = iter(range(10**6))
    history = [[] for _ in range(rows)]  # per row, the labels of its committed tokens
    first = np.array([[next(label) for _ in range(4)] for _ in range(rows)])
    ok = torch.tensor([[1, 1, 1, 1], [0, 1, 1, 1], [0, 0, 0, 1]], dtype=torch.bool)  # ragged prompts
    s.forward(torch.from_numpy(first), ok)
    for r in range(rows):
        history[r] = [int(x) for x, k in zip(first[r], ok[r]) if k]
    live = list(range(rows))
    for step in range(120):
        n = int(rng.integers(1, 9))
        # a tree per row (forests allowed: -1 = top); fed depth by depth, all rows share one shape (as a draft's)
        parents = [_random_tree(rng, n)] * len(live) if by_depth else [_random_tree(rng, n) for _ in live]
        if by_depth:  # a node's depth must not be below an earlier node's: sort the shape breadth-first
            d = [_depth(parents[0], i) for i in range(n)]
            order_ = sorted(range(n), key=lambda i: (d[i], i))
            new_id = {old: k for k, old in enumerate(order_)}
            shape = [-1 if parents[0][old] < 0 else new_id[parents[0][old]] for old in order_]
            parents = [shape] * len(live)
        valid = rng.random((len(live), n)) < 0.9
        for r, par in enumerate(parents):  # an invalid node's subtree is invalid (as the drafter makes them)
            for i in range(n):
                if par[i] >= 0 and not valid[r, par[i]]:
                    valid[r, i] = False
        labels = np.array([[next(label) for _ in range(n)] for _ in live])
        depth = np.array([[_depth(p, i) for i in range(n)] for p in parents])
        anc = np.zeros((len(live), n, n), bool)
        for r, par in enumerate(parents):
            for i in range(n):
                for a in _path(par, i)[:-1]:
                    anc[r, i, a] = valid[r, a]
        base, start = s.length, s.n.copy()
        ctx.seen = []
        order = [list(range(n))] if not by_depth else \
            [[i for i in range(n) if depth[0, i] == d] for d in range(int(depth.max()) + 1)]
        fed = []
        for nodes in order:
            if not nodes:
                continue
            idx = torch.tensor(nodes)
            cols = torch.tensor(fed + nodes)
            att = torch.from_numpy(anc)[:, idx][:, :, cols]  # over the tree's slots so far, then the new ones
            pos = torch.from_numpy(start[:, None] + depth[:, nodes])
            s.forward_tree(torch.from_numpy(labels[:, nodes]), torch.from_numpy(valid[:, nodes]), pos, att, base=base)
            fed += nodes
        # each fed token saw: its row's committed tokens, its ancestors and itself
        seen = iter(ctx.seen)
        for nodes in order:  # call by call, row-major within a call
            for r in range(len(live)):
                for i in nodes:
                    if valid[r, i]:
                        want = sorted(history[live[r]] + [int(labels[r, a]) for a in _path(parents[r], i)])
                        assert next(seen) == want
        assert next(seen, None) is None
        # keep a root-to-node path per row (or nothing), then check the row's sequence holds exactly it
        keep_idx, keep_len = torch.zeros(len(live), n, dtype=torch.long), torch.zeros(len(live), dtype=torch.long)
        slot_of = {node: k for k, node in enumerate(fed)}
        for r, par in enumerate(parents):
            tops = [i for i in range(n) if par[i] < 0 and valid[r, i]]
            if not tops or rng.random() < 0.1:
                continue
            node = int(rng.choice(tops))
            path = [node]
            while True:
                kids = [i for i in range(n) if par[i] == path[-1] and valid[r, i]]
                if not kids or rng.random() < 0.3:
                    break
                path.append(int(rng.choice(kids)))
            keep_idx[r, :len(path)] = torch.tensor([slot_of[p] for p in path])
            keep_len[r] = len(path)
            history[live[r]] += [int(labels[r, p]) for p in path]
        s.keep(base, keep_len, path=keep_idx)
        for r in range(len(live)):
            seq = int(s.seq[r])
            cells = sorted((p, lab) for p, ids, lab in ctx.cells if seq in ids)
            assert [p for p, _ in cells] == list(range(len(history[live[r]])))
            assert [lab for _, lab in cells] == history[live[r]]
            assert s.n[r] == len(history[live[r]])
        assert all(len(ids & {int(x) for x in s.seq}) for _, ids, _ in ctx.cells), "a cell no row owns was left"
        assert sorted(s._free) == sorted(set(range(ctx.n_seq)) - set(range(rows)))
        if step in (40, 80) and len(live) > 1:  # a row leaves between steps
            gone = len(live) - 1
            s.select_rows(torch.tensor([i for i in range(len(live)) if i != gone]))
            live.pop(gone)
            ctx.cells = [c for c in ctx.cells if c[1]]
        # a chain step in between, as the draft's pending tokens are fed
        nxt = torch.tensor([[next(label)] for _ in live])
        s.forward(nxt, torch.ones(len(live), 1, dtype=torch.bool))
        for r in range(len(live)):
            history[live[r]].append(int(nxt[r, 0]))


def test_a_mask_that_is_not_a_tree_and_misuse_are_clear_errors():
    s, ctx = _session(1)
    s.forward(torch.tensor([[1, 2, 3]]), torch.ones(1, 3, dtype=torch.bool))
    base = s.length
    tok, ok = torch.tensor([[4, 5, 6]]), torch.ones(1, 3, dtype=torch.bool)
    pos = torch.tensor([[3, 4, 4]])
    att = torch.tensor([[[False, False, False], [True, False, False], [False, True, False]]])  # 2 sees 1, not 0
    with pytest.raises(ValueError, match="row 0, new slot 2"):
        s.forward_tree(tok, ok, pos, att, base=base)
    att = torch.tensor([[[False, False, False], [True, False, False], [True, False, False]]])
    with pytest.raises(ValueError, match="one position past its parent"):
        s.forward_tree(tok, ok, torch.tensor([[3, 4, 5]]), att, base=base)
    with pytest.raises(TypeError, match="base="):
        s.forward_tree(tok, ok, pos, att)
    s.forward_tree(tok, ok, pos, att, base=base)  # a root and two children
    with pytest.raises(RuntimeError, match="a tree is open"):
        s.forward(tok[:, :1], ok[:, :1])
    with pytest.raises(ValueError, match="not a path"):
        s.keep(base, torch.tensor([2]), path=torch.tensor([[1, 2]]))
    s.keep(base, torch.tensor([2]), path=torch.tensor([[0, 2]]))
    assert s.n.tolist() == [5]
    wide = torch.arange(11)[None]  # ten children of one root need nine forked ids; the context has eight
    att = torch.zeros(1, 11, 11, dtype=torch.bool)
    att[0, 1:, 0] = True
    pos = torch.tensor([[5] + [6] * 10])
    with pytest.raises(ValueError, match="ran out of sequence ids"):
        s.forward_tree(wide, torch.ones(1, 11, dtype=torch.bool), pos, att, base=s.length)
    assert s._tree is None and len(s._free) == 8  # nothing changed
    s.forward_tree(wide[:, :10], torch.ones(1, 10, dtype=torch.bool), pos[:, :10], att[:, :10, :10], base=s.length)
    assert not s._free  # eight forks: every spare id in use, and back once the tree ends
    s.keep(s._tree.base, torch.tensor([2]), path=torch.tensor([[0, 9]]))
    assert len(s._free) == 8 and s.n.tolist() == [7]


def _state(s, ctx):
    return (s._tree is None, sorted(s._free), s.n.tolist(), s.length,
            sorted((p, tuple(sorted(ids)), lab) for p, ids, lab in ctx.cells))


def test_a_failed_call_leaves_the_session_and_its_cells_as_they_were():
    s, ctx = _session(2, n_batch=8)
    s.forward(torch.tensor([[1, 2, 3], [4, 5, 6]]), torch.ones(2, 3, dtype=torch.bool))
    par = torch.tensor([[-1, 0, 0, 1, 2]] * 2)
    from exactspec.engine.treedraft import ancestors

    att, ok = ancestors(par), torch.ones(2, 5, dtype=torch.bool)
    pos = torch.tensor([[3, 4, 4, 5, 5]] * 2)
    tok = torch.tensor([[10, 11, 12, 13, 14], [20, 21, 22, 23, 24]])
    before = _state(s, ctx)
    with pytest.raises(ValueError, match="10 tree tokens over all rows in one llama.cpp decode, at most 8"):
        s.forward_tree(tok, ok, pos, att, base=s.length)
    assert _state(s, ctx) == before
    ctx.fail = True  # the decode itself fails after the forks took their cells
    with pytest.raises(RuntimeError, match="llama_decode"):
        s.forward_tree(tok[:, :4], ok[:, :4], pos[:, :4], att[:, :4, :4], base=s.length)
    assert _state(s, ctx) == before
    s.forward_tree(tok[:, :4], ok[:, :4], pos[:, :4], att[:, :4, :4], base=s.length)  # and it works after
    mid = _state(s, ctx)
    with pytest.raises(ValueError, match="not a path"):  # row 1's path is wrong: row 0 must not change either
        s.keep(s._tree.base, torch.tensor([2, 2]), path=torch.tensor([[0, 2], [0, 3]]))
    assert _state(s, ctx) == mid
    with pytest.raises(ValueError, match="counts must be"):
        s.keep(s._tree.base, torch.tensor([2]), path=torch.tensor([[0, 2]]))
    with pytest.raises(ValueError, match="path must be"):
        s.keep(s._tree.base, torch.tensor([2, 2]), path=torch.tensor([[0, 2]]))
    s.keep(s._tree.base, torch.tensor([2, 2]), path=torch.tensor([[0, 2], [0, 1]]))
    assert s.n.tolist() == [5, 5] and sorted(s._free) == list(range(2, 18))
