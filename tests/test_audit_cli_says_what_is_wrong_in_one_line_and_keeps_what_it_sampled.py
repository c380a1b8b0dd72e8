"""`exactspec audit`'s promises outside the statistics: one clear line and exit 2 for an unusable server or bad
input (unreachable, no token ids, another model than --target, settings it cannot mix), a run without metrics
that still audits, the files --out writes, and Ctrl-C keeping what was sampled."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from _audit_servers import law_server, make_models
from exactspec.cli import main


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_models(tmp_path_factory.mktemp("audit_cli"))


def run(capsys, *argv):
    rc = main(["audit", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _one_line_error(rc, err, *words):
    lines = [ln for ln in err.splitlines() if "error" in ln]
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("exactspec audit: error:"), err
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert "Traceback" not in err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_server_is_one_line(tiny, capsys):
    rc, _, err = run(capsys, f"http://127.0.0.1:{_free_port()}", "--target", str(tiny / "target"))
    _one_line_error(rc, err, "cannot reach the server")


def test_server_without_token_ids_is_one_line(tiny, capsys):
    with law_server("--target", str(tiny / "target"), "--fault", "no-ids") as url:
        rc, _, err = run(capsys, url, "--target", str(tiny / "target"), "--samples", "2")
    _one_line_error(rc, err, "no token ids", "return_token_ids")


def test_another_model_than_target_is_one_line_not_a_verdict(tiny, capsys):
    with law_server("--target", str(tiny / "other")) as url:
        rc, _, err = run(capsys, url, "--target", str(tiny / "target"), "--prompts", str(tiny / "prompts.json"))
    _one_line_error(rc, err, "does not match --target")


def test_bad_settings_fail_before_any_request(tiny, capsys):
    url = f"http://127.0.0.1:{_free_port()}"
    rc, _, err = run(capsys, url, "--target", str(tiny / "target"), "--temperature", "0,1")
    _one_line_error(rc, err, "--temperature")
    rc, _, err = run(capsys, url, "--target", str(tiny / "target"), "--temperature", "-1")
    assert rc == 2 and "--temperature" in err
    rc, _, err = run(capsys, "localhost:8000", "--target", str(tiny / "target"))
    _one_line_error(rc, err, "http://")
    rc, _, err = run(capsys, url, "--target", str(tiny / "target"), "--engine", "llamacpp", "--draft-method",
                     "probabilistic")
    _one_line_error(rc, err, "--draft-method")
    rc, _, err = run(capsys, url, "--target", str(tiny / "target"), "--prompts", str(tiny / "missing.txt"))
    _one_line_error(rc, err, "--prompts")


def test_no_metrics_still_audits_and_out_writes_every_file(tiny, capsys, tmp_path):
    out = tmp_path / "report"
    with law_server("--target", str(tiny / "target"), "--draft", str(tiny / "draft"), "--gamma", "2",
                    "--fault", "no-metrics") as url:
        rc, stdout, err = run(capsys, url, "--target", str(tiny / "target"), "--draft", str(tiny / "draft"),
                              "--prompts", str(tiny / "prompts.json"), "--samples", "40", "--max-tokens", "4",
                              "--out", str(out))
    assert rc in (0, 3), err  # 320 tokens: too few to promise `exact`, and not `not exact`
    for name in ("audit.json", "audit.md", "audit.png", "samples.jsonl", "audit.log"):
        assert (out / name).stat().st_size > 0, name
    report = json.loads((out / "audit.json").read_text())
    assert report["acceptance"]["engine"] is None  # no counters to read, said in one line
    assert len([ln for ln in err.splitlines() if ln.startswith("note: no speculative-decoding counters")]) == 1
    assert report["acceptance"]["engine_rule"] == "greedy" and report["acceptance"]["gamma"] == 4
    assert len((out / "samples.jsonl").read_text().splitlines()) == report["samples"] == 80
    assert report["verdict"] in stdout  # the Markdown report on stdout
    assert "sampling 80 requests" in (out / "audit.log").read_text()


def test_ctrl_c_reports_what_was_sampled(tiny, tmp_path):
    with law_server("--target", str(tiny / "target")) as url:
        proc = subprocess.Popen([sys.executable, "-m", "exactspec", "audit", url, "--target", str(tiny / "target"),
                                 "--prompts", str(tiny / "prompts.json"), "--samples", "5000", "--json",
                                 "--concurrency", "2"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                                # a background job (CI) inherits SIGINT ignored: give the command Python's handler
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        seen = ""
        deadline = time.time() + 120
        while "samples (" not in seen and time.time() < deadline:  # wait for the first progress line
            seen += proc.stderr.readline()
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    report = json.loads(out)
    assert report["partial"] and 0 < report["samples"] < report["samples_asked"]
    assert report["tokens_tested"] == report["samples"] * 8
    assert "interrupted: reported the" in err


def test_request_seeds_reproduce_the_samples_and_the_default_sends_none(tiny, capsys, tmp_path):
    args = ["--target", str(tiny / "target"), "--prompts", str(tiny / "prompts.json"), "--samples", "10",
            "--max-tokens", "4"]
    with law_server("--target", str(tiny / "target")) as url:
        for name, extra in (("a", ["--request-seeds"]), ("b", ["--request-seeds"]), ("c", [])):
            run(capsys, url, *args, *extra, "--out", str(tmp_path / name))
    rows = {n: [json.loads(x) for x in (tmp_path / n / "samples.jsonl").read_text().splitlines()] for n in "abc"}
    key = lambda r: (r["prompt"], r["sample"])  # noqa: E731
    assert sorted(rows["a"], key=key) == sorted(rows["b"], key=key)
    assert all(r["seed"] is None for r in rows["c"]) and all(r["seed"] is not None for r in rows["a"])


def test_help_states_the_verdicts_their_error_rates_and_exit_statuses(capsys):
    with pytest.raises(SystemExit):
        from exactspec.cli import build_parser

        build_parser().parse_args(["audit", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for phrase in ("not exact", "exact", "inconclusive", "--alpha", "Bonferroni", "probability >= 0.95",
                   "--tolerance", "--control", "two-sample", "0 exact, 1 not exact, 3 inconclusive", "130 Ctrl-C"):
        assert phrase in text, phrase
