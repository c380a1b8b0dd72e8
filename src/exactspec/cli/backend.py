"""`--backend transformers|llamacpp`, shared by generate, bench, plan and demo: which runtime runs the models.

Without it a shipped pair runs on transformers, and a `.gguf` target on llama.cpp when llama-cpp-python is
installed (else on transformers' dequantizing loader, said in one line on stderr)."""
from __future__ import annotations

import sys

BACKEND_HELP = ("which runtime runs the models: transformers (torch) or llamacpp (ggml, GGUF files; "
                "pip install 'exactspec[llamacpp]'). Default: llamacpp for a .gguf --target when it is installed, "
                "else transformers")


def add_backend(p) -> None:
    p.add_argument("--backend", choices=("transformers", "llamacpp"), default=None, help=BACKEND_HELP)


def backend_for(args, target_path=None) -> str:
    """The backend these arguments choose (checked: llamacpp must be installed when asked for)."""
    from exactspec.pairs.ggufload import choose_backend

    return choose_backend(getattr(args, "backend", None), target_path,
                          warn=lambda line: print(f"note: {line}", file=sys.stderr, flush=True))


def load_on_backend(backend: str, pair: str | None, target_path, draft_path, *, threads: int | None = None,
                    device: str = "cpu"):
    """`(target, draft, tokenizer)` on `backend`: a shipped pair by name, or files by path."""
    import contextlib
    import io

    from exactspec.pairs.load import load_pair as load_named
    from exactspec.pairs.stdlib import load_pair

    if pair is None and target_path is None:  # no model named: the shipped demo pair
        pair = "stdlib"
    if backend == "llamacpp":
        if device != "cpu":
            raise ValueError(f"--device: the llama.cpp backend runs on the CPU here, got {device!r}")
        if pair:
            return load_named(pair, backend="llamacpp", threads=threads)
        from exactspec.pairs.ggufload import load_gguf_files

        return load_gguf_files(target_path, draft_path, threads=threads)
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    if pair:  # a shipped pair hides its own conversion's tqdm bar, and may say on stderr that it rebuilt its cache
        return load_named(pair, device=device)
    with contextlib.redirect_stderr(io.StringIO()):  # transformers' GGUF loader draws a plain tqdm bar there
        return load_pair(target_path, draft_path, device=device)
