"""Drafting with a draft that reads the target's own final hidden states (EAGLE-style).

The model itself (:class:`exactspec.pairs.featuredraft.FeatureDraft`) is a shipped model's format; this
module is how the engine drafts with any such model: it keeps the draft's KV cache on (feature, token) pairs
whose feature is the target's own, rolling back the pairs fed with the draft's own guesses after each
verification. Exactness never depends on it: the drafter samples from the q it returns.
"""
from __future__ import annotations

import torch

from exactspec.backends.cache import SlotCache
from exactspec.engine.drafters import Draft, DraftModelDrafter

__all__ = ["FeatureDrafter"]


def _left_pack(tokens: torch.Tensor, feats: torch.Tensor, valid: torch.Tensor):
    """:func:`exactspec.backends.cache.left_pack` of `tokens [B, W]` with their features `feats [B, W, H]` alongside."""
    width = int(valid.long().sum(1).max()) if valid.numel() else 0
    order = torch.argsort(valid.long(), dim=1, stable=True)[:, tokens.shape[1] - width:]  # valid entries last
    ok = valid.gather(1, order)
    tok = torch.where(ok, tokens.gather(1, order), torch.zeros_like(order))
    f = feats.gather(1, order[..., None].expand(-1, -1, feats.shape[-1])) * ok[..., None]
    return tok, f, ok


class FeatureDrafter(DraftModelDrafter):
    """Drafts with a :class:`~exactspec.pairs.featuredraft.FeatureDraft`, fed the target's final hidden states by the loop.

    Pending pairs: (f_j, x_{j+1}) whose feature the target has computed but the draft has not yet been fed
    (left-packed: `pending [B, W]` tokens, `pending_feats [B, W, H]`, `pending_valid [B, W]`). A step's first
    draft call feeds them; later calls feed the draft's own (f^, d) pairs, which `update` rolls back and
    replaces by the accepted tokens paired with the target's features from the verification.
    """

    drafts_trees = False  # its calls feed (feature, token) pairs of one chain
    wants_target_features = True  # the loop calls watch(target cache), whose forwards keep their features

    def __init__(self, model):
        if not all(hasattr(model, a) for a in ("pair_embeds", "head", "lm")):
            raise TypeError(f"model must be a FeatureDraft, got {type(model).__name__}")
        self.model = model
        self.forward_calls, self.first_call_time = 0, 0.0

    def watch(self, target_cache: SlotCache) -> None:
        """The target's slot cache, whose forwards this drafter reads the features of."""
        if getattr(getattr(target_cache.model, "model", None), "norm", None) is None:
            raise ValueError(f"a feature draft needs a target with a final norm at .model.norm (Llama-like), "
                             f"not {type(target_cache.model).__name__}")
        target_cache.record_hidden = True
        self.target = target_cache

    def _features(self, rows: int, width: int) -> torch.Tensor:
        h = self.target.hidden
        if h is None:  # a one-token prompt: nothing before it has a feature (a zero one: exact, just unhelpful)
            return torch.zeros(rows, width, self.model.config.hidden_size, device=self.model.device,
                               dtype=self.model.dtype)
        return h[:, -width:].to(self.model.dtype)

    def start(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> None:
        """After the target's prefill over the prompt `[B, P]` minus its last token: feed the draft the pairs
        (f_j, x_{j+1}) for j < P - 2; (f_{P-2}, x_{P-1}) is pending."""
        self.state = SlotCache(self.model.lm)
        self.state.use_lean()
        b, p = input_ids.shape
        dev = self.state.device
        ids, mask = input_ids.to(dev), attention_mask.to(dev).bool()
        f = self._features(b, max(p - 1, 1))  # [B, P-1, H]: f_0 .. f_{P-2}
        if p > 2:
            self.state.forward_embeds(self.model.pair_embeds(ids[:, 1:-1], f[:, :-1]), mask[:, :-2], keep=1)
        self.pending, self.pending_feats = ids[:, -1:], f[:, -1:]
        self.pending_valid = mask[:, -2:-1] if p > 1 else torch.ones(b, 1, dtype=torch.bool, device=dev)

    # propose is DraftModelDrafter's; a call feeds (feature, token) pairs and reads the draft's feature guess
    def _first_input(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.model.pair_embeds(self.pending, self.pending_feats), self.pending_valid

    def _logits(self, inp: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        self._guess = self.state.forward_embeds(inp, valid, keep=1)[:, -1]  # [B, H]: f^ of the next position
        return self.model.head(self._guess)  # [B, V]

    def _next_input(self, d: torch.Tensor) -> torch.Tensor:
        return self.model.pair_embeds(d[:, None], self._guess[:, None])  # the draft's own guess of the feature

    def update(self, accepted: torch.Tensor, next_token: torch.Tensor, draft: Draft) -> None:
        """Drop the pairs fed with the draft's own guesses; queue the emitted tokens with the target's features
        of the forward that verified them (`[B, K+1, H]`, or `[B, 1, H]` for a plain step)."""
        k = draft.tokens.shape[1]
        feats = self._features(len(next_token), k + 1)  # f at [pending, d_1 .. d_K]
        toks = torch.cat([draft.tokens, torch.zeros_like(next_token)[:, None]], 1)  # [B, K+1]
        toks.scatter_(1, accepted[:, None], next_token[:, None])  # d_1 .. d_n, then the bonus token
        new_valid = torch.arange(k + 1, device=accepted.device)[None, :] <= accepted[:, None]
        if draft.calls == 0:  # a plain step not proposed to: the pending pairs are still unfed
            toks, feats, new_valid = (torch.cat([self.pending, toks], 1), torch.cat([self.pending_feats, feats], 1),
                                      torch.cat([self.pending_valid, new_valid], 1))
        else:  # the first call fed the pending pairs (kept); the later ones fed guesses (dropped)
            self.state.keep(self._start, self.pending_valid.sum(1))
        self.pending, self.pending_feats, self.pending_valid = _left_pack(toks, feats, new_valid)

    def select_rows(self, rows: torch.Tensor) -> None:
        self.state.select_rows(rows)
        rows = rows.to(self.pending.device)
        self.pending, self.pending_feats, self.pending_valid = _left_pack(
            self.pending[rows], self.pending_feats[rows], self.pending_valid[rows])
