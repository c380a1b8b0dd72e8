"""Drafters: where the K candidate tokens of a speculative step come from.

A drafter proposes, per row b, up to ``lengths[b]`` tokens with the distribution q they were drawn
from. Exactness never depends on the drafter (verification corrects any q with q(x) > 0 for drafted x);
only speed does. Two are provided:

- :class:`DraftModelDrafter`: a small causal LM with its own batch KV cache (see :mod:`exactspec.cache`),
  sampled with the row-wise part of the target's processors (temperature, top-k/p, ...).
- :class:`PromptLookupDrafter`: model-free n-gram lookup in the prompt + generated text; q is one-hot.

Protocol (used by :class:`exactspec.decoding.SpeculativeGenerator`):
``start(input_ids, attention_mask)``, ``propose(k [B], spec) -> Draft``,
``update(accepted [B], next_token [B], draft)``, ``select_rows(rows)``, attribute ``forward_calls``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from exactspec.cache import SlotCache, left_pack
from exactspec.hfconfig import SamplingSpec  # noqa: F401  (the spec drafters receive; re-exported)


@dataclass
class Draft:
    """One step's proposal. `tokens [B, K]` int64 (entries past `lengths[b]` are filler),
    `probs [B, K, V]` fp32 or None for one-hot q, `lengths [B]` int64."""

    tokens: torch.Tensor
    probs: torch.Tensor | None
    lengths: torch.Tensor


class DraftModelDrafter:
    """Drafts autoregressively with a small causal LM that keeps its own batch KV cache.

    The draft lags the emitted text by one or two tokens ("pending"): the bonus token of the last step,
    preceded by the last draft token when all K were accepted (it was sampled but never fed). The
    first draft forward of a step feeds those pending tokens, left-packed so that the last slot is real
    for every row.
    """

    def __init__(self, model):
        self.model = model
        self.forward_calls = 0
        # Seconds spent in the first draft step of each proposal: the target's forward has just evicted
        # the draft's weights from the CPU caches, so it costs more than the later ones (CostModel.calibrate).
        self.first_call_time = 0.0
        self.max_draft = None  # no limit of its own

    def start(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> None:
        """Prefill on the prompt `[B, P]` minus its last token (which becomes pending)."""
        self.state = SlotCache(self.model)
        if input_ids.shape[1] > 1:
            self.state.forward(input_ids[:, :-1], attention_mask[:, :-1].bool(), logits_to_keep=1)
        self.pending = input_ids[:, -1:].to(self.state.device)  # [B, W]
        self.pending_valid = torch.ones_like(self.pending, dtype=torch.bool)

    def propose(self, k: torch.Tensor, spec: SamplingSpec) -> Draft:
        b = k.shape[0]
        big_k = int(k.max()) if b else 0
        if big_k == 0:
            return Draft(torch.zeros(b, 0, dtype=torch.long, device=k.device), None, k)
        tokens, probs = [], []
        inp, valid = self.pending, self.pending_valid
        t0 = time.perf_counter()
        for i in range(big_k):  # feeds pending, d_1 .. d_{K-1}; d_K is sampled but not fed
            logits = self.state.forward(inp, valid, logits_to_keep=1)[:, -1]  # [B, V_draft]
            self.forward_calls += 1
            if spec.greedy:  # greedy verification never reads q: skip building one-hot rows
                d = logits[:, : spec.vocab_size].argmax(-1)  # [B], lowest id among ties, as probs_from_logits
            else:
                q = spec.probs(logits)  # [B, V]
                d = spec.sample(q)  # [B]
                probs.append(q)
            tokens.append(d)
            if i == 0:
                if d.device.type == "cuda":  # honest timings need the queued kernels finished
                    torch.cuda.synchronize(d.device)
                self.first_call_time += time.perf_counter() - t0
            inp, valid = d[:, None], torch.ones(b, 1, dtype=torch.bool, device=d.device)
        return Draft(torch.stack(tokens, 1), torch.stack(probs, 1) if probs else None, k)

    def update(self, accepted: torch.Tensor, next_token: torch.Tensor, draft: Draft) -> None:
        """Roll the draft cache back to the accepted prefix; the bonus token (and d_K) become pending."""
        big_k = draft.tokens.shape[1]
        nxt = next_token[:, None]
        if big_k == 0:  # nothing was fed this step: the pending tokens are still pending
            self.pending, self.pending_valid = left_pack(
                torch.cat([self.pending, nxt], 1),
                torch.cat([self.pending_valid, torch.ones_like(nxt, dtype=torch.bool)], 1))
            return
        j = torch.arange(1, big_k, device=accepted.device)[None, :]  # fed draft positions 1..K-1
        self.state.rollback(torch.cat([self.pending_valid, j <= accepted[:, None]], 1))
        all_accepted = (accepted == big_k)[:, None]
        self.pending, self.pending_valid = left_pack(
            torch.cat([draft.tokens[:, -1:], nxt], 1),
            torch.cat([all_accepted, torch.ones_like(all_accepted)], 1))

    def select_rows(self, rows: torch.Tensor) -> None:
        self.state.select_rows(rows)
        rows = rows.to(self.pending.device)
        self.pending, self.pending_valid = left_pack(self.pending[rows], self.pending_valid[rows])


class PromptLookupDrafter:
    """Model-free drafting by n-gram lookup (Saxena 2023, "prompt lookup decoding").

    For each row, the last n tokens (n = max_ngram down to min_ngram) are searched in the row's prompt +
    generated tokens; at the earliest earlier occurrence, the tokens that followed it (up to `max_draft`)
    are proposed with one-hot q, so verification accepts token x with probability p(x) and stays exact.
    A row with no match drafts 0 tokens (a plain target step).
    """

    def __init__(self, max_ngram: int = 3, max_draft: int = 10, min_ngram: int = 1):
        for name, v in (("max_ngram", max_ngram), ("max_draft", max_draft), ("min_ngram", min_ngram)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if min_ngram > max_ngram:
            raise ValueError(f"min_ngram ({min_ngram}) must be <= max_ngram ({max_ngram})")
        self.max_ngram, self.min_ngram, self.max_draft = max_ngram, min_ngram, max_draft
        self.forward_calls = 0

    def start(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> None:
        self.history = [row[m.bool()].tolist() for row, m in zip(input_ids.cpu(), attention_mask.cpu())]

    def lookup(self, hist: list[int], k: int) -> list[int]:
        """Continuation (<= k tokens) of the earliest earlier occurrence of the longest matching suffix."""
        if k <= 0:
            return []
        t = torch.tensor(hist)
        for n in range(min(self.max_ngram, len(hist) - 1), self.min_ngram - 1, -1):
            windows = t[:-1].unfold(0, n, 1)  # starts 0..len-n-1: every match has >= 1 token after it
            hits = (windows == t[-n:]).all(1).nonzero()
            if hits.numel():
                start = int(hits[0]) + n
                return hist[start:start + k]
        return []

    def propose(self, k: torch.Tensor, spec: SamplingSpec) -> Draft:
        conts = [self.lookup(h, int(kb)) for h, kb in zip(self.history, k.tolist())]
        big_k = max((len(c) for c in conts), default=0)
        tokens = torch.zeros(len(conts), big_k, dtype=torch.long)
        for i, c in enumerate(conts):
            tokens[i, :len(c)] = torch.tensor(c, dtype=torch.long)
        lengths = torch.tensor([len(c) for c in conts], dtype=torch.long)
        return Draft(tokens.to(k.device), None, lengths.to(k.device))

    def update(self, accepted: torch.Tensor, next_token: torch.Tensor, draft: Draft) -> None:
        toks = draft.tokens.tolist()
        for h, row, n, x in zip(self.history, toks, accepted.tolist(), next_token.tolist()):
            h.extend(row[:n])
            h.append(x)

    def select_rows(self, rows: torch.Tensor) -> None:
        self.history = [self.history[i] for i in rows.tolist()]
