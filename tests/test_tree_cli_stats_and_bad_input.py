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
