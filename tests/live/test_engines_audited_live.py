"""`exactspec audit` against the real engines (issue 47's "done when"): run by `make audit-live`, never by the default
suite (it needs vLLM's own venv and llama.cpp's server: engines/setup.sh makes both).

On prompts no test had seen (benchmarks/prompts/audit/unseen_audit1.json), 4 prompts x 600 samples x 8 tokens:
- vLLM with speculation off at T = 1: exact;
- vLLM's draft-model speculation at T = 1, greedy and sampled drafts: not exact (its CPU build's fault);
- the same with the fault replaced by the plugin engines/vllm_exact_sampling: exact;
- vLLM's speculation at T = 0: greedy_equal;
- llama.cpp's server with a draft at T = 1: exact; in its blind-acceptance benchmarking mode: not exact;
each audit within 10 minutes, sampling included. The reports are written under $EXACTSPEC_LIVE_OUT (default: a
temporary folder); docs/audit.md quotes them.
"""
from __future__ import annotations

import json
import os
import pathlib
import time

import pytest

from exactspec.cli import main

pytestmark = pytest.mark.skipif(os.environ.get("EXACTSPEC_LIVE") != "1", reason="live engines: make audit-live")

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROMPTS = ROOT / "benchmarks" / "prompts" / "audit" / "unseen_audit1.json"
LIMIT_S = 600


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    where = os.environ.get("EXACTSPEC_LIVE_OUT")
    return pathlib.Path(where) if where else tmp_path_factory.mktemp("live")


def audit(url: str, out: pathlib.Path, name: str, *extra: str) -> dict:
    t0 = time.time()
    rc = main(["audit", url, "--target", "stdlib", "--prompts", str(PROMPTS), "--samples", "600", "--max-tokens",
               "8", "--concurrency", "8", "--out", str(out / name), *extra])
    seconds = time.time() - t0
    report = json.loads((out / name / "audit.json").read_text())
    report["_rc"], report["_wall_s"] = rc, seconds
    (out / name / "wall.json").write_text(json.dumps({"rc": rc, "wall_s": seconds}))
    print(f"{name}: {report['verdict']} p={report.get('p_value')} in {seconds:.0f} s", flush=True)
    return report


def test_vllm_plain_is_exact_at_t1(out):
    from _engines import vllm

    with vllm(out / "vllm_plain.log") as url:
        r = audit(url, out, "vllm_plain_t1", "--temperature", "1")
    assert r["verdict"] == "exact" and r["_rc"] == 0
    assert r["tokens_tested"] == 4 * 600 * 8 and r["_wall_s"] < LIMIT_S


@pytest.mark.parametrize("method", ["greedy", "probabilistic"])
def test_vllm_draft_speculation_is_not_exact_at_t1(out, method):
    from _engines import vllm

    spec = {"num_speculative_tokens": 4, "draft_sample_method": method}
    with vllm(out / f"vllm_{method}.log", spec) as url:
        r = audit(url, out, f"vllm_{method}_t1", "--temperature", "1", "--draft", "stdlib", "--gamma", "4",
                  "--draft-method", method)
        g = audit(url, out, f"vllm_{method}_t0", "--temperature", "0", "--samples", "8") if method == "greedy" else None
    assert r["verdict"] == "not exact" and r["_rc"] == 1 and r["_wall_s"] < LIMIT_S
    if g is not None:
        assert g["greedy_equal"] is True and g["verdict"] == "exact"


def test_vllm_speculation_with_the_fault_replaced_is_exact_at_t1(out):
    from _engines import vllm

    spec = {"num_speculative_tokens": 4, "draft_sample_method": "probabilistic"}
    with vllm(out / "vllm_fixed.log", spec, fix=True) as url:
        r = audit(url, out, "vllm_fixed_t1", "--temperature", "1", "--draft", "stdlib", "--gamma", "4",
                  "--draft-method", "probabilistic")
    assert r["verdict"] == "exact" and r["_rc"] == 0 and r["_wall_s"] < LIMIT_S


def test_llamacpp_server_with_a_draft_is_exact_at_t1(out):
    from _engines import llama_server

    with llama_server(out / "llamacpp_draft.log", draft=True) as url:
        r = audit(url, out, "llamacpp_draft_t1", "--temperature", "1", "--draft", "stdlib", "--gamma", "4")
    assert r["engine"] == "llamacpp" and r["verdict"] == "exact" and r["_wall_s"] < LIMIT_S
    assert r["acceptance"]["engine"]["num_drafts"] > 0


def test_llamacpp_servers_blind_acceptance_mode_is_not_exact(out):
    """--spec-synth-rates keeps drafts at fixed rates whatever the target says (a benchmarking mode)."""
    from _engines import llama_server

    with llama_server(out / "llamacpp_synth.log", draft=True, synth_rates="0.5,0.5,0.5,0.5") as url:
        r = audit(url, out, "llamacpp_synth_t1", "--temperature", "1", "--samples", "150")
    assert r["verdict"] == "not exact" and r["_rc"] == 1
