"""`plan --engine --engine-url`: an engine's step costs measured over HTTP (a plain server and speculative ones at two
draft lengths, greedy, batch 1), fitted as a + b·γ, price its plan; they predict a server at another γ started
afterwards. The servers are the tests' own (tests/_law_server.py), whose steps sleep known times."""
from __future__ import annotations

import json

import pytest

from _audit_servers import law_server, make_models
from exactspec.audit import enginecosts
from exactspec.cli import main

MS = "6,12,15,8"  # a prompt's pass 6 ms, a plain step 12 ms, a speculative step 15 + 8·γ ms: sleeps, not the
# tiny models' forwards (about a millisecond, and noisy on a shared machine), set the costs


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_models(tmp_path_factory.mktemp("enginecosts"))


@pytest.fixture(autouse=True)
def no_pause(monkeypatch):
    monkeypatch.setattr(enginecosts, "PAUSE_S", 0.0)  # the tests' server does not spin after a request


def plan(capsys, tiny, *extra):
    rc = main(["plan", "--engine", "vllm", "--target", str(tiny / "target"), "--draft", str(tiny / "draft"),
               "--prompts", str(tiny / "prompts.json"), "--max-new-tokens", "24", "--max-gamma", "6",
               "--tree-nodes", "0", "--draft-sample-method", "greedy", "--json", *extra])
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if rc == 0 else err)


def test_costs_fitted_on_two_gammas_predict_a_third_server(tiny, capsys, tmp_path):
    spec = ["--target", str(tiny / "target"), "--draft", str(tiny / "draft"), "--step-ms", MS]
    with law_server("--target", str(tiny / "target"), "--step-ms", MS) as plain, \
            law_server(*spec, "--gamma", "2") as g2, law_server(*spec, "--gamma", "4") as g4:
        rc, out = plan(capsys, tiny, "--engine-url", plain, "--engine-url", g2, "--engine-url", g4,
                       "--engine-profile", str(tmp_path / "engine.json"))
    assert rc == 0, out
    costs = out["engine_costs"]
    assert costs["engine"] == "vllm" and 0.007 <= costs["b"] <= 0.015  # 8 ms slept per drafted token, and its forward
    assert out["pricing"] == "the engine's own costs, measured live" and "recommendation" in out
    with law_server(*spec, "--gamma", "3") as g3, law_server("--target", str(tiny / "target"), "--step-ms", MS) as p:
        ids = [[int(t[1:]) + 3 for t in prompt.split()] for prompt in json.loads((tiny / "prompts.json").read_text())]
        live3 = enginecosts.measure_server(g3, ids, max_tokens=24, repeats=3, pause=0.0)
        live0 = enginecosts.measure_server(p, ids, max_tokens=24, repeats=3, pause=0.0)
    row = out["rows"][2]
    assert row["gamma"] == 3
    assert row["expected_tokens"] == pytest.approx(live3["tokens_per_step"], rel=0.05)
    whole = lambda m: m["seconds"] + m["requests"] * m["t_prefill"]  # noqa: E731  (Σ t_N: whole requests)
    assert row["predicted_request_speedup"] == pytest.approx(whole(live0) / whole(live3), rel=0.10)
    # the stored profile prices the same plan without any server
    rc, again = plan(capsys, tiny, "--engine-profile", str(tmp_path / "engine.json"))
    assert rc == 0 and [r["predicted_speedup"] for r in again["rows"]] == [r["predicted_speedup"] for r in out["rows"]]


def test_do_not_speculate_when_no_draft_length_pays(tiny, capsys, tmp_path):
    """A stored profile whose speculative steps cost far more than plain ones (2 ms a token plain, 20 + 8·γ ms a step)."""
    measured = [{"url": "plain", "engine": "vllm", "model": "m", "gamma": None, "max_tokens": 24, "t_prefill": 0.004,
                 "t_token": 0.002}] + [{"url": f"g{g}", "engine": "vllm", "model": "m", "gamma": g, "max_tokens": 24,
                                        "t_prefill": 0.004, "t_step": 0.020 + 0.008 * g} for g in (2, 3)]
    enginecosts.save(enginecosts.fit(measured), str(tmp_path / "slow.json"))
    rc, out = plan(capsys, tiny, "--engine-profile", str(tmp_path / "slow.json"))
    assert rc == 0 and out["speculation_helps"] is False
    assert out["engine_costs"]["a"] == pytest.approx(0.020) and out["engine_costs"]["b"] == pytest.approx(0.008)
    assert out["recommendation"].startswith("do not speculate on vllm")
    assert all(r["predicted_speedup"] < 1 for r in out["rows"])


def test_engine_costs_need_a_plain_server_and_two_gammas(tiny, capsys, tmp_path):
    spec = ["--target", str(tiny / "target"), "--draft", str(tiny / "draft")]
    with law_server(*spec, "--gamma", "2") as g2, law_server("--target", str(tiny / "target")) as plain:
        rc, err = plan(capsys, tiny, "--engine-url", plain, "--engine-url", g2)
        assert rc == 2 and "two draft lengths at least" in err
        rc, err = plan(capsys, tiny, "--engine-url", g2)
        assert rc == 2 and "speculation off" in err
    rc, err = plan(capsys, tiny, "--engine-profile", str(tmp_path / "missing.json"))
    assert rc == 2 and "cannot read --engine-profile" in err
    rc = main(["plan", "--target", str(tiny / "target"), "--draft", str(tiny / "draft"), "--prompts",
               str(tiny / "prompts.json"), "--engine-url", "http://127.0.0.1:1"])
    assert rc == 2 and "--engine vllm|llamacpp|sglang" in capsys.readouterr().err
