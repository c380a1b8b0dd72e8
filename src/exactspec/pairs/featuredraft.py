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


__all__ = ["FeatureDraft", "load_feature_draft", "save_feature_draft", "timed_model"]


class FeatureDraft(nn.Module):
    """`fc` [2H -> H] (over the token's embedding and the feature times a learnt gain `feat_gain [H]`) then `lm`: a LlamaForCausalLM of `num_layers` layers of the target's shape, sharing the
    target's token embedding (frozen, not shipped), with a head over `token_ids [S]`
    (:class:`exactspec.pairs.smollm2.SubsetHead`). Initialised so that an untrained draft already predicts
    f^_{j+1} = f_j passed through the target's last layer: fc takes the feature half as it is, the layers
    are the target's last ones, the head is the target's head restricted to the subset."""

    def __init__(self, target, token_ids, num_layers: int = 1, init_from_target: bool = True):
        super().__init__()
        from exactspec.pairs.smollm2 import build_draft

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

    def make_drafter(self):
        """The drafter that feeds this draft the target's features (the engine asks a draft for its own
        drafter through this method; it then prices and checks the draft as ``drafter.lm``)."""
        from exactspec.engine.featuredrafter import FeatureDrafter

        return FeatureDrafter(self)


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
