"""A cost profile: one :class:`~exactspec.speed.costmodel.CostModel` per batch size, measured where you deploy.

``exactspec profile`` writes one (``CostProfile.measure`` + ``save``); ``exactspec plan --profile`` reads it.
Every price in it comes from CostModel (T_target(k) per batch size, t_draft, and, when calibrated, the
per-step overhead of exactspec's own loop); nothing here prices a step by another formula.
"""
from __future__ import annotations

import json
import os
from typing import Any, Iterable, Mapping

from exactspec.speed.costmodel import CostModel

__all__ = ["CostProfile"]

_FORMAT = "exactspec.CostProfile/1"


class CostProfile:
    """``by_batch_size[b]``: the CostModel measured with b rows per forward pass."""

    def __init__(self, by_batch_size: Mapping[int, CostModel], metadata: Mapping | None = None):
        if not by_batch_size:
            raise ValueError("a cost profile needs at least one batch size")
        for b, cm in by_batch_size.items():
            if isinstance(b, bool) or not isinstance(b, int) or b < 1:
                raise ValueError(f"batch sizes must be integers >= 1, got {b!r}")
            if not isinstance(cm, CostModel):
                raise ValueError(f"by_batch_size[{b}] must be a CostModel, got {type(cm).__name__}")
        self.by_batch_size = dict(sorted(by_batch_size.items()))
        self.metadata = dict(metadata or {})

    def __eq__(self, other) -> bool:
        return isinstance(other, CostProfile) and self.by_batch_size == other.by_batch_size

    @property
    def batch_sizes(self) -> list[int]:
        return list(self.by_batch_size)

    def cost(self, batch_size: int) -> CostModel:
        if batch_size not in self.by_batch_size:
            raise ValueError(f"batch size {batch_size!r} is not in the profile (it has {self.batch_sizes}); "
                             "profile it, or choose among those")
        return self.by_batch_size[batch_size]

    # ---------------------------------------------------------------------------- serialisation
    def to_dict(self) -> dict[str, Any]:
        return {"format": _FORMAT, "metadata": self.metadata,
                "by_batch_size": {str(b): cm.to_dict() for b, cm in self.by_batch_size.items()}}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "CostProfile":
        """A profile dict, or a single CostModel dict (its ``metadata.batch_size``, else 1)."""
        if not isinstance(d, Mapping):
            raise ValueError(f"a cost profile must be a JSON object, got {type(d).__name__}")
        if "by_batch_size" not in d:
            cm = CostModel.from_dict(d)
            return cls({int(cm.metadata.get("batch_size", 1)): cm})
        table = d["by_batch_size"]
        if not isinstance(table, Mapping):
            raise ValueError("by_batch_size must map batch sizes to cost models")
        out = {}
        for b, cm in table.items():
            try:
                bi = int(b)
            except (TypeError, ValueError):
                raise ValueError(f"by_batch_size keys must be integers, got {b!r}") from None
            out[bi] = CostModel.from_dict(cm)
        return cls(out, d.get("metadata"))

    def save(self, path: str | os.PathLike) -> None:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(self.to_dict(), fh, indent=2)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "CostProfile":
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"cannot read a cost profile from {os.fspath(path)!r}: {exc}") from exc
        return cls.from_dict(data)

    # -------------------------------------------------------------------------------- measuring
    @classmethod
    def measure(cls, target, draft=None, *, batch_sizes: Iterable[int] = (1,), prompt_len: int = 64,
                repeats: int = 5, calibrate: bool = False, prompt_ids: list[list[int]] | None = None,
                max_new_tokens: int = 32, gamma: int = 4, seed: int = 0) -> "CostProfile":
        """Measure a CostModel per batch size (bare forward passes, :meth:`CostModel.measure`).

        ``draft=None`` profiles a model-free drafter (prompt lookup): the draft step is free. ``calibrate``
        also runs exactspec's own loop (``gamma`` drafts per step, ``max_new_tokens`` per row) and our
        target-alone loop on ``prompt_ids`` (default: random tokens) and re-prices each model as that loop
        ran (:meth:`CostModel.calibrate`): for serving with exactspec. An engine such as vLLM has its own
        per-step overhead, which bare forwards leave out.
        """
        sizes = sorted({int(b) for b in batch_sizes})
        if not sizes or sizes[0] < 1:
            raise ValueError(f"batch_sizes must be integers >= 1, got {list(batch_sizes)!r}")
        out = {}
        for b in sizes:
            cm = CostModel.measure(target, draft if draft is not None else target, batch_size=b,
                                   prompt_len=prompt_len, repeats=repeats, seed=seed)
            if draft is None:
                cm = cm.without_draft()
            if calibrate:
                cm = _calibrate(cm, target, draft, b, prompt_len, prompt_ids, max_new_tokens, gamma, seed)
            out[b] = cm
        meta = {"calibrated": bool(calibrate), "drafter": "draft_model" if draft is not None else "prompt_lookup",
                "prompt_len": prompt_len}
        return cls(out, meta)


def _calibrate(cm: CostModel, target, draft, batch: int, prompt_len: int, prompt_ids, max_new: int, gamma: int,
               seed: int, rounds: int = 3) -> CostModel:
    """`cm` re-priced as exactspec's loop runs at this batch size, the way `exactspec bench` prices it.

    Every prompt batch (all of `prompt_ids`, `batch` rows at a time; random tokens without them) runs
    `rounds` times through exactspec's loop and, interleaved with it, through our target-alone loop; the
    loop's statistics over all those runs price its draft step and per-step overhead, and the plain loop's
    time per step prices plain decoding. One short run would let a single slow call (allocation, a
    scheduler hiccup) set the per-step overhead: measured so, plan's prediction was 26% low.
    """
    import time

    import torch

    from exactspec.engine.baseline import target_alone_loop
    from exactspec.engine.decoding import SpeculativeGenerator

    if max_new < 2:
        raise ValueError(f"max_new_tokens must be >= 2 to calibrate, got {max_new}")
    g = torch.Generator().manual_seed(seed)
    batches = []
    if prompt_ids:
        for start in range(0, len(prompt_ids), batch):
            rows = [prompt_ids[(start + i) % len(prompt_ids)] for i in range(batch)]
            width = max(len(r) for r in rows)
            ids = torch.zeros(batch, width, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for i, r in enumerate(rows):
                ids[i, width - len(r):], mask[i, width - len(r):] = torch.tensor(r), 1
            batches.append((ids, mask))
    else:
        from exactspec.backends.seam import vocab_size

        vocab = vocab_size(target)
        ids = torch.randint(1, vocab, (batch, prompt_len), generator=g)
        batches.append((ids, torch.ones_like(ids)))
    batches = [(i.to(target.device), m.to(target.device)) for i, m in batches]
    gen = SpeculativeGenerator(target, draft) if draft is not None else \
        SpeculativeGenerator(target, drafter="prompt_lookup")
    kw = dict(max_new_tokens=max_new, do_sample=False, gamma=gamma, eos_token_id=[], seed=seed)
    gen.generate(*batches[0], **kw)  # warm-up: first calls pay for allocation
    target_alone_loop(target, *batches[0], max_new_tokens=max_new, temperature=0.0, seed=seed)
    stats, plain, steps = [], 0.0, 0
    for _ in range(rounds):
        for ids, mask in batches:
            stats.append(gen.generate(ids, mask, **kw).stats)
            timings: dict = {}
            t0 = time.perf_counter()
            target_alone_loop(target, ids, mask, max_new_tokens=max_new, temperature=0.0, seed=seed, timings=timings)
            plain += time.perf_counter() - t0 - timings["prefill"]
            steps += max_new - 1
    return cm.calibrate(stats, plain_time=plain / steps)
