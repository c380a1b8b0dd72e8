"""KV-cache bookkeeping for batched speculative decoding with ragged acceptance.

Design ("one cache, a slot mask, explicit positions"):

* Each model keeps ONE `transformers.DynamicCache` for the whole batch. Its sequence axis is a list of
  *slots* shared by all rows. A 2-D mask `mask [B, L]` says which slots hold a real token of a row
  (1) and which are left padding or *holes* (0): rejected draft positions of rows that accepted fewer
  tokens than the longest row of the batch, or filler slots of a ragged input.
* Every forward passes that 2-D mask (cached slots + new slots) and explicit `position_ids`
  (= number of real tokens of the row before the slot), so RoPE / learned position embeddings see the
  row's true positions whatever holes lie between its tokens. transformers builds the 4-D mask as
  `causal(slot order) AND mask[b, kv_slot]`, which is exactly "attend to the real earlier tokens".
* Keeping what each row accepted (`keep`): crop the cache (all rows) to the last slot any row keeps, and zero
  the mask of the remaining slots a row rejected; a tree's path is moved into place. Nothing is recomputed.
* Compaction: when rows finish they are dropped from the batch (`select_rows`), and slot columns that no
  remaining row uses are removed from the key/value tensors, so holes do not accumulate.

Sliding-window layers (Mistral, Qwen2 with `use_sliding_window`, Gemma 2/3): transformers' sliding cache
forgets slots by count and its mask counts slots, both incompatible with holes (and with left padding).
So such models get a full cache (every slot kept, so rollback stays a crop) and explicit 4-D masks: a
sliding layer's query at real position t sees the row's real tokens at positions > t - window, exactly
what an unpadded `generate` sees. Memory grows like a full-attention model's; output is exact.
"""
from __future__ import annotations

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer


def max_positions(model) -> int | None:
    """The longest sequence `model` (a transformers model) takes, from its config; None if it names none."""
    cfg = model.config.get_text_config()
    for attr in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        v = getattr(cfg, attr, None)
        if isinstance(v, int) and v > 0:
            return v
    return None


def sync(device: torch.device) -> None:
    """Wait for `device`'s queued kernels (CUDA), so that a timing taken next is honest; a no-op on CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class GrowingLayer(DynamicLayer):
    """A `DynamicLayer` that appends into spare capacity instead of concatenating.

    `DynamicLayer.update` copies the whole cache on every append (`torch.cat`), O(L) per step: 20-50 µs per
    layer at 100-400 cached tokens on a 2-core CPU, against about 12 µs here. Here `keys`/`values` are prefix
    views of buffers with room to grow (a quarter more when full), so an append writes only the S new
    slots, and a crop (a chain's `SlotCache.keep`) only shortens the views. A tree's `keep` writes its accepted path
    back into the buffers; any other rewrite of `keys`/`values` (`compact`, `batch_select_indices`) leaves
    tensors that are not the views handed out, and the next append copies them into fresh buffers once.
    """

    _view = None  # (keys, values) exactly as last handed out

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        s = key_states.shape[-2]
        if not self._current() or self._n + s > self._kbuf.shape[2] \
                or key_states.shape[:2] != self._kbuf.shape[:2] \
                or (self._kbuf.is_inference() and not torch.is_inference_mode_enabled()):
            self._regrow(key_states, value_states, s)  # (in-place writes into an inference tensor are refused
            # outside inference mode)
        self._kbuf.narrow(2, self._n, s).copy_(key_states)
        self._vbuf.narrow(2, self._n, s).copy_(value_states)
        self._set(self._n + s)
        return self.keys, self.values

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove < 0 and self._current():
            self._set(max(self._n + tokens_to_remove, 0))
        else:
            super().crop(tokens_to_remove)

    def _current(self) -> bool:
        return self._view is not None and self._view[0] is self.keys and self._view[1] is self.values

    def _set(self, n: int) -> None:
        self._n = n
        self.keys, self.values = self._kbuf.narrow(2, 0, n), self._vbuf.narrow(2, 0, n)
        self._view = (self.keys, self.values)

    def _regrow(self, key_states: torch.Tensor, value_states: torch.Tensor, s: int) -> None:
        n = self.keys.shape[2] if self.keys.dim() == 4 else 0
        if n and self.keys.shape[:2] != key_states.shape[:2]:
            raise ValueError(f"cache rows/heads {tuple(self.keys.shape[:2])} != new {tuple(key_states.shape[:2])}")
        # Room for a few steps more, growing by a quarter: a long prompt's cache is not held twice over.
        cap = n + s + max(64, (n + s) // 4)
        self._kbuf = key_states.new_empty(*key_states.shape[:2], cap, key_states.shape[3])
        self._vbuf = value_states.new_empty(*value_states.shape[:2], cap, value_states.shape[3])
        if n:
            self._kbuf.narrow(2, 0, n).copy_(self.keys)
            self._vbuf.narrow(2, 0, n).copy_(self.values)
        self._set(n)


class SlotCache:
    """A causal LM plus its batch KV cache, slot mask and per-row real-token counts.

    Attributes:
        mask: `[B, L]` int64, 1 where slot `l` holds a real token of row `b`.
        n_real: `[B]` int64, real tokens cached per row (= `mask.sum(1)`).
    """

    def __init__(self, model):
        self.model = model
        self.cache = DynamicCache(config=model.config)
        self.window = _sliding_window(model, self.cache)
        if self.window is not None:  # keep every slot; the window is applied by the masks (see module doc)
            self.mixed = not all(layer.is_sliding for layer in self.cache.layers)
            self.cache = DynamicCache()
            self.cache.layer_class_to_replicate = GrowingLayer
        else:
            self.cache.layers = [GrowingLayer() if type(layer) is DynamicLayer else layer for layer in self.cache.layers]
        self.device = model.device
        self.mask: torch.Tensor | None = None
        self.lean = None  # exactspec.backends.leanforward.LeanForward (see use_lean)
        # Ids the model cannot embed (a target whose lm-head is padded larger than the draft's) are fed
        # as 0: that only changes what the draft conditions on, never the exactness of the output.
        self.n_embed = model.get_input_embeddings().num_embeddings
        # For a drafter fed the target's features (exactspec.pairs.featuredraft): when set, each forward keeps the
        # model's final hidden state, the output of its final norm, `[B, S, H]`, in `hidden`.
        self.record_hidden, self.hidden = False, None

    def use_lean(self, rows: int = 1, target: bool = False) -> None:
        """Run this model through :mod:`exactspec.backends.leanforward` when it knows the model's layout; `rows`: the
        batch a draft drafts for (which may set the dtype it computes in); `target`: the target's forward
        (transformers' own ops without its per-call module overhead: logits equal to its forward)."""
        from exactspec.backends.leanforward import lean_forward_for

        self.lean = lean_forward_for(self.model, self.window, rows, target=target)

    @property
    def n_real(self) -> torch.Tensor | None:
        """`[B]` real tokens cached per row."""
        return None if self.mask is None else self.mask.sum(1)

    @property
    def length(self) -> int:
        """Number of slots in the cache (real tokens + holes + padding)."""
        return 0 if self.mask is None else self.mask.shape[1]

    def forward(self, tokens: torch.Tensor, valid: torch.Tensor, logits_to_keep: int = 0) -> torch.Tensor:
        """Append `tokens [B, S]` as S new slots (`valid [B, S]` bool marks real ones); return logits.

        Returns `[B, S, V]` logits (or `[B, logits_to_keep, V]`). Positions of valid slots continue each
        row's count of real tokens; invalid slots get a harmless clamped position and are masked out
        for every later query.
        """
        s = tokens.shape[1]
        pos, mask = self._slots(valid)
        tokens = torch.where(tokens < self.n_embed, tokens, torch.zeros_like(tokens)).to(self.device)
        norm = self.model.model.norm if self.record_hidden else None  # (a Llama-like layout: see featuredraft)
        hook = norm.register_forward_hook(self._keep_hidden) if norm is not None else None
        try:
            if self.lean is not None:  # every slot real: a plain causal step, no mask to build
                logits = self.lean.run(tokens, pos, None if bool(mask.all()) else _allowed(mask, s)[:, None],
                                       self.cache, logits_to_keep)
            else:
                out = self.model(
                    input_ids=tokens,
                    attention_mask=self._attention_mask(mask, s) if self.window is None else self._window_masks(mask, s),
                    position_ids=pos,
                    cache=self.cache,
                    use_cache=True,
                    logits_to_keep=logits_to_keep,
                )
                self.cache = out.cache if getattr(out, "cache", None) is not None else self.cache
                logits = out.logits
        finally:
            if hook is not None:
                hook.remove()
        self.mask = mask
        return logits

    def _keep_hidden(self, module, args, output) -> None:
        self.hidden = output

    def _slots(self, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Positions `[B, S]` of S new slots (`valid [B, S]`) and the slot mask `[B, L+S]` with them."""
        valid = valid.to(self.device)
        if self.mask is None:
            self.mask = torch.zeros(valid.shape[0], 0, dtype=torch.long, device=self.device)
        pos = (self.n_real[:, None] + valid.long().cumsum(1) - 1).clamp(min=0)  # [B, S]
        return pos, torch.cat([self.mask, valid.long()], dim=1)

    def forward_embeds(self, embeds: torch.Tensor, valid: torch.Tensor, keep: int = 1) -> torch.Tensor:
        """As :meth:`forward`, fed input embeddings `[B, S, H]` in place of tokens; returns the final norm's
        output at the last `keep` slots, `[B, keep, H]` (a feature draft applies its own head)."""
        s = embeds.shape[1]
        pos, mask = self._slots(valid)
        attend = None if bool(mask.all()) else _allowed(mask, s)[:, None]
        if self.lean is not None:
            h = self.lean.layers_out(embeds, pos, attend, self.cache)[:, -keep:]
            h = self.model.model.norm(h)
        else:
            masks = self._attention_mask(mask, s) if self.window is None else self._window_masks(mask, s)
            out = self.model.model(inputs_embeds=embeds, attention_mask=masks, position_ids=pos, cache=self.cache,
                                   use_cache=True)
            self.cache = out.cache if getattr(out, "cache", None) is not None else self.cache
            h = out.last_hidden_state[:, -keep:]
        self.mask = mask
        return h

    def _attention_mask(self, mask: torch.Tensor, s: int) -> torch.Tensor:
        """The 2-D slot mask, or for eager attention an equivalent additive 4-D mask `[B, 1, S, L]`.

        A padding query with no real key before it (leading padding of a prompt) is a fully masked row.
        sdpa copes, but eager attention softmaxes in fp32, so a float64 model's `finfo.min` becomes -inf
        and the row turns NaN; its key/value at the next layer are then NaN, and `0 * NaN` poisons every
        query that masks it out. Letting every query also see its own slot avoids fully masked rows and
        changes nothing for real queries (they attend to themselves anyway).
        """
        if getattr(self.model.config, "_attn_implementation", None) != "eager":
            return mask
        allowed = _allowed(mask, s)  # [B, S, L]
        dtype = self.model.dtype
        return torch.zeros(allowed.shape, dtype=dtype, device=mask.device).masked_fill_(
            ~allowed, torch.finfo(dtype).min)[:, None]

    def _window_masks(self, mask: torch.Tensor, s: int):
        """Additive 4-D masks `[B, 1, S, L]` for a model with sliding-window layers: the full-attention one
        (as :meth:`_attention_mask`) and the sliding one, which also drops keys `window` or more real
        positions behind the query; a dict when full and sliding layers are mixed."""
        total = mask.shape[1]
        q = torch.arange(total - s, total, device=mask.device)[:, None]  # [S, 1] slot of each query
        kv = torch.arange(total, device=mask.device)[None, :]  # [1, L]
        real_pos = mask.cumsum(1) - 1  # [B, L] real position of each slot (meaningful where mask == 1)
        near = (real_pos[:, -s:, None] - real_pos[:, None, :]) < self.window  # [B, S, L]
        causal = mask.bool()[:, None, :] & (kv <= q)  # [B, S, L]
        dtype = self.model.dtype

        def additive(allowed):
            allowed = allowed | (kv == q)  # never a fully masked row (see _attention_mask)
            return torch.zeros(allowed.shape, dtype=dtype, device=mask.device).masked_fill_(
                ~allowed, torch.finfo(dtype).min)[:, None]

        sliding = additive(causal & near)
        return {"full_attention": additive(causal), "sliding_attention": sliding} if self.mixed else sliding

    def forward_tree(self, tokens: torch.Tensor, valid: torch.Tensor, pos: torch.Tensor,
                     attend: torch.Tensor, base: int | None = None) -> torch.Tensor:
        """Append `tokens [B, S]` as S new slots that attend as told, not causally; return `[B, S, V]` logits.

        For token trees (:mod:`exactspec.engine.trees`): `pos [B, S]` explicit position ids (a node's depth past
        the row's real tokens), `attend [B, S, L+S]` bool: the slots (cached and new) each query sees;
        every query also sees its own slot. `valid [B, S]` marks the slots later queries may see.
        With `base` (the seam's form, which every backend takes), `attend` is `[B, S, L-base+S]`, over the slots
        from `base` on, and every query also sees its row's real slots before `base`.
        transformers takes a 4-D mask as given (masking_utils returns a custom 4-D mask as-is), which the
        eager and sdpa attention paths honour; other attention kernels ignore or reject it.
        """
        impl = getattr(self.model.config, "_attn_implementation", None)
        if impl not in ("eager", "sdpa"):
            raise ValueError(f"tree speculation needs a custom 4-D attention mask, which attn_implementation="
                             f"{impl!r} of {type(self.model).__name__} does not take; load the model with "
                             "attn_implementation='sdpa' or 'eager'")
        b, s = tokens.shape
        if self.mask is None:
            self.mask = torch.zeros(b, 0, dtype=torch.long, device=self.device)
        if base is not None:  # the row's real slots before the tree, then the tree's as asked
            attend = torch.cat([self.mask[:, :base].bool()[:, None, :].expand(-1, s, -1).to(attend.device), attend], 2)
        allowed = attend.to(self.device).clone()
        q = torch.arange(s, device=self.device)
        allowed[:, q, self.length + q] = True
        tokens = torch.where((tokens >= 0) & (tokens < self.n_embed), tokens, torch.zeros_like(tokens))
        tokens, pos = tokens.to(self.device), pos.to(self.device)
        if self.lean is not None:
            logits = self.lean.run(tokens, pos, allowed[:, None], self.cache)
        else:
            if impl == "eager":
                dtype = self.model.dtype
                mask4 = torch.zeros(allowed.shape, dtype=dtype, device=self.device).masked_fill_(
                    ~allowed, torch.finfo(dtype).min)[:, None]
            else:
                mask4 = allowed[:, None]  # [B, 1, S, L+S] bool: True = attend
            out = self.model(input_ids=tokens, attention_mask=mask4, position_ids=pos, cache=self.cache,
                             use_cache=True)
            self.cache = out.cache if getattr(out, "cache", None) is not None else self.cache
            logits = out.logits
        self.mask = torch.cat([self.mask, valid.to(self.device).long()], dim=1)
        return logits

    def keep(self, start: int, counts: torch.Tensor, path: torch.Tensor | None = None) -> None:
        """Row b keeps `counts[b]` (`[B]` int64) of the slots fed since slot `start` as its next tokens, and
        drops the rest: its first `counts[b]` real slots there (a chain's pending token and accepted drafts),
        or with `path [B, W]` (int64 offsets from `start`) the slots `start + path[b, :counts[b]]` in that
        order (a tree's root-to-node path). Nothing is recomputed: a chain's kept slots stay where they are
        (trailing slots no row keeps are cropped, the others become holes); a path's KV entries, computed with
        exactly the path as context at the path's positions, are moved into place per row."""
        counts = counts.to(self.device)
        if path is None:
            real = self.mask[:, start:]  # [B, S]
            tail = (real.cumsum(1) <= counts[:, None]) & real.bool()  # a hole stays a hole
            used = tail.any(0).nonzero()
            n_keep = int(used[-1]) + 1 if used.numel() else 0
            if n_keep < real.shape[1]:
                self.cache.crop(-(real.shape[1] - n_keep))
            self.mask = torch.cat([self.mask[:, :start], tail[:, :n_keep].long()], dim=1)
            return
        w = path.shape[1]
        ar = torch.arange(w, device=self.device)
        keep = ar < counts[:, None]  # [B, W]
        idx = torch.where(keep, path.to(self.device), 0)
        if bool(((idx == ar) | ~keep).all()):  # a chain's path: already in place
            if self.length - start > w:
                self.cache.crop(-(self.length - start - w))
            self.mask = torch.cat([self.mask[:, :start], keep.long()], 1)
            return
        for layer in self.cache.layers:
            if not isinstance(layer, DynamicLayer) or not layer.is_initialized or layer.keys.numel() == 0:
                continue
            k, v = layer.keys, layer.values  # [B, H, L, Dh]
            gi = idx[:, None, :, None].expand(k.shape[0], k.shape[1], w, k.shape[3])
            tail_k, tail_v = k[:, :, start:].gather(2, gi), v[:, :, start:].gather(2, gi)  # [B, H, W, Dh] copies
            if isinstance(layer, GrowingLayer) and layer._current():  # write in place: the buffers stay current
                layer._kbuf.narrow(2, start, w).copy_(tail_k)
                layer._vbuf.narrow(2, start, w).copy_(tail_v)
                layer._set(start + w)
            else:
                layer.keys = torch.cat([k[:, :, :start], tail_k], 2)
                layer.values = torch.cat([v[:, :, :start], tail_v], 2)
        self.mask = torch.cat([self.mask[:, :start], keep.long()], 1)

    def select_rows(self, rows: torch.Tensor) -> None:
        """Keep batch rows `rows [B']` (int64) and drop slot columns no kept row uses."""
        if self.mask is None:
            return
        rows = rows.to(self.device)
        self.cache.batch_select_indices(rows)
        self.mask = self.mask[rows]
        self.compact()

    def compact(self) -> None:
        """Remove slot columns that are a hole or padding for every row (keeps causal slot order)."""
        used = self.mask.bool().any(0)
        if bool(used.all()):
            return
        cols = used.nonzero().squeeze(1)
        for layer in self.cache.layers:
            if not isinstance(layer, DynamicLayer) or not layer.is_initialized or layer.keys.numel() == 0:
                continue
            layer.keys = layer.keys.index_select(-2, cols)
            layer.values = layer.values.index_select(-2, cols)
        self.mask = self.mask[:, cols]


def _allowed(mask: torch.Tensor, s: int) -> torch.Tensor:
    """`[B, S, L]` bool: which slots each of the last S slots' queries sees, the row's real slots up to its
    own (`mask [B, L]`), and always its own slot, so that no row is fully masked (see
    :meth:`SlotCache._attention_mask`)."""
    total = mask.shape[1]
    q = torch.arange(total - s, total, device=mask.device)[:, None]  # [S, 1] slot of each query
    kv = torch.arange(total, device=mask.device)[None, :]  # [1, L]
    return (mask.bool()[:, None, :] & (kv <= q)) | (kv == q)


def _sliding_window(model, cache) -> int | None:
    """The window of the model's sliding layers (None without any); ValueError for layouts the slot
    cache cannot roll back exactly."""
    kinds = {type(layer) for layer in cache.layers}
    if not any(getattr(layer, "is_sliding", False) for layer in cache.layers):
        return None
    windows = {layer.sliding_window for layer in cache.layers if isinstance(layer, DynamicSlidingWindowLayer)}
    cfg = model.config.get_text_config(decoder=True)
    if not kinds <= {DynamicLayer, DynamicSlidingWindowLayer} or len(windows) != 1 \
            or getattr(cfg, "use_bidirectional_attention", False):
        raise ValueError(f"model {type(model).__name__}: its attention layout ({sorted(k.__name__ for k in kinds)}, "
                         f"windows {sorted(windows)}) cannot be rolled back exactly by exactspec's slot cache")
    return windows.pop()


def left_pack(tokens: torch.Tensor, valid: torch.Tensor, pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Move each row's valid entries to the right end (left padding), keeping their order.

    `tokens [B, W]`, `valid [B, W]` bool -> (`tokens [B, W']`, `valid [B, W']`) with W' = max valid count.
    Left packing puts every row's last real token in the last column, so one `logits[:, -1]` serves all.
    """
    counts = valid.long().sum(1)
    width = int(counts.max()) if counts.numel() else 0
    order = torch.argsort(valid.long(), dim=1, stable=True)  # invalid first, valid (in order) last
    packed = tokens.gather(1, order)[:, tokens.shape[1] - width :]
    packed_valid = valid.gather(1, order)[:, tokens.shape[1] - width :]
    packed = torch.where(packed_valid, packed, torch.full_like(packed, pad_id))
    return packed, packed_valid
