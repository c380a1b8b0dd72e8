"""GGUF files given by path, run natively on llama.cpp, and which backend a model runs on.

``load_gguf_files("target.gguf", "draft.gguf")`` gives ``(LlamaCppLM, LlamaCppLM, tokenizer)``: the tokenizer is
transformers' reading of the target file's own tokenizer metadata (offline; needs the `gguf` package), the
models run on llama.cpp. :func:`choose_backend` is the rule the command line follows: ``--backend`` as given,
else a ``.gguf`` target runs on llama.cpp when llama-cpp-python is installed, and on transformers' dequantizing
loader otherwise (said in one line).
"""
from __future__ import annotations

import pathlib

__all__ = ["BACKENDS", "choose_backend", "load_gguf_files"]

BACKENDS = ("transformers", "llamacpp")


def choose_backend(backend: str | None, target_path: str | None = None, warn=None) -> str:
    """`backend` checked ("transformers" or "llamacpp"), or when None: "llamacpp" for a `.gguf` target if
    llama-cpp-python is installed, else "transformers" (with one line to `warn` for a `.gguf` target)."""
    from exactspec.backends.optional import INSTALL_HINT, BackendMissing, llamacpp_available

    if backend is not None:
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        if backend == "llamacpp" and not llamacpp_available():
            raise BackendMissing(f"backend 'llamacpp' needs llama-cpp-python: {INSTALL_HINT}")
        return backend
    gguf = target_path is not None and str(target_path).lower().endswith(".gguf")
    if gguf and llamacpp_available():
        return "llamacpp"
    if gguf and warn is not None:
        warn(f"llama-cpp-python is not installed: {pathlib.Path(target_path).name} runs dequantized on "
             f"transformers ({INSTALL_HINT} for ggml speed)")
    return "transformers"


def load_gguf_files(target, draft=None, *, threads: int | None = None):
    """`(target, draft or None, tokenizer)`: `.gguf` files on llama.cpp, offline. The draft must share the
    target's vocabulary (checked token by token)."""
    from exactspec.backends.llamacpp import LlamaCppLM
    from exactspec.backends.seam import check_same_vocab

    for name, path in (("target", target), ("draft", draft)):
        if path is not None and not str(path).lower().endswith(".gguf"):
            raise ValueError(f"{name}: the llama.cpp backend runs .gguf files, got {path!r} (convert a Hugging "
                             "Face Llama directory with `python -m exactspec.pairs.gguf DIR OUT.gguf`)")
    t = LlamaCppLM(_existing("target", target), threads=threads)
    d = LlamaCppLM(_existing("draft", draft), threads=threads) if draft is not None else None
    if d is not None:
        check_same_vocab(t, d)
    return t, d, gguf_tokenizer(target)


def gguf_tokenizer(path):
    """transformers' tokenizer read from a GGUF file's metadata (no weights are read)."""
    from transformers import AutoTokenizer

    p = pathlib.Path(path)
    try:
        import gguf  # noqa: F401 - transformers' GGUF reader needs it
    except ImportError:
        from exactspec.backends.optional import BackendMissing

        raise BackendMissing("reading a tokenizer from a .gguf file needs the gguf package: "
                             "pip install 'exactspec[llamacpp]'") from None
    return AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name, local_files_only=True)


def _existing(name: str, path) -> str:
    p = pathlib.Path(path)
    if not p.is_file():
        raise ValueError(f"{name}: no such .gguf file: {path}")
    return str(p)
