"""Drafters: where the K candidate tokens of a speculative step come from.

A drafter proposes, per row b, up to ``lengths[b]`` tokens with the distribution q they were drawn
from. Exactness never depends on the drafter (verification corrects any q with q(x) > 0 for drafted x);
only speed does. Two are provided:

- :class:`DraftModelDrafter`: a small causal LM with its own batch KV cache (see :mod:`exactspec.backends.cache`),
  sampled with the row-wise part of the target's processors (temperature, top-k/p, ...).
- :class:`PromptLookupDrafter`: model-free n-gram lookup in the prompt + generated text; q is one-hot.

Protocol (:class:`Drafter`, used by :class:`exactspec.engine.decoding.SpeculativeGenerator`):
``start(input_ids, attention_mask)``, ``propose(caps [B], spec, policy) -> Draft`` (the Draft carries its own
counters: draft-model calls and the first call's seconds), ``update(accepted [B], next_token [B], draft)``,
``select_rows(rows)``; a step whose caps are all 0 (a plain step) is not proposed to, and `update` gets an
empty Draft (:meth:`Draft.empty`). A model drafter asks ``policy.include(i, confidence, caps)`` before sampling each
position (see :mod:`exactspec.engine.policy`); a model-free one finds up to its caps and asks ``policy.trim`` how
many of the found tokens to draft.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

import torch

from exactspec.backends.cache import left_pack, sync
from exactspec.backends.seam import open_session
from exactspec.engine.hfconfig import SamplingSpec  # noqa: F401  (the spec drafters receive; re-exported)


@dataclass
class Draft:
    """One step's proposal. `tokens [B, K]` int64 (entries past `lengths[b]` are filler),
    `probs [B, K, V]` fp32 or None for one-hot q, `lengths [B]` int64; `confidence [B, K]` what the policy
    bins each position's acceptance by, a function of the prefix only: a model draft's top probability there,
    prompt lookup's match length and place (:meth:`PromptLookupDrafter.confidence`), or None (every position
    alike); `calls` draft-model forward passes and `first_call_time` the seconds of the first one's whole
    iteration (the cold call right after the target's forward, with its q, the policy's look and the draw:
    what each later call's share of the draft time holds too, so that calibrate's split into t_draft and
    t_draft_cold prices every call alike);
    `prefill_time` the seconds of a deferred prompt prefill inside this proposal (not drafting time)."""

    tokens: torch.Tensor
    probs: torch.Tensor | None
    lengths: torch.Tensor
    confidence: torch.Tensor | None = None
    calls: int = 0
    first_call_time: float = 0.0
    prefill_time: float = 0.0  # seconds this proposal spent feeding the prompt first (a lazy prefill)

    @classmethod
    def empty(cls, rows: int, device) -> "Draft":
        """Nothing drafted for any of `rows` rows: a plain step's proposal."""
        return cls(torch.zeros(rows, 0, dtype=torch.long, device=device), None,
                   torch.zeros(rows, dtype=torch.long, device=device))


class Drafter(Protocol):
    """Where draft tokens come from (see the module docstring)."""

    def start(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> None: ...

    def propose(self, caps: torch.Tensor, spec: SamplingSpec, policy=None) -> Draft: ...

    def update(self, accepted: torch.Tensor, next_token: torch.Tensor, draft: Draft) -> None: ...

    def select_rows(self, rows: torch.Tensor) -> None: ...


class DraftModelDrafter:
    """Drafts autoregressively with a small causal LM that keeps its own batch KV cache.

    The draft lags the emitted text by one or two tokens ("pending"): the bonus token of the last step,
    preceded by the last draft token when all K were accepted (it was sampled but never fed). The
    first draft forward of a step feeds those pending tokens, left-packed so that the last slot is real
    for every row.
    """

    _unfed = None  # the prompt (ids, mask) not fed yet: start(lazy=True) defers it to the first draft call

    def __init__(self, model):
        self.model = model
        # Cumulative counters of the tree drafter (exactspec.engine.treedraft); a chain proposal reports its own
        # in the Draft it returns.
        self.forward_calls, self.first_call_time = 0, 0.0

    def start(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, lazy: bool = False) -> None:
        """Prefill on the prompt `[B, P]` minus its last token (which becomes pending). `lazy`: feed it at
        the first proposal instead (:meth:`feed_prompt`), in the same one call: a run that never drafts
        (``gamma="auto"`` with a draft that does not help) then never pays for the draft's prefill."""
        # a draft's forward need not be transformers' own (exactspec.backends.leanforward), nor torch's
        self.state = open_session(self.model, input_ids.shape[0], target=False)
        self._unfed = (input_ids[:, :-1], attention_mask[:, :-1].bool()) if input_ids.shape[1] > 1 else None
        if not lazy:
            self.feed_prompt()
        self.pending = input_ids[:, -1:].to(self.state.device)  # [B, W]
        self.pending_valid = torch.ones_like(self.pending, dtype=torch.bool)

    def feed_prompt(self) -> float:
        """Feed the prompt if :meth:`start` deferred it; returns the seconds that took (0.0 if nothing was due)."""
        if self._unfed is None:
            return 0.0
        t0 = time.perf_counter()
        ids, mask = self._unfed
        self._unfed = None
        self.state.forward(ids, mask, logits_to_keep=1)
        sync(ids.device)
        return time.perf_counter() - t0

    def propose(self, caps: torch.Tensor, spec: SamplingSpec, policy=None) -> Draft:
        """Up to `caps [B]` tokens per row; `policy.include` may stop the step before any position."""
        b = caps.shape[0]
        fed = self.feed_prompt()  # (a lazy start's prompt, before this step's clock: prefill, not drafting)
        calls = 0  # draft-model forwards this step (the Draft carries them to update)
        big_k = int(caps.max()) if b else 0
        tokens, probs, confs = [], [], []
        inp, valid = self._first_input()
        first, t0 = 0.0, time.perf_counter()
        self._start = self.state.length  # where this step's slots begin (update keeps what was accepted)
        ask = policy is not None and policy.wants_confidence
        # [B] positions each row drafts: the policy's rows per position (a row it stops stays stopped), or caps
        lengths = caps.clamp(max=0) if ask else None
        ones = torch.ones(b, 1, dtype=torch.bool, device=valid.device)  # the validity of every later call's input
        for i in range(big_k):  # feeds pending, d_1 .. d_{K-1}; d_K is sampled but not fed
            if i == 1:  # the first call's whole iteration (its forward, q, the policy's look, the draw),
                sync(inp.device)  # as every later call's share of the draft time counts it
                first = time.perf_counter() - t0
            logits = self._logits(inp, valid)  # [B, V_draft]
            calls += 1
            q = None if spec.greedy else spec.probs(logits)  # [B, V]; greedy verification never reads q
            if ask:  # the decision reads q_{i+1} only, never the token about to be drawn from it
                conf = (q if q is not None else
                        torch.softmax(logits[:, : spec.vocab_size].float(), -1)).amax(-1)  # [B]
                rows = policy.include(i + 1, conf, caps).to(caps.device)  # [B] bool
                if not bool(rows.any()):
                    break
                lengths = lengths + rows
                confs.append(conf)
            # greedy: the argmax of the logits, lowest id among ties, as probs_from_logits
            # (cut to the target's vocabulary when the draft's head is wider: its padding is never drawn)
            d = (logits if logits.shape[-1] == spec.vocab_size else logits[:, : spec.vocab_size]).argmax(-1) \
                if q is None else spec.sample(q)  # [B]
            if q is not None:
                probs.append(q)
            tokens.append(d)
            if ask and i + 1 < big_k and not policy.more(i + 1):  # the next draft call would not pay
                break
            inp, valid = self._next_input(d), ones
        if not ask:  # each row drafts up to its cap, one position per call
            lengths = caps.clamp(max=len(tokens))
        if calls == 1:
            sync(caps.device)
            first = time.perf_counter() - t0
        n = len(tokens)
        tok = torch.stack(tokens, 1) if n else torch.zeros(b, 0, dtype=torch.long, device=caps.device)
        return Draft(tok, torch.stack(probs, 1) if probs else None, lengths,
                     torch.stack(confs, 1) if confs else None, calls, first, fed)

    # What a draft call feeds and reads; a feature drafter (exactspec.pairs.featuredraft) feeds pairs instead.
    def _first_input(self) -> tuple[torch.Tensor, torch.Tensor]:
        """A step's first call: the pending tokens `[B, W]` and their validity."""
        return self.pending, self.pending_valid

    def _logits(self, inp: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """One draft forward over `inp` (new slots, `valid [B, S]`): the last slot's logits `[B, V]`."""
        return self.state.forward(inp, valid, logits_to_keep=1)[:, -1]

    def _next_input(self, d: torch.Tensor) -> torch.Tensor:
        """What the next call feeds after drawing `d [B]`."""
        return d[:, None]

    def update(self, accepted: torch.Tensor, next_token: torch.Tensor, draft: Draft) -> None:
        """Keep the accepted prefix in the draft cache; emitted tokens not fed yet become pending.

        A step fed the pending tokens and then d_1 .. d_f (f = calls - 1: d_K is drafted but not fed, unless
        the policy stopped the step after feeding it, when f = K)."""
        nxt = next_token[:, None]
        ones = torch.ones_like(nxt, dtype=torch.bool)
        if draft.calls == 0:  # nothing was fed this step: the pending tokens are still pending; they are
            # left-packed, and a column valid in every row keeps them so (no repacking on plain steps)
            self.pending = torch.cat([self.pending, nxt], 1)
            self.pending_valid = torch.cat([self.pending_valid, ones], 1)
            return
        f, k = draft.calls - 1, draft.tokens.shape[1]
        j = torch.arange(1, k + 1, device=accepted.device)[None, :]  # [1, K]
        took = j <= accepted[:, None]  # [B, K]: the drafts each row kept
        self.state.keep(self._start, self.pending_valid.sum(1) + accepted.clamp(max=f))
        # d_K is drafted and not fed (f = K - 1) unless the policy stopped the step after feeding it (f = K);
        # a row that kept it has it pending before the bonus token, left-packed (as left_pack would)
        full = took[:, -1] if f < k else None  # [B]
        if full is None or not bool(full.any()):
            self.pending, self.pending_valid = nxt, ones
        else:
            self.pending = torch.stack([torch.where(full, draft.tokens[:, -1], 0), next_token], 1)  # [B, 2]
            self.pending_valid = torch.stack([full, ones[:, 0]], 1)

    def update_plain(self, made: torch.Tensor) -> None:
        """`made [B, m]`: m plain steps, none proposed to, emitted these tokens; they join the pending ones
        (what :meth:`update` does for each, in one op)."""
        self.pending = torch.cat([self.pending, made], 1)
        self.pending_valid = torch.cat([self.pending_valid, torch.ones_like(made, dtype=torch.bool)], 1)

    def select_rows(self, rows: torch.Tensor) -> None:
        self.state.select_rows(rows)
        rows = rows.to(self.pending.device)
        if self._unfed is not None:
            self._unfed = (self._unfed[0][rows], self._unfed[1][rows])
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

    def start(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> None:
        self.history = [row[m.bool()].tolist() for row, m in zip(input_ids.cpu(), attention_mask.cpu())]
        self._index = [NgramIndex(self.min_ngram, self.max_ngram, h) for h in self.history]

    def lookup(self, hist: list[int], k: int) -> list[int]:
        """Continuation (<= k tokens) of the earliest earlier occurrence of the longest matching suffix."""
        return self.match(hist, k)[0]

    def match(self, hist: list[int], k: int) -> tuple[list[int], int]:
        """`(continuation, n)`: :meth:`lookup`'s tokens and the length n of the suffix that matched (0: none)."""
        if k <= 0:
            return [], 0
        t = torch.tensor(hist)
        for n in range(min(self.max_ngram, len(hist) - 1), self.min_ngram - 1, -1):
            windows = t[:-1].unfold(0, n, 1)  # starts 0..len-n-1: every match has >= 1 token after it
            hits = (windows == t[-n:]).all(1).nonzero()
            if hits.numel():
                start = int(hits[0]) + n
                return hist[start:start + k], n
        return [], 0

    def confidence(self, n: int, position: int = 0) -> float:
        """What the policy bins the acceptance of a continuation's token at `position` (0-based) by: the
        matched suffix's length n, for the first token, the next two and the rest apart. A longer match is
        followed by its continuation far more often (first tokens kept after a 1-, 2- and 3-token match
        0.14-0.32, 0.41-0.74 and 0.75-0.83 of the time: held-out and two unseen sets, greedy, γ = 5), and
        each place gets its own measured rate rather than one assumed for all (a rate pooled over all
        positions expected 5.6 of a 3-token match's 10 tokens to be kept, and 2.9 were). The numbers are bin
        keys of :class:`exactspec.engine.policy.AcceptanceModel`, not probabilities: first tokens in
        [0.15, 0.75], the next two in [0.8, 0.99], the rest in [0.0, 0.3). A function of the history only,
        so verification stays exact."""
        x = n / self.max_ngram
        if position == 0:
            return 0.15 + 0.6 * x
        return 0.8 + 0.19 * x if position <= 2 else 0.29 * x

    def propose(self, caps: torch.Tensor, spec: SamplingSpec, policy=None) -> Draft:
        k = caps.clamp(max=self.max_draft)
        found = [ix.match(int(kb)) for ix, kb in zip(self._index, k.tolist())]  # = self.match(history, k)
        if not any(n for _, n in found):  # nothing found: a plain step
            return Draft.empty(len(found), k.device)
        conts = [c for c, _ in found]
        conf = [[self.confidence(n, j) for j in range(len(c))] for c, n in found]  # per row, per position
        if policy is not None:  # how many found tokens are worth verifying (the step is as wide as its longest)
            width = policy.trim([len(c) for c in conts], conf)
            conts = [c[:width] for c in conts]
        big_k = max((len(c) for c in conts), default=0)
        if big_k == 0:  # a plain step
            return Draft.empty(len(conts), k.device)
        tokens = torch.zeros(len(conts), big_k, dtype=torch.long)
        for i, c in enumerate(conts):
            tokens[i, :len(c)] = torch.tensor(c, dtype=torch.long)
        conf = torch.tensor([(c + [1.0] * big_k)[:big_k] for c in conf])  # [B, K]
        lengths = torch.tensor([len(c) for c in conts], dtype=torch.long)
        return Draft(tokens.to(k.device), None, lengths.to(k.device), conf.to(k.device))

    def update(self, accepted: torch.Tensor, next_token: torch.Tensor, draft: Draft) -> None:
        toks = draft.tokens.tolist()
        for h, row, n, x in zip(self.history, toks, accepted.tolist(), next_token.tolist()):
            h.extend(row[:n])
            h.append(x)

    def update_plain(self, made: torch.Tensor) -> None:
        """`made [B, m]`: tokens of m plain steps, appended to each row's history."""
        for h, row in zip(self.history, made.tolist()):
            h.extend(row)

    def select_rows(self, rows: torch.Tensor) -> None:
        self.history = [self.history[i] for i in rows.tolist()]
        self._index = [self._index[i] for i in rows.tolist()]


class NgramIndex:
    """Where each n-gram (n = lo..hi) of a growing token list first occurs with a token after it, kept up to
    date as tokens arrive, so that a lookup is a few dict reads instead of a scan of the whole history
    (beside a 2 ms llama.cpp forward, a scan of a few hundred tokens was a tenth of a plain step).
    :meth:`match` returns what :meth:`PromptLookupDrafter.match` returns for the same list."""

    def __init__(self, lo: int, hi: int, hist: list[int]):
        self.lo, self.hi, self.hist, self.first, self._done = lo, hi, hist, {}, 1

    def _sync(self) -> None:
        h, first = self.hist, self.first
        for end in range(self._done, len(h)):  # the token at `end` follows the n-grams that end before it
            for n in range(self.lo, min(self.hi, end) + 1):
                first.setdefault(tuple(h[end - n:end]), end - n)
        self._done = max(self._done, len(h))

    def match(self, k: int) -> tuple[list[int], int]:
        """`(continuation of <= k tokens, n)` of the earliest earlier occurrence of the longest matching suffix."""
        if k <= 0:
            return [], 0
        self._sync()
        h = self.hist
        for n in range(min(self.hi, len(h) - 1), self.lo - 1, -1):
            i = self.first.get(tuple(h[-n:]))
            if i is not None:
                return h[i + n:i + n + k], n
        return [], 0
