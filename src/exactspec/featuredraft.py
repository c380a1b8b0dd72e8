"""A draft that reads the target's own hidden state (EAGLE-style), and its drafter.

Why: a 2-layer draft that sees only tokens must rebuild, from scratch, what the 30-layer target knows
about the context; on SmolLM2 it plateaued at alpha 0.52. The target has already computed that knowledge:
its final hidden state f_t (after the final norm, the vector its head turns into p). A draft fed f_t plus
the next token only has to predict one step of the target's feature dynamics (Li et al. 2024, EAGLE).

The model (:class:`FeatureDraft`): pair j is (f_j, x_{j+1}), the target's feature at position j and the
token at j+1; ``fc([embed(x_{j+1}); f_j])`` goes through a few decoder layers of the target's shape and
the final norm to f^_{j+1}, the draft's guess of the target's next feature, and a head over a frequent-token
subset (q = 0 outside it) turns f^_{j+1} into q(x_{j+2}). Drafting further, the draft feeds its own guess:
(f^_{j+1}, d) for the token d it drew.

Exactness never depends on any of this: the drafter samples from the q it returns, and verification
corrects any q. Only speed does.

The drafter (:class:`FeatureDrafter`) keeps the draft's KV cache on pairs whose feature is the target's
own: after each verification it rolls back the pairs it fed with its own guesses and queues the accepted
tokens with the target's features of that forward (the loop hands them over: the target's slot cache
records its final hidden state for a drafter that asks, ``wants_target_features``).
"""
from __future__ import annotations

import json
import pathlib

import torch
import torch.nn as nn

from exactspec.cache import SlotCache
from exactspec.drafters import Draft, DraftModelDrafter

__all__ = ["FeatureDraft", "FeatureDrafter", "load_feature_draft", "save_feature_draft", "timed_model"]


class FeatureDraft(nn.Module):
    """`fc` [2H -> H] (over the token's embedding and the feature times a learnt gain `feat_gain [H]`) then `lm`: a LlamaForCausalLM of `num_layers` layers of the target's shape, sharing the
    target's token embedding (frozen, not shipped), with a head over `token_ids [S]`
    (:class:`exactspec.smollm2.SubsetHead`). Initialised so that an untrained draft already predicts
    f^_{j+1} = f_j passed through the target's last layer: fc takes the feature half as it is, the layers
    are the target's last ones, the head is the target's head restricted to the subset."""

    def __init__(self, target, token_ids, num_layers: int = 1, init_from_target: bool = True):
        super().__init__()
        from exactspec.smollm2 import build_draft

        self.lm = build_draft(target, token_ids, num_layers=num_layers, init_from_target=False)
        h = target.config.hidden_size
        self.fc = nn.Linear(2 * h, h).to(target.dtype)
        # The target's final features are ~15x the embeddings' scale (SmolLM2: RMS 1.9 against 0.14, a few
        # dimensions near 50), so fed raw they swamp the token half of fc's input as soon as fc reads them.
        # A per-dimension gain, learnt, starts them at the embeddings' scale.
        with torch.no_grad():
            emb = target.get_input_embeddings().weight.float().pow(2).mean().sqrt()
            feat = target.model.norm.weight.float().pow(2).mean().sqrt()
        self.feat_gain = nn.Parameter(torch.full((h,), float(emb / feat), dtype=target.dtype))
        if init_from_target:
            with torch.no_grad():
                last = len(target.model.layers)
                for i in range(num_layers):
                    self.lm.model.layers[i].load_state_dict(target.model.layers[last - num_layers + i].state_dict())
                self.lm.model.norm.load_state_dict(target.model.norm.state_dict())
                self.lm.lm_head.weight.copy_(target.lm_head.weight[self.lm.lm_head.token_ids])
                self.fc.weight.zero_()
                self.fc.weight[:, h:].copy_(torch.eye(h) / self.feat_gain[0])
                self.fc.bias.zero_()
        self.config = self.lm.config
        self.eval()

    @property
    def device(self):
        return self.fc.weight.device

    @property
    def dtype(self):
        return self.fc.weight.dtype

    def pair_embeds(self, tokens: torch.Tensor, feats: torch.Tensor) -> torch.Tensor:
        """`tokens [B, S]`, `feats [B, S, H]` -> the layers' inputs `[B, S, H]`."""
        e = self.lm.model.embed_tokens(tokens).to(self.dtype)
        return self.fc(torch.cat([e, feats.to(self.dtype) * self.feat_gain], -1))

    def forward(self, tokens: torch.Tensor, feats: torch.Tensor, attention_mask=None) -> torch.Tensor:
        """Teacher-forced, no cache (training): pairs `(feats[:, j], tokens[:, j])` -> f^ `[B, S, H]`."""
        return self.lm.model(inputs_embeds=self.pair_embeds(tokens, feats),
                             attention_mask=attention_mask).last_hidden_state

    def head(self, feat: torch.Tensor) -> torch.Tensor:
        """f^ `[..., H]` -> full-vocabulary logits `[..., V]` (-inf outside the head's subset)."""
        return self.lm.lm_head(feat)


def timed_model(draft):
    """The causal LM that prices `draft`'s step in a cost model (`CostModel.measure` times token forwards): a
    feature draft's own LM (its step is that forward plus one small fc), any other draft as it is."""
    return draft.lm if isinstance(draft, FeatureDraft) else draft


def save_feature_draft(draft: FeatureDraft, path: pathlib.Path, extra: dict | None = None) -> None:
    """fp16 safetensors (everything but the borrowed embedding) and a config json into directory `path`."""
    from safetensors.torch import save_file

    path.mkdir(parents=True, exist_ok=True)
    state = {k: (v.half() if v.is_floating_point() else v).contiguous()
             for k, v in draft.state_dict().items() if "embed_tokens" not in k}
    save_file(state, path / "feature_draft.safetensors")
    meta = {"kind": "feature", "num_layers": len(draft.lm.model.layers),
            "vocab_subset": int(draft.lm.lm_head.token_ids.numel()), **(extra or {})}
    (path / "feature_draft.json").write_text(json.dumps(meta, indent=1))


def load_feature_draft(target, path: pathlib.Path) -> FeatureDraft:
    """The feature draft saved in directory `path` for `target`, in the target's dtype, eval mode."""
    from safetensors.torch import load_file

    meta = json.loads((path / "feature_draft.json").read_text())
    state = load_file(path / "feature_draft.safetensors")
    draft = FeatureDraft(target, state["lm.lm_head.token_ids"], num_layers=meta["num_layers"],
                         init_from_target=False)
    missing, unexpected = draft.load_state_dict(
        {k: v.to(target.dtype) if v.is_floating_point() else v for k, v in state.items()}, strict=False)
    missing = [k for k in missing if "embed_tokens" not in k]
    if missing or unexpected:
        raise ValueError(f"the feature draft in {path} does not fit: missing {missing}, unexpected {unexpected}")
    return draft.to(target.device).eval()


def _left_pack(tokens: torch.Tensor, feats: torch.Tensor, valid: torch.Tensor):
    """:func:`exactspec.cache.left_pack` of `tokens [B, W]` with their features `feats [B, W, H]` alongside."""
    width = int(valid.long().sum(1).max()) if valid.numel() else 0
    order = torch.argsort(valid.long(), dim=1, stable=True)[:, tokens.shape[1] - width:]  # valid entries last
    ok = valid.gather(1, order)
    tok = torch.where(ok, tokens.gather(1, order), torch.zeros_like(order))
    f = feats.gather(1, order[..., None].expand(-1, -1, feats.shape[-1])) * ok[..., None]
    return tok, f, ok


class FeatureDrafter(DraftModelDrafter):
    """Drafts with a :class:`FeatureDraft`, fed the target's final hidden states by the loop.

    Pending pairs: (f_j, x_{j+1}) whose feature the target has computed but the draft has not yet been fed
    (left-packed: `pending [B, W]` tokens, `pending_feats [B, W, H]`, `pending_valid [B, W]`). A step's first
    draft call feeds them; later calls feed the draft's own (f^, d) pairs, which `update` rolls back and
    replaces by the accepted tokens paired with the target's features from the verification.
    """

    wants_target_features = True  # the loop calls watch(target cache), whose forwards keep their features

    def __init__(self, model: FeatureDraft):
        if not isinstance(model, FeatureDraft):
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
            own = torch.zeros(len(accepted), draft.calls - 1, dtype=torch.bool, device=accepted.device)
            self.state.rollback(torch.cat([self.pending_valid, own], 1))
        self.pending, self.pending_feats, self.pending_valid = _left_pack(toks, feats, new_valid)

    def select_rows(self, rows: torch.Tensor) -> None:
        self.state.select_rows(rows)
        rows = rows.to(self.pending.device)
        self.pending, self.pending_feats, self.pending_valid = _left_pack(
            self.pending[rows], self.pending_feats[rows], self.pending_valid[rows])
