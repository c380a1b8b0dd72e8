"""The llama.cpp session's bookkeeping (which recent slots each row really fed, kept in a ring of slots) stays
right over runs far longer than the ring: each keep removes exactly the dropped tail of each row from the
context, positions stay contiguous, and keeping more than a row fed is refused after the ring has wrapped. No
llama.cpp needed: the context is a recording fake with llama.cpp's contract (decode appends, remove drops a tail)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from exactspec.backends.llamacpp import LlamaCppSession


class _Model:
    vocab_size, n_ctx = 11, 10**6


class _Ctx:
    """Per sequence, the positions it holds; decode checks each new token sits right after them."""

    n_batch = 512

    def __init__(self, rows):
        self.held = {s: [] for s in range(rows)}
        self.n_seq = rows

    def decode(self, tokens, pos, seq, flags):
        for p, s in zip(pos.tolist(), seq.tolist()):
            assert p == len(self.held[s]), "positions must continue each sequence"
            self.held[s].append(p)
        return np.zeros((int(np.count_nonzero(flags)), _Model.vocab_size), np.float32)

    def decode_rows(self, tokens, pos, seq, flags, shape):  # the session's lean path: every slot real
        assert len(tokens) == len(pos) == len(seq) == len(flags) <= self.n_batch
        assert int(np.count_nonzero(flags)) == shape[0] * shape[1] and shape[2] == _Model.vocab_size
        return self.decode(tokens, pos, seq, flags).reshape(shape)

    def remove(self, seq, start):
        self.held[int(seq)] = self.held[int(seq)][:int(start)]


def test_a_thousand_ragged_steps_with_keeps_keep_every_row_exact():
    rows, rng = 3, np.random.default_rng(0)
    ctx = _Ctx(rows)
    s = LlamaCppSession(_Model(), ctx, rows)
    s.forward(torch.zeros(rows, 1500, dtype=torch.long), torch.ones(rows, 1500, dtype=torch.bool), 1)  # > ring
    expect = np.full(rows, 1500)
    for step in range(1000):
        # one or two ragged calls (as a drafter feeds its pending tokens, then its drafts), then one keep
        # over all their slots of a prefix of each row's real tokens there
        real, start = [], s.length
        for _ in range(int(rng.integers(1, 3))):
            k = int(rng.integers(1, 7))
            lengths = rng.integers(0, k + 1, rows)  # a row feeds its last lengths[b] slots (left-packed)
            valid = torch.from_numpy(np.arange(k)[None, :] >= k - lengths[:, None])
            out = s.forward(torch.ones(rows, k, dtype=torch.long), valid)
            assert out.shape == (rows, k, _Model.vocab_size)
            real.append(valid)
        real = torch.cat(real, 1)  # [B, S]
        fed = real.sum(1).numpy()
        kept = np.array([int(rng.integers(0, n + 1)) for n in fed])
        s.keep(start, torch.from_numpy(kept))
        expect += kept
        assert s.n.tolist() == expect.tolist() == [len(ctx.held[b]) for b in range(rows)]
    # after the ring wrapped many times, keeping more than a row fed is still refused
    s.forward(torch.ones(rows, 3, dtype=torch.long), torch.ones(rows, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="keeps more than"):
        s.keep(s.length - 3, torch.tensor([3] * (rows - 1) + [4]))
    # and a keep reaching further back than the ring remembers is refused, not guessed
    with pytest.raises(ValueError, match="remembers"):
        s.keep(s.length - 5000, torch.full((rows,), 5000))


def test_dropping_rows_keeps_the_others_counts_and_sequences():
    ctx = _Ctx(4)
    s = LlamaCppSession(_Model(), ctx, 4)
    s.forward(torch.ones(4, 5, dtype=torch.long), torch.ones(4, 5, dtype=torch.bool))
    s.select_rows(torch.tensor([1, 3]))
    assert ctx.held[0] == [] and ctx.held[2] == [] and len(ctx.held[1]) == len(ctx.held[3]) == 5
    s.forward(torch.ones(2, 2, dtype=torch.long), torch.tensor([[True, True], [False, True]]))
    s.keep(s.length - 2, torch.tensor([1, 0]))
    assert s.n.tolist() == [6, 5] and len(ctx.held[1]) == 6 and len(ctx.held[3]) == 5
