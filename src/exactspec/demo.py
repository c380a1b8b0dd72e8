"""The demo pair that ships inside the package, and the prompts cut from its held-out files.

The pair (a 23M-parameter Llama target and a 3.7M-parameter Llama draft sharing one byte-level BPE tokenizer)
was trained on the Python standard library's own source by `training/train_demo.py`; see
`demo_pair/training_report.json` for how long, on what, and with which held-out loss and acceptance.
Weights are stored in fp16 safetensors. The target loads in fp32 (its forward defines p, and a CPU's fp16
arithmetic rounds more); the draft keeps its stored fp16, since a draft call on a CPU is mostly reading its
weights and its numerics never decide exactness (docs/generation.md: 6-21% faster end to end at γ=4).
"""
from __future__ import annotations

import json
import pathlib

PAIR_DIR = pathlib.Path(__file__).resolve().parent / "demo_pair"


def _require_pair() -> None:
    if not (PAIR_DIR / "target" / "config.json").exists() or not (PAIR_DIR / "draft" / "config.json").exists():
        raise FileNotFoundError(
            f"the demo pair is missing from {PAIR_DIR}; it ships with the package "
            "(rebuild it with `python training/train_demo.py`)")


def load_demo_pair(dtype=None, device: str = "cpu"):
    """Load the shipped demo pair offline.

    Returns `(target, draft, tokenizer)`: two `LlamaForCausalLM` in eval mode (the target in fp32 and the
    draft in its stored fp16, unless `dtype` sets both) and the shared `PreTrainedTokenizerFast`, ready for
    `SpeculativeGenerator(target, draft)`. Nothing is ever downloaded: loading uses `local_files_only=True`.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from exactspec.checks import check_device, check_float_dtype

    check_device("device", device)
    check_float_dtype("dtype", dtype)
    _require_pair()
    dtypes = {"target": dtype or torch.float32, "draft": dtype or torch.float16}
    models = [AutoModelForCausalLM.from_pretrained(PAIR_DIR / name, dtype=dtypes[name], local_files_only=True)
              .to(device).eval() for name in ("target", "draft")]
    tokenizer = AutoTokenizer.from_pretrained(PAIR_DIR / "target", local_files_only=True)
    return models[0], models[1], tokenizer


def load_pair(target: str | None = None, draft: str | None = None, dtype=None, device: str = "cpu"):
    """`(target, draft, tokenizer)` from local paths (directories or .gguf files) or the local HF cache
    (offline), or the shipped demo pair when `target` is None (then `draft` must be None too).
    `draft=None` with a `target` gives `draft=None` (for model-free drafters).

    The tokenizer is the target's; the draft's must be the same (checked), since speculative decoding
    compares token ids. Loading never downloads: a path that is not local is a ValueError.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from exactspec.checks import check_device, check_float_dtype
    from exactspec.decoding import SpeculativeGenerator

    check_device("device", device)
    check_float_dtype("dtype", dtype)
    if target is None:
        if draft is not None:
            raise ValueError("--draft needs --target (or give neither for the demo pair)")
        return load_demo_pair(dtype=dtype, device=device)
    dtype = dtype or torch.float32

    def load(path):
        where, kw = path, {}
        if str(path).lower().endswith(".gguf"):  # a GGUF file: transformers dequantizes it (needs `gguf`)
            where, kw = str(pathlib.Path(path).parent), {"gguf_file": pathlib.Path(path).name}
            if not pathlib.Path(path).is_file():
                raise ValueError(f"cannot load model {path!r}: no such .gguf file")
            _require_gguf()
        try:
            model = AutoModelForCausalLM.from_pretrained(where, dtype=dtype, local_files_only=True, **kw)
            return model, AutoTokenizer.from_pretrained(where, local_files_only=True, **kw)
        except OSError as exc:  # missing path / not in the local cache: a usage error, not a crash
            raise ValueError(f"cannot load model {path!r} offline: {exc}") from exc

    target_model, tokenizer = load(target)
    draft_model = None
    if draft is not None:
        draft_model, draft_tokenizer = load(draft)
        SpeculativeGenerator.check_tokenizers(tokenizer, draft_tokenizer)
        draft_model = draft_model.to(device).eval()
    return target_model.to(device).eval(), draft_model, tokenizer


def _require_gguf() -> None:
    import importlib.util

    missing = [m for m in ("gguf", "accelerate") if importlib.util.find_spec(m) is None]
    if missing:
        raise ValueError(f"reading .gguf files needs {' and '.join(missing)}: pip install 'exactspec[gguf]'")


def demo_prompts() -> list[str]:
    """The held-out prompts shipped with the pair (each ends with a `def ...:` header line)."""
    _require_pair()
    return [p["text"] for p in json.loads((PAIR_DIR / "prompts.json").read_text())["prompts"]]


def training_report() -> dict:
    """What training the pair took and what it reached (held-out loss, perplexity, acceptance)."""
    _require_pair()
    return json.loads((PAIR_DIR / "training_report.json").read_text())


def run_demo(target, draft, tokenizer, prompts: list[str], *, max_new_tokens: int = 64, temperature: float = 0.0,
             gamma: int | str = "auto", method: str = "token", seed: int = 0, on_text=None,
             eos_token_id=()) -> dict:
    """Complete each prompt with speculative decoding, then measure plain decoding and the predicted speedup.

    `on_text(prompt_index, text, kind)` is called as text arrives; kind is "prompt", "accepted", "corrected"
    or "bonus" (see `exactspec.text.token_kinds`). `eos_token_id` (ids; default none) ends a completion, as a
    chat model's end-of-turn token should. Returns a summary dict: per-position acceptance, mean accepted length (with and
    without the bonus token), tokens/s of speculative and plain decoding measured here, and the speedup the
    cost model predicts from the measured acceptance.
    """
    import time

    import torch

    from exactspec.costmodel import CostModel
    from exactspec.decoding import SpeculativeGenerator
    from exactspec.featuredraft import timed_model
    from exactspec.prediction import predict
    from exactspec.stats import GenerationStats
    from exactspec.text import styled_pieces, token_kinds

    on_text = on_text or (lambda *a: None)
    # Measured before the timed runs and handed to the generator: gamma="auto" would otherwise measure
    # it inside the first timed call.
    prompt_len = max(len(tokenizer(p)["input_ids"]) for p in prompts)
    cost = CostModel.measure(target, timed_model(draft), repeats=3, prompt_len=prompt_len)
    gen = SpeculativeGenerator(target, draft, cost_model=cost)
    greedy = temperature == 0
    # One untimed run first, as any long-lived generator would have had: gamma="auto" then starts the
    # timed prompts from the acceptance it measured, not from a neutral guess (and the kernels are warm).
    warm = tokenizer(prompts[0], return_tensors="pt")
    gen.generate(warm["input_ids"], warm["attention_mask"], max_new_tokens=max_new_tokens, do_sample=not greedy,
                 temperature=temperature, top_k=0, gamma=gamma, method=method, eos_token_id=[], seed=seed - 1)
    runs = []
    spec_time = plain_time = 0.0
    spec_tokens = plain_tokens = 0
    texts = []
    for i, prompt in enumerate(prompts):
        enc = tokenizer(prompt, return_tensors="pt")
        on_text(i, prompt, "prompt")
        ids: list[int] = []
        kinds: list[str] = []
        t0 = time.perf_counter()
        stream = gen.stream(enc["input_ids"], enc["attention_mask"], max_new_tokens=max_new_tokens,
                            do_sample=not greedy, temperature=temperature, top_k=0, gamma=gamma,
                            method=method, eos_token_id=list(eos_token_id), seed=seed + i)  # top_k=0: as the HF run below
        for step in stream:
            for toks, fds, drafted in zip(step.tokens, step.from_draft, step.drafted):
                start = len(ids)
                ids += toks
                kinds += token_kinds(fds, drafted)
                for piece, kind in styled_pieces(tokenizer, ids, kinds, start):
                    on_text(i, piece, kind)
        spec_time += time.perf_counter() - t0
        spec_tokens += len(ids)
        texts.append(tokenizer.decode(ids))
        runs.append(stream.output.stats)
        # Plain decoding of the same number of tokens, measured on the spot with transformers' generate.
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = target.generate(**enc, max_new_tokens=len(ids), min_new_tokens=len(ids), do_sample=not greedy,
                                  pad_token_id=tokenizer.pad_token_id,
                                  **({} if greedy else {"temperature": temperature, "top_k": 0}))
        plain_time += time.perf_counter() - t0
        plain_tokens += out.shape[1] - enc["input_ids"].shape[1]
    total = GenerationStats.merge(runs)
    spec_tps, plain_tps = spec_tokens / spec_time, plain_tokens / plain_time
    # Priced as these runs ran: a draft step and the per-step overhead from the speculative runs' own
    # statistics, plain decoding at the time per token `generate` just took (its prefill included, so a
    # call of n tokens costs n of them), and the speculative prefills: end to end, like the measurement.
    plain_token = plain_time / plain_tokens
    loop_cost = cost.calibrate(total, plain_time=plain_token)

    return {
        "texts": texts,
        "stats": total.to_dict(),
        "per_position_acceptance": total.per_position_acceptance,
        "mean_accepted_per_step": total.mean_accepted_per_step,
        "mean_tokens_per_step": total.mean_tokens_per_step,
        "speculative_tokens_per_second": spec_tps,
        "plain_tokens_per_second": plain_tps,
        "measured_speedup": spec_tps / plain_tps,
        # Tokens per completion as run: a chat model's completions end at its end-of-turn token.
        "predicted_speedup": predict(total, loop_cost, n_tokens=max(1, round(spec_tokens / len(prompts))),
                                     prefill_plain=plain_token,
                                     prefill_spec=total.prefill_time / len(prompts)),
        "predicted_speedup_forwards": predict(total, cost),
        "cost_model": cost.to_dict(),
        "calibrated_cost_model": loop_cost.to_dict(),
        "cost_ratio": cost.cost_ratio,
    }
