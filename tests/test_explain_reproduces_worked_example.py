"""`exactspec explain` reproduces the worked example (accept B with 0.6, residual all on A,
P(A) = 0.20 + 0.50*0.40*1 = 0.40) and, for every token, via_accept + via_reject = p; it handles q(x)=0,
p = q, and rejects non-distributions with exit code 2 naming the flag."""
import json

import pytest

from exactspec.cli import main

P = "0.40,0.30,0.15,0.10,0.05"
Q = "0.20,0.50,0.15,0.10,0.05"
KEYS = {"labels", "target", "draft", "accept_prob", "residual", "residual_mass", "acceptance_rate",
        "via_accept", "via_reject", "output"}


def run_json(capsys, *args):
    assert main(["explain", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_worked_example_json(capsys):
    r = run_json(capsys, "--target", P, "--draft", Q, "--labels", "A,B,C,D,E")
    assert set(r) == KEYS
    assert r["labels"] == ["A", "B", "C", "D", "E"]
    assert r["accept_prob"] == pytest.approx([1.0, 0.6, 1.0, 1.0, 1.0])
    assert r["residual"] == pytest.approx([0.2, 0, 0, 0, 0])
    assert r["residual_mass"] == pytest.approx(0.2)
    assert r["acceptance_rate"] == pytest.approx(0.8)
    assert r["via_accept"][0] == pytest.approx(0.20)
    assert r["via_reject"][0] == pytest.approx(0.50 * 0.40 * 1)
    assert r["output"] == pytest.approx([0.40, 0.30, 0.15, 0.10, 0.05], abs=1e-12)
    assert all(isinstance(x, float) for x in r["output"] + r["via_reject"])


def test_table_output_mentions_the_check(capsys):
    assert main(["explain", "--target", P, "--draft", Q, "--labels", "A,B,C,D,E"]) == 0
    out = capsys.readouterr().out
    assert "0.6" in out and "min(1, p/q)" in out and "yes" in out and "NO" not in out


def test_zero_draft_probability_and_equal_distributions(capsys):
    r = run_json(capsys, "--target", "0.5,0.5,0", "--draft", "0.5,0,0.5")
    assert r["accept_prob"][1] is None and r["via_accept"][1] == 0.0
    assert r["output"] == pytest.approx([0.5, 0.5, 0.0], abs=1e-12)
    r = run_json(capsys, "--target", "0.3,0.7", "--draft", "0.3,0.7")
    assert r["residual_mass"] == 0.0 and r["output"] == pytest.approx([0.3, 0.7])
    assert main(["explain", "--target", "0.3,0.7", "--draft", "0.3,0.7"]) == 0
    assert "Z = 0" in capsys.readouterr().out


@pytest.mark.parametrize("target,draft,flag", [
    ("0.5,0.6", "0.5,0.5", "--target"), ("0.5,0.5", "0.9,0.3", "--draft"),
    ("0.5,x", "0.5,0.5", "--target"), ("1.2,-0.2", "0.5,0.5", "--target"), ("0.5,0.5", "1", "--draft"),
])
def test_bad_distributions_exit_2_naming_flag(capsys, target, draft, flag):
    assert main(["explain", "--target", target, "--draft", draft]) == 2
    assert flag in capsys.readouterr().err


def test_normalize_rescales(capsys):
    r = run_json(capsys, "--target", "4,3,2,1", "--draft", "1,1,1,1", "--normalize")
    assert r["target"] == pytest.approx([0.4, 0.3, 0.2, 0.1])
    assert r["output"] == pytest.approx(r["target"])
