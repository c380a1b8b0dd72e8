"""`plan --engine --engine-url`: an engine's step costs measured over HTTP (a plain server and speculative ones at two
draft lengths or more, greedy, batch 1) by the server's own clock, fitted as a + b·γ (+ e·γ² with three), price its
plan; they predict a server at another γ started afterwards, at batch 1 and under load. The servers are the
tests' own (tests/_law_server.py), whose steps sleep known times."""
from __future__ import annotations

import json

import numpy as np
import pytest

from _audit_servers import law_server, law_servers, make_models
from exactspec.audit import enginecosts
from exactspec.cli import main

pytestmark = pytest.mark.timed  # servers' slept costs timed and compared: `make test` runs these alone

MS = "6,12,15,8"  # a prompt's pass 6 ms, a plain step 12 ms, a speculative step 15 + 8·γ ms: sleeps, not the
# tiny models' forwards (about a millisecond, and noisy on a shared machine), set the costs
CURVE = "3,6,7.5,4,1"  # a k-token forward 6 + (k − 1)² ms: a speculative step verifies γ + 1 tokens in one, so it
# costs 6 + γ² + 7.5 + 4·γ ms, a curve that a line through γ = 2 and 4 misses by 22% at γ = 8 (MS's scale
# halved: the test sleeps half as long)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    # a close draft: about 2.3 tokens a step at γ ≥ 3, so a request takes a third of the steps it would at 0.3
    return make_models(tmp_path_factory.mktemp("enginecosts"), draft_noise=0.05)


@pytest.fixture(autouse=True)
def no_pause(monkeypatch):
    monkeypatch.setattr(enginecosts, "PAUSE_S", 0.0)  # the tests' server does not spin after a request


def plan(capsys, tiny, *extra, engine="vllm"):
    rc = main(["plan", "--engine", engine, "--target", str(tiny / "target"), "--draft", str(tiny / "draft"),
               "--prompts", str(tiny / "prompts.json"), "--max-new-tokens", "24", "--max-gamma", "6",
               "--tree-nodes", "0", *(["--draft-sample-method", "greedy"] if engine == "vllm" else []), "--json",
               *extra])
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if rc == 0 else err)


def _ids(tiny):
    return [[int(t[1:]) + 3 for t in prompt.split()] for prompt in json.loads((tiny / "prompts.json").read_text())]


def _whole(m):  # Σ t_N on the client's clock: whole requests, what a user waits for
    return m["client_seconds"] + m["requests"] * m["t_prefill"]


def test_llamacpp_requests_are_timed_and_counted_by_the_servers_timings(tiny):
    """llama.cpp's server answers each completion with `timings` (predicted_ms, draft_n_accepted): a speculative
    step of 15 + 8·3 ms slept is measured as that by the server's clock, its steps from the accepted drafts."""
    spec = ["--target", str(tiny / "target"), "--draft", str(tiny / "draft"), "--step-ms", MS, "--dialect", "llamacpp"]
    with law_server(*spec, "--gamma", "3") as g3:
        m = enginecosts.measure_server(g3, _ids(tiny), max_tokens=24, repeats=1, pause=0.0)
    assert m["engine"] == "llamacpp" and m["clock"] == "server" and m["gamma"] == 3
    # the step's forwards run inside its slept cost (tests/_law_server.py `_pace`), so it costs 39 ms and a little
    # sampling; a step miscounted (per request, or half the steps) lands far above
    assert 0.039 <= m["t_step"] <= 0.039 * 2
    assert m["steps"] < m["tokens"]  # accepted drafts came back in the timings


@pytest.mark.parametrize("dialect", ["vllm"])
def test_costs_fitted_on_three_gammas_predict_gamma_8_where_the_step_cost_curves(tiny, capsys, tmp_path, dialect):
    """γ = 2, 4 and 6 measured by each engine's own clock, γ = 8 predicted on a server started afterwards: the
    step's curve is fitted (a line through γ = 2 and 4 would miss γ = 8's step by 22%). Three γ two apart, not
    one: a quadratic through γ = 2, 3, 4 carries a millisecond of a step's jitter to γ = 6 ten-fold (its Lagrange
    weights 3, −8, 6), through 2, 4, 6 to γ = 8 four-fold (1, −3, 3)."""
    d = ["--dialect", dialect]
    spec = ["--target", str(tiny / "target"), "--draft", str(tiny / "draft"), "--step-ms", CURVE, *d]
    with law_servers(["--target", str(tiny / "target"), "--step-ms", CURVE, *d], [*spec, "--gamma", "2"],
                     [*spec, "--gamma", "4"], [*spec, "--gamma", "6"]) as (plain, g2, g4, g6):
        rc, out = plan(capsys, tiny, "--engine-url", plain, "--engine-url", g2, "--engine-url", g4, "--engine-url",
                       g6, "--engine-profile", str(tmp_path / "engine.json"), "--max-gamma", "8", engine=dialect)
    assert rc == 0, out
    costs = out["engine_costs"]
    assert costs["engine"] == dialect and costs["clock"] == "server"
    assert 0.0005 <= costs["e"] <= 0.002  # 1 ms·γ² slept by the verification
    assert out["pricing"] == "the engine's own costs, measured live" and "recommendation" in out
    with law_servers([*spec, "--gamma", "8"], ["--target", str(tiny / "target"), "--step-ms", CURVE, *d]) as (g8, p):
        live8 = enginecosts.measure_server(g8, _ids(tiny), max_tokens=24, repeats=3, pause=0.0)
        live0 = enginecosts.measure_server(p, _ids(tiny), max_tokens=24, repeats=3, pause=0.0)
    assert live8["clock"] == "server" and live8["gamma"] == 8
    row = next(r for r in out["rows"] if r["gamma"] == 8)
    assert row["expected_tokens"] == pytest.approx(live8["tokens_per_step"], rel=0.05)
    assert enginecosts.step_seconds(costs | {"measured": []}, 8) == pytest.approx(live8["t_step"], rel=0.10)
    assert row["predicted_request_speedup"] == pytest.approx(_whole(live0) / _whole(live8), rel=0.10)
    # the stored profile prices the same plan without any server
    rc, again = plan(capsys, tiny, "--engine-profile", str(tmp_path / "engine.json"), "--max-gamma", "8",
                     engine=dialect)
    assert rc == 0 and [r["predicted_speedup"] for r in again["rows"]] == [r["predicted_speedup"] for r in out["rows"]]


def test_under_load_two_gammas_row_step_prices_predict_a_third_servers_throughput(tiny, capsys):
    """--engine-load 2: the servers timed 2 requests at a time; a row-step at γ priced as a + b·γ from γ = 2 and 4
    predicts the throughput of a γ = 3 server, started afterwards, over the plain one's at that load."""
    from exactspec.audit.engineload import ratio_runs

    spec = ["--target", str(tiny / "target"), "--draft", str(tiny / "draft"), "--step-ms", MS]
    with law_servers(["--target", str(tiny / "target"), "--step-ms", MS], [*spec, "--gamma", "2"],
                     [*spec, "--gamma", "4"]) as (plain, g2, g4):
        rc, out = plan(capsys, tiny, "--engine-url", plain, "--engine-url", g2, "--engine-url", g4,
                       "--engine-load", "2")
        assert rc == 0, out
        with law_server(*spec, "--gamma", "3") as g3:
            live = ratio_runs(plain, g3, _ids(tiny), 2, max_tokens=24, temperature=0.0, repeats=2, waves=2)
    load = out["engine_costs"]["loads"]["2"]
    assert load["plain_tokens_per_second"] > 0 and load["b"] > 0
    row = next(r for r in out["rows"] if r["gamma"] == 3)
    assert row["load"]["2"]["predicted_speedup"] == pytest.approx(live["speedup"], rel=0.15)
    assert any("--engine-load" in n for n in out["notes"])


def test_three_draft_lengths_see_a_step_that_grows_faster_than_a_line():
    """Steps of 11.4 + 0.2·γ + 0.17·γ² ms (vLLM-CPU's shape, r2): two γ extrapolate a line that misses γ = 6 by 9%;
    three fit the curve and price γ = 6 within 1%; two γ keep the line."""
    step = lambda g: 0.0114 + 0.0002 * g + 0.00017 * g * g  # noqa: E731
    plain = {"url": "p", "engine": "vllm", "model": "m", "gamma": None, "max_tokens": 64, "t_prefill": 0.02,
             "t_token": 0.0098}
    spec = lambda g: {"url": f"g{g}", "engine": "vllm", "model": "m", "gamma": g, "max_tokens": 64,  # noqa: E731
                      "t_prefill": 0.03, "t_step": step(g)}
    two = enginecosts.fit([plain, spec(2), spec(3)])
    three = enginecosts.fit([plain, spec(2), spec(3), spec(4)])
    assert two["e"] == 0.0 and enginecosts.step_seconds(two, 6) < 0.92 * step(6)
    assert enginecosts.step_seconds(three, 6) == pytest.approx(step(6), rel=0.01)
    assert enginecosts.step_seconds(three, 0) == pytest.approx(0.0098)


@pytest.mark.parametrize("engine", ["vllm", "llamacpp"])
def test_a_request_pays_its_first_draft_besides_decoding_where_the_engine_drafts_in_the_prompts_step(engine):
    """vLLM proposes the first step's γ drafts in the prompt's step, before the first token is stamped: a speculative
    request's rest besides decoding grows with γ (r5: 45.6 and 55.9 ms at γ = 2 and 4), priced by the line through
    the servers measured; llama.cpp's server drafts inside its decoding's timing, and its rest is their mean. A
    slope below zero is noise: the mean too."""
    plain = {"url": "p", "engine": engine, "model": "m", "gamma": None, "max_tokens": 64, "t_prefill": 0.040,
             "t_token": 0.012}
    spec = lambda g, rest: {"url": f"g{g}", "engine": engine, "model": "m", "gamma": g,  # noqa: E731
                            "max_tokens": 64, "t_prefill": rest, "t_step": 0.015 + 0.004 * g}
    profile = enginecosts.fit([plain, spec(2, 0.0456), spec(2, 0.0456), spec(4, 0.0559)])
    t = enginecosts.request_seconds(profile, 6, 3.0)
    want = 0.0456 + 4 * (0.0559 - 0.0456) / 2 if engine == "vllm" else (2 * 0.0456 + 0.0559) / 3
    assert t["spec_rest_s"] == pytest.approx(want) and t["plain_rest_s"] == 0.040
    assert t["spec_request_s"] == pytest.approx(want + 63 / 3.0 * enginecosts.step_seconds(profile, 6))
    falling = enginecosts.fit([plain, spec(2, 0.050), spec(4, 0.046)])
    assert enginecosts.request_seconds(falling, 6, 3.0)["spec_rest_s"] == pytest.approx(0.048)


def test_a_gamma_outside_those_measured_is_flagged_with_the_spread_the_fit_carries_to_it(capsys):
    """Each server process has a speed of its own (~5%, r3). A step priced from γ = 2 and 3 weighs their steps 1 and 0
    at γ = 2, but -3 and 4 at γ = 6: the spread grows five-fold there, and the row and the recommendation say it is
    extrapolated (vLLM-CPU's γ = 6 missed by 26% in r3, where this spread is 21%)."""
    plain = {"url": "p", "engine": "vllm", "model": "m", "gamma": None, "max_tokens": 64, "t_prefill": 0.02,
             "t_token": 0.0098}
    spec = lambda g, t: {"url": f"g{g}", "engine": "vllm", "model": "m", "gamma": g, "max_tokens": 64,  # noqa: E731
                         "t_prefill": 0.03, "t_step": t}
    profile = enginecosts.fit([plain, spec(2, 0.01485), spec(3, 0.01577)])  # r3's vLLM steps
    s = enginecosts.PROCESS_SPREAD
    at = lambda g, w2, w3: float(np.hypot(s * np.hypot(w2 * 0.01485, w3 * 0.01577)  # noqa: E731
                                          / enginecosts.step_seconds(profile, g), s))
    assert enginecosts.speedup_spread(profile, 2) == pytest.approx(at(2, 1, 0))
    assert enginecosts.speedup_spread(profile, 6) == pytest.approx(at(6, -3, 4))
    assert 0.2 < enginecosts.speedup_spread(profile, 6) < 0.22 < enginecosts.speedup_spread(profile, 8)
    # two servers at each γ (the fit takes several at one γ): the steps' part of the spread falls by √2
    twice = enginecosts.fit([plain, spec(2, 0.01485), spec(3, 0.01577), spec(2, 0.01485), spec(3, 0.01577)])
    part = np.sqrt(enginecosts.speedup_spread(profile, 6) ** 2 - s ** 2)
    assert enginecosts.speedup_spread(twice, 6) == pytest.approx(float(np.hypot(part / np.sqrt(2), s)))
    rows = [{"gamma": g, "expected_tokens": 1 + 0.8 * g, "predicted_speedup": 1.0 + 0.1 * g} for g in range(1, 7)]
    out = enginecosts.annotate({"rows": rows, "predicted_speedup": 1.6, "recommended_gamma": 6, "notes": []}, profile)
    assert [r["extrapolated"] for r in out["rows"]] == [True, False, False, True, True, True]
    assert "extrapolated past the γ measured (± 21%)" in out["recommendation"] and "γ = 6" in out["recommendation"]
    assert any("speedup_spread" in n for n in out["notes"])
    assert any("start two at each" in n for n in out["notes"])  # one server per γ: the hint that narrows it
    out2 = enginecosts.annotate({"rows": [dict(r) for r in rows], "predicted_speedup": 1.6, "recommended_gamma": 6,
                                 "notes": []}, twice)
    assert not any("start two at each" in n for n in out2["notes"])
    assert any("weighs their steps -3 and 4 at γ = 6" in n and "weigh them -1 and 2" in n for n in out["notes"])
    apart = enginecosts.fit([plain, spec(2, 0.01485), spec(4, 0.01731)])
    out3 = enginecosts.annotate({"rows": [dict(r) for r in rows], "predicted_speedup": 1.6, "recommended_gamma": 6,
                                 "notes": []}, apart)
    assert not any("neighbours" in n for n in out3["notes"])
    w, _ = enginecosts._weights(apart, 6)
    assert w.tolist() == pytest.approx([-1.0, 2.0])  # what the note promised for servers two apart
    assert out2["rows"][5]["speedup_spread"] < out["rows"][5]["speedup_spread"]
    inside = enginecosts.annotate({"rows": rows, "predicted_speedup": 1.3, "recommended_gamma": 3, "notes": []},
                                  profile)
    assert "extrapolated" not in inside["recommendation"]
    # the printed table: a ± column and the word beside each extrapolated row
    from exactspec.cli.planview import emit

    emit(out | {"batch_size": 1, "by_batch_size": [{"batch_size": 1, "recommended_gamma": 6, "predicted_speedup": 1.6,
                                                    "limit": None}]}, as_json=False)
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert any("±" in line for line in lines)
    assert "speculate with γ = 6" in " ".join(text.split()) and "time a server at γ = 6" in " ".join(text.split())
    cells = {c[1]: c for c in ([x.strip() for x in line.split("│")] for line in lines) if len(c) > 5}
    assert cells["6"][4:6] == ["21%", "extrapolated"] and cells["3"][4:6] == ["7%", ""]
    # a flat refit (γ = 3 cheaper than γ = 2) prices every γ at the mean: each step weighs 1/2
    flat = enginecosts.fit([plain, spec(2, 0.00488), spec(3, 0.00427)])
    assert flat["b"] == 0.0 and enginecosts.speedup_spread(flat, 6) == pytest.approx(
        float(np.hypot(s * np.hypot(0.00488, 0.00427) / 2 / enginecosts.step_seconds(flat, 6), s)))


def test_do_not_speculate_when_no_draft_length_pays(tiny, capsys, tmp_path):
    """A stored profile whose speculative steps cost far more than plain ones (2 ms a token plain, 20 + 8·γ ms a step)."""
    measured = [{"url": "plain", "engine": "vllm", "model": "m", "gamma": None, "max_tokens": 24, "t_prefill": 0.004,
                 "t_token": 0.002}] + [{"url": f"g{g}", "engine": "vllm", "model": "m", "gamma": g, "max_tokens": 24,
                                        "t_prefill": 0.004, "t_step": 0.020 + 0.008 * g} for g in (2, 3)]
    enginecosts.save(enginecosts.fit(measured), str(tmp_path / "slow.json"))
    rc, out = plan(capsys, tiny, "--engine-profile", str(tmp_path / "slow.json"))
    assert rc == 0 and out["speculation_helps"] is False
    costs = out["engine_costs"]
    assert costs["a"] == pytest.approx(0.020) and costs["b"] == pytest.approx(0.008) and costs["e"] == 0.0
    assert out["recommendation"].startswith("do not speculate on vllm")
    assert all(r["predicted_speedup"] < 1 for r in out["rows"])


def test_a_server_without_its_own_clock_is_timed_by_the_clients_and_priced_by_a_line(tiny, capsys):
    """No llama.cpp `timings`, no vLLM histograms: the client's clock, and the plan says so."""
    spec = ["--target", str(tiny / "target"), "--draft", str(tiny / "draft"), "--step-ms", MS, "--fault", "no-clock"]
    with law_servers(["--target", str(tiny / "target"), "--step-ms", MS, "--fault", "no-clock"],
                     [*spec, "--gamma", "2"], [*spec, "--gamma", "4"]) as (plain, g2, g4):
        rc, out = plan(capsys, tiny, "--engine-url", plain, "--engine-url", g2, "--engine-url", g4)
    assert rc == 0, out
    costs = out["engine_costs"]
    assert costs["clock"] == "client" and costs["e"] == 0.0
    assert 0.007 <= costs["b"] <= 0.015  # 8 ms slept per drafted token, and its forward
    assert any("the client's clock" in n for n in out["notes"])


def test_engine_costs_need_a_plain_server_and_two_gammas(tiny, capsys, tmp_path):
    spec = ["--target", str(tiny / "target"), "--draft", str(tiny / "draft")]
    with law_servers([*spec, "--gamma", "2"], ["--target", str(tiny / "target")]) as (g2, plain):
        rc, err = plan(capsys, tiny, "--engine-url", plain, "--engine-url", g2)
        assert rc == 2 and "two draft lengths at least" in err
        rc, err = plan(capsys, tiny, "--engine-url", g2)
        assert rc == 2 and "speculation off" in err
    rc, err = plan(capsys, tiny, "--engine-profile", str(tmp_path / "missing.json"))
    assert rc == 2 and "cannot read --engine-profile" in err
    for bad in ("1", "4,x", "0,4"):
        rc, err = plan(capsys, tiny, "--engine-url", "http://127.0.0.1:1", "--engine-load", bad)
        assert rc == 2 and "--engine-load must be comma-separated integers" in err
    rc, err = plan(capsys, tiny, "--engine-profile", str(tmp_path / "missing.json"), "--engine-load", "4")
    assert rc == 2 and "--engine-load times servers: give --engine-url too" in err
    rc = main(["plan", "--target", str(tiny / "target"), "--draft", str(tiny / "draft"), "--prompts",
               str(tiny / "prompts.json"), "--engine-url", "http://127.0.0.1:1"])
    assert rc == 2 and "--engine vllm|llamacpp|sglang" in capsys.readouterr().err


def _fake_engine(monkeypatch, engine: str, answer):
    """measure_servers' HTTP replaced: servers of `engine` whose requests `answer(url, prompt, n)` returns (a Timed)."""

    class Fake:
        def __init__(self, url, concurrency=1):
            self.url = url

        def get_json(self, path):
            raise AssertionError("detect is the test's")

        def close(self):
            pass

    monkeypatch.setattr(enginecosts, "Server", Fake)
    monkeypatch.setattr(enginecosts, "detect", lambda get_json: (engine, "m"))
    monkeypatch.setattr(enginecosts, "timed_request",
                        lambda server, dialect, model, prompt, n, law, seed, pause: answer(server.url, prompt, n))


def test_servers_take_turns_prompt_by_prompt_so_drift_lands_on_all_alike(monkeypatch):
    """measure_servers: each prompt goes to every server before the next prompt is sent, over each repeat (timed one
    server after the other, a slow minute of the machine priced one γ alone)."""
    from exactspec.audit.engineclock import Timed

    sent = []

    def answer(url, prompt, n):
        sent.append((url, tuple(prompt)))
        return Timed(client=0.01, tokens=n, decode_s=0.008)

    _fake_engine(monkeypatch, "llamacpp", answer)
    out = enginecosts.measure_servers(["a", "b", "c"], [[1], [2]], max_tokens=4, repeats=2, pause=0.0)
    assert sent == [(u, (p,)) for _ in range(2) for p in (1, 2) for u in "abc"]
    assert [m["url"] for m in out] == ["a", "b", "c"] and all(m["requests"] == 4 for m in out)
    assert out[0]["t_token"] == pytest.approx(0.008 / 3) and out[0]["t_prefill"] == pytest.approx(0.002)


def _fake_servers(monkeypatch, stop_after: int):
    """Servers at "p" (plain), "g2" and "g3" (vLLM, greedy drafts) that answer by arithmetic; the call after
    `stop_after` requests raises KeyboardInterrupt, as a Ctrl-C would."""
    from exactspec.audit.engineclock import Timed

    calls = []

    def answer(url, prompt, n):
        if len(calls) == stop_after:
            raise KeyboardInterrupt
        calls.append(url)
        if url == "p":
            return Timed(client=0.004 + 0.002 * (n - 1), tokens=n, decode_s=0.002 * (n - 1))
        g = int(url[1:])
        steps = -(-(n - 1) // 2)
        step = 0.004 + 0.001 * g
        return Timed(client=0.004 + step * steps, tokens=n, decode_s=step * steps, accepted=float(n - 1 - steps),
                     drafts=float(steps), gamma=g)

    _fake_engine(monkeypatch, "vllm", answer)
    return calls


def test_ctrl_c_while_timing_servers_prices_the_plan_by_what_was_timed(tiny, capsys, tmp_path, monkeypatch):
    """Interrupted after 8 requests (each of the 3 servers answered at least 2): the plan is printed, priced by those
    requests, marked partial, exit status 130, and the unfinished profile is not stored."""
    calls = _fake_servers(monkeypatch, stop_after=8)
    rc = main(["plan", "--engine", "vllm", "--target", str(tiny / "target"), "--draft", str(tiny / "draft"),
               "--prompts", str(tiny / "prompts.json"), "--max-new-tokens", "24", "--tree-nodes", "0",
               "--draft-sample-method", "greedy", "--json", "--engine-url", "p", "--engine-url", "g2", "--engine-url",
               "g3", "--engine-profile", str(tmp_path / "engine.json")])
    out, err = capsys.readouterr()
    assert rc == 130 and len(calls) == 8 and "interrupted" in err and "Traceback" not in err
    got = json.loads(out)
    assert got["partial"]["interrupted"] and got["partial"]["engine_requests_timed"] == [3, 3, 2]
    assert any("interrupted by Ctrl-C" in n for n in got["notes"])
    costs = got["engine_costs"]  # priced by the requests timed: 2 ms a token, steps of 4 + 1·γ ms
    assert costs["t_plain"] == pytest.approx(0.002) and costs["b"] == pytest.approx(0.001)
    assert not (tmp_path / "engine.json").exists()


def test_ctrl_c_before_every_server_answered_is_one_line(tiny, capsys, monkeypatch):
    _fake_servers(monkeypatch, stop_after=2)  # the third server has not answered: nothing to price by
    rc = main(["plan", "--engine", "vllm", "--target", str(tiny / "target"), "--draft", str(tiny / "draft"),
               "--prompts", str(tiny / "prompts.json"), "--max-new-tokens", "24", "--tree-nodes", "0",
               "--draft-sample-method", "greedy", "--json", "--engine-url", "p", "--engine-url", "g2", "--engine-url",
               "g3"])
    err = capsys.readouterr().err
    assert rc == 130 and "interrupted" in err and "Traceback" not in err


def test_ctrl_c_while_timing_a_load_keeps_batch_1_and_the_loads_done(tiny, capsys, tmp_path, monkeypatch):
    """--engine-load 2,4 interrupted at concurrency 4: the plan keeps batch 1's prices and concurrency 2's rows."""
    from exactspec.audit import engineload

    _fake_servers(monkeypatch, stop_after=10 ** 6)
    at = []

    def load(url, prompts, c, **kw):
        if c == 4:
            raise KeyboardInterrupt
        at.append(url)
        g = None if url == "p" else int(url[1:])
        return {"url": url, "gamma": g, "concurrency": c, "u": 0.005 if g is None else 0.008 + 0.001 * g,
                "tokens_per_second": 400.0}

    monkeypatch.setattr(engineload, "measure_load", load)
    rc = main(["plan", "--engine", "vllm", "--target", str(tiny / "target"), "--draft", str(tiny / "draft"),
               "--prompts", str(tiny / "prompts.json"), "--max-new-tokens", "24", "--tree-nodes", "0",
               "--draft-sample-method", "greedy", "--json", "--engine-url", "p", "--engine-url", "g2", "--engine-url",
               "g3", "--engine-load", "2,4", "--engine-profile", str(tmp_path / "engine.json")])
    out, err = capsys.readouterr()
    assert rc == 130 and "Traceback" not in err, err
    got = json.loads(out)
    assert got["partial"]["interrupted"] and at == ["p", "g2", "g3"]
    assert list(got["engine_costs"]["loads"]) == ["2"] and all("2" in r["load"] for r in got["rows"] if "load" in r)
    assert any("Ctrl-C while timing concurrency 4" in n for n in got["notes"])
    assert not (tmp_path / "engine.json").exists()
