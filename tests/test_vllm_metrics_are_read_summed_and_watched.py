"""`exactspec plan --vllm-metrics` reads vLLM's Prometheus counters (prometheus_client's parser): engines summed,
one model selected, `_created` samples ignored; derives the per-position acceptance, acceptance rate, mean
acceptance length and gamma in use; recommends a gamma; `--watch` reports each interval's increments; an
unreachable URL, a scrape without speculative metrics, several models without --model-name and counters
going backwards exit with status 2 and one line."""
from __future__ import annotations

import http.server
import json
import threading

import pytest

from exactspec.cli import main
from exactspec.deploy.enginemetrics import extrapolate, parse_spec_counters, summarize
from exactspec.speed.speedup import walltime_speedup

HEAD = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="%(m)s"} 3.0
"""
SPEC = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="%(e)s",model_name="%(m)s"} %(drafts)s
vllm:spec_decode_num_drafts_created{engine="%(e)s",model_name="%(m)s"} 1.7e9
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="%(e)s",model_name="%(m)s"} %(tokens)s
vllm:spec_decode_num_draft_tokens_created{engine="%(e)s",model_name="%(m)s"} 1.7e9
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="%(e)s",model_name="%(m)s"} %(acc)s
vllm:spec_decode_num_accepted_tokens_created{engine="%(e)s",model_name="%(m)s"} 1.7e9
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
"""
POS = 'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="%s",model_name="%s",position="%d"} %s\n'


def scrape(engines: dict[str, tuple[float, list[float]]], model: str = "llama", other: bool = True) -> str:
    """Prometheus text: per engine (drafts, accepted per position) of a 3-token draft; a second model."""
    text = HEAD % {"m": model}
    sets = [(model, engines)] + ([("other", {"0": (10.0, [1.0, 0.0, 0.0])})] if other else [])
    for m, eng in sets:
        for e, (drafts, pos) in eng.items():
            text += SPEC % {"e": e, "m": m, "drafts": drafts, "tokens": 3 * drafts, "acc": sum(pos)}
            text += "".join(POS % (e, m, i, v) for i, v in enumerate(pos))
    return text


TWO_ENGINES = {"0": (100.0, [80.0, 60.0, 30.0]), "1": (50.0, [40.0, 30.0, 15.0])}


def test_engines_are_summed_and_rates_derived():
    s = summarize(parse_spec_counters(scrape(TWO_ENGINES), "llama"))
    assert s["num_drafts"] == 150 and s["num_draft_tokens"] == 450 and s["num_accepted_tokens"] == 255
    assert s["accepted_per_position_per_draft"] == pytest.approx([0.8, 0.6, 0.3])
    assert s["per_position_acceptance"] == pytest.approx([0.8, 0.75, 0.5])
    assert s["acceptance_rate"] == pytest.approx(255 / 450)
    assert s["mean_acceptance_length"] == pytest.approx(1 + 255 / 150)
    assert s["gamma_in_use"] == pytest.approx(3.0)
    assert parse_spec_counters(scrape(TWO_ENGINES), "other").drafts == 10


def test_cli_recommends_the_argmax_gamma_and_says_when_it_extrapolates(tmp_path, capsys):
    f = tmp_path / "metrics.txt"
    f.write_text(scrape(TWO_ENGINES))
    rc = main(["plan", "--vllm-metrics", str(f), "--model-name", "llama", "--cost", "0.02", "--max-gamma", "6",
               "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    alphas, _ = extrapolate([0.8, 0.75, 0.5], 6)
    assert alphas[3:] == [0.5, 0.5, 0.5]  # the smallest observed rate, not a hopeful one
    speedups = [walltime_speedup(alphas[:g], g, 0.02) for g in range(1, 7)]
    assert out["recommended_gamma"] == 1 + speedups.index(max(speedups))
    assert out["predicted_speedup"] == pytest.approx(max(speedups))
    assert out["vllm"]["num_speculative_tokens"] == out["recommended_gamma"]
    assert [r["gamma"] for r in out["rows"]] == list(range(1, 7))
    assert out["per_position_acceptance"] == pytest.approx([0.8, 0.75, 0.5])
    assert out["mean_acceptance_length"] == pytest.approx(1 + 255 / 150)
    assert len(out["by_batch_size"]) == 1 and out["by_batch_size"][0]["batch_size"] == 1
    assert any("extrapolated" in n for n in out["notes"])


class _Server:
    """A local HTTP server whose i-th request gets `pages[min(i, last)]`; stops in `close`."""

    def __init__(self, pages: list[str]):
        self.pages, self.hits = pages, 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                body = outer.pages[min(outer.hits, len(outer.pages) - 1)].encode()
                outer.hits += 1
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.timeout = 5
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/metrics"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def server():
    made = []

    def start(pages):
        made.append(_Server(pages))
        return made[-1]

    yield start
    for s in made:
        s.close()


def test_watch_reports_each_intervals_increments(server, capsys):
    # totals after 0, 1, 2 polls: the second interval's rates differ from the cumulative ones
    pages = [scrape(TWO_ENGINES),
             scrape({"0": (200.0, [160.0, 120.0, 60.0]), "1": (50.0, [40.0, 30.0, 15.0])}),
             scrape({"0": (200.0, [160.0, 120.0, 60.0]), "1": (150.0, [140.0, 120.0, 100.0])})]
    s = server(pages)
    rc = main(["plan", "--vllm-metrics", s.url, "--model-name", "llama", "--watch", "0.05", "--count", "2",
               "--json"])
    assert rc == 0 and s.hits == 3
    first, second = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert first["num_drafts"] == 100 and first["per_position_acceptance"] == pytest.approx([0.8, 0.75, 0.5])
    assert second["num_drafts"] == 100 and second["per_position_acceptance"] == pytest.approx([1.0, 0.9, 85 / 90])
    assert second["interval"] == 2 and second["recommended_gamma"] is None  # no cost given: no recommendation


def test_counters_going_backwards_exit_2(server, capsys):
    s = server([scrape(TWO_ENGINES), scrape({"0": (5.0, [1.0, 0.0, 0.0])})])
    rc = main(["plan", "--vllm-metrics", s.url, "--model-name", "llama", "--watch", "0.05", "--count", "3"])
    err = capsys.readouterr().err
    assert rc == 2 and "went backwards" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("case,message", [
    ("unreachable", "cannot scrape"),
    ("no_spec", "no speculative-decoding metrics"),
    ("two_models", "--model-name"),
    ("unknown_model", "not in the scrape"),
    ("missing_file", "cannot read"),
])
def test_bad_sources_exit_2_with_one_line(tmp_path, capsys, case, message):
    f = tmp_path / "m.txt"
    f.write_text({"no_spec": HEAD % {"m": "llama"}}.get(case, scrape(TWO_ENGINES)))
    source = {"unreachable": "http://127.0.0.1:9/metrics", "missing_file": str(tmp_path / "nope.txt")}.get(case, str(f))
    argv = ["plan", "--vllm-metrics", source] + (["--model-name", "nobody"] if case == "unknown_model" else [])
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1
