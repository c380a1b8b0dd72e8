"""The llama.cpp backend: a GGUF file run by ggml, behind the engine's model seam.

    from exactspec import SpeculativeGenerator
    from exactspec.backends.llamacpp import LlamaCppLM

    target = LlamaCppLM("target.gguf", threads=2)
    draft = LlamaCppLM("draft.gguf", threads=2)          # or a transformers draft: the drafter seam allows it
    out = SpeculativeGenerator(target, draft).generate(input_ids, max_new_tokens=64)

:class:`LlamaCppLM` is what the engine treats as a causal LM: it has a ``config`` and ``generation_config``
(so transformers' own logits processors and generation-config resolution apply unchanged), ``vocab_size``,
``device`` (the CPU), and it opens a :class:`LlamaCppSession` per run (:mod:`exactspec.backends.seam`).
Exactness is with respect to the p of the verification pass: llama.cpp computes a k-token batch with other
rounding than a 1-token call (logits differ by ~1e-3), and a quantized file has its own p.

Needs ``pip install 'exactspec[llamacpp]'`` (llama-cpp-python, compiled once by pip; see docs/llamacpp.md).
Trees are verified in one decode too, a branch per sequence id (:mod:`exactspec.backends.llamacpptree`).
"""
from __future__ import annotations

import os
import pathlib

import numpy as np
import torch
from transformers import GenerationConfig, GenerationMixin, PretrainedConfig

__all__ = ["LlamaCppLM", "LlamaCppSession", "llamacpp_available", "BackendMissing", "INSTALL_HINT",
           "LLAMA_CPP_VERSION"]

from exactspec.backends.optional import INSTALL_HINT, LLAMA_CPP_VERSION, BackendMissing, llamacpp_available


def _require():
    if not llamacpp_available():
        raise BackendMissing(f"the llama.cpp backend needs llama-cpp-python: {INSTALL_HINT}")
    from exactspec.backends.llamacppctx import llama

    return llama()


def _gguf_file(name: str, path) -> pathlib.Path:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{name} must be a path to a .gguf file, got {type(path).__name__}")
    p = pathlib.Path(path)
    if not p.is_file():
        raise ValueError(f"{name}: no such file: {p}")
    with open(p, "rb") as f:
        if f.read(4) != b"GGUF":
            raise ValueError(f"{name}: {p} is not a GGUF file (it does not start with the GGUF magic)")
    return p


def _file_type(path: pathlib.Path) -> int | None:
    """`general.file_type` of a GGUF file (3 = mostly Q4_1), read from its header without loading weights."""
    try:
        from gguf import GGUFReader
    except ImportError:
        return None
    field = GGUFReader(str(path)).get_field("general.file_type")
    return None if field is None else int(field.parts[field.data[0]][0])


class LlamaCppLM(GenerationMixin):
    """A GGUF causal LM run by llama.cpp (CPU), as a model of the engine.

    Args:
        gguf_path: the .gguf file (any file type llama.cpp reads: f32, f16, Q8_0, Q4_1, ...).
        threads: ggml threads for one-token and batch calls alike (default: the cores this process may use).
        n_ctx: the longest row (prompt + new tokens) a run may hold; default min(the file's training
            context, 4096). A run of B rows gets one context of B * n_ctx cells.
        generation_config: a transformers ``GenerationConfig`` (e.g. the one a converted model shipped
            with); default: BOS/EOS from the file's tokenizer metadata.
        repack: let ggml repack weights for this CPU (AMX/AVX-512 layouts). Default: on, except for Q4_1
            files, where llama-cpp-python 0.3.36 crashes in llama_decode with it on.
    """

    backend = "llamacpp"
    supports_trees = True
    main_input_name = "input_ids"
    training = False

    def __init__(self, gguf_path, *, threads: int | None = None, n_ctx: int | None = None,
                 generation_config: GenerationConfig | None = None, repack: bool | None = None):
        from exactspec.verification.checks import check_bool, check_int

        path = _gguf_file("gguf_path", gguf_path)
        threads = check_int("threads", threads, min=1) if threads is not None else len(os.sched_getaffinity(0))
        if n_ctx is not None:
            check_int("n_ctx", n_ctx, min=8)
        if repack is not None:
            check_bool("repack", repack)
        if generation_config is not None and not isinstance(generation_config, GenerationConfig):
            raise TypeError(f"generation_config must be a transformers GenerationConfig, got "
                            f"{type(generation_config).__name__}")
        L = _require()
        self.gguf_path, self.threads = str(path), threads
        self.repack = (_file_type(path) != 3) if repack is None else repack
        mp = L.llama_model_default_params()
        mp.n_gpu_layers = 0
        mp.use_extra_bufts = self.repack
        self._model = L.llama_model_load_from_file(self.gguf_path.encode(), mp)
        if not self._model:
            raise ValueError(f"gguf_path: llama.cpp could not load {path} (set EXACTSPEC_LLAMACPP_LOG=1 to "
                             "see why)")
        vocab = L.llama_model_get_vocab(self._model)
        self.vocab_size = self.embed_size = int(L.llama_vocab_n_tokens(vocab))
        train_ctx = int(L.llama_model_n_ctx_train(self._model))
        self.n_ctx = n_ctx or min(train_ctx, 4096)
        desc = ctypes_string(L.llama_model_desc, self._model)
        self.n_params = int(L.llama_model_n_params(self._model))
        self.config = PretrainedConfig(vocab_size=self.vocab_size, max_position_embeddings=self.n_ctx,
                                       hidden_size=int(L.llama_model_n_embd(self._model)),
                                       num_hidden_layers=int(L.llama_model_n_layer(self._model)),
                                       name_or_path=self.gguf_path)
        self.description = desc
        if generation_config is None:
            def tok(x):
                x = int(x)
                return x if x >= 0 else None
            generation_config = GenerationConfig(bos_token_id=tok(L.llama_vocab_bos(vocab)),
                                                 eos_token_id=tok(L.llama_vocab_eos(vocab)))
        self.generation_config = generation_config
        self.device = torch.device("cpu")
        self.dtype = torch.float32  # the logits it hands over
        self._token_texts = None
        self._ctx = None  # one context, kept between runs while large enough
        self._session = None

    # ------------------------------------------------------------------ what the engine asks of a model
    def eval(self) -> "LlamaCppLM":
        return self

    def open_session(self, rows: int, *, target: bool = True) -> "LlamaCppSession":
        """A fresh session for a batch of `rows`; the previous session on this model ends (one run at a time)."""
        from exactspec.backends.llamacppctx import Context

        rows = max(int(rows), 1)
        if rows > 256:  # llama.cpp's LLAMA_MAX_SEQ: a larger n_seq_max is refused
            raise ValueError(f"input_ids: the llama.cpp backend runs at most 256 rows at once, got {rows}")
        n_seq = min(256, rows * (1 + TREE_IDS))  # each row's sequence, and ids for the branches of its trees
        cells = rows * self.n_ctx + 512  # (+ a batch of cells for a tree's rejected nodes)
        if self._ctx is None or self._ctx.n_seq < n_seq or self._ctx.n_ctx < cells:
            if self._ctx is not None:
                self._ctx.close()
            self._ctx = Context(self._model, self.vocab_size, n_seq=n_seq, n_ctx=cells, threads=self.threads)
        self._ctx.clear()
        if self._session is not None:
            self._session._ended = True
        self._session = LlamaCppSession(self, self._ctx, rows)
        return self._session

    def describe(self) -> dict:
        """What a stored cost profile is keyed by: the file, its size, the build and the threads."""
        st = os.stat(self.gguf_path)
        return {"backend": "llamacpp", "llama_cpp_python": LLAMA_CPP_VERSION, "file": os.path.basename(self.gguf_path),
                "size": st.st_size, "mtime_ns": st.st_mtime_ns, "desc": self.description, "params": self.n_params,
                "threads": self.threads, "repack": self.repack}

    def token_texts(self) -> list[bytes]:
        """Every token's text as the file's tokenizer stores it (to check that two files share a vocabulary)."""
        if self._token_texts is None:
            L = _require()
            vocab = L.llama_model_get_vocab(self._model)
            self._token_texts = [L.llama_vocab_get_text(vocab, i) or b"" for i in range(self.vocab_size)]
        return self._token_texts

    def parameters(self):  # nothing of torch's: the weights live in ggml
        return iter(())

    def __repr__(self) -> str:
        return f"LlamaCppLM({self.gguf_path!r}, {self.description}, threads={self.threads})"

    def __del__(self):
        try:
            if self._ctx is not None:
                self._ctx.close()
            if getattr(self, "_model", None):
                _require().llama_model_free(self._model)
                self._model = None
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


TREE_IDS = 64  # sequence ids per row for the branches of a tree (a context holds at most 256 ids)


def _token_ids(tokens: torch.Tensor, vocab: int) -> np.ndarray:
    """`tokens [B, S]` as llama.cpp takes them, int32, a copy; as in SlotCache, ids it cannot take feed 0."""
    tok = tokens.numpy(force=True).astype(np.int64)
    bad = tok.view(np.uint64) >= vocab  # (negative ids too)
    if bad.any():
        tok[bad] = 0
    return tok.astype(np.int32)


def ctypes_string(fn, model, size: int = 256) -> str:
    import ctypes

    buf = ctypes.create_string_buffer(size)
    fn(model, buf, size)
    return buf.value.decode(errors="replace")


class LlamaCppSession:
    """One run's rows on a llama.cpp context: the session protocol of :mod:`exactspec.backends.seam`.

    Row b is sequence ``seq[b]``. A ring of the recent slots records which ones each row really fed (as
    :class:`~exactspec.backends.cache.SlotCache`'s mask does), so that :meth:`keep` reads "row b keeps its first
    c_b real tokens since slot `start`" and knows which slots those were.
    Every call costs one ``llama_decode`` plus a few small numpy operations: beside a 2 ms forward, each
    0.1 ms of Python here is 5% of a step, so the common shapes (every slot real) take no gathers.
    """

    device = torch.device("cpu")
    _RING = 1024  # slots of history kept; a keep reaches back a few steps only

    def __init__(self, model: LlamaCppLM, ctx, rows: int):
        self.model, self._ctx, self._ended = model, ctx, False
        self._vocab = model.vocab_size
        self.seq = np.arange(rows, dtype=np.int32)
        self.n = np.zeros(rows, dtype=np.int64)  # tokens cached per row
        self._ring = np.zeros((rows, self._RING), dtype=bool)  # [B, RING]: which recent slots were real
        self._w = 0  # slots of the ring in use
        self._shapes: dict = {}  # (S, keep) -> the batch's constant arrays when every slot is real
        self._len = 0  # slots fed so far (as SlotCache counts them: a tree's base is one of these)
        self._tree = None  # the open tree (llamacpptree.Episode) between forward_tree and keep(path=)
        self._free = list(range(ctx.n_seq - 1, rows - 1, -1))  # sequence ids for a tree's branches

    @property
    def length(self) -> int:
        return self._len

    @property
    def n_real(self) -> torch.Tensor:
        return torch.from_numpy(self.n.copy())

    def _live(self, tree: bool = False) -> None:
        if self._ended:
            raise RuntimeError("this llama.cpp session ended: another run opened a session on the same model "
                               "(one run at a time per LlamaCppLM)")
        if self._tree is not None and not tree:
            raise RuntimeError("a tree is open on this llama.cpp session: keep(start, counts, path) ends it first")

    def _record(self, ok) -> None:
        """Append `ok` ([B, S] bool, or True for all real) to the ring of recent slots."""
        s = ok.shape[1] if isinstance(ok, np.ndarray) else ok
        if self._w + s > self._RING:  # keep the newest half (or what this call leaves room for)
            keep = max(0, min(self._w, self._RING // 2, self._RING - s))
            self._ring[:, :keep] = self._ring[:, self._w - keep:self._w]
            self._w = keep
            if s > self._RING:  # a long prefill: only its last slots can ever be rolled back
                ok = ok[:, -self._RING:] if isinstance(ok, np.ndarray) else self._RING
                s = self._RING
        self._ring[:, self._w:self._w + s] = True if not isinstance(ok, np.ndarray) else ok
        self._w += s

    def _dense(self, b: int, s: int, keep: int):
        """`(arange(S) [S], seq [B*S], flags [B*S])` of a batch whose every slot is real (cached per shape)."""
        key = (b, s, keep)
        hit = self._shapes.get(key)
        if hit is None:
            flags = np.zeros((b, s), dtype=np.int8)
            flags[:, s - keep:] = 1
            hit = self._shapes[key] = (np.arange(s), np.repeat(self.seq, s), flags.ravel())
        return hit

    def forward(self, tokens: torch.Tensor, valid: torch.Tensor, logits_to_keep: int = 0) -> torch.Tensor:
        """Append `tokens [B, S]` (`valid [B, S]` marks real ones) in one decode; `[B, S, V]` logits
        (`[B, logits_to_keep, V]` for the last slots), zeros at invalid slots."""
        self._live()
        b, s = tokens.shape
        keep = s if not logits_to_keep else min(int(logits_to_keep), s)
        if b * s <= self._ctx.n_batch and valid.numpy(force=True).all():
            # the common case (every draft call, plain steps, most verifications), lean: a few numpy calls
            tok = tokens.numpy(force=True)  # [B, S]
            n = self.n + s
            if tok.min() >= 0 and tok.max() < self._vocab and n.max() <= self.model.n_ctx:
                ar, seq, flags = self._dense(b, s, keep)
                raw = self._ctx.decode_rows(tok.ravel(), (self.n[:, None] + ar).ravel(), seq, flags,
                                            (b, keep, self._vocab))  # [B, keep, V]
                self.n = n
                self._record(s)
                self._len += s
                return torch.from_numpy(raw)
        tok = _token_ids(tokens, self._vocab).ravel()  # [B*S]
        if bool(valid.all()):  # every slot real, but a long prompt or ids it cannot take: no gather needed
            ar, seq, flags = self._dense(b, s, keep)
            counts, ok = s, None
            pos = (self.n[:, None] + ar).astype(np.int32).ravel()
        else:
            ok = valid.numpy(force=True).astype(bool)
            counts = ok.sum(1)
            rows, cols = np.nonzero(ok)  # row-major: each row's tokens in order
            pos = (self.n[rows] + np.cumsum(ok, 1)[rows, cols] - 1).astype(np.int32)
            seq = self.seq[rows]
            tok = tok.reshape(b, s)[rows, cols]
            flags = (cols >= s - keep).astype(np.int8)
        n = self.n + counts
        if int(n.max(initial=0)) > self.model.n_ctx:
            raise ValueError(f"a row would exceed the llama.cpp context of {self.model.n_ctx} tokens "
                             "(LlamaCppLM(n_ctx=...))")
        raw = self._ctx.decode(tok, pos, seq, flags)  # [flagged, V], in batch order
        self.n = n
        self._record(s if ok is None else ok)
        self._len += s
        if raw.shape[0] == b * keep:  # every kept slot real: the rows are the logits, in order
            return torch.from_numpy(raw).view(b, keep, -1)
        out = np.zeros((b, keep, raw.shape[1]), np.float32)
        out[ok[:, s - keep:]] = raw
        return torch.from_numpy(out)

    def keep(self, start: int, counts: torch.Tensor, path: torch.Tensor | None = None) -> None:
        """Row b keeps `counts[b]` (`[B]`) of the slots fed since slot `start` as its next tokens, as
        :meth:`exactspec.backends.cache.SlotCache.keep` does: its first `counts[b]` real slots there (a chain),
        or with `path [B, W]` the tree slots `start + path[b, :counts[b]]`, a path from the tree's first depth
        down (which ends the open tree). The other tokens leave the KV cache; nothing is recomputed. Every row
        is checked before any changes: a ValueError leaves the session as it was."""
        c = counts.tolist()
        if len(c) != len(self.seq) or min(c, default=0) < 0:
            raise ValueError(f"keep: counts must be [B] >= 0 with B = {len(self.seq)} rows, got {c}")
        if path is not None and self._tree is not None:
            return self._keep_path(start, path, c)
        self._live()
        s = self._len - start
        if not 0 <= s <= self._w:
            raise ValueError(f"keep from slot {start}: the session has {self._len} slots and remembers the last "
                             f"{self._w}")
        real = self._ring[:, self._w - s:self._w]  # [B, S], a view
        if path is not None:  # no tree open: a path must name each row's first real slots (a chain)
            p = path.numpy(force=True)
            if p.ndim != 2 or p.shape[0] != len(c) or not all(
                    np.array_equal(p[b, :cb], np.flatnonzero(real[b])[:cb]) for b, cb in enumerate(c)):
                raise ValueError("keep: no tree is open on this llama.cpp session, and the path is not each "
                                 "row's first real slots since start")
        if real.all():  # every slot was real (dense calls: a chain's steps): a few Python ints
            if max(c, default=0) > s:
                raise ValueError(f"keep: a row keeps more than the {s} tokens it fed since slot {start}")
            for b, cb in enumerate(c):
                if cb < s:
                    self.n[b] -= s - cb
                    self._ctx.remove(self.seq[b], self.n[b])
                    real[b, cb:] = False
            n_keep = max(c, default=0)
        else:
            k = np.asarray(c, dtype=np.int64)
            fed = real.sum(1)
            if (k > fed).any():
                raise ValueError(f"keep: a row keeps more than the real tokens it fed since slot {start} "
                                 f"({k.tolist()} of {fed.tolist()})")
            drop = fed - k
            if drop.any():
                self.n = self.n - drop
                for b in np.flatnonzero(drop):
                    self._ctx.remove(self.seq[b], self.n[b])
            real &= np.cumsum(real, 1) <= k[:, None]
            used = np.flatnonzero(real.any(0))
            n_keep = int(used[-1]) + 1 if used.size else 0
        self._w -= s - n_keep  # slots no row keeps are forgotten (as SlotCache crops them)
        self._len = start + n_keep

    def select_rows(self, rows: torch.Tensor) -> None:
        """Keep batch rows `rows [B']`; the others' sequences are emptied."""
        self._live()
        idx = rows.detach().cpu().numpy().astype(np.int64)
        for b in sorted(set(range(len(self.seq))) - set(idx.tolist())):
            self._ctx.remove(self.seq[b], 0)
        self.seq, self.n, self._ring = self.seq[idx], self.n[idx], self._ring[idx]
        self._shapes = {}

    def forward_tree(self, tokens: torch.Tensor, valid: torch.Tensor, pos: torch.Tensor, attend: torch.Tensor,
                     base: int | None = None) -> torch.Tensor:
        """Append `tokens [B, S]` as tree slots in one decode; `[B, S, V]` logits (zeros at invalid slots).

        As :meth:`exactspec.backends.cache.SlotCache.forward_tree` with `base`: `attend [B, S, length - base + S]`
        says which of the tree's slots (those fed since slot `base`, then the new ones) each new slot sees; every
        slot sees the row's tokens before the tree. It must be a tree (each node: its ancestors and itself) at
        positions one past the parent's, the first depth at the row's length (else a ValueError); branches
        become sequence ids (:mod:`exactspec.backends.llamacpptree`). The tree stays open until :meth:`keep`.
        """
        from exactspec.backends.llamacpptree import Episode, feed_tree

        self._live(tree=True)
        if base is None:
            raise TypeError("forward_tree on the llama.cpp backend needs base= (the slot count when the tree began)")
        if self._tree is None and base != self._len:
            raise ValueError(f"forward_tree: a new tree begins at the session's length {self._len}, not {base}")
        if self._tree is not None and base != self._tree.base:
            raise ValueError(f"forward_tree: the open tree began at slot {self._tree.base}, not {base}")
        b, s = tokens.shape
        if valid.shape != tokens.shape or pos.shape != tokens.shape or b != len(self.seq):
            raise ValueError(f"forward_tree: tokens, valid and pos must be [B, S] with B = {len(self.seq)} rows, "
                             f"got {list(tokens.shape)}, {list(valid.shape)}, {list(pos.shape)}")
        if attend.shape != (b, s, self._len - base + s):
            raise ValueError(f"forward_tree: attend must be [B, S, length - base + S] = {[b, s, self._len - base + s]}"
                             f", got {list(attend.shape)}")
        ok = valid.numpy(force=True).astype(bool)
        p = pos.numpy(force=True).astype(np.int64)
        if int(ok.sum()) > self._ctx.n_batch:  # one decode: its sequence-id sets cannot be split
            raise ValueError(f"tree: {int(ok.sum())} tree tokens over all rows in one llama.cpp decode, at most "
                             f"{self._ctx.n_batch}; a smaller tree or fewer rows")
        if int(np.where(ok, p, 0).max(initial=0)) >= self.model.n_ctx:
            raise ValueError(f"a row would exceed the llama.cpp context of {self.model.n_ctx} tokens "
                             "(LlamaCppLM(n_ctx=...))")
        tok = _token_ids(tokens, self._vocab)
        opened = self._tree is None
        if opened:
            self._tree = Episode(base, len(self.seq), self.n)
        try:
            raw = feed_tree(self, tok, ok, p, attend.numpy(force=True).astype(bool))
        except BaseException:  # (feed_tree leaves nothing of a failed call behind)
            if opened:
                self._tree = None
            raise
        self._record(ok)
        self._len += s
        out = np.zeros((b, s, self._vocab), np.float32)
        out[ok] = raw
        return torch.from_numpy(out)

    def _keep_path(self, start: int, path: torch.Tensor, counts: list) -> None:
        """:meth:`keep` of the open tree: row b keeps its tree slots `start + path[b, :counts[b]]`."""
        from exactspec.backends.llamacpptree import keep_path

        self._live(tree=True)
        self.n, k = keep_path(self, start, path.numpy(force=True).astype(np.int64), counts)  # k [B, W]: kept
        w = k.shape[1]
        self._tree = None
        self._w -= self._len - start  # the ring forgets the tree's slots and records the kept path
        if self._w < 0:
            raise RuntimeError("a tree of more slots than the llama.cpp session's ring remembers")
        self._record(k)
        self._len = start + w
