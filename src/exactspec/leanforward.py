"""A lean forward pass for Llama-family draft models: the same weights, a fraction of the per-call cost.

Why: a draft of 2 narrow layers spends most of a decoding step in Python and mask building, not in
arithmetic. Measured here on the demo draft (2 layers, width 256, 4,096-token vocabulary), one token with
a few hundred cached: transformers' forward 1.25 ms, this one about 0.75 ms; the matrix products are
about 0.25 ms of either. The draft runs K times per step, so that overhead decides whether drafting pays.

Exactness does not depend on it. Verification corrects any draft distribution q as long as q is the
distribution the tokens were drawn from, and the drafter samples from the logits this forward returns.
It agrees with transformers' forward to float rounding (tests compare the two), so acceptance is the same.

What it does not do: it is used for drafts only, never for the target (the target's own forward defines
p; a different rounding could flip a greedy near-tie against `target.generate`), and only for models it
knows exactly: `LlamaForCausalLM` and `Qwen2ForCausalLM` without sliding windows, SiLU MLPs, no tensor
parallel split. Everything else (and ``EXACTSPEC_LEAN_DRAFT=0``) takes transformers' forward.
It reads the modules' weights at call time, so a draft trained or edited in place is seen as it is.
"""
from __future__ import annotations

import os
import weakref

import torch
import torch.nn.functional as F

__all__ = ["LeanForward", "lean_forward_for"]

_KNOWN = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2"}
_GQA = tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 5)  # sdpa's enable_gqa


def lean_forward_for(model, window) -> "LeanForward | None":
    """The lean forward of `model`, or None when it must run through transformers (see the module doc).
    `window` is the slot cache's sliding window (None without)."""
    if os.environ.get("EXACTSPEC_LEAN_DRAFT", "1") == "0" or window is not None:
        return None
    cfg = model.config
    if _KNOWN.get(type(model).__name__) != getattr(cfg, "model_type", None):
        return None
    if getattr(cfg, "hidden_act", None) != "silu" or getattr(cfg, "pretraining_tp", 1) != 1 \
            or getattr(cfg, "mlp_bias", False) or getattr(cfg, "use_sliding_window", False) \
            or getattr(cfg, "_attn_implementation", "sdpa") not in ("sdpa", "eager"):
        return None
    return LeanForward(model)


class LeanForward:
    """`run(tokens, pos, attend, cache, logits_to_keep)` for one Llama-family causal LM.

    Per layer it multiplies once for q, k and v together and once for gate and up together: the fused
    weights are copies, made once per model and remade when a source weight changes (its tensor version)."""

    def __init__(self, model):
        self.model = model
        cfg = model.config
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.scale = self.head_dim ** -0.5
        self.layers = _fused(model)

    def run(self, tokens: torch.Tensor, pos: torch.Tensor, attend: torch.Tensor | None, cache,
            logits_to_keep: int = 0) -> torch.Tensor:
        """`tokens [B, S]`, `pos [B, S]` position ids, `attend [B, 1, S, L+S]` bool (True = may attend; None =
        every cached slot and every earlier new one, a plain causal step); appends S slots to the
        `DynamicCache` `cache`. Returns logits `[B, S or logits_to_keep, V]`."""
        inner = self.model.model
        b, s = tokens.shape
        h = inner.embed_tokens(tokens)  # [B, S, D]
        cos, sin = inner.rotary_emb(h, pos)  # [B, S, Dh]
        cos, sin = cos[:, None], sin[:, None]  # [B, 1, S, Dh]
        if attend is None and s > 1:  # causal among the new slots, all cached slots visible
            n = cache.get_seq_length()
            attend = torch.ones(s, n + s, dtype=torch.bool, device=h.device).tril(n)[None, None]
        nq, nkv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        extra = {"enable_gqa": True} if self.kv_heads != self.heads and _GQA else {}
        for i, w in enumerate(self.layers):
            qkv = F.linear(_rms(h, w.norm1, w.eps1), w.qkv, w.qkv_bias)  # [B, S, (H + 2 KV) Dh]
            qk = _rope(qkv[..., : nq + nkv].view(b, s, -1, self.head_dim).transpose(1, 2), cos, sin)
            q, k = qk[:, : self.heads], qk[:, self.heads:]  # [B, H, S, Dh], [B, KV, S, Dh]
            v = qkv[..., nq + nkv:].view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
            keys, values = cache.layers[i].update(k, v)  # [B, KV, L+S, Dh]
            if self.kv_heads != self.heads and not _GQA:
                rep = self.heads // self.kv_heads
                keys, values = keys.repeat_interleave(rep, 1), values.repeat_interleave(rep, 1)
            o = F.scaled_dot_product_attention(q, keys, values, attn_mask=attend, scale=self.scale, **extra)
            h = h + F.linear(o.transpose(1, 2).reshape(b, s, nq), w.o)
            gate, up = F.linear(_rms(h, w.norm2, w.eps2), w.gate_up).chunk(2, -1)
            h = h + F.linear(F.silu(gate) * up, w.down)
        if logits_to_keep:
            h = h[:, -logits_to_keep:]
        return self.model.lm_head(inner.norm(h))


class _Layer:
    """One decoder layer's weights as the lean forward reads them."""

    def __init__(self, layer):
        a, mlp = layer.self_attn, layer.mlp
        self.sources = [a.q_proj.weight, a.k_proj.weight, a.v_proj.weight, mlp.gate_proj.weight, mlp.up_proj.weight]
        self.sources += [x.bias for x in (a.q_proj, a.k_proj, a.v_proj) if x.bias is not None]
        self.qkv = torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]).detach()
        biases = [x.bias for x in (a.q_proj, a.k_proj, a.v_proj)]
        self.qkv_bias = None if all(x is None for x in biases) else torch.cat(
            [x if x is not None else torch.zeros(p.weight.shape[0], dtype=p.weight.dtype, device=p.weight.device)
             for x, p in zip(biases, (a.q_proj, a.k_proj, a.v_proj))]).detach()
        self.gate_up = torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]).detach()
        self.o, self.down = a.o_proj.weight, mlp.down_proj.weight  # read live, not copied
        self.norm1, self.eps1 = layer.input_layernorm.weight, _eps(layer.input_layernorm)
        self.norm2, self.eps2 = layer.post_attention_layernorm.weight, _eps(layer.post_attention_layernorm)
        self.stamp = _stamp(self.sources)


_FUSED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _fused(model) -> list[_Layer]:
    """The model's fused layers, remade when any weight they copy was changed (or replaced) since."""
    layers = _FUSED.get(model)
    if layers is None or len(layers) != len(model.model.layers) or any(
            w.stamp is None or w.stamp != _stamp(w.sources) for w in layers):
        with torch.no_grad():
            layers = [_Layer(layer) for layer in model.model.layers]
        _FUSED[model] = layers
    return layers


def _stamp(tensors) -> tuple | None:
    """Where each tensor lives and how often it was written; None when one is an inference tensor (made
    under torch.inference_mode), which keeps no write count: such a model is fused again on every run."""
    if any(t.is_inference() for t in tensors):
        return None
    return tuple((t.data_ptr(), t._version) for t in tensors)


def _eps(norm) -> float:
    return getattr(norm, "variance_epsilon", getattr(norm, "eps", 1e-6))


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' Llama RMSNorm: normalised in fp32, scaled in the input dtype."""
    xf = x.float()
    return weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding, transformers' rotate-half convention: x·cos + rotate_half(x)·sin."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin
