"""`exactspec audit` against real HTTP servers the tests own (tests/_law_server.py): exact samplers, plain and
speculative, in both engines' dialects, are not called "not exact"; small known faults are; greedy flips are
found with their margin; a control separates a deviation both servers share from one speculation adds.

Every request carries a seed (--request-seeds), so each audit here is one fixed draw: the verdicts are the
same on every run. That the verdicts' error rates hold over many draws is tests/test_audit_states_its_error_rates.py.
"""
from __future__ import annotations

import json

import pytest

from _audit_servers import law_server, make_models
from exactspec.cli import main


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_models(tmp_path_factory.mktemp("audit"))


def audit(capsys, url, tiny, *extra, samples=300, target="target"):
    rc = main(["audit", url, "--target", str(tiny / target), "--prompts", str(tiny / "prompts.json"),
               "--samples", str(samples), "--max-tokens", "6", "--request-seeds", "--seed", "3",
               "--tolerance", "0.08", "--json", *extra])
    out = capsys.readouterr().out
    return rc, (json.loads(out) if out.strip() else None)


def test_plain_exact_server_is_exact_and_its_json_has_the_documented_fields(tiny, capsys):
    with law_server("--target", str(tiny / "target")) as url:
        rc, r = audit(capsys, url, tiny)
    assert (rc, r["verdict"], r["engine"]) == (0, "exact", "vllm")
    for key in ("verdict", "p_value", "alpha", "samples", "tokens_tested", "greedy_equal", "worst_positions",
                "control", "acceptance", "detectable_ks_distance", "tolerance", "power", "worst_tokens"):
        assert key in r, key
    assert r["tokens_tested"] == 2 * 300 * 6 and r["samples"] == 600 and r["p_value"] > r["alpha"]
    assert r["detectable_ks_distance"] <= 0.08 and r["greedy_equal"] is None
    assert sorted(w["position"] for w in r["worst_positions"]) == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("fault", ["temperature:1.1", "move:0.08"])
def test_small_faults_of_a_plain_sampler_are_not_exact(tiny, capsys, fault):
    """A temperature 10% off; 0.08 of every position's probability moved off its likeliest token (a KS distance
    of 0.08 in the PIT law, above the 0.058 these 4,800 tokens promise to see)."""
    with law_server("--target", str(tiny / "target"), "--fault", fault) as url:
        rc, r = audit(capsys, url, tiny, samples=400)
    assert (rc, r["verdict"]) == (1, "not exact"), r["p_value"]
    assert r["detectable_ks_distance"] < 0.08


def test_speculative_server_is_exact_and_a_bonus_drawn_from_q_is_not(tiny, capsys):
    spec = ["--target", str(tiny / "target"), "--draft", str(tiny / "draft"), "--gamma", "2"]
    args = ("--draft", str(tiny / "draft"), "--draft-method", "probabilistic")
    with law_server(*spec) as url:
        rc, good = audit(capsys, url, tiny, *args, samples=200)
    with law_server(*spec, "--fault", "bonus-q") as url:
        rc_bad, bad = audit(capsys, url, tiny, *args, samples=200)
    assert (rc, good["verdict"]) == (0, "exact")
    assert (rc_bad, bad["verdict"]) == (1, "not exact"), bad["p_value"]
    # acceptance: the engine's counters agree with its rule replayed on its own texts
    acc = good["acceptance"]
    assert acc["gamma"] == 2 and acc["engine_rule"] == "probabilistic"
    mine, theirs = acc["engine_rule_expected"]["per_position_acceptance"], acc["engine"]["per_position_acceptance"]
    assert mine == pytest.approx(theirs, abs=0.05)
    assert acc["counters_expected"] == pytest.approx(acc["engine"]["mean_acceptance_length"], rel=0.03)
    assert acc["best_exact"]["tokens_per_step"] >= acc["engine_rule_expected"]["tokens_per_step"]


def test_llamacpp_dialect_is_detected_and_its_ignore_eos_law_is_exact(tiny, capsys):
    with law_server("--target", str(tiny / "target"), "--dialect", "llamacpp") as url:
        rc, r = audit(capsys, url, tiny, "--temperature", "1,0.7")
    assert (rc, r["verdict"], r["engine"]) == (0, "exact", "llamacpp")
    assert r["settings"] == ["T=1", "T=0.7"] and r["tests"] == 1 + 6 + 2
    assert r["impossible_tokens"] == 0  # the end token was banned on both sides


def test_greedy_equal_and_a_flipped_token_is_reported_with_its_margin(tiny, capsys):
    with law_server("--target", str(tiny / "target")) as url:
        rc, r = audit(capsys, url, tiny, "--temperature", "0", samples=3)
    assert (rc, r["verdict"], r["greedy_equal"]) == (0, "exact", True)
    with law_server("--target", str(tiny / "target"), "--fault", "greedy-flip") as url:
        rc, r = audit(capsys, url, tiny, "--temperature", "0", samples=3)
    assert (rc, r["greedy_equal"]) == (1, False)
    first = r["greedy_mismatches"][0]
    assert first["position"] == 3 and first["engine_token"] != first["target_token"] and first["margin"] > 0


def test_control_cancels_a_shared_deviation_and_keeps_one_speculation_adds(tiny, capsys):
    with law_server("--target", str(tiny / "target"), "--fault", "temperature:1.1") as a, \
            law_server("--target", str(tiny / "target"), "--fault", "temperature:1.1") as b:
        rc, r = audit(capsys, a, tiny, "--control", b, "--tolerance", "0.12", samples=200)  # two samples see less
    assert r["control"]["law_verdict"] == "not exact" and r["control"]["verdict"] == "not exact"
    assert (rc, r["verdict"]) == (0, "exact"), r["control"]
    with law_server("--target", str(tiny / "target"), "--fault", "move:0.1") as a, \
            law_server("--target", str(tiny / "target")) as b:
        rc, r = audit(capsys, a, tiny, "--control", b, samples=200)
    assert (rc, r["verdict"], r["control"]["verdict"]) == (1, "not exact", "exact")
    assert r["control"]["two_sample_p"] < 1e-3


FILTERS = ["--temperature", "0.6,1.2", "--top-p", "0.7", "--top-k", "20", "--repetition-penalty", "1.5"]


@pytest.mark.parametrize("dialect", ["vllm", "llamacpp"])
def test_each_engines_filters_and_penalty_are_modelled_as_that_engine_defines_them(tiny, capsys, dialect):
    """top-k, top-p, min-p and the repetition penalty, in each engine's order (the server's laws are written apart
    from exactspec's): exact; a server that applies the other engine's order is not."""
    extra = FILTERS + (["--min-p", "0.05"] if dialect == "vllm" else [])
    with law_server("--target", str(tiny / "target"), "--dialect", dialect) as url:
        rc, r = audit(capsys, url, tiny, *extra, samples=200)
    with law_server("--target", str(tiny / "target"), "--dialect", dialect, "--fault", "swap-order") as url:
        rc_swap, swapped = audit(capsys, url, tiny, *FILTERS, samples=200)
    assert (rc, r["verdict"], r["impossible_tokens"]) == (0, "exact", 0), r["p_value"]
    assert (rc_swap, swapped["verdict"]) == (1, "not exact")
