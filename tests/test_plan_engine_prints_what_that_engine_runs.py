"""`exactspec plan --engine vllm|llamacpp|sglang` plans with that engine's own rule and prints only the config it
runs (vLLM's speculative_config with draft_sample_method, llama.cpp's server flags with --spec-type, SGLang's
flags), rows whose expected_tokens are the engine's tokens per step, the draft's memory, an audit's verdict
beside the config, acceptance per Spec-Bench category; `--engine exactspec` (the default) is today's plan;
`--metrics` reads vLLM's and llama.cpp's counters (`--vllm-metrics` its alias); bad input exits 2 with one line."""
from __future__ import annotations

import json

import pytest

from exactspec.cli import main
from exactspec.deploy.prompts import read_prompt_file
from test_plan_and_profile_cli_round_trip import pair  # noqa: F401  (the tiny saved pair and its prompts)
from test_vllm_metrics_are_read_summed_and_watched import TWO_ENGINES, scrape

SPEC_BENCH = [{"question_id": 81, "category": "coding", "turns": ["w5 w6 w7 w5 w6", "w1 w2"]},
              {"question_id": 82, "category": "writing", "turns": ["w9 w3 w9 w3 w9"]},
              {"question_id": 83, "category": "coding", "turns": ["w40 w41 w42 w40 w41"]}]


@pytest.fixture(scope="module")
def question(pair):  # noqa: F811
    path = pair / "question.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in SPEC_BENCH) + "\n")
    return path


def plan(pair, capsys, *argv, prompts=None, json_out=True):  # noqa: F811
    capsys.readouterr()
    rc = main(["plan", "--target", str(pair / "target"), "--draft", str(pair / "draft"), "--prompts",
               str(prompts or pair / "prompts.txt"), "--max-new-tokens", "12", "--max-gamma", "4", "--cost", "0.1",
               "--tree-nodes", "0", *argv] + (["--json"] if json_out else []))
    out = capsys.readouterr().out
    assert rc == 0
    return json.loads(out) if json_out else out


def test_spec_bench_questions_are_read_as_first_turns_with_their_categories(question):
    from exactspec.bench.bench import load_prompts

    got = read_prompt_file(str(question))
    assert list(got) == ["w5 w6 w7 w5 w6", "w9 w3 w9 w3 w9", "w40 w41 w42 w40 w41"]
    assert got.categories == ["coding", "writing", "coding"]
    assert load_prompts(question) == list(got)  # bench reads the same file (no per-category report yet)


def test_vllm_plan_has_its_rule_its_config_and_per_category_rows(pair, question, capsys):  # noqa: F811
    out = plan(pair, capsys, "--engine", "vllm", "--temperature", "1", "--batch-sizes", "1,8", prompts=question)
    assert out["engine"] == "vllm" and set(out["methods"]) == {"greedy", "probabilistic"}
    best = max(out["methods"], key=lambda m: (out["methods"][m]["predicted_speedup"], m == "greedy"))
    assert out["rule"] == best
    cfg = out["vllm"]
    assert cfg["method"] == "draft_model" and cfg["draft_sample_method"] == out["rule"]
    assert cfg["num_speculative_tokens"] >= out["recommended_gamma"]
    for key in ("sglang", "hf", "exactspec", "llamacpp", "block", "tree"):  # only what vLLM runs
        assert key not in out, key
    for r in out["rows"]:  # tokens per drafting step, as the engine's counters give it
        assert r["expected_tokens"] == pytest.approx(r["mean_acceptance_length"])
    assert "not the engine's" in out["pricing"] and any("exactspec audit" in n for n in out["notes"])
    cats = {c["category"]: c for c in out["by_category"]}
    assert set(cats) == {"coding", "writing"} and cats["coding"]["prompts"] == 2
    assert sum(c["tokens"] for c in cats.values()) == out["measured"]["tokens_written"]
    for c in cats.values():
        assert c["predicted_speedup"] == max(r["predicted_speedup"] for r in c["rows"])


def test_vllm_draft_sample_method_is_planned_as_given(pair, capsys):  # noqa: F811
    out = plan(pair, capsys, "--engine", "vllm", "--temperature", "1", "--draft-sample-method", "greedy")
    assert out["rule"] == "greedy" and out["vllm"]["draft_sample_method"] == "greedy" and "methods" not in out


def test_llamacpp_plan_prints_server_flags_and_the_drafts_memory(pair, capsys):  # noqa: F811
    out = plan(pair, capsys, "--engine", "llamacpp", "--spec-draft-n-min", "2", "--spec-draft-p-min", "0.25",
               "--context", "100")
    flags, g = out["llamacpp"], out["recommended_gamma"]
    assert flags[flags.index("--spec-type") + 1] == "draft-simple" and "-md" in flags  # -md alone is ignored
    assert flags[flags.index("--spec-draft-n-max") + 1] == str(g)
    assert flags[flags.index("--spec-draft-n-min") + 1] == "2" and flags[flags.index("--spec-draft-p-min") + 1] == "0.25"
    assert "<draft.gguf>" in flags  # a Hugging Face folder is no GGUF file: a placeholder, and a note how to convert
    assert any("exactspec.pairs.gguf" in n for n in out["notes"]) and "vllm" not in out
    import transformers

    cfg = transformers.AutoConfig.from_pretrained(pair / "draft")
    draft = transformers.AutoModelForCausalLM.from_pretrained(pair / "draft")
    mem = out["draft_memory"]
    params = sum(p.numel() for p in draft.parameters())
    head = cfg.hidden_size // cfg.num_attention_heads
    per_token = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head * 2  # llama.cpp's f16 cache
    assert mem["weights_bytes"] == params * 4 and mem["kv_bytes_per_token"] == per_token
    assert mem["total_bytes"] == params * 4 + per_token * 100 * 1


def test_sglang_plan_prints_its_flags_and_says_what_was_assumed(pair, capsys):  # noqa: F811
    out = plan(pair, capsys, "--engine", "sglang")
    g = out["recommended_gamma"]
    assert out["sglang"][out["sglang"].index("--speculative-num-steps") + 1] == str(g) and "vllm" not in out
    assert out["rule"] == "greedy" and any("assumed" in n for n in out["notes"])


def test_default_engine_is_exactspec_and_its_plan_unchanged(pair, capsys):  # noqa: F811
    default = plan(pair, capsys)
    named = plan(pair, capsys, "--engine", "exactspec")
    assert default == named and default["engine"] == "exactspec"
    assert {"vllm", "sglang", "hf", "exactspec"} <= set(default) and "vllm" in default
    assert "draft_sample_method" not in default["vllm"]


@pytest.mark.parametrize("engine,key,first", [("vllm", "vllm", "ngram"), ("llamacpp", "llamacpp", "-m")])
def test_prompt_lookup_plans_the_engines_own_lookup(pair, capsys, engine, key, first):  # noqa: F811
    capsys.readouterr()
    rc = main(["plan", "--target", str(pair / "target"), "--prompt-lookup", "--ngram", "1", "--prompts",
               str(pair / "prompts.txt"), "--max-new-tokens", "12", "--max-gamma", "3", "--cost", "0", "--engine",
               engine, "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["rule"] in ("ngram", "ngram-simple")
    if engine == "vllm":
        assert out[key]["method"] == first and out[key]["prompt_lookup_max"] == 1
    else:
        flags = out[key]
        assert flags[flags.index("--spec-type") + 1] == "ngram-simple" and "-md" not in flags
        assert flags[flags.index("--spec-ngram-simple-size-m") + 1] == str(out["recommended_gamma"])


def test_an_audit_that_found_speculation_not_exact_says_so_beside_the_config(pair, tmp_path, capsys):  # noqa: F811
    audit = tmp_path / "audit.json"
    audit.write_text(json.dumps({"verdict": "not exact", "engine": "vllm", "settings": ["T=1"], "p_value": 1e-30}))
    out = plan(pair, capsys, "--engine", "vllm", "--temperature", "0.7", "--audit", str(audit))
    assert out["audit"]["verdict"] == "not exact" and out["audit"]["exact"] is False
    assert out["notes"][0].startswith("NOT EXACT") and any("not the planned T = 0.7" in n for n in out["notes"])
    text = plan(pair, capsys, "--engine", "sglang", "--audit", str(audit), json_out=False)
    assert "audit: NOT EXACT" in text and "does not apply" in " ".join(text.split())
    audit.write_text(json.dumps({"verdict": "exact", "engine": "vllm", "settings": ["T=0"], "p_value": None}))
    out = plan(pair, capsys, "--engine", "vllm", "--audit", str(audit))
    assert out["audit"]["exact"] is True and not any("NOT EXACT" in n for n in out["notes"])


def test_metrics_reads_llamacpp_counters_and_vllm_metrics_stays_an_alias(tmp_path, capsys):
    f = tmp_path / "m.txt"
    text = "".join(line.replace("vllm:", "llamacpp:").replace('engine="0",model_name="llama",', "")
                   .replace('{engine="0",model_name="llama"}', "")
                   for line in scrape({"0": (100.0, [80.0, 60.0, 30.0])}, other=False).splitlines(True))
    f.write_text(text)
    rc = main(["plan", "--metrics", str(f), "--cost", "0.02", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["engine"] == "llamacpp"
    assert out["per_position_acceptance"] == pytest.approx([0.8, 0.75, 0.5])
    assert out["llamacpp"] == ["--spec-draft-n-max", str(out["recommended_gamma"])] and "vllm" not in out
    f.write_text(scrape(TWO_ENGINES))
    for option in ("--metrics", "--vllm-metrics"):
        rc = main(["plan", option, str(f), "--model-name", "llama", "--json"])
        out = json.loads(capsys.readouterr().out)
        assert rc == 0 and out["engine"] == "vllm" and out["num_drafts"] == 150


@pytest.mark.parametrize("argv,message", [
    (["--engine", "vllm", "--draft-sample-method", "greedy", "--engine", "sglang"], "--draft-sample-method"),
    (["--spec-draft-n-min", "1"], "--spec-draft-n-min"),
    (["--engine", "llamacpp", "--spec-draft-p-min", "2"], "--spec-draft-p-min"),
    (["--engine", "nope"], "--engine"),
    (["--metrics", "M", "--vllm-metrics", "M"], "not both"),
    (["--metrics", "M", "--engine", "vllm"], "--engine"),
    (["--audit", "/nonexistent/a.json"], "cannot read --audit"),
    (["--audit", "BAD"], "--audit"),
    (["--prompts", "Q"], "--prompts"),
])
def test_bad_engine_input_exits_2_with_one_line(pair, tmp_path, capsys, argv, message):  # noqa: F811
    (tmp_path / "m.txt").write_text(scrape(TWO_ENGINES))
    (tmp_path / "bad.json").write_text('{"verdict": "maybe"}')
    (tmp_path / "q.jsonl").write_text('{"question_id": 1, "turns": "not a list"}\n')
    subst = {"M": str(tmp_path / "m.txt"), "BAD": str(tmp_path / "bad.json"), "Q": str(tmp_path / "q.jsonl")}
    rc = main(["plan", "--target", str(pair / "target"), "--draft", str(pair / "draft"), "--cost", "0.1",
               *[subst.get(a, a) for a in argv]] if "--metrics" not in argv else
              ["plan", *[subst.get(a, a) for a in argv]])
    err = capsys.readouterr().err
    assert rc == 2 and message in err and len(err.strip().splitlines()) == 1, err
