"""`exactspec demo` and a tiny `exactspec bench` run end to end, offline, and write valid JSON, Markdown and PNG."""
import json

import matplotlib.image
import pytest

from exactspec.cli import main


def test_demo_json_summary_is_complete(capsys):
    # A fixed gamma: gamma="auto"'s first 8 tokens follow the stored profile, which the suite measures beside its
    # other worker, so that a fresh seeded run may price drafting dear and stay plain (nothing then to predict)
    assert main(["demo", "--prompts", "1", "--max-new-tokens", "8", "--threads", "1", "--gamma", "4", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    for key in ("per_position_acceptance", "mean_accepted_per_step", "mean_tokens_per_step",
                "speculative_tokens_per_second", "plain_tokens_per_second", "measured_speedup",
                "predicted_speedup", "predicted_speedup_forwards", "calibrated_cost_model"):
        assert key in summary
    assert len(summary["texts"]) == 1 and summary["stats"]["new_tokens"] == 8
    assert summary["mean_tokens_per_step"] == summary["mean_accepted_per_step"] + 1
    assert summary["speculative_tokens_per_second"] > 0 and summary["predicted_speedup"] > 0
    # The loop-calibrated model prices plain decoding at the time per token generate() just took.
    cal = summary["calibrated_cost_model"]
    plain = 1 / summary["plain_tokens_per_second"]
    assert cal["metadata"]["calibrated_from"]["plain_time"] == pytest.approx(plain)
    assert float(cal["target_times"]["1"]) == pytest.approx(plain)


def test_demo_streams_coloured_text(capsys):
    assert main(["demo", "--prompts", "1", "--max-new-tokens", "6", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "what happened" in out and "predicted speedup" in out


def test_bench_writes_json_markdown_and_pngs(tmp_path, capsys):
    out = tmp_path / "bench"
    argv = ["bench", "--num-prompts", "1", "--max-new-tokens", "6", "--repeats", "1", "--threads", "1",
            "--out", str(out), "--json"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert json.loads((out / "bench.json").read_text()) == report
    names = [r["system"] for r in report["rows"]]
    assert names[0] == "target (HF generate)" and any(n.startswith("HF assisted") for n in names)
    assert any(n.startswith("HF prompt lookup") for n in names)
    # Greedy: every system's tokens were compared with target-alone generate's (the demo pair: all equal).
    assert all(r["greedy_equals_target_generate"] is True for r in report["rows"])
    assert any("block" in n for n in names) and any("prompt lookup" in n for n in names)
    for row in report["rows"]:
        assert row["tokens_per_second"] > 0
        if row["system"].startswith("exactspec"):
            assert row["acceptance_rate"] is not None and row["kind"] == "exactspec"
            # A prediction exactly when the run drafted: gamma="auto" may take only plain steps.
            drafted = any(a is not None for a in row["per_position_acceptance"])
            assert (row["predicted_speedup"] is not None) == drafted
            assert (row["predicted_speedup_forwards"] is not None) == drafted
            assert all(v >= 0 for v in row["ms_per_step"].values()) and row["ms_per_step"]["target"] > 0
    assert {"best_fixed_gamma", "auto_vs_best_fixed"} <= set(report["summary"])
    md = (out / "bench.md").read_text()
    assert all(n in md for n in names)
    assert "Time per target call inside the loop" in md
    assert "Greedy output equal to target-alone `generate`" in md
    # Each exactspec system's cost model came from its own untimed run and prices the loop's overhead.
    cals = report["calibrated_cost_models"]
    assert set(cals) == {n for n in names if n.startswith("exactspec")}
    for cal in cals.values():
        assert cal["t_overhead"] >= 0 and cal["metadata"]["calibrated_from"]["target_calls"] > 0
    assert cals["exactspec prompt lookup (γ=4)"]["t_draft"] == 0.0
    assert report["calibrated_prefill_seconds"]["plain"] > 0
    # The prediction is end_to_end_speedup recomputed from what the report says it used.
    from exactspec import CostModel, end_to_end_speedup

    row = next(r for r in report["rows"] if r["system"] == "exactspec token (γ=4)")
    pre = report["calibrated_prefill_seconds"]
    assert row["predicted_speedup"] is not None
    cm = CostModel.from_dict(cals[row["system"]])
    assert cm.t_target(1) == pytest.approx(cm.metadata["calibrated_from"]["plain_time"])
    assert len(row["alphas_by_length"]) == len(row["length_counts"])  # a row per drafted length
    assert row["predicted_speedup"] == pytest.approx(end_to_end_speedup(
        row["alphas_by_length"], row["length_counts"], cm, pre["n_tokens"], prefill_plain=pre["plain"],
        prefill_spec=pre[row["system"]], by_length=True))
    for png in ("speedup.png", "acceptance.png", "predicted_vs_measured.png"):
        assert matplotlib.image.imread(out / png).ndim == 3


def test_bench_batched_omits_assisted_generation_and_says_why(tmp_path, capsys):
    out = tmp_path / "bench"
    argv = ["bench", "--num-prompts", "2", "--batch-size", "2", "--max-new-tokens", "4", "--repeats", "1",
            "--threads", "1", "--systems", "token (γ=4)", "--out", str(out), "--json"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    names = [r["system"] for r in report["rows"]]
    assert not any(n.startswith("HF assisted") for n in names)
    assert any("batch size 1" in n for n in report["notes"])


def test_demo_with_one_new_token_has_no_prediction_and_does_not_crash(capsys):
    # One new token per prompt drafts nothing: there is no acceptance to predict from.
    assert main(["demo", "--prompts", "1", "--max-new-tokens", "1", "--threads", "1", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["predicted_speedup"] is None and summary["predicted_speedup_forwards"] is None
    assert main(["demo", "--prompts", "1", "--max-new-tokens", "1", "--threads", "1"]) == 0
    assert "—" in capsys.readouterr().out


def test_greedy_equality_check_compares_up_to_the_first_eos():
    import torch

    from exactspec.bench.bench import greedy_prefix_equal

    ref = torch.tensor([[5, 6, 7, 8], [1, 2, 3, 4]])
    assert greedy_prefix_equal(ref.clone(), ref, {0}) == (True, 8)
    ours = torch.tensor([[5, 6, 0, 9], [1, 2, 3, 4]])  # EOS at 2: generate (EOS banned) went on differently
    assert greedy_prefix_equal(ours, ref, {0}) == (True, 6)
    ours = torch.tensor([[5, 9, 7, 8], [1, 2, 3, 4]])
    assert greedy_prefix_equal(ours, ref, {0}) == (False, 8)
    assert greedy_prefix_equal(ours[:, :3], ref, {0}) == (False, 0)
    # The cut comes from the target's own unbanned greedy run: a system ending early still differs there.
    loop = torch.tensor([[5, 6, 7, 0], [1, 2, 3, 4]])
    early = torch.tensor([[5, 0, 7, 8], [1, 2, 3, 4]])
    assert greedy_prefix_equal(early, ref, {0}, cut_from=loop) == (False, 7)
    assert greedy_prefix_equal(ref.clone(), ref, {0}, cut_from=loop) == (True, 7)


def test_bench_predicts_each_repeat_from_the_calibration_calls_made_beside_it(tmp_path, capsys):
    """With two repeats every exactspec system gets one prediction per repeat, each recomputable from that
    repeat's own calibrated cost model; the reported prediction is their median, and the measured ÷ predicted
    error is computed against our target-alone loop."""
    import statistics

    from exactspec import CostModel, end_to_end_speedup

    argv = ["bench", "--num-prompts", "2", "--max-new-tokens", "8", "--repeats", "2", "--threads", "1",
            "--gammas", "2", "--tree", "none", "--systems", "loop,token (γ=2)", "--out", str(tmp_path), "--json"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    row = next(r for r in report["rows"] if r["system"] == "exactspec token (γ=2)")
    preds = row["predicted_speedup_by_repeat"]
    assert len(preds) == 2 and all(p > 0 for p in preds)
    assert row["predicted_speedup"] == pytest.approx(statistics.median(preds))
    assert len(report["calibrated_by_repeat"]) == 2
    last = report["calibrated_by_repeat"][-1]  # the row's acceptance figures are the last repeat's
    cm = CostModel.from_dict(last["cost_models"][row["system"]])
    pre = last["prefill_seconds"]
    assert preds[-1] == pytest.approx(end_to_end_speedup(
        row["alphas_by_length"], row["length_counts"], cm, pre["n_tokens"], prefill_plain=pre["plain"],
        prefill_spec=pre[row["system"]], by_length=True))
    assert preds[0] != preds[1]  # two repeats, two separate calibrations (timings never tie exactly)
    loop_speedups = row["speedup_vs_exactspec_loop_by_repeat"]
    assert len(loop_speedups) == 2 and all(s > 0 for s in loop_speedups)
    err = report["prediction_errors"][row["system"]]
    # paired: the median over repeats of each repeat's measured ÷ its own prediction
    assert err == pytest.approx(statistics.median(m / p for m, p in zip(loop_speedups, preds)) - 1)
