"""`exactspec plan` plans token trees and block verification, not only chains: the sibling terms it
measures at one position equal the multi-round rule's exact law, its tree tokens per target call match what
`generate(tree=...)` measures on the same prompts (tiny random-weight models), and the plan's JSON carries
both sections, choosing exactspec's config from them."""
from __future__ import annotations

import json

import pytest
import torch

from _spec_models import noisy_copy, tiny_lm
from exactspec import SpeculativeGenerator
from exactspec.verification import exact
from exactspec.cli import main
from exactspec.deploy.offline import measure_acceptance
from exactspec.deploy.offlinetrees import rank_terms, tree_acceptance
from exactspec.speed.stats import GenerationStats
from exactspec.speed.treemath import expected_tokens_tree
from test_offline_acceptance_matches_generate import NEW, PROMPTS, tokenizer
from test_plan_and_profile_cli_round_trip import pair as plan_pair  # noqa: F401  (the saved-model fixture)


def _exact_rank_terms(p, q, ranks):
    """P(rank r is THE accepted sibling) and P(ranks < r all rejected), by enumerating every draw of
    `ranks` siblings without replacement (exactspec.verification.exact, from the candidates module's formulas)."""
    num, den = [0.0] * ranks, [0.0] * ranks
    for c, pc in exact._candidate_draws(q, ranks, "without_replacement"):
        alive = 1.0
        for s, pr, _ in exact._mrrs_outcomes(p, q, c, "without_replacement"):
            if s < 0:
                break
            den[s] += pc * alive
            num[s] += pc * pr
            alive -= pr
    return num, den


@pytest.mark.parametrize("seed", [0, 1])
def test_sampled_sibling_terms_match_the_multi_round_rule(seed):
    g = torch.Generator().manual_seed(seed)
    V, R = 5, 3
    p = torch.rand(2, V, generator=g, dtype=torch.float64) ** 2
    q = torch.rand(2, V, generator=g, dtype=torch.float64) ** 2
    p[0], q[0] = torch.tensor([.1, .4, .3, .15, .05]), torch.tensor([.7, .1, .1, .05, .05])  # peaked draft
    q[1, 0] = 0.0  # a zero in q: fewer candidates than ranks on a sparse draft is handled too
    p, q = p / p.sum(1, keepdim=True), q / q.sum(1, keepdim=True)
    num, den = rank_terms(p, q, torch.zeros(2, dtype=torch.long), R, greedy=False,
                          generator=torch.Generator().manual_seed(7), draws=40000)
    for t in range(2):
        en, ed = _exact_rank_terms(p[t], q[t], R)
        assert num[t] == pytest.approx(en, abs=0.01), (t, num[t], en)
        assert den[t] == pytest.approx(ed, abs=0.01), (t, den[t], ed)
    # power: the terms of i.i.d. siblings (the wrong scheme for a without-replacement tree) lie outside the
    # tolerance, so drawing siblings the wrong way fails this test
    iid = [0.0] * R
    for c, pc in exact._candidate_draws(q[0], R, "iid"):
        for s, pr, _ in exact._mrrs_outcomes(p[0], q[0], c, "iid"):
            if s >= 0:
                iid[s] += pc * pr
    assert max(abs(a - b) for a, b in zip(iid, _exact_rank_terms(p[0], q[0], R)[0])) > 0.03


def test_greedy_sibling_terms_are_the_draft_rank_of_the_target_token():
    logits = torch.tensor([[0.1, 3.0, 2.0, -1.0], [5.0, 0.0, 1.0, 2.0]])
    x = torch.tensor([2, 0])  # ranks 1 and 0
    num, den = rank_terms(None, None, x, 3, greedy=True, q_logits=logits)
    assert num.tolist() == [[0, 1, 0], [1, 0, 0]] and den.tolist() == [[1, 1, 0], [1, 0, 0]]


@pytest.fixture(scope="module")
def models():
    target = tiny_lm("llama", seed=0)
    return target, noisy_copy(target, 0.15), tokenizer()


@pytest.mark.parametrize("sample,tol", [(False, 0.06), (True, 0.12)])
def test_planned_tree_tokens_per_call_match_generate(models, sample, tol):
    """Greedy: the written text is the target's, so only the positional model approximates. Sampled: the
    positional model (a sibling's chance depends on its depth and rank only) plus the noise of 60 short
    runs (about +-4% between seeds here); on the demo pair the plan was within 3% (docs/plan.md)."""
    target, draft, tok = models
    prompts = PROMPTS * (10 if sample else 1)
    acc = measure_acceptance(target, tok, prompts, draft=draft, max_new_tokens=NEW, temperature=float(sample),
                             max_gamma=4, stop_at_eos=False, seed=5, tree_ranks=3)
    table = tree_acceptance(acc, 4)
    gen = SpeculativeGenerator(target, draft)
    for shape in ((2, 1, 1), (3, 2, 1)):
        runs = [gen.generate(tok(p, return_tensors="pt")["input_ids"], max_new_tokens=NEW, do_sample=sample,
                             tree=shape, eos_token_id=[], seed=50 + i).stats for i, p in enumerate(prompts)]
        st = GenerationStats.merge(runs)
        measured = st.new_tokens / st.target_calls
        chain = expected_tokens_tree((1,) * len(shape), table)
        planned = expected_tokens_tree(shape, table)
        assert planned > chain + 0.05  # siblings add tokens here: the check is not a chain's in disguise
        assert planned == pytest.approx(measured, rel=tol), (shape, planned, measured)


def test_plan_json_has_block_and_tree_sections(plan_pair, capsys):  # noqa: F811
    rc = main(["plan", "--target", str(plan_pair / "target"), "--draft", str(plan_pair / "draft"), "--prompts",
               str(plan_pair / "prompts.txt"), "--max-new-tokens", "16", "--max-gamma", "4", "--cost", "0.1",
               "--temperature", "1", "--batch-sizes", "1,4", "--json"])
    assert rc == 0
    plan = json.loads(capsys.readouterr().out)
    block, tree = plan["block"], plan["tree"]
    assert [r["gamma"] for r in block["rows"]] == [1, 2, 3, 4] and block["recommended_gamma"] in (1, 2, 3, 4)
    assert block["exactspec"]["method"] == "block" and len(block["by_batch_size"]) == 2
    assert len(tree["acceptance"]) == 4 and len(tree["acceptance"][0]) == 4
    best = tree["best"]
    assert best["nodes"] == len(best["parents"]) <= 16 and best["predicted_speedup"] > 0
    assert tree["vs_best_chain"] == pytest.approx(best["predicted_speedup"] / plan["predicted_speedup"])
    # exactspec's config is whichever of chain / block / tree predicts most; the engines' stay chains
    top = max(plan["predicted_speedup"], block["predicted_speedup"],
              -1.0 if best["is_chain"] else best["predicted_speedup"])
    want = ("tree" if top == best["predicted_speedup"] else
            "block" if top == block["predicted_speedup"] else "token")
    got = "tree" if "tree" in plan["exactspec"] else plan["exactspec"]["method"]
    assert got == want
    assert plan["vllm"]["num_speculative_tokens"] == plan["recommended_gamma"]
    for entry, tree_entry in zip(plan["by_batch_size"], tree["by_batch_size"]):  # per batch size: gamma, block, tree
        assert entry["tree"]["tree"] == tree_entry["best"]["tree"] and "predicted_speedup" in entry["block"]


def test_plan_without_trees_and_bad_tree_nodes(plan_pair, capsys):  # noqa: F811
    base = ["plan", "--target", str(plan_pair / "target"), "--draft", str(plan_pair / "draft"), "--prompts",
            str(plan_pair / "prompts.txt"), "--max-new-tokens", "8", "--max-gamma", "2", "--cost", "0.1"]
    assert main(base + ["--tree-nodes", "0", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert "tree" not in plan and "block" not in plan  # greedy: block verification is the greedy rule
    rc = main(base + ["--tree-nodes", "-1"])
    err = capsys.readouterr().err
    assert rc == 2 and "--tree-nodes" in err and len(err.strip().splitlines()) == 1
