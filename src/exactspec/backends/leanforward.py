"""A lean forward pass for Llama-family models: the same weights, a fraction of the per-call cost.

Why: a draft of 2 narrow layers spends most of a decoding step in Python and mask building, not in
arithmetic. Measured here on the demo draft (2 layers, width 256, 4,096-token vocabulary), one token with
a few hundred cached: transformers' forward 1.25 ms, this one about 0.75 ms; the matrix products are
about 0.25 ms of either. The draft runs K times per step, so that overhead decides whether drafting pays.
The target pays the same toll once per step: the demo target (6 layers, width 512) took 4.58 ms through
transformers' forward for one token and 3.40 ms here, 6.16 and 5.13 ms for five (2026-12-03).

Two forms. A draft's (``fuse=True``) multiplies q, k, v together and gate, up together (copied weights) and
runs its own attention call; it agrees with transformers' forward to float rounding (tests compare the
two), and exactness does not depend on it: verification corrects any draft distribution q as long as q is
the distribution the tokens were drawn from, and the drafter samples from the logits this forward returns.
The target's (``use_lean(target=True)``, ``fuse=False``) is transformers' decoder layer op for op: each
projection through its module's own weight (nothing copied: a target may be large), transformers' own sdpa
attention function (its grouped-query, mask and causal choices), its norm and head modules. Its logits
equal transformers' forward bit for bit (tests assert ``torch.equal`` through padding, holes, chain widths
and tree masks, fp32, fp64 and bf16), so p and greedy decoding are those of the model as transformers runs it;
only the module calls, hooks and per-call mask building are skipped. sdpa models only (an eager model's
target keeps transformers' forward); ``EXACTSPEC_LEAN_TARGET=0`` turns it off.

Both are used only for models they know exactly: `LlamaForCausalLM` and `Qwen2ForCausalLM` without sliding
windows, SiLU MLPs, no tensor parallel split, plain `nn.Linear` projections on one device (not quantised,
no adapters, no accelerate hooks). Everything else (and ``EXACTSPEC_LEAN_DRAFT=0`` for drafts) takes
transformers' forward. A draft's fused q/k/v and gate/up weights are copied once per generation run, so a
draft trained or edited between runs is seen as it is.

A half-precision draft on a CPU computes in fp32 when a run drafts for more than one row. One row's draft
call is a matrix-vector product per weight, a read of the weights, which half precision halves; at several
rows the product itself is the cost, and PyTorch's fp16 products on a CPU are far slower than fp32 ones
(measured here, 2026-12-02, the demo draft's nine products per call: 1 row 191 µs fp16, 115 fp32; 4 rows
384 µs fp16, 156 fp32). Then every weight the forward reads is copied to fp32 once per run (a few MB for
the demo draft). Exactness does not depend on it; q is whatever this forward computed.
``EXACTSPEC_DRAFT_UPCAST=0`` keeps the draft's own dtype (both timed at batch 4: docs/history.md, r18-r22).
"""
from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from transformers.integrations.sdpa_attention import sdpa_attention_forward as _sdpa

__all__ = ["LeanForward", "lean_forward_for"]

_KNOWN = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2"}
_GQA = tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 5)  # sdpa's enable_gqa


def lean_forward_for(model, window, rows: int = 1, target: bool = False) -> "LeanForward | None":
    """The lean forward of `model`, or None when it must run through transformers (see the module doc).
    `window` is the slot cache's sliding window (None without); `rows` the batch the run drafts for (a
    half-precision draft on a CPU then computes in fp32, see the module doc); `target`: the target's forward
    (transformers' own projections and attention function, no copied weights; sdpa models only)."""
    switch = "EXACTSPEC_LEAN_TARGET" if target else "EXACTSPEC_LEAN_DRAFT"
    if os.environ.get(switch, "1") == "0" or window is not None:
        return None
    cfg = model.config
    if target and getattr(cfg, "_attn_implementation", None) != "sdpa":
        return None
    if _KNOWN.get(type(model).__name__) != getattr(cfg, "model_type", None):
        return None
    if getattr(cfg, "hidden_act", None) != "silu" or getattr(cfg, "pretraining_tp", 1) != 1 \
            or getattr(cfg, "mlp_bias", False) or getattr(cfg, "use_sliding_window", False) \
            or getattr(cfg, "_attn_implementation", "sdpa") not in ("sdpa", "eager") \
            or getattr(model, "_hf_peft_config_loaded", False):  # adapters live in wrapped modules
        return None
    layers = model.model.layers[: cfg.num_hidden_layers]
    linears = [m for layer in layers for m in (layer.self_attn.q_proj, layer.self_attn.k_proj,
               layer.self_attn.v_proj, layer.self_attn.o_proj, layer.mlp.gate_proj, layer.mlp.up_proj,
               layer.mlp.down_proj)]
    # Plain Linear layers on one device, no accelerate hooks (offloading, device maps): a quantised or
    # adapted projection, or one moved by a hook, is only right through its own forward.
    # (accelerate sets `_hf_hook` as a plain attribute, so it lives in the module's __dict__; looking there
    # skips nn.Module.__getattr__'s failing lookup, about 0.8 ms a run over a small model's modules)
    if any(type(m) is not torch.nn.Linear for m in linears) or any("_hf_hook" in vars(m) for m in model.modules()):
        return None
    params = [p for m in linears for p in m.parameters()]
    if len({(p.device, p.dtype) for p in params}) != 1 or params[0].device.type == "meta" \
            or not params[0].dtype.is_floating_point:
        return None
    if target:
        return LeanForward(model, fuse=False)
    upcast = rows > 1 and os.environ.get("EXACTSPEC_DRAFT_UPCAST", "1") != "0" \
        and params[0].device.type == "cpu" and params[0].dtype in (torch.float16, torch.bfloat16) \
        and type(model.lm_head) is torch.nn.Linear  # (a head of its own, e.g. a token subset, keeps its dtype)
    return LeanForward(model, torch.float32 if upcast else None)


class LeanForward:
    """`run(tokens, pos, attend, cache, logits_to_keep)` for one Llama-family causal LM.

    `fuse=True` (a draft's): per layer it multiplies once for q, k and v together and once for gate and up
    together. The fused weights are copies made when the LeanForward is made (once per generation run: a
    draft trained or edited between runs is seen as it is); every other weight is read from its module at
    call time, unless `dtype` (the dtype to compute in) differs from the model's: then those are copied in
    `dtype` too, and logits come out in `dtype`. `fuse=False` (the target's): transformers' own ops on the
    layers' own tensors, looked up once per run (:meth:`_unfused`), logits equal to transformers' forward."""

    def __init__(self, model, dtype: torch.dtype | None = None, fuse: bool = True):
        self.model = model
        own = next(model.parameters()).dtype
        self.dtype = None if dtype in (None, own) else dtype
        self.fuse = fuse or self.dtype is not None  # (computing in another dtype needs the cast copies)
        cfg = model.config
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.scale = self.head_dim ** -0.5
        with torch.inference_mode(False), torch.no_grad():  # ordinary tensors whatever mode the caller runs in
            self.layers = [_Layer(layer, self.dtype) if self.fuse else _Refs(layer)
                           for layer in model.model.layers[: cfg.num_hidden_layers]]
            norm, head = model.model.norm, model.lm_head
            self.norm, self.norm_eps = (norm.weight if self.dtype is None else norm.weight.to(self.dtype)), _eps(norm)
            self.head = None if self.dtype is None else (head.weight.to(self.dtype),
                                                         None if head.bias is None else head.bias.to(self.dtype))

    def run(self, tokens: torch.Tensor, pos: torch.Tensor, attend: torch.Tensor | None, cache,
            logits_to_keep: int = 0) -> torch.Tensor:
        """`tokens [B, S]`, `pos [B, S]` position ids, `attend [B, 1, S, L+S]` bool (True = may attend; None =
        every cached slot and every earlier new one: a causal step over real slots only); appends S slots
        to the `DynamicCache` `cache`. Returns logits `[B, S or logits_to_keep, V]`."""
        h = self.layers_out(self.model.model.embed_tokens(tokens), pos, attend, cache)  # [B, S, D]
        if self.head is None:  # the norm module over every slot, as transformers runs it (a hook sees them all)
            h = self.model.model.norm(h)
            return self.model.lm_head(h[:, -logits_to_keep:] if logits_to_keep else h)
        if logits_to_keep:
            h = h[:, -logits_to_keep:]
        return F.linear(_rms(h, self.norm, self.norm_eps), *self.head)

    def layers_out(self, h: torch.Tensor, pos: torch.Tensor, attend: torch.Tensor | None, cache) -> torch.Tensor:
        """The decoder layers on input embeddings `h [B, S, D]` (as :meth:`run`), before the final norm."""
        inner = self.model.model
        if self.dtype is not None:
            h = h.to(self.dtype)
        b, s = h.shape[:2]
        cos, sin = inner.rotary_emb(h, pos)  # [B, S, Dh]
        cos, sin = cos[:, None], sin[:, None]  # [B, 1, S, Dh]
        causal = False
        if attend is None and s > 1:
            n = cache.get_seq_length()
            if n == 0:  # a prefill: sdpa's own causal mask (top-left aligned, right when nothing is cached)
                causal = True
            else:  # causal among the new slots, every cached slot visible
                attend = torch.ones(s, n + s, dtype=torch.bool, device=h.device).tril(n)[None, None]
        if not self.fuse:  # the target's form: transformers' own attention function makes the GQA choice
            return self._unfused(h, cos, sin, attend, causal, cache)
        nq, nkv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        # Grouped-query attention in sdpa itself, except with a mask on an accelerator, where only the slow
        # math kernel takes that combination: there the KV heads are repeated instead.
        gqa = self.kv_heads != self.heads
        native = gqa and _GQA and (attend is None or h.device.type == "cpu")
        extra = {"enable_gqa": True} if native else {}
        for i, w in enumerate(self.layers):
            qkv = F.linear(_rms(h, w.norm1, w.eps1), w.qkv, w.qkv_bias)  # [B, S, (H + 2 KV) Dh]
            qk = _rope(qkv[..., : nq + nkv].view(b, s, -1, self.head_dim).transpose(1, 2), cos, sin)
            q, k = qk[:, : self.heads], qk[:, self.heads:]  # [B, H, S, Dh], [B, KV, S, Dh]
            v = qkv[..., nq + nkv:].view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
            keys, values = cache.layers[i].update(k, v)  # [B, KV, L+S, Dh]
            if gqa and not native:
                rep = self.heads // self.kv_heads
                keys, values = keys.repeat_interleave(rep, 1), values.repeat_interleave(rep, 1)
            o = F.scaled_dot_product_attention(q, keys, values, attn_mask=attend, is_causal=causal,
                                               scale=self.scale, **extra)
            h = h + F.linear(o.transpose(1, 2).reshape(b, s, nq), w.o.weight, w.o.bias)
            gate, up = F.linear(_rms(h, w.norm2, w.eps2), w.gate_up).chunk(2, -1)
            h = h + F.linear(F.silu(gate) * up, w.down.weight)
        return h

    def _unfused(self, h, cos, sin, attend, causal, cache) -> torch.Tensor:
        """The layers as transformers' Llama/Qwen2 decoder layers compute them, op for op: each projection
        through its own module's weight, transformers' own sdpa attention function (its GQA handling, mask
        and causal choices), so the logits equal transformers' forward bit for bit; only the module calls,
        hooks and per-call mask building are skipped. No weight is copied (a target may be large)."""
        b, s = h.shape[:2]
        for i, w in enumerate(self.layers):
            x = _rms(h, w.norm1, w.eps1)
            q = F.linear(x, w.q, w.q_bias).view(b, s, -1, self.head_dim).transpose(1, 2)
            k = F.linear(x, w.k, w.k_bias).view(b, s, -1, self.head_dim).transpose(1, 2)
            v = F.linear(x, w.v, w.v_bias).view(b, s, -1, self.head_dim).transpose(1, 2)
            q, k = _rope(q, cos, sin), _rope(k, cos, sin)  # [B, H, S, Dh], [B, KV, S, Dh]
            keys, values = cache.layers[i].update(k, v)  # [B, KV, L+S, Dh]
            o, _ = _sdpa(w.attn, q, keys, values, attend, dropout=0.0, scaling=w.scaling, is_causal=causal or None)
            h = h + F.linear(o.reshape(b, s, -1), w.o, w.o_bias)
            x = _rms(h, w.norm2, w.eps2)
            h = h + F.linear(F.silu(F.linear(x, w.gate)) * F.linear(x, w.up), w.down)
        return h


class _Refs:
    """One decoder layer's own weights and attention module as the target's lean forward reads them: the
    tensors themselves (no copies), looked up once per run instead of through module attributes per call."""

    def __init__(self, layer):
        a, mlp = layer.self_attn, layer.mlp
        self.attn, self.scaling = a, a.scaling
        self.q, self.q_bias = a.q_proj.weight, a.q_proj.bias
        self.k, self.k_bias = a.k_proj.weight, a.k_proj.bias
        self.v, self.v_bias = a.v_proj.weight, a.v_proj.bias
        self.o, self.o_bias = a.o_proj.weight, a.o_proj.bias
        self.gate, self.up, self.down = mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight
        self.norm1, self.eps1 = layer.input_layernorm.weight, _eps(layer.input_layernorm)
        self.norm2, self.eps2 = layer.post_attention_layernorm.weight, _eps(layer.post_attention_layernorm)


class _Layer:
    """One decoder layer's weights as the lean forward reads them: q/k/v and gate/up fused (copies), the
    rest the layer's own modules."""

    def __init__(self, layer, dtype: torch.dtype | None = None):
        a, mlp = layer.self_attn, layer.mlp
        cast = (lambda t: t) if dtype is None else (lambda t: None if t is None else t.to(dtype))
        projections = (a.q_proj, a.k_proj, a.v_proj)
        self.qkv = cast(torch.cat([x.weight for x in projections]))
        self.qkv_bias = None if all(x.bias is None for x in projections) else cast(torch.cat(
            [x.bias if x.bias is not None else x.weight.new_zeros(x.weight.shape[0]) for x in projections]))
        self.gate_up = cast(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]))
        # Llama's attention_bias puts a bias on o_proj too; the modules' own weights unless computing apart
        self.o = a.o_proj if dtype is None else _Linear(cast(a.o_proj.weight), cast(a.o_proj.bias))
        self.down = mlp.down_proj if dtype is None else _Linear(cast(mlp.down_proj.weight), None)
        self.norm1, self.eps1 = cast(layer.input_layernorm.weight), _eps(layer.input_layernorm)
        self.norm2, self.eps2 = cast(layer.post_attention_layernorm.weight), _eps(layer.post_attention_layernorm)


class _Linear:
    """A weight and bias as the lean forward reads a projection's (``.weight``, ``.bias``)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        self.weight, self.bias = weight, bias


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
