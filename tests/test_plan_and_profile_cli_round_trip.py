"""`exactspec profile` writes a cost model per batch size that reads back equal; `exactspec plan` measures
acceptance offline on local models and emits, per batch size, rows priced by the library's formulas, the
best gamma and configs that deploy it; bad input exits with status 2 and one line naming the argument."""
from __future__ import annotations

import json

import pytest
import torch

from _spec_models import noisy_copy, tiny_lm
from exactspec import CostModel
from exactspec.cli import main
from exactspec.deploy.costprofile import CostProfile
from test_offline_acceptance_matches_generate import tokenizer


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("plan_pair")
    target = tiny_lm("llama", seed=0, dtype=torch.float32)
    for name, model in (("target", target), ("draft", noisy_copy(target, 0.08))):
        model.save_pretrained(root / name)
        tokenizer().save_pretrained(root / name)
    (root / "prompts.txt").write_text("w5 w6 w7 w5 w6\n\nw9 w3 w9 w3 w9\n\nw40 w41 w42 w40 w41\n")
    return root


def test_profile_round_trip(tmp_path):
    prof = CostProfile({1: CostModel(0.001, {1: 0.01, 5: 0.012}), 8: CostModel(0.002, {1: 0.02, 5: 0.03},
                                                                               t_overhead=0.001)}, {"note": "x"})
    prof.save(tmp_path / "p.json")
    back = CostProfile.load(tmp_path / "p.json")
    assert back == prof and back.batch_sizes == [1, 8] and back.metadata == {"note": "x"}
    assert back.cost(8).t_overhead == 0.001
    single = CostModel(0.001, {1: 0.01}, {"batch_size": 4})
    assert CostProfile.from_dict(single.to_dict()).batch_sizes == [4]  # a bare CostModel file is accepted
    with pytest.raises(ValueError, match="batch size 2"):
        back.cost(2)


def test_calibrated_profile_prices_every_prompt_over_several_rounds():
    """Calibration runs every prompt batch `rounds` times (interleaved with plain decoding), as bench does:
    one short run let a single slow call set the per-step overhead."""
    target = tiny_lm("llama", seed=0, dtype=torch.float32)
    draft = noisy_copy(target, 0.08)
    prompts = [[5, 6, 7, 5, 6], [9, 3, 9], [40, 41, 42, 40]]
    prof = CostProfile.measure(target, draft, batch_sizes=[1, 2], prompt_len=5, repeats=1, calibrate=True,
                               prompt_ids=prompts, max_new_tokens=6, gamma=2)
    for b, batches in ((1, 3), (2, 2)):
        seen = prof.cost(b).metadata["calibrated_from"]
        assert seen["target_calls"] >= 3 * batches * 2  # 3 rounds x batches x >= 2 steps of 6 tokens at gamma 2
        assert seen["plain_time"] > 0 and prof.cost(b).t_overhead >= 0


def test_profile_cli_then_plan_with_it(pair, tmp_path, capsys):
    out = tmp_path / "profile.json"
    rc = main(["profile", "--target", str(pair / "target"), "--draft", str(pair / "draft"), "--batch-sizes", "1,2",
               "--prompt-len", "8", "--repeats", "1", "--out", str(out)])
    assert rc == 0
    prof = CostProfile.load(out)
    assert prof.batch_sizes == [1, 2] and all(cm.t_draft > 0 for cm in prof.by_batch_size.values())
    capsys.readouterr()
    rc = main(["plan", "--target", str(pair / "target"), "--draft", str(pair / "draft"), "--prompts",
               str(pair / "prompts.txt"), "--max-new-tokens", "12", "--max-gamma", "4", "--profile", str(out),
               "--json"])
    assert rc == 0
    plan = json.loads(capsys.readouterr().out)
    assert [e["batch_size"] for e in plan["by_batch_size"]] == [1, 2]
    for entry in plan["by_batch_size"]:
        best = max(entry["rows"], key=lambda r: r["predicted_speedup"])
        assert entry["recommended_gamma"] == best["gamma"]
        assert entry["vllm"]["num_speculative_tokens"] == entry["recommended_gamma"]
        assert entry["limit"] >= entry["predicted_speedup"]


def test_plan_json_keys_and_configs(pair, capsys):
    rc = main(["plan", "--target", str(pair / "target"), "--draft", str(pair / "draft"), "--prompts",
               str(pair / "prompts.txt"), "--max-new-tokens", "16", "--max-gamma", "5", "--cost", "0.1",
               "--batch-sizes", "1,8", "--tree-nodes", "0", "--json"])  # chains only: trees are tested beside
    assert rc == 0
    plan = json.loads(capsys.readouterr().out)
    for key in ("per_position_acceptance", "acceptance_rate", "mean_acceptance_length", "recommended_gamma",
                "predicted_speedup", "rows", "vllm", "sglang", "hf", "by_batch_size"):
        assert key in plan, key
    g = plan["recommended_gamma"]
    assert plan["vllm"] == {"method": "draft_model", "model": str(pair / "draft"), "num_speculative_tokens": g}
    assert plan["hf"]["num_assistant_tokens"] == g and plan["hf"]["assistant_model"] == str(pair / "draft")
    assert plan["sglang"][plan["sglang"].index("--speculative-num-steps") + 1] == str(g)
    assert plan["exactspec"]["gamma"] == g
    # gamma = 1 with the paper's cost c: a step drafting k in {0, 1} tokens yields 1 + k*alpha tokens for
    # k*c + 1 target steps; a step starting one token before the end drafts nothing
    row = plan["rows"][0]
    (c0, c1), a = row["length_counts"], row["per_position_acceptance"][0]
    assert c0 <= 3 and c1 > 0
    assert row["predicted_speedup"] == pytest.approx((c0 + c1 * (1 + a)) / (c0 + c1 * 1.1))
    assert plan["rows"][g - 1]["predicted_speedup"] == plan["predicted_speedup"]
    assert len(plan["per_position_acceptance"]) <= 5 and 1 <= plan["mean_acceptance_length"] <= 6


def test_plan_prompt_lookup_configs(pair, capsys):
    rc = main(["plan", "--target", str(pair / "target"), "--prompt-lookup", "--prompts", str(pair / "prompts.txt"),
               "--max-new-tokens", "12", "--max-gamma", "3", "--cost", "0", "--json"])
    assert rc == 0
    plan = json.loads(capsys.readouterr().out)
    g = plan["recommended_gamma"]
    assert plan["vllm"] == {"method": "ngram", "num_speculative_tokens": g, "prompt_lookup_max": 3,
                            "prompt_lookup_min": 1}
    assert plan["hf"] == {"prompt_lookup_num_tokens": g, "max_matching_ngram_size": 3}
    rows = plan["rows"]
    assert all(r["predicted_speedup"] >= 1.0 for r in rows)  # a free draft never slows a step (c = 0)


@pytest.mark.parametrize("argv,message", [
    (["--cost", "-1"], "--cost"),
    (["--cost", "0.1", "--profile", "x.json"], "not both"),
    (["--max-gamma", "0"], "--max-gamma"),
    (["--batch-sizes", "1,x"], "--batch-sizes"),
    (["--watch", "1"], "--vllm-metrics"),
    (["--vllm-metrics", "m.txt", "--pair", "demo"], "--pair"),
    (["--pair", "demo", "--cost", "0.1"], "--prompts"),
    (["--pair", "demo", "--cost", "0.1", "--prompts", "/nonexistent/p.txt"], "cannot read --prompts"),
    (["--target", "T", "--cost", "0.1"], "--draft"),
    (["--pair", "demo", "--prompts", "P", "--profile", "/nonexistent/prof.json"], "cannot read a cost profile"),
])
def test_bad_plan_input_exits_2_with_one_line(pair, capsys, argv, message):
    argv = [str(pair / "prompts.txt") if a == "P" else a for a in argv]
    rc = main(["plan", *argv])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_bad_profile_input_exits_2(pair, tmp_path, capsys):
    rc = main(["profile", "--target", str(pair / "target"), "--batch-sizes", "0", "--out", str(tmp_path / "p.json")])
    err = capsys.readouterr().err
    assert rc == 2 and "--batch-sizes" in err and len(err.strip().splitlines()) == 1
