"""Tree speculation from the outside: bad `tree` values raise ValueError naming the argument, the CLI
runs `generate --tree` and `speedup --tree` (bad input exits 2), and tree statistics merge."""
from __future__ import annotations

import json

import pytest
import torch

from _spec_models import noisy_copy, tiny_lm
from exactspec import GenerationStats, SpeculativeGenerator
from exactspec.cli import main
from test_generate_cli_streams_and_reports_json import pair  # noqa: F401  (fixture)


@pytest.mark.parametrize("bad", [0, -3, (), (2, 0), "wide", True, 2.5, [1, "a"]])
def test_bad_tree_raises_valueerror_naming_tree(bad):
    target = tiny_lm("llama")
    gen = SpeculativeGenerator(target, noisy_copy(target, 0.1))
    with pytest.raises(ValueError, match="tree"):
        gen.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=2, tree=bad)


def test_tree_needs_a_draft_model():
    gen = SpeculativeGenerator(tiny_lm("llama"), drafter="prompt_lookup")
    with pytest.raises(ValueError, match="tree speculation needs a draft model"):
        gen.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=2, tree=(2, 1))


def test_block_method_is_refused_for_trees():
    target = tiny_lm("llama")
    gen = SpeculativeGenerator(target, noisy_copy(target, 0.1))
    with pytest.raises(ValueError, match="method='block'"):
        gen.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=2, tree=(2, 1), method="block")


def test_tree_stats_merge_and_count_per_depth_and_rank():
    target = tiny_lm("llama")
    gen = SpeculativeGenerator(target, noisy_copy(target, 0.2))
    runs = [gen.generate(torch.tensor([[3, 1, 4, 1]]), max_new_tokens=10, tree=(2, 2), seed=s,
                         do_sample=True).stats
            for s in (0, 1)]
    total = GenerationStats.merge(runs)
    assert total.tree_nodes == sum(r.tree_nodes for r in runs) > 0
    assert sum(total.accepted_depths) == total.row_steps == total.target_calls
    assert total.rank_reached[0][0] == sum(r.rank_reached[0][0] for r in runs)
    assert all(a <= n for ra, rr in zip(total.rank_accepted, total.rank_reached) for a, n in zip(ra, rr))
    assert len(total.tree_history) == total.target_calls
    assert json.dumps(total.to_dict())


def test_generate_cli_with_tree(pair, capsys):  # noqa: F811
    rc = main(["generate", "--target", str(pair / "target"), "--draft", str(pair / "draft"), "--json",
               "--max-new-tokens", "8", "--temperature", "0", "--tree", "2,1", "w5 w6 w7"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["stats"]["tree_nodes"] > 0 and out["config"]["tree"] == "2,1"
    assert main(["generate", "--target", str(pair / "target"), "--draft", str(pair / "draft"),
                 "--tree", "2,x", "w5"]) == 2
    assert "--tree" in capsys.readouterr().err


def test_speedup_cli_prints_best_tree_per_budget_beside_chain(capsys):
    assert main(["speedup", "--tree", "--alpha", "0.8", "--cost", "0.1", "--max-nodes", "6", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [r["nodes"] for r in rows] == list(range(1, 7))
    assert all(r["speedup"] >= r["chain_speedup"] - 1e-12 for r in rows)  # a chain is a tree
    assert main(["speedup", "--tree", "--rank-acceptance", "0.5,oops"]) == 2
    assert "--rank-acceptance" in capsys.readouterr().err


def test_trees_refuse_generation_settings_that_depend_on_the_prefix():
    """A tree's target law is taken row by row: a repetition penalty (which reads each node's own prefix)
    would make it inexact, so it is a clear error, not a silent wrong law."""
    target = tiny_lm("llama")
    gen = SpeculativeGenerator(target, noisy_copy(target, 0.2))
    with pytest.raises(ValueError, match="tree"):
        gen.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=2, tree=(2, 1), do_sample=True,
                     repetition_penalty=1.3)


def test_tree_labels_drop_invalid_nodes_and_renumber():
    """A sampled node may have fewer candidates than children (top-k, top-p, a draft head over a token
    subset): its empty children are -1 and are left out of the label, with the rest renumbered."""
    from exactspec.engine.trees import valid_parents

    parents = [-1, -1, -1, 0, 0, 1, 1, 2, 2, 3, 5]
    tokens = [4, 6, -1, 1, -1, 2, 3, 5, 7, 1, 2]  # node 2 empty: its children 7, 8 go too
    assert valid_parents(parents, tokens) == [-1, -1, 0, 1, 1, 2, 3]


def test_sampled_tree_with_empty_siblings_in_the_middle_runs_and_labels():
    """(4, 1, 1) under top-k 2: the root's third and fourth children are empty, so later nodes' indices shift;
    the run (and its tree history) must not trip over it. Found by `exactspec bench --pair smollm2
    --temperature 0.7 --top-p 0.9`, where the draft's q often has fewer tokens than a node has children."""
    from _spec_models import left_padded, tiny_lm
    from exactspec import SpeculativeGenerator

    target = tiny_lm("llama", vocab=8, seed=0, init=0.5, dtype=torch.float32, attn="sdpa", hidden=16, layers=1)
    draft = tiny_lm("llama", vocab=8, seed=1, init=0.5, dtype=torch.float32, attn="sdpa", hidden=16, layers=1)
    ids, mask = left_padded([[3, 1, 4]] * 16)
    for tree in ((4, 1, 1), "auto"):
        out = SpeculativeGenerator(target, draft).generate(ids, mask, max_new_tokens=6, tree=tree, seed=5,
                                                           do_sample=True, top_k=2, temperature=0.7,
                                                           eos_token_id=[], pad_token_id=0)
        assert out.sequences.shape == (16, 9) and out.stats.tree_nodes > 0
