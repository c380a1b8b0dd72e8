"""Tree speculation in the engine: draft a token tree, verify it in ONE target pass, keep the accepted path.

One step, for the B rows still generating (:class:`TreeStepper`):

1. :func:`exactspec.engine.treedraft.draft_tree` drafts a tree per row (one draft forward per depth);
2. the target runs ONE forward over [pending, node_1 .. node_N] with a tree attention mask (a node sees the
   row's real tokens, the pending token, its ancestors and itself) and position ids by depth: a 4-D mask on
   transformers, a sequence id per branch on llama.cpp (:mod:`exactspec.backends.llamacpptree`);
3. :func:`exactspec.verification.candidates.verify_tree` walks the tree with the exact multi-round rule ("deterministic"
   candidates under greedy decoding, "without_replacement" when sampling): per row the accepted path
   (any depth, any branch) and the token after it;
4. both KV caches keep only the accepted path (the session's ``keep(start, counts, path)``: entries moved
   into place per row, or the kept branch made the row's sequence), nothing is recomputed.

``tree`` (the argument of ``SpeculativeGenerator.generate``): a tuple of branching factors (a static
tree), an int (a dynamic tree with that many nodes, EAGLE-2), or ``"auto"`` (the shape of
:func:`exactspec.speed.treemath.optimal_tree` for the measured acceptance per (depth, rank) and the cost model,
re-planned as the statistics grow; ``gamma="auto"``'s chain when trees do not pay:
:mod:`exactspec.engine.treepolicy`). A chain of gamma tokens is the tree
``(1,) * gamma`` and runs through the same code.
"""
from __future__ import annotations

import time

import torch

from exactspec.backends.cache import left_pack, sync as _sync
from exactspec.verification.candidates import verify_candidates
from exactspec.engine.treedraft import ancestors, draft_tree
from exactspec.speed.treemath import shape_parents, tree_label
from exactspec.engine.treepolicy import learn_from_trees, planner_for

__all__ = ["parse_tree", "TreeStepper", "run_tree"]


DYNAMIC_WIDTH, DYNAMIC_BRANCH, DYNAMIC_MAX_DEPTH = 3, 3, 6


def parse_tree(tree, has_draft: bool = True, method: str = "token"):
    """Validate ``tree``: None, a tuple of branching factors >= 1, an int node budget >= 1, or "auto".
    Trees are verified by the multi-round rule (the token rule per sibling), so method="block" is refused."""
    if tree is not None and not has_draft:
        raise ValueError("tree speculation needs a draft model (draft=...); a model-free drafter drafts chains")
    if tree is not None and method == "block":
        raise ValueError("method='block' verifies chains only; tree speculation uses the multi-round token "
                         "rule (method='token' or 'greedy')")
    if tree is None or (isinstance(tree, str) and tree == "auto"):
        return tree
    if isinstance(tree, bool):
        raise ValueError(f"tree must be None, a tuple of branching factors, an int node budget or 'auto', "
                         f"got {tree!r}")
    if isinstance(tree, int):
        if tree < 1:
            raise ValueError(f"tree: a dynamic tree needs a node budget >= 1, got {tree!r}")
        return tree
    if isinstance(tree, (tuple, list)) and tree and all(
            isinstance(b, int) and not isinstance(b, bool) and b >= 1 for b in tree):
        return tuple(tree)
    raise ValueError(f"tree must be None, a tuple of branching factors >= 1 (e.g. (3, 2, 1, 1)), an int "
                     f"node budget >= 1 or 'auto', got {tree!r}")


def plan_of(tree) -> tuple:
    """The drafting plan for a parsed static or dynamic ``tree``."""
    if isinstance(tree, int):
        # Each depth is one draft call: a small budget spread over 6 depths pays for calls it cannot fill.
        return ("dynamic", tree, DYNAMIC_WIDTH, DYNAMIC_BRANCH, min(DYNAMIC_MAX_DEPTH, tree // 2 + 1))
    return ("static", shape_parents(tree))


class TreeStepper:
    """The tree step of the decoding loop, over the target's session and a DraftModelDrafter's state.

    :meth:`step` drafts, verifies in one target call and returns what each row emitted;
    :meth:`commit` keeps the accepted paths in both caches; :meth:`select_rows` drops finished rows.
    """

    def __init__(self, target_cache, drafter, spec):
        from exactspec.engine.drafters import DraftModelDrafter

        if not isinstance(drafter, DraftModelDrafter):
            raise ValueError("tree speculation needs a draft model (draft=...), not a model-free drafter")
        self.target, self.drafter, self.spec = target_cache, drafter, spec

    def step(self, pending: torch.Tensor, plan, depth_limit: int):
        """Returns (`emitted [B, D+1]` path tokens then the corrected/bonus token, `accepted [B]` path
        length, `next_token [B]`, `tree` DraftTree or None, `verdict path [B, D]`, fed width)."""
        t0 = time.perf_counter()
        tree = draft_tree(self.drafter, self.spec, plan, depth_limit)
        _sync(pending.device)
        t1 = time.perf_counter()
        b = pending.shape[0]
        n = 0 if tree is None else tree.num_nodes
        tokens = pending[:, None] if tree is None else torch.cat([pending[:, None], tree.tokens], 1)
        valid = tokens >= 0
        depth = torch.zeros_like(tokens)  # [B, N+1]: the pending token at depth 0, node i at its depth
        if tree is not None:
            depth[:, 1:] = tree.depth
        attend_new = torch.zeros(b, n + 1, n + 1, dtype=torch.bool, device=pending.device)
        attend_new[:, :, 0] = True  # everyone sees the pending token
        if tree is not None:
            attend_new[:, 1:, 1:] = ancestors(tree.parents) & valid[:, None, 1:]
        self._start = self.target.length
        pos = self.target.n_real[:, None] + depth
        logits = self.target.forward_tree(tokens, valid, pos, attend_new, base=self._start)  # [B, N+1, V]
        _sync(pending.device)
        t2 = time.perf_counter()
        p = self.spec.probs(logits)
        if tree is None:
            nxt = self.spec.sample(p[:, 0])
            self.bonus = torch.ones_like(nxt, dtype=torch.bool)
            path = torch.zeros(b, 0, dtype=torch.long, device=pending.device)
        else:
            path, nxt = self._verify(tree, p)
        acc = (path >= 0).sum(1)
        path_tok = tree.tokens.gather(1, path.clamp(min=0)) if tree is not None else path
        emitted = torch.cat([path_tok, torch.zeros_like(nxt)[:, None]], 1)
        emitted.scatter_(1, acc[:, None], nxt[:, None])
        self._tree, self._path = tree, path
        self.times = (t1 - t0, t2 - t1, time.perf_counter() - t2)  # draft, target forward, verification
        return emitted, acc, nxt, tree, path, n + 1

    def _verify(self, tree, p):
        """Walk every row's tree at once, depth by depth: at the node each row has reached, the exact
        multi-round rule (:func:`exactspec.verification.candidates.verify_candidates`, the rule ``verify_tree`` applies
        node by node) over its children in rank order; accepted -> descend, else the row emits the residual
        sample; at a leaf (no candidates) it emits a bonus token from p. Rows may have different trees."""
        scheme = "without_replacement"
        b, n = tree.tokens.shape
        dev = p.device
        ok = tree.tokens >= 0
        c = int(tree.rank[ok].max()) + 1 if bool(ok.any()) else 1
        kids = torch.full((b, (n + 1) * c), -1, dtype=torch.long, device=dev)  # [B, (N+1) * C]
        slot = (tree.parents + 1) * c + tree.rank
        kids.scatter_(1, torch.where(ok, slot, torch.full_like(slot, (n + 1) * c)).clamp(max=(n + 1) * c - 1),
                      torch.where(ok, torch.arange(n, device=dev).expand(b, -1), kids[:, :n]))
        kids = kids.view(b, n + 1, c)
        d = int(tree.depth.max()) if n else 0
        path = torch.full((b, d), -1, dtype=torch.long, device=dev)
        nxt = torch.zeros(b, dtype=torch.long, device=dev)
        node = torch.full((b,), -1, dtype=torch.long, device=dev)
        self.bonus = torch.zeros(b, dtype=torch.bool, device=dev)
        rows = torch.arange(b, device=dev)
        for depth in range(d + 1):
            ch = kids[rows, node[rows] + 1]  # [A, C] node ids, -1 = none
            cand = torch.where(ch >= 0, tree.tokens[rows[:, None], ch.clamp(min=0)], torch.full_like(ch, -1))
            pr = p[rows, node[rows] + 1]
            if self.spec.greedy:  # the rule on one-hot p: accept the child that is p's argmax, else emit it
                top = pr.argmax(-1)  # [A]
                hit = cand == top[:, None]  # greedy siblings are distinct: at most one hit
                a = torch.where(hit.any(1), hit.long().argmax(1), torch.full_like(top, -1))
                t = top
            else:
                q = tree.q[rows, node[rows] + 1]
                q = torch.where((ch[:, :1] >= 0), q, pr)  # a leaf was never fed to the draft: no q is read
                # p and q come from spec.probs and every candidate was drawn from q: skip the input checks
                a, t = verify_candidates(pr, q, cand, scheme=scheme, generator=self.spec.generator, checks="none")
            acc = a >= 0
            nxt[rows[~acc]] = t[~acc]
            self.bonus[rows[~acc]] = (ch[~acc] < 0).all(1)  # no candidates: a leaf, the token is a bonus
            down = rows[acc]
            if depth < d:
                node[down] = ch[acc, a[acc]]
                path[down, depth] = node[down]
            rows = down
            if not rows.numel():
                break
        return path, nxt

    def commit(self, accepted: torch.Tensor, next_token: torch.Tensor) -> None:
        """Keep [pending, accepted path] in the target cache and the fed part of the path in the draft's;
        the next token (and the path's last node when the draft never fed it) becomes the draft's pending."""
        tree, path, drafter = self._tree, self._path, self.drafter
        nxt = next_token[:, None]
        ones = torch.ones_like(nxt, dtype=torch.bool)
        w = int(accepted.max()) + 1 if accepted.numel() else 1
        self.target.keep(self._start, accepted + 1, path=torch.cat([torch.zeros_like(nxt), path + 1], 1)[:, :w])
        if tree is None:  # nothing was fed to the draft this step
            drafter.pending, drafter.pending_valid = left_pack(
                torch.cat([drafter.pending, nxt], 1), torch.cat([drafter.pending_valid, ones], 1))
            return
        slot = torch.where(path >= 0, tree.dslot.gather(1, path.clamp(min=0)), torch.full_like(path, -1))
        fed = slot >= 0  # every path node but possibly the last was fed (it has children)
        wd = int(fed.sum(1).max()) if fed.numel() else 0
        drafter.state.keep(tree.base, fed.sum(1), path=slot.clamp(min=0)[:, :wd])
        last = path.gather(1, (accepted - 1).clamp(min=0)[:, None])  # [B, 1]
        last_tok = tree.tokens.gather(1, last.clamp(min=0))
        unfed = (accepted > 0)[:, None] & (tree.dslot.gather(1, last.clamp(min=0)) < 0)
        drafter.pending, drafter.pending_valid = left_pack(torch.cat([last_tok.clamp(min=0), nxt], 1),
                                                           torch.cat([unfed, ones], 1))

    def select_rows(self, rows: torch.Tensor) -> None:
        self.target.select_rows(rows)
        self.drafter.select_rows(rows)


def _label(tree) -> str:
    """The tree of row 0 (all rows share a static tree's shape), without its invalid nodes (-1 tokens: a
    sampled node with fewer candidates than children, e.g. under top-p) and their descendants."""
    if tree is None:
        return ""
    return tree_label(valid_parents(tree.parents[0].tolist(), tree.tokens[0].tolist()))


def valid_parents(parents: list[int], tokens: list[int]) -> list[int]:
    """`parents` of the nodes whose token and ancestors are all valid (>= 0), renumbered among themselves."""
    new: dict[int, int] = {}
    out = []
    for i, (p, t) in enumerate(zip(parents, tokens)):
        if t >= 0 and (p < 0 or p in new):
            new[i] = len(out)
            out.append(-1 if p < 0 else new[p])
    return out


def verified_pairs(tree, path: torch.Tensor, accepted: torch.Tensor) -> list[list[tuple[int, int, bool]]]:
    """Per row, the (depth index, rank, accepted) of every sibling verification the walk made."""
    out = []
    if tree is None:
        return [[] for _ in range(path.shape[0])]
    for par, tok, rank, pth, a in zip(tree.parents.tolist(), tree.tokens.tolist(), tree.rank.tolist(),
                                      path.tolist(), accepted.tolist()):
        kids = {}
        for i, (p, t) in enumerate(zip(par, tok)):
            if t >= 0:
                kids[p] = kids.get(p, 0) + 1
        pairs = []
        for j in range(a):
            r = rank[pth[j]]
            pairs.extend((j, s, s == r) for s in range(r + 1))
        last = pth[a - 1] if a else -1
        pairs.extend((a, s, False) for s in range(kids.get(last, 0)))
        out.append(pairs)
    return out


def run_tree(gen, ids, mask, max_new, spec, tree, eos, pad, prior_key=()):
    """The decoding loop of ``SpeculativeGenerator`` with tree speculation (a generator of StreamStep,
    returning the GenerationOutput); `gen` is the generator, `tree` the parsed ``tree`` argument."""
    import copy

    from exactspec.engine.output import GenerationOutput, StreamStep
    from exactspec.engine.steps import emit, emitted_counts, prefill
    from exactspec.speed.stats import GenerationStats

    device, b = ids.device, ids.shape[0]
    stats = GenerationStats()
    out = torch.full((b, max_new), pad, dtype=torch.long, device=device)  # [B, max_new]
    from_draft = torch.zeros(b, max_new, dtype=torch.bool, device=device)
    n_gen = torch.zeros(b, dtype=torch.long, device=device)
    eos_ids = frozenset(eos.tolist())
    t_start, suspended = time.perf_counter(), 0.0
    active = torch.arange(b, device=device) if max_new > 0 else torch.zeros(0, dtype=torch.long)
    drafter = copy.copy(gen.drafter)
    planner = planner_for(gen, b, prior_key) if tree == "auto" else None  # exactspec.engine.treepolicy
    if planner is None:
        plan = plan_of(tree)
    if max_new > 0:
        target, pending, _, _ = prefill(gen.target, drafter, ids, mask)
        stepper = TreeStepper(target, drafter, spec)
        stats.prefill_time = time.perf_counter() - t_start
    while active.numel():
        if planner is not None:
            plan = planner.next_plan(stats)
        left = max_new - n_gen[active]  # [B] tokens still to write
        t0 = time.perf_counter()
        calls0, first0 = drafter.forward_calls, drafter.first_call_time
        emitted, n, nxt, dtree, path, fed = stepper.step(pending, plan, int(left.max()) - 1)
        calls = drafter.forward_calls - calls0
        stats.draft_calls += calls
        if calls:  # the first call's whole iteration, as exactspec.engine.drafters times a chain's
            stats.draft_steps += 1
            stats.draft_first_time += drafter.first_call_time - first0 if calls > 1 else stepper.times[0]
        _sync(device)
        # a tree deeper than the tokens left is cut, exactly; then after the first EOS (exactspec.engine.steps)
        rows, n_l = active.tolist(), n.tolist()
        proposed = [r[:c] for r, c in zip(emitted.tolist(), torch.minimum(n + 1, left).tolist())]
        tokens, flags, count, done = emit(out, from_draft, n_gen, active, rows, proposed, n_l, eos_ids, max_new)
        depth = torch.zeros_like(n) if dtree is None else \
            torch.where(dtree.tokens >= 0, dtree.depth, torch.zeros_like(dtree.depth)).max(1).values
        stats.record_step(*emitted_counts(count, n_l, depth.tolist()), fed=fed, row_ids=rows)
        stats.record_tree(n_l, verified_pairs(dtree, path, n),
                          0 if dtree is None else int((dtree.tokens >= 0).sum()))
        stats.gamma_history.append(calls)
        stats.tree_history.append(_label(dtree))
        _sync(device)
        t2 = time.perf_counter()
        t_draft, t_target, t_verify = stepper.times
        stats.draft_time += t_draft
        stats.target_time += t_target
        stats.verify_time += (t2 - t0) - t_draft - t_target
        t_out = time.perf_counter()
        yield StreamStep(rows=rows, tokens=tokens, from_draft=flags, finished=list(done), gamma=calls,
                         # "all drafts kept" <=> the path ended at a leaf: its last token is a bonus token
                         drafted=torch.where(stepper.bonus, n, torch.maximum(depth, n + 1)).tolist())
        t3 = time.perf_counter()
        suspended += t3 - t_out
        keep = torch.tensor([not d for d in done], dtype=torch.bool, device=device)
        if keep.any():
            stepper.commit(n, nxt)
            pending = nxt
            if not bool(keep.all()):
                rows_kept = keep.nonzero().squeeze(1)
                stepper.select_rows(rows_kept)
                pending = pending[rows_kept]
        active = active[keep]
        stats.verify_time += time.perf_counter() - t3
    new_len = int(n_gen.max()) if b else 0
    stats.new_tokens, stats.row_tokens = int(n_gen.sum()), n_gen.tolist()
    stats.total_time = time.perf_counter() - t_start - suspended
    if planner is not None:
        learn_from_trees(gen, prior_key, stats, b, planner)
    return GenerationOutput(torch.cat([ids, out[:, :new_len]], 1), stats, from_draft[:, :new_len])
