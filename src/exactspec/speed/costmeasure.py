"""Timing bare forward passes of a (target, draft) pair, as the engine runs them: what CostModel.measure
prices a step from (``t_draft``: one draft step; ``T_target(k)``: the target over k new tokens)."""
from __future__ import annotations

import statistics
import time
from typing import Any, Iterable

from exactspec.verification.checks import ArgumentTypeError, check_generator, check_int, check_seed

__all__ = ["measure_forwards", "WIDTHS"]

# Every width a step of up to 16 drafted tokens verifies, each timed: the table is not monotone in the width, and
# an interpolated width is priced at what it never costs (stdlib pair, transformers, T = 1, 2026-12-06: 4 tokens
# verified in 11.7 ms, 3 in 12.7; 8 in 12.7, 7 in 15.8)
WIDTHS = tuple(range(1, 18))


def measure_forwards(target_model, draft_model, *, prompt_len: int | None = None,
                     ks: Iterable[int] = WIDTHS, batch_size: int = 1,
                     repeats: int = 7, warmup: int = 2, generator=None, seed: int = 0):
    """``(t_draft, target_times {k: seconds}, metadata)`` for :meth:`exactspec.speed.costmodel.CostModel.measure`,
    which documents the arguments."""
    import torch

    from exactspec.backends.cache import sync as _sync
    from exactspec.backends.cache import max_positions
    from exactspec.backends.seam import describe, is_backend_model, open_session, vocab_size

    for name, model in (("target_model", target_model), ("draft_model", draft_model)):
        if not (isinstance(model, torch.nn.Module) or is_backend_model(model)) \
                or getattr(model, "config", None) is None:
            raise ArgumentTypeError(f"{name} must be a Hugging Face causal LM (a torch module with a "
                                    f"config) or a backend model (LlamaCppLM), got {type(model).__name__}")
    if isinstance(ks, (str, bytes)) or not isinstance(ks, Iterable):
        raise ArgumentTypeError(f"ks must be a list of integers >= 1, got {ks!r}")
    ks = sorted({check_int(f"ks entry {k!r}", k, min=1) for k in ks} | {1})
    limits = [v for v in (max_positions(target_model), max_positions(draft_model)) if v is not None]
    if prompt_len is None:
        prompt_len = max(1, min([64] + [v - max(ks) for v in limits]))
    for name, v, lo in (("prompt_len", prompt_len, 1), ("batch_size", batch_size, 1),
                        ("repeats", repeats, 1), ("warmup", warmup, 0)):
        check_int(name, v, min=lo)
    check_generator("generator", generator)
    check_seed("seed", seed)
    for name, model in (("target_model", target_model), ("draft_model", draft_model)):
        limit = max_positions(model)
        if limit is not None and prompt_len + max(ks) > limit:
            raise ValueError(f"prompt_len={prompt_len} + {max(ks)} timed tokens exceeds the {name}'s "
                             f"context of {limit} positions")
    if generator is None:
        generator = torch.Generator().manual_seed(seed)
    vocab = min(vocab_size(target_model), vocab_size(draft_model))
    n_new = max(ks)
    ids = torch.randint(0, vocab, (batch_size, prompt_len + n_new), generator=generator)

    def prefill(model, target: bool):
        # Through the engine's own slot cache: its growing cache layers and its lean forwards where the
        # engine would run them (exactspec.backends.leanforward), so t_draft and T_target(k) are the steps it takes.
        sc = open_session(model, batch_size, target=target)
        sc.forward(ids[:, :prompt_len], torch.ones(batch_size, prompt_len, dtype=torch.bool), logits_to_keep=1)
        return sc

    def once(sc, k: int, keep: int) -> float:
        new = ids[:, prompt_len:prompt_len + k]
        _sync(sc.device)
        t0 = time.perf_counter()
        sc.forward(new, torch.ones(batch_size, k, dtype=torch.bool), logits_to_keep=keep)
        _sync(sc.device)
        dt = time.perf_counter() - t0
        sc.keep(sc.length - k, torch.zeros(batch_size, dtype=torch.long))  # the next call sees the same context
        return dt

    # Round robin: every repeat times the draft and every k once, so that a burst of load on a shared
    # machine lands on all of them alike instead of inflating a few neighbouring k (the dips at 4, 8
    # and 12 tokens recur; widths 5-11 still moved by up to 40% between measurements: docs/adaptive.md, r27).
    with torch.inference_mode():
        t_state = prefill(target_model, True)
        # (a model-free drafter is priced with the target as its own "draft"; a backend model runs one
        # session at a time, so the two timings share it)
        d_state = t_state if draft_model is target_model and is_backend_model(target_model) else \
            prefill(draft_model, False)
        times: dict = {"draft": [], **{k: [] for k in ks}}
        for i in range(warmup + repeats):
            once(d_state, 1, 1)  # t_draft is a warm draft step: its cold first call is
            # priced apart, as t_draft_cold, by calibrate()
            row = {"draft": once(d_state, 1, 1), **{k: once(t_state, k, 0) for k in ks}}
            if i >= warmup:
                for key, dt in row.items():
                    times[key].append(dt)
        t_draft = statistics.median(times.pop("draft"))
        target_times = {k: statistics.median(v) for k, v in times.items()}
    metadata = {
        "torch_threads": torch.get_num_threads(),
        "batch_size": batch_size,
        "prompt_len": prompt_len,
        "repeats": repeats,
        "warmup": warmup,
        "device": str(target_model.device),
        "target": _model_info(target_model, describe),
        "draft": _model_info(draft_model, describe),
        "torch_version": torch.__version__,
    }
    return t_draft, target_times, metadata


def _model_info(model, describe) -> dict[str, Any]:
    cfg = getattr(model, "config", None)
    name = getattr(cfg, "name_or_path", "") or type(model).__name__
    info = {"name": str(name), "class": type(model).__name__,
            "params": int(getattr(model, "n_params", 0) or sum(p.numel() for p in model.parameters()))}
    if getattr(model, "backend", None):
        info["backend"] = describe(model)
    return info
