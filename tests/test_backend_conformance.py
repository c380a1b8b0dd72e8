"""What every backend must satisfy: the model seam's calls (:mod:`exactspec.backends.seam`), checked against the
backend's own fresh forward over each row's text.

One suite, parametrized over the backends: transformers (a tiny random Llama through the slot cache: the
target's lean forward, transformers' own eager forward, a draft's fused forward) and llama.cpp (the same kind of
Llama written as a GGUF file; skipped where llama-cpp-python is not installed). The tests use the seam's calls
alone (``open_session``, ``forward``, ``forward_tree``, ``keep``, ``select_rows``, ``n_real``, ``length``), so a
third backend passes by implementing the seam: add a param to :func:`backend` giving its model, a second copy
of the same weights for reference sessions (llama.cpp runs one session per model at a time), its tolerance and
a counter of its model evaluations (to show that a keep recomputes nothing). Tolerances are relative to the
largest reference logit: float64 transformers agrees with itself to rounding; llama.cpp rounds a k-token batch
otherwise than a whole-sequence one (about 1e-3). Each comparison that could pass by accident also checks that
the wrong context (the text before the keep) gives logits the tolerance tells apart.
"""
from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from _spec_models import tiny_lm
from exactspec.backends.optional import llamacpp_available
from exactspec.backends.seam import open_session, supports_trees, vocab_size


@dataclass
class Backend:
    model: object  # what the sessions under test run on
    again: object  # the same weights, for reference sessions
    target: bool  # open_session(target=)
    tol: float  # |logits - reference| / max |reference|
    evaluations: object  # () -> model evaluations so far

    def open(self, rows: int):
        return open_session(self.model, rows, target=self.target)

    def fresh(self, tokens: list[int]) -> torch.Tensor:
        """`[len(tokens), V]`: one forward over the whole text on a fresh session."""
        s = open_session(self.again, 1, target=self.target)
        t = torch.tensor([tokens])
        return s.forward(t, torch.ones_like(t, dtype=torch.bool))[0]


def _torch_backend(attn: str, target: bool) -> Backend:
    model = tiny_lm("llama", seed=3, attn=attn, dtype=torch.float64)
    calls = [0]
    model.model.embed_tokens.register_forward_hook(lambda *a: calls.__setitem__(0, calls[0] + 1))
    return Backend(model, model, target, 1e-5, lambda: calls[0])  # (eager softmaxes in fp32: measured 4e-7)


def _llamacpp_backend(root) -> Backend:
    from _tiny_gguf import gguf_of, llama_dir, tokenizer_dir

    from exactspec.backends.llamacpp import LlamaCppLM
    from exactspec.backends.llamacppctx import Context

    gguf = gguf_of(llama_dir(root / "hf", seed=1, scale=4.0, head_scale=6.0, tok_dir=tokenizer_dir(root / "tok")),
                   root / "t.gguf")
    calls, run = [0], Context._run

    def counted(self, z, shape):
        calls[0] += 1
        return run(self, z, shape)
    Context._run = counted  # (module-scoped: the fixture puts it back)
    model = LlamaCppLM(gguf, threads=1, n_ctx=128)
    b = Backend(model, LlamaCppLM(gguf, threads=1, n_ctx=128), True, 2e-3, lambda: calls[0])  # (measured 1.0e-3)
    b.restore = lambda: setattr(Context, "_run", run)
    return b


@pytest.fixture(scope="module", params=[
    "transformers", "transformers-eager", "transformers-draft",
    pytest.param("llamacpp", marks=pytest.mark.skipif(not llamacpp_available(), reason="llama-cpp-python missing"))])
def backend(request, tmp_path_factory):
    if request.param == "llamacpp":
        b = _llamacpp_backend(tmp_path_factory.mktemp("gguf"))
        yield b
        b.restore()
        return
    yield _torch_backend("eager" if request.param == "transformers-eager" else "sdpa",
                         target=request.param != "transformers-draft")


def _same(got: torch.Tensor, want: torch.Tensor, tol: float, unlike: torch.Tensor | None = None) -> None:
    """`got` equals `want` to `tol` of want's largest magnitude; `unlike` (the wrong context's logits) does not."""
    scale = float(want.abs().max())
    err = float((got - want).abs().max()) / scale
    assert err <= tol, f"logits differ by {err:.2e} of their magnitude (tolerance {tol:.0e})"
    if unlike is not None:
        assert float((unlike - want).abs().max()) / scale > 10 * tol, "the test cannot tell the contexts apart"


def _prompts(v: int, g) -> tuple[torch.Tensor, torch.Tensor, list[list[int]]]:
    """Three left-padded prompts of 7, 4 and 1 tokens: `ids [3, 7]`, `valid [3, 7]`, the texts."""
    ids = torch.randint(1, v, (3, 7), generator=g)
    valid = torch.arange(7)[None, :] >= torch.tensor([0, 3, 6])[:, None]
    return ids, valid, [ids[b, valid[b]].tolist() for b in range(3)]


def _rand(v: int, shape, g) -> torch.Tensor:
    return torch.randint(1, v, shape, generator=g)


@torch.inference_mode()
def test_prefill_then_new_tokens_give_the_logits_of_one_fresh_forward_over_the_whole_text(backend):
    v, g = vocab_size(backend.model), torch.Generator().manual_seed(0)
    ids, valid, texts = _prompts(v, g)
    s = backend.open(3)
    out = s.forward(ids, valid)  # [3, 7, V]
    for b in range(3):
        _same(out[b, valid[b]], backend.fresh(texts[b]), backend.tol)
    new = _rand(v, (3, 3), g)
    out = s.forward(new, torch.ones(3, 3, dtype=torch.bool))  # [3, 3, V]
    for b in range(3):
        texts[b] += new[b].tolist()
        _same(out[b], backend.fresh(texts[b])[-3:], backend.tol)
    new = _rand(v, (3, 2), g)
    last = s.forward(new, torch.ones(3, 2, dtype=torch.bool), logits_to_keep=1)
    assert last.shape == (3, 1, out.shape[-1])
    for b in range(3):
        _same(last[b, 0], backend.fresh(texts[b] + new[b].tolist())[-1], backend.tol)


@torch.inference_mode()
def test_ragged_rows_each_see_only_their_own_real_tokens(backend):
    """A left-packed call (a drafter's pending tokens) and a right-ragged one (a chain's verification): each
    row's real slots get the logits of its own text; slots it did not feed do not exist for it."""
    v, g = vocab_size(backend.model), torch.Generator().manual_seed(1)
    ids, valid, texts = _prompts(v, g)
    s = backend.open(3)
    s.forward(ids, valid)
    for ok in ([[1, 1, 1], [0, 1, 1], [0, 0, 1]], [[1, 1, 1], [1, 1, 0], [1, 0, 0]]):
        ok = torch.tensor(ok, dtype=torch.bool)
        new = _rand(v, (3, 3), g)
        out = s.forward(new, ok)
        for b in range(3):
            texts[b] += new[b, ok[b]].tolist()
            _same(out[b, ok[b]], backend.fresh(texts[b])[-int(ok[b].sum()):], backend.tol)
    assert s.n_real.tolist() == [len(t) for t in texts]


@torch.inference_mode()
def test_keeping_a_chains_first_n_recomputes_nothing_and_continues_as_the_kept_text_from_scratch(backend):
    """Steps as the loop makes them: pending + drafts fed (ragged lengths), each row keeps its first n (0 to
    all), then the next step. Over several steps the rows' holes accumulate; each row's logits stay those of
    its kept text alone, n_real counts it, and the keep runs no model evaluation."""
    v, g = vocab_size(backend.model), torch.Generator().manual_seed(2)
    ids, valid, texts = _prompts(v, g)
    s = backend.open(3)
    s.forward(ids, valid)
    for counts, lengths in (([1, 4, 2], [3, 3, 1]), ([0, 1, 3], [2, 0, 2]), ([3, 2, 1], [2, 4, 0])):
        k = max(lengths) + 1
        ok = torch.arange(k)[None, :] <= torch.tensor(lengths)[:, None]  # [B, K+1]
        new = _rand(v, (3, k), g)
        start, before = s.length, s.n_real.tolist()
        s.forward(new, ok)
        evals = backend.evaluations()
        s.keep(start, torch.tensor(counts))
        assert backend.evaluations() == evals
        assert s.n_real.tolist() == [n + c for n, c in zip(before, counts)]
        assert start + max(counts) <= s.length <= start + k
        fed = [texts[b] + new[b, ok[b]].tolist() for b in range(3)]
        for b in range(3):
            texts[b] += new[b, :counts[b]].tolist()
        more = _rand(v, (3, 2), g)
        out = s.forward(more, torch.ones(3, 2, dtype=torch.bool))
        for b in range(3):
            dropped = counts[b] < ok[b].sum()
            _same(out[b], backend.fresh(texts[b] + more[b].tolist())[-2:], backend.tol,
                  unlike=backend.fresh(fed[b] + more[b].tolist())[-2:] if dropped else None)
            texts[b] += more[b].tolist()


@torch.inference_mode()
def test_a_keep_over_several_calls_keeps_each_rows_first_real_slots_across_them(backend):
    """As a draft model's step: its pending tokens (left-packed), then drafts one call at a time, then one keep
    from the step's first slot of each row's first real tokens (here the pending ones and some drafts)."""
    v, g = vocab_size(backend.model), torch.Generator().manual_seed(3)
    ids, valid, texts = _prompts(v, g)
    s = backend.open(3)
    s.forward(ids, valid)
    start = s.length
    pend_ok = torch.tensor([[0, 1], [1, 1], [0, 1]], dtype=torch.bool)
    pend = _rand(v, (3, 2), g)
    s.forward(pend, pend_ok)
    drafts = _rand(v, (3, 2), g)
    for j in range(2):
        s.forward(drafts[:, j:j + 1], torch.ones(3, 1, dtype=torch.bool))
    took = [2, 0, 1]
    s.keep(start, pend_ok.sum(1) + torch.tensor(took))
    for b in range(3):
        texts[b] += pend[b, pend_ok[b]].tolist() + drafts[b, :took[b]].tolist()
    assert s.n_real.tolist() == [len(t) for t in texts]
    more = _rand(v, (3, 1), g)
    out = s.forward(more, torch.ones(3, 1, dtype=torch.bool))
    for b in range(3):
        _same(out[b, 0], backend.fresh(texts[b] + more[b].tolist())[-1], backend.tol)


@torch.inference_mode()
def test_select_rows_drops_rows_and_the_rest_continue_unchanged(backend):
    v, g = vocab_size(backend.model), torch.Generator().manual_seed(4)
    ids, valid, texts = _prompts(v, g)
    s = backend.open(3)
    s.forward(ids, valid)
    start = s.length
    new = _rand(v, (3, 3), g)
    s.forward(new, torch.ones(3, 3, dtype=torch.bool))
    s.keep(start, torch.tensor([3, 1, 0]))  # holes in two rows
    for b, c in enumerate([3, 1, 0]):
        texts[b] += new[b, :c].tolist()
    for rows in ([0, 2], [1]):  # (positions among the rows left)
        s.select_rows(torch.tensor(rows))
        texts = [texts[r] for r in rows]
        assert s.n_real.tolist() == [len(t) for t in texts]
        more = _rand(v, (len(rows), 2), g)
        out = s.forward(more, torch.ones(len(rows), 2, dtype=torch.bool))
        for b in range(len(rows)):
            texts[b] += more[b].tolist()
            _same(out[b], backend.fresh(texts[b])[-2:], backend.tol)


# A tree after the pending token (node 0), nodes in depth order: 1, 2 children of 0; 3, 4 of 1; 5 of 2; 6 of 3.
TREE = [-1, 0, 0, 1, 1, 2, 3]
WIDTH_ONE = [-1, 0, 1, 2]  # a chain is a tree of width one
# Per row: a forked branch, the first-child branch, the pending token alone (path [B, 4], counts [B]).
PATHS = {id(TREE): ([[0, 2, 5, 0], [0, 1, 3, 6], [0, 0, 0, 0]], [3, 4, 1]),
         id(WIDTH_ONE): ([[0, 1, 2, 0], [0, 1, 2, 3], [0, 0, 0, 0]], [3, 4, 1])}


def _path(parents: list[int], i: int) -> list[int]:
    return ([] if parents[i] < 0 else _path(parents, parents[i])) + [i]


def _feed_tree(s, parents: list[int], tokens: torch.Tensor, ok: torch.Tensor, by_depth: bool) -> torch.Tensor:
    """Feed a tree (`tokens [B, N]`, `ok [B, N]`) in one forward_tree or depth by depth (one `base`, as a draft
    grows its tree); returns its logits `[B, N, V]`."""
    n = len(parents)
    depth = torch.tensor([len(_path(parents, i)) - 1 for i in range(n)])
    see = torch.zeros(n, n, dtype=torch.bool)  # node i sees its path (ancestors and itself)
    for i in range(n):
        see[i, _path(parents, i)] = True
    see = see[None] & ok[:, None, :]  # [B, N, N]
    calls = [list(range(n))] if not by_depth else [[i for i in range(n) if depth[i] == d]
                                                   for d in range(int(depth.max()) + 1)]
    base, n0, fed, out = s.length, s.n_real, [], []
    for nodes in calls:
        cols = fed + nodes
        out.append(s.forward_tree(tokens[:, nodes], ok[:, nodes], n0[:, None] + depth[nodes],
                                  see[:, nodes][:, :, cols], base=base))
        fed = cols
    return torch.cat(out, 1)


@pytest.mark.parametrize("by_depth", [False, True])
@pytest.mark.parametrize("parents", [TREE, WIDTH_ONE], ids=["branching", "width-one"])
@torch.inference_mode()
def test_each_tree_node_gets_the_logits_of_the_chain_over_its_path(backend, parents, by_depth):
    if not supports_trees(backend.model):
        pytest.skip("this backend verifies chains only")
    v, g = vocab_size(backend.model), torch.Generator().manual_seed(5)
    ids, valid, texts = _prompts(v, g)
    s = backend.open(3)
    s.forward(ids, valid)
    tokens = _rand(v, (3, len(parents)), g)
    ok = torch.ones_like(tokens, dtype=torch.bool)
    ok[2, -1] = False  # an invalid leaf (a draft with fewer candidates than children)
    out = _feed_tree(s, parents, tokens, ok, by_depth)
    for b in range(3):
        for i in range(len(parents)):
            if ok[b, i]:
                _same(out[b, i], backend.fresh(texts[b] + tokens[b, _path(parents, i)].tolist())[-1], backend.tol)


@pytest.mark.parametrize("parents", [TREE, WIDTH_ONE], ids=["branching", "width-one"])
@torch.inference_mode()
def test_keeping_a_tree_path_recomputes_nothing_and_continues_as_that_path_from_scratch(backend, parents):
    """Two tree steps: each row keeps a root-to-node path (a forked branch, the first-child branch, the pending
    token alone), then the next tokens see exactly that path; n_real counts it, length is start + W."""
    if not supports_trees(backend.model):
        pytest.skip("this backend verifies chains only")
    v, g = vocab_size(backend.model), torch.Generator().manual_seed(6)
    ids, valid, texts = _prompts(v, g)
    s = backend.open(3)
    s.forward(ids, valid)
    path, counts = PATHS[id(parents)]
    for step in range(2):
        tokens = _rand(v, (3, len(parents)), g)
        start, before = s.length, s.n_real.tolist()
        _feed_tree(s, parents, tokens, torch.ones_like(tokens, dtype=torch.bool), by_depth=bool(step))
        evals = backend.evaluations()
        s.keep(start, torch.tensor(counts), path=torch.tensor(path))
        assert backend.evaluations() == evals
        assert s.n_real.tolist() == [n + c for n, c in zip(before, counts)] and s.length == start + 4
        all_nodes = [texts[b] + tokens[b].tolist() for b in range(3)]
        for b in range(3):
            texts[b] += tokens[b, path[b][:counts[b]]].tolist()
        more = _rand(v, (3, 2), g)
        out = s.forward(more, torch.ones(3, 2, dtype=torch.bool))
        for b in range(3):
            dropped = counts[b] < len(parents)
            _same(out[b], backend.fresh(texts[b] + more[b].tolist())[-2:], backend.tol,
                  unlike=backend.fresh(all_nodes[b] + more[b].tolist())[-2:] if dropped else None)
            texts[b] += more[b].tolist()


@torch.inference_mode()
def test_n_real_and_length_count_each_rows_tokens_and_every_slot_fed(backend):
    """n_real: the tokens each row holds. length: every slot fed (padding too); forward and forward_tree add
    their S, a chain's keep leaves start + the slots up to the last one some row kept, a path's start + W."""
    v, g = vocab_size(backend.model), torch.Generator().manual_seed(7)
    ids, valid, _ = _prompts(v, g)
    s = backend.open(3)
    assert s.device.type in ("cpu", "cuda")
    s.forward(ids, valid)
    assert s.length == 7 and s.n_real.tolist() == [7, 4, 1]
    start = s.length
    s.forward(_rand(v, (3, 4), g), torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]], dtype=torch.bool))
    assert s.length == 11 and s.n_real.tolist() == [9, 8, 2]
    s.keep(start, torch.tensor([1, 2, 0]))  # the last slot kept is the second
    assert s.length == start + 2 and s.n_real.tolist() == [8, 6, 1]
    s.keep(s.length, torch.zeros(3, dtype=torch.long))  # nothing fed since: nothing changes
    assert s.length == start + 2 and s.n_real.tolist() == [8, 6, 1]
    if supports_trees(backend.model):
        start = s.length
        _feed_tree(s, TREE, _rand(v, (3, len(TREE)), g), torch.ones(3, len(TREE), dtype=torch.bool), False)
        assert s.length == start + len(TREE)  # (n_real while a tree is open: unspecified, read it before)
        s.keep(start, torch.tensor([2, 1, 3]), path=torch.tensor([[0, 1, 0], [0, 0, 0], [0, 2, 5]]))
        assert s.length == start + 3 and s.n_real.tolist() == [10, 7, 4]
