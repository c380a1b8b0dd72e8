"""What a speculative run gives back: the whole output, and the steps of a stream."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from exactspec.speed.stats import GenerationStats

__all__ = ["GenerationOutput", "StreamStep", "GenerationStream"]


@dataclass
class GenerationOutput:
    """`sequences [B, P + new]` (prompt + new tokens, finished rows padded with pad_token_id),
    `stats` (:class:`GenerationStats`), `from_draft [B, new]` bool: the token was an accepted draft token."""

    sequences: torch.Tensor
    stats: GenerationStats
    from_draft: torch.Tensor


@dataclass
class StreamStep:
    """Tokens emitted by one speculative step. Lists are parallel, one entry per row that emitted:
    `rows` (index in the input batch), `tokens`, `from_draft` (per token: accepted draft token?),
    `finished` (the row is done after this step), `drafted` (draft tokens the row proposed this step: when
    all of them were accepted the last token is the target's bonus token, otherwise a corrected one).
    A step with `gamma` 0 is plain: one token per row, or up to ``PLAIN_RUN`` (64) when gamma="auto" hands a
    streak of plain steps over at once (:mod:`exactspec.engine.plainstep`)."""

    rows: list[int]
    tokens: list[list[int]]
    from_draft: list[list[bool]]
    finished: list[bool]
    gamma: int
    drafted: list[int]


class GenerationStream:
    """Iterable of :class:`StreamStep`; after it is exhausted, `.output` holds the GenerationOutput."""

    def __init__(self, steps):
        self._steps = steps
        self.output: GenerationOutput | None = None

    def __iter__(self):
        return self

    def __next__(self) -> StreamStep:
        # An iterator rather than a generator wrapper: abandoning one loop (zip, break) must not close the
        # underlying run, so a later loop can resume it.
        try:
            return next(self._steps)
        except StopIteration as stop:
            if stop.value is not None:
                self.output = _normal(stop.value)
            raise


def _normal(output: GenerationOutput) -> GenerationOutput:
    """The run makes its tensors in inference mode (no autograd bookkeeping per op: ~10% of a small model's
    step on a CPU); outside it such tensors refuse in-place edits, so the caller gets ordinary copies."""
    def plain(t):
        return t.clone() if t.is_inference() else t
    return GenerationOutput(plain(output.sequences), output.stats, plain(output.from_draft))
