"""GGUF files run natively: exactspec's converter writes a file that llama.cpp and transformers both load with
the Hugging Face model's logits; a subset-head draft exported to GGUF gives the torch draft's logits (-inf put
back outside its subset); the shipped pairs load on llama.cpp (`load_pair(name, backend="llamacpp")`) and are
greedy-equal to the same backend's target-alone loop; the stdlib pair's cached GGUF form is rebuilt when
damaged; `--backend` works on generate and bench; bad values give one clear error."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

pytest.importorskip("llama_cpp")

from _tiny_gguf import gguf_of, llama_dir, tokenizer_dir  # noqa: E402

from exactspec import SpeculativeGenerator, load_pair  # noqa: E402
from exactspec.backends.llamacpp import LlamaCppLM  # noqa: E402
from exactspec.backends.seam import open_session  # noqa: E402
from exactspec.engine.baseline import target_alone_loop  # noqa: E402
from exactspec.pairs.load import chat_prompt, pair_prompts  # noqa: E402


def test_the_converter_writes_a_file_llamacpp_and_transformers_both_load(tmp_path):
    from transformers import AutoModelForCausalLM

    hf_dir = llama_dir(tmp_path / "hf", seed=5, tok_dir=tokenizer_dir(tmp_path / "tok"))
    path = gguf_of(hf_dir, tmp_path / "m.gguf", outtype="f32")
    hf = AutoModelForCausalLM.from_pretrained(hf_dir).eval()
    via_tf = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="m.gguf").eval()
    ids = torch.randint(1, hf.config.vocab_size, (1, 20), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        want = hf(ids).logits
        assert torch.allclose(via_tf(ids).logits, want, atol=1e-5)  # the permutation is undone exactly
        got = open_session(LlamaCppLM(path, threads=1), 1, target=True).forward(ids, torch.ones_like(ids, dtype=torch.bool))
    assert float((got - want).abs().max() / want.abs().max()) < 2e-3  # ggml's rounding (see the seam test)


@pytest.mark.parametrize("outtype, tol", [("q8_0", 0.03), ("q4_0", 0.4)])
def test_the_converter_writes_llamacpps_block_quantizations(tmp_path, outtype, tol):
    """--outtype q8_0 / q4_0: every matrix is stored in that type (norms in f32), each within that type's rounding
    of the f32 file's tensor (a block-quantized copy of the same layout, not another type nor a transposition),
    and llama.cpp runs the file with logits near the f32 file's and not equal to them."""
    import gguf
    import numpy as np

    from exactspec.pairs.gguf import convert_to_gguf, main

    hf_dir = llama_dir(tmp_path / "hf", seed=5, tok_dir=tokenizer_dir(tmp_path / "tok"))
    ref = gguf_of(hf_dir, tmp_path / "f32.gguf", outtype="f32")
    assert main([str(hf_dir), str(tmp_path / "q.gguf"), "--outtype", outtype]) == 0  # the CLI's choice
    want_t = {t.name: np.asarray(t.data) for t in gguf.GGUFReader(ref).tensors}
    qtype = getattr(gguf.GGMLQuantizationType, outtype.upper())
    step = {"q8_0": 1 / 127, "q4_0": 1 / 7}[outtype]  # a block's scale over its largest value
    tensors = gguf.GGUFReader(tmp_path / "q.gguf").tensors
    assert {t.name for t in tensors} == set(want_t)
    for t in tensors:
        w = want_t[t.name]
        if w.ndim == 1:
            assert t.tensor_type == gguf.GGMLQuantizationType.F32, t.name
            continue
        assert t.tensor_type == qtype, (t.name, t.tensor_type)
        got = gguf.quants.dequantize(np.asarray(t.data), qtype).reshape(w.shape)
        err = np.abs(got - w).max() / np.abs(w).max()
        assert err <= step, (t.name, err)  # at most one quantization step of the largest block
    f16 = convert_to_gguf(hf_dir, tmp_path / "f16.gguf", "f16")
    quant = LlamaCppLM(tmp_path / "q.gguf", threads=1)
    assert outtype.upper() in quant.description and (tmp_path / "q.gguf").stat().st_size < f16.stat().st_size
    ids = torch.randint(1, quant.vocab_size, (1, 20), generator=torch.Generator().manual_seed(0))
    ones = torch.ones_like(ids, dtype=torch.bool)
    want = open_session(LlamaCppLM(ref, threads=1), 1, target=True).forward(ids, ones)
    got = open_session(quant, 1, target=True).forward(ids, ones)
    err = float((got - want).abs().max() / want.abs().max())
    assert 0 < err < tol, err  # (not 0: the weights really were quantized)
    with pytest.raises(ValueError, match="outtype must be one of"):
        convert_to_gguf(hf_dir, tmp_path / "x.gguf", "q5_k")


def test_a_block_quantization_of_rows_not_a_multiple_of_32_is_a_clear_error(tmp_path):
    from exactspec.pairs.gguf import convert_to_gguf

    hf_dir = llama_dir(tmp_path / "hf", seed=5, hidden=48, tok_dir=tokenizer_dir(tmp_path / "tok"))
    with pytest.raises(ValueError, match="not a multiple of 32"):
        convert_to_gguf(hf_dir, tmp_path / "q.gguf", "q8_0")


def _greedy_equal(target, draft, ids, n: int, gammas=("auto", 4)):
    """Whether each of `gammas` gives the target-alone loop's greedy tokens (gamma="auto" may not draft at all
    on a pair near break-even); the last run's output (gamma=4: it drafted)."""
    alone = target_alone_loop(target, ids, torch.ones_like(ids), max_new_tokens=n, temperature=0, seed=0)
    gen, same = SpeculativeGenerator(target, draft), True
    for gamma in gammas:
        out = gen.generate(ids, max_new_tokens=n, do_sample=False, eos_token_id=[], gamma=gamma)
        same = same and out.sequences[0, -n:].tolist() == alone[0].tolist()
    return same, out


def test_the_stdlib_pair_on_llamacpp_is_greedy_equal_to_its_target_alone_loop():
    target, draft, tok = load_pair("stdlib", backend="llamacpp", threads=1)
    assert isinstance(target, LlamaCppLM) and isinstance(draft, LlamaCppLM)
    assert target.gguf_path.endswith("target.gguf") and draft.gguf_path.endswith("draft.gguf")
    for prompt in pair_prompts("stdlib")[:2]:
        ids = tok(prompt, return_tensors="pt").input_ids[:, -128:]
        same, out = _greedy_equal(target, draft, ids, 32)
        assert same
        assert sum(out.stats.position_accepted) > 0


def test_a_subset_head_draft_exported_to_gguf_gives_the_torch_drafts_logits(tmp_path):
    """export_smollm2_draft on a tiny target/draft pair (the same code path as the shipped draft): the layers'
    q/k permuted, the head's subset rows in place, zeros elsewhere; SubsetLlamaCppLM masks those to -inf."""
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    from exactspec.pairs.gguf import export_smollm2_draft
    from exactspec.pairs.smollm2 import SubsetLlamaCppLM, build_draft, draft_state

    hf_dir = llama_dir(tmp_path / "hf", seed=7, tok_dir=tokenizer_dir(tmp_path / "tok"))
    target_gguf = gguf_of(hf_dir, tmp_path / "target.gguf", outtype="f32")
    hf = AutoModelForCausalLM.from_pretrained(hf_dir).eval()
    subset = torch.randperm(hf.config.vocab_size, generator=torch.Generator().manual_seed(1))[:100].sort().values
    draft = build_draft(hf, subset, num_layers=1)
    with torch.no_grad():
        draft.lm_head.weight.add_(0.1 * torch.randn_like(draft.lm_head.weight))  # not the target's rows
    (tmp_path / "draft").mkdir()
    save_file(draft_state(draft), tmp_path / "draft" / "draft.safetensors")
    (tmp_path / "draft" / "draft.json").write_text(json.dumps({"num_layers": 1}))
    path = export_smollm2_draft(tmp_path / "d.gguf", layers="f32", head="f32", target_gguf=target_gguf,
                                draft_dir=tmp_path / "draft")
    lm = SubsetLlamaCppLM(path, threads=1)
    assert torch.equal(lm.token_ids, subset)  # read back from the file's exactspec.draft.token_ids
    ids = torch.randint(1, hf.config.vocab_size, (1, 16), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        want = draft(ids).logits  # [1, 16, V], -inf outside the subset
        got = open_session(lm, 1, target=False).forward(ids, torch.ones_like(ids, dtype=torch.bool))
    finite = torch.isfinite(want)
    assert torch.equal(torch.isfinite(got), finite)
    assert float((got[finite] - want[finite]).abs().max() / want[finite].abs().max()) < 2e-3
    with pytest.raises(ValueError, match="head must be one of"):
        export_smollm2_draft(tmp_path / "x.gguf", head="q2_k", target_gguf=target_gguf, draft_dir=tmp_path / "draft")


def test_the_smollm2_pair_runs_its_q4_1_file_as_it_ships():
    pytest.importorskip("gguf")
    from exactspec.pairs.smollm2 import SubsetLlamaCppLM

    target, draft, tok = load_pair("smollm2", backend="llamacpp", threads=2)
    assert target.gguf_path.endswith("SmolLM2-135M-Instruct.Q4_1.gguf") and not target.repack  # (see LlamaCppLM)
    assert isinstance(draft, SubsetLlamaCppLM) and draft.gguf_path.endswith("draft.gguf")
    assert draft.token_ids.numel() == 8192
    ids = tok(chat_prompt(tok, pair_prompts("smollm2")[0]), return_tensors="pt").input_ids
    same, out = _greedy_equal(target, draft, ids, 12, gammas=(4,))  # (gamma="auto" on llama.cpp: the stdlib
    assert same and out.stats.accepted_tokens > 0  # pair's test; measuring this pair's profile takes seconds)


def test_a_damaged_cached_gguf_is_rebuilt(tmp_path, monkeypatch, capsys):
    from exactspec.pairs.gguf import stdlib_gguf

    monkeypatch.setenv("EXACTSPEC_CACHE", str(tmp_path))
    t_path, _ = stdlib_gguf()
    size = t_path.stat().st_size
    with open(t_path, "r+b") as f:  # same size, other bytes
        f.seek(size // 2)
        f.write(b"\x00" * 64)
    import exactspec.backends.cachecheck as cc

    cc._VERIFIED.clear()  # a new process would hash it again
    t2, _ = stdlib_gguf()
    assert "cannot be trusted" in capsys.readouterr().err
    assert t2.stat().st_size == size and LlamaCppLM(t2, threads=1).vocab_size == 4096
    with pytest.raises(ValueError, match="outtype"):
        stdlib_gguf("q8")


def test_bad_backend_dtype_and_device_give_one_clear_error():
    with pytest.raises(ValueError, match="backend must be"):
        load_pair("stdlib", backend="vllm")
    with pytest.raises(ValueError, match="dtype: a llama.cpp model"):
        load_pair("stdlib", backend="llamacpp", dtype=torch.float16)
    with pytest.raises(ValueError, match="threads"):
        load_pair("stdlib", threads=2)
    from exactspec.pairs.load import smollm2_on_llamacpp

    with pytest.raises(ValueError, match="draft must be"):
        smollm2_on_llamacpp(draft="onnx")


def test_a_missing_llama_cpp_python_says_how_to_install_it(monkeypatch):
    import exactspec.backends.optional as optional

    monkeypatch.setattr(optional, "llamacpp_available", lambda: False)
    with pytest.raises(ModuleNotFoundError, match="backend 'llamacpp' needs llama-cpp-python") as err:
        load_pair("stdlib", backend="llamacpp")
    assert optional.INSTALL_HINT in str(err.value)


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "exactspec", *args], capture_output=True, text=True, timeout=600,
                          env=env or os.environ.copy())


def test_generate_and_bench_take_backend_llamacpp(tmp_path):
    out = _cli("generate", "--backend", "llamacpp", "--threads", "1", "--max-new-tokens", "12", "--json",
               "def add(a, b):")
    assert out.returncode == 0, out.stderr
    assert len(json.loads(out.stdout)["token_ids"][0]) == 12
    bench = _cli("bench", "--backend", "llamacpp", "--no-peers", "--num-prompts", "1", "--repeats", "1",
                 "--max-new-tokens", "16", "--systems", "token (γ=4)", "--threads", "1", "--out", str(tmp_path),
                 "--json")
    assert bench.returncode == 0, bench.stderr
    report = json.loads(bench.stdout.strip().splitlines()[-1])
    assert report["baseline"] == "target (exactspec loop)"
    assert all(r["greedy_equals_target_generate"] for r in report["rows"])


def test_trees_run_on_llamacpp_from_the_cli_and_the_bench_runs_them_when_asked(tmp_path):
    out = _cli("generate", "--backend", "llamacpp", "--threads", "1", "--max-new-tokens", "12", "--tree", "3,2,1",
               "--json", "def add(a, b):")
    assert out.returncode == 0, out.stderr
    assert len(json.loads(out.stdout)["token_ids"][0]) == 12
    args = ["bench", "--backend", "llamacpp", "--no-peers", "--num-prompts", "1", "--repeats", "1",
            "--max-new-tokens", "16", "--threads", "1", "--out", str(tmp_path), "--json"]
    default = _cli(*args, "--systems", "tree")  # --help: no tree system on llama.cpp unless --tree asks
    assert default.returncode == 2 and "'tree' selects no system" in default.stderr
    bench = _cli(*args, "--systems", "tree", "--tree", "6")
    assert bench.returncode == 0, bench.stderr
    rows = json.loads(bench.stdout.strip().splitlines()[-1])["rows"]
    tree = [r for r in rows if "tree" in r["system"]]
    assert tree and all(r["greedy_equals_target_generate"] for r in tree)


def test_a_gguf_target_falls_back_to_transformers_in_one_line_without_llama_cpp_python(tmp_path):
    tok = tokenizer_dir(tmp_path / "tok")
    path = gguf_of(llama_dir(tmp_path / "hf", seed=6, tok_dir=tok), tmp_path / "m.gguf")
    block = tmp_path / "block"
    block.mkdir()
    (block / "sitecustomize.py").write_text(
        "import importlib.util as u\n_f = u.find_spec\n"
        "u.find_spec = lambda name, *a, **k: None if name == 'llama_cpp' else _f(name, *a, **k)\n")
    env = {**os.environ, "PYTHONPATH": str(block)}
    out = _cli("generate", "--target", str(path), "--prompt-lookup", "--max-new-tokens", "4", "def add", env=env)
    assert out.returncode == 0, out.stderr
    assert "note: llama-cpp-python is not installed: m.gguf runs dequantized on transformers" in out.stderr


def test_a_seed_reproduces_on_llamacpp_in_separate_processes():
    """The seed promise (docs/generation.md, "Seeds") on the llama.cpp backend: gamma="auto" prices with the
    stored cost profile of these GGUF files, so two processes draw the same tokens."""
    args = ("generate", "--backend", "llamacpp", "--threads", "1", "--seed", "3", "--temperature", "1",
            "--max-new-tokens", "24", "--json", "def add(a, b):")
    first, second = _cli(*args), _cli(*args)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert json.loads(first.stdout)["token_ids"] == json.loads(second.stdout)["token_ids"]


def test_plan_takes_backend_llamacpp(tmp_path):
    """plan measures acceptance (the target writes, one teacher-forced pass of each model) and costs through
    llama.cpp's sessions."""
    prompts = tmp_path / "p.txt"
    prompts.write_text("def add(a, b):\n\nclass Point:\n    def __init__(self, x, y):\n")
    out = _cli("plan", "--backend", "llamacpp", "--threads", "1", "--pair", "stdlib", "--prompts", str(prompts),
               "--max-new-tokens", "16", "--json")
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    assert plan["measured"]["tokens_written"] > 0


def test_the_bench_reports_where_greedy_output_first_differs_and_the_logit_gap_there():
    """Where ggml rounds a k-token batch otherwise than a one-token call, a greedy near-tie can flip: the bench
    says where the first divergence is and the target's logit gap between the two tokens there."""
    from exactspec.bench.bench import first_divergence

    target, _, tok = load_pair("stdlib", backend="llamacpp", threads=1)
    ids = tok("def add(a, b):", return_tensors="pt").input_ids
    mask = torch.ones_like(ids)
    reference = target_alone_loop(target, ids, mask, max_new_tokens=8, temperature=0, seed=0)
    assert first_divergence(target, ids, mask, reference.clone(), reference) is None
    new = reference.clone()
    new[0, 5] = (int(reference[0, 5]) + 1) % target.vocab_size  # a system that took another token at position 5
    found = first_divergence(target, ids, mask, new, reference, prompt=3)
    assert (found["prompt"], found["position"], found["reference_token"]) == (3, 5, int(reference[0, 5]))
    with torch.inference_mode():
        prefix = torch.cat([ids[0], reference[0, :5]])[None]
        logits = open_session(target, 1, target=True).forward(prefix, torch.ones_like(prefix, dtype=torch.bool))[0, -1]
    want = float(logits[int(reference[0, 5])] - logits[int(new[0, 5])])
    assert found["logit_gap"] == pytest.approx(want, abs=1e-3) and found["logit_gap"] > 0  # greedy took the max
