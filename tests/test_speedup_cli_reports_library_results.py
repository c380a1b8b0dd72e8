"""`exactspec speedup` prints what the library computes: --json keys/values, a valid --plot PNG, a plain
no-gain message, and exit code 2 with a clear message on bad input."""
import json

import pytest

from exactspec import CostModel, expected_tokens, ops_factor, optimal_gamma, speedup_limit, walltime_speedup
from exactspec.cli import main


def run_cli(capsys, *argv):
    rc = main(["speedup", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_json_keys_and_values(capsys):
    rc, out, _ = run_cli(capsys, "--alpha", "0.8", "--cost", "0.05", "--gamma-max", "12", "--json")
    assert rc == 0
    d = json.loads(out)
    assert set(d) == {"alpha", "cost", "rows", "optimal_gamma", "optimal_speedup", "limit"}
    assert d["alpha"] == 0.8 and d["cost"] == 0.05
    assert [r["gamma"] for r in d["rows"]] == list(range(1, 13))
    for r in d["rows"]:
        assert set(r) == {"gamma", "expected_tokens", "speedup", "ops_factor"}
        g = r["gamma"]
        assert r["expected_tokens"] == pytest.approx((1 - 0.8 ** (g + 1)) / 0.2)
        assert r["speedup"] == pytest.approx(walltime_speedup(0.8, g, 0.05))
        assert r["ops_factor"] == pytest.approx(ops_factor(0.8, g, 0.05))
    assert (d["optimal_gamma"], d["optimal_speedup"]) == (8, pytest.approx(optimal_gamma(0.8, 0.05, 12)[1]))
    assert d["limit"] == pytest.approx(speedup_limit(0.8, 0.05))


def test_per_position_and_unbounded_limit(capsys):
    rc, out, _ = run_cli(capsys, "--alpha-per-position", "0.9,0.8,1", "--cost", "0", "--gamma-max", "4",
                         "--json")
    d = json.loads(out)
    assert rc == 0 and d["alpha"] == [0.9, 0.8, 1.0] and d["limit"] is None  # null = unbounded
    assert d["rows"][3]["expected_tokens"] == pytest.approx(expected_tokens([0.9, 0.8, 1.0], 4))


def test_table_marks_optimum_and_limit(capsys):
    rc, out, _ = run_cli(capsys, "--alpha", "0.8", "--cost", "0.05", "--gamma-max", "10")
    assert rc == 0
    assert "<- best" in out and "Best gamma in 1..10: 8" in out and "Limit over all gamma" in out


def test_no_gain_is_said_plainly(capsys):
    rc, out, _ = run_cli(capsys, "--alpha", "0.3", "--cost", "0.4")
    assert rc == 0 and "No gamma gives a speedup" in out


def test_costs_file(capsys, tmp_path):
    path = tmp_path / "costs.json"
    cm = CostModel(0.02, {1: 1.0, 5: 1.4, 17: 2.6})
    cm.save(path)
    rc, out, _ = run_cli(capsys, "--alpha", "0.8", "--costs", str(path), "--gamma-max", "6", "--json")
    d = json.loads(out)
    assert rc == 0 and d["cost"]["t_draft"] == 0.02
    assert d["rows"][3]["speedup"] == pytest.approx(walltime_speedup(0.8, 4, cm))
    rc, out, _ = run_cli(capsys, "--alpha", "0.8", "--costs", str(path))
    assert rc == 0 and "measured CostModel" in out


def test_plot_writes_png(capsys, tmp_path):
    png = tmp_path / "s.png"
    rc, _, _ = run_cli(capsys, "--alpha", "0.7", "--cost", "0.1", "--plot", str(png))
    assert rc == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 1000


@pytest.mark.parametrize("argv,match", [
    (["--alpha", "1.5"], "alpha"),
    (["--alpha", "-0.1"], "alpha"),
    (["--alpha", "nan"], "alpha"),
    (["--alpha", "0.5", "--cost", "-1"], "cost"),
    (["--cost", "0.1"], "--alpha"),
    (["--alpha-per-position", "0.9,x"], "alpha-per-position"),
    (["--alpha", "0.5", "--gamma-max", "0"], "gamma-max"),
    (["--alpha", "0.5", "--costs", "/nonexistent.json"], "cost model"),
])
def test_bad_input_exits_2(capsys, argv, match):
    rc, out, err = run_cli(capsys, *argv)
    assert rc == 2 and match in err and "Traceback" not in err
