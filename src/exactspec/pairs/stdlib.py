"""The stdlib pair (the demo pair) that ships inside the package, and the prompts cut from its held-out files.

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

    from exactspec.verification.checks import check_device, check_float_dtype

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

    from exactspec.verification.checks import check_device, check_float_dtype
    from exactspec.engine.decoding import SpeculativeGenerator

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
