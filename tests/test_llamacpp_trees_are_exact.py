"""Token trees on llama.cpp (branches as sequence ids): every node's logits are those of its path, on llama.cpp
recomputed as a chain and on transformers' tree mask alike; the kept path continues as if recomputed; tree
speculation is greedy-equal to the backend's target-alone loop and samples the law of its own logits
(chi-square); a long run leaves no KV cell behind."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("llama_cpp")

from _tiny_gguf import assert_two_tokens_follow_the_law, tiny_pair  # noqa: E402

from exactspec import SpeculativeGenerator  # noqa: E402
from exactspec.backends.seam import open_session  # noqa: E402
from exactspec.engine.baseline import target_alone_loop  # noqa: E402
from exactspec.engine.treedraft import ancestors  # noqa: E402

RTOL = 2e-3  # ggml's rounding against torch's, and a k-token batch against a chain (see the seam test)

# a pending token (node 0) and a tree under it: 1, 2 children of 0; 3, 4 of 1; 5 of 2; 6 of 3; node 4 invalid
PARENTS = [-1, 0, 0, 1, 1, 2, 3]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from exactspec.backends.llamacpp import LlamaCppLM

    pair = tiny_pair(tmp_path_factory.mktemp("tiny"))
    pair["again"] = LlamaCppLM(pair["t_gguf"], threads=1, n_ctx=256)  # the target loaded twice: a session each
    return pair


def _tree(tokens):
    """`attend [B, N, N]` (ancestors), positions by depth past the row, valid: the PARENTS tree per row."""
    b, n = tokens.shape
    par = torch.tensor(PARENTS).expand(b, -1)
    valid = torch.ones(b, n, dtype=torch.bool)
    valid[:, 4] = False
    attend = ancestors(par) & valid[:, None, :]
    depth = torch.tensor([0, 1, 1, 2, 2, 2, 3])
    return attend, depth, valid


def _path(i):
    return ([] if PARENTS[i] < 0 else _path(PARENTS[i])) + [i]


def test_each_node_gets_the_logits_of_its_path_and_the_kept_path_continues_as_recomputed(tiny):
    g = torch.Generator().manual_seed(3)
    v = tiny["target"].vocab_size
    ids = torch.randint(1, v, (2, 9), generator=g)
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[1, :4] = False  # ragged rows of 9 and 5 tokens
    nodes = torch.randint(1, v, (2, 7), generator=g)
    attend, depth, valid = _tree(nodes)
    with torch.inference_mode():
        ll, hf = open_session(tiny["target"], 2, target=True), open_session(tiny["hf"], 2, target=True)
        ll.forward(ids, mask)
        hf.forward(ids, mask)
        pos = ll.n_real[:, None] + depth
        a = ll.forward_tree(nodes, valid, pos, attend, base=ll.length)
        b = hf.forward_tree(nodes, valid, pos, attend, base=hf.length)
        assert float((a - b)[valid].abs().max() / b[valid].abs().max()) < RTOL
        assert not a[~valid].any()  # an invalid node: zeros, as SlotCache gives
        for r in range(2):
            prompt = ids[r, mask[r]].tolist()
            for i in (0, 2, 5, 6):  # a chain on llama.cpp over the row and the node's path
                chain = torch.tensor([prompt + nodes[r, _path(i)].tolist()])
                alone = open_session(tiny["again"], 1, target=True).forward(chain, torch.ones_like(chain).bool())
                assert float((a[r, i] - alone[0, -1]).abs().max() / alone[0, -1].abs().max()) < RTOL
        # row 0 keeps 0 -> 2 -> 5 (a forked branch), row 1 keeps 0 -> 1 -> 3 -> 6 (the first-child branch)
        idx = torch.tensor([[0, 2, 5, 0], [0, 1, 3, 6]])
        counts = torch.tensor([3, 4])
        start = ll.length - 7
        ll.keep(start, counts, path=idx)
        assert ll.n_real.tolist() == [9 + 3, 5 + 4]
        more = torch.randint(1, v, (2, 2), generator=g)
        after = ll.forward(more, torch.ones(2, 2, dtype=torch.bool))
        for r in range(2):
            kept = nodes[r, idx[r, :counts[r]]].tolist()
            chain = torch.tensor([ids[r, mask[r]].tolist() + kept + more[r].tolist()])
            alone = open_session(tiny["again"], 1, target=True).forward(chain, torch.ones_like(chain).bool())
            assert float((after[r] - alone[0, -2:]).abs().max() / alone[0, -2:].abs().max()) < RTOL


@pytest.mark.parametrize("tree", [(2, 2, 1), 8, "auto"])
def test_tree_speculation_is_greedy_equal_to_the_target_alone_loop(tiny, tree):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny["tok"])
    tok.padding_side = "left"
    enc = tok(["def add(a, b):", "for i in range(10):\n    print"], return_tensors="pt", padding=True)
    gen = SpeculativeGenerator(tiny["target"], tiny["draft"])
    out = gen.generate(enc.input_ids, enc.attention_mask, max_new_tokens=24, do_sample=False, tree=tree,
                       eos_token_id=[])
    for b in range(2):
        ids = enc.input_ids[b, enc.attention_mask[b].bool()][None]
        alone = target_alone_loop(tiny["target"], ids, torch.ones_like(ids), max_new_tokens=24, temperature=0,
                                  seed=0)
        assert out.sequences[b, -24:].tolist() == alone[0].tolist()
    assert sum(out.stats.position_accepted) > 0  # drafts were kept


@pytest.mark.parametrize("tree,temperature,top_p", [((2, 2), 1.0, 1.0), (6, 0.7, 0.9)])
def test_tree_speculation_samples_the_law_of_the_backends_own_logits(tiny, tree, temperature, top_p):
    gen = SpeculativeGenerator(tiny["target"], tiny["draft"])  # 768 draws, batched 32 rows at a time
    assert_two_tokens_follow_the_law(gen, tiny["target"], rows=32, runs=24, temperature=temperature, top_p=top_p,
                                     tree=tree)


def test_a_long_tree_run_leaves_no_cell_behind(tiny):
    """220 new tokens in a context of 256 + 512 cells: ~9 cells a step for ~100 steps would overflow it if the
    rejected nodes' cells were not freed (llama_decode would find no cell). Fresh models: a context sized for
    an earlier, larger batch would hide a leak."""
    from exactspec.backends.llamacpp import LlamaCppLM

    target, draft = (LlamaCppLM(tiny[k], threads=1, n_ctx=256) for k in ("t_gguf", "d_gguf"))
    gen = SpeculativeGenerator(target, draft)
    ids = torch.tensor([[5, 17, 42, 8]])
    out = gen.generate(ids, max_new_tokens=220, do_sample=True, seed=1, tree=8, eos_token_id=[])
    assert out.sequences.shape[1] == 4 + 220
    assert out.stats.target_calls > 60  # enough steps that leaked cells would have run out


def test_a_model_rebuilds_its_context_for_a_larger_batch(tiny):
    """A context is kept between runs while it is large enough: in sequence ids and in cells alike."""
    from exactspec.backends.llamacpp import LlamaCppLM

    m = LlamaCppLM(tiny["t_gguf"], threads=1, n_ctx=64)
    open_session(m, 4, target=True)
    s = open_session(m, 16, target=True)
    ids = torch.randint(1, m.vocab_size, (16, 60), generator=torch.Generator().manual_seed(0))
    assert s.forward(ids, torch.ones_like(ids, dtype=torch.bool)).shape == (16, 60, m.vocab_size)
