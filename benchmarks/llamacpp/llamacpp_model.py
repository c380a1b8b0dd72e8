"""Minimal multi-sequence llama.cpp model on llama-cpp-python's LOW-LEVEL ctypes API (tested with 0.3.36).

Token ids in, logits out; llama.cpp never tokenizes here.

    m = LlamaCppModel("target.gguf", n_ctx=2048, n_seq=4, threads=2)
    out = m.forward([[1, 2, 3], [7]], start_positions=[0, 0], rows=[0, 1])   # [4, V] float32
    m.keep(0, 2)          # row 0 keeps positions 0..1 (drops position 2 from the KV cache)
    m.close()

Rows are llama.cpp sequence ids (0 <= row < n_seq).  llama.cpp requires each row's new tokens to start
exactly at the row's current length (Y = X + 1 rule), so ``start_positions[i]`` must equal
``m.length(row)``; this is checked here and a ValueError is raised (llama.cpp would only return an error).
Things that would ABORT the process inside llama.cpp or corrupt memory on the Python side (more tokens
than n_batch -> GGML_ASSERT; seq id >= n_seq_max or more seq ids per token than allocated -> writes out of
the batch buffers) are rejected with ValueError before the C call.

``decode(tokens, positions, seq_ids, logits)`` is the general entry point: each token may carry several seq
ids (tree-style attention), which needs ``kv_unified=True``.
"""
from __future__ import annotations

import ctypes
import os
from typing import Sequence

import numpy as np

import llama_cpp as L

_LOG_CB = None


def _silence_llama_log() -> None:
    global _LOG_CB
    if _LOG_CB is None:
        @L.llama_log_callback
        def _cb(level, text, user_data):  # noqa: ARG001
            if os.environ.get("LLAMACPP_VERBOSE"):
                print(text.decode(errors="replace"), end="")
        _LOG_CB = _cb
        L.llama_log_set(_LOG_CB, ctypes.c_void_p(0))


_BACKEND_READY = False


def _backend_init() -> None:
    global _BACKEND_READY
    if not _BACKEND_READY:
        _silence_llama_log()
        L.llama_backend_init()
        _BACKEND_READY = True


class LlamaCppModel:
    def __init__(self, path: str, n_ctx: int = 2048, n_seq: int = 1, threads: int = 2,
                 n_batch: int = 512, n_ubatch: int | None = None, kv_unified: bool = False,
                 max_seq_per_token: int | None = None, extra_bufts: bool = True):
        _backend_init()
        self.gguf_path = str(path)
        mp = L.llama_model_default_params()
        mp.n_gpu_layers = 0
        # extra_bufts=False disables the CPU "repack" weight layouts; needed for Q4_1 files with this
        # 0.3.36 build on AVX-512 (llama_decode segfaults with repacked Q4_1, e.g. SmolLM2-135M Q4_1).
        mp.use_extra_bufts = extra_bufts
        self._model = L.llama_model_load_from_file(self.gguf_path.encode(), mp)
        if not self._model:
            raise RuntimeError(f"llama.cpp could not load {self.gguf_path}")
        cp = L.llama_context_default_params()
        cp.n_ctx = n_ctx
        cp.n_batch = n_batch
        cp.n_ubatch = n_ubatch or n_batch
        cp.n_seq_max = n_seq
        cp.n_threads = threads
        cp.n_threads_batch = threads
        cp.kv_unified = kv_unified
        cp.no_perf = True
        self._ctx = L.llama_init_from_model(self._model, cp)
        if not self._ctx:
            L.llama_model_free(self._model)
            raise RuntimeError("llama_init_from_model failed")
        self._mem = L.llama_get_memory(self._ctx)
        self.n_ctx = L.llama_n_ctx(self._ctx)
        self.n_batch = L.llama_n_batch(self._ctx)      # llama.cpp clamps n_batch to n_ctx
        self.n_seq = L.llama_n_seq_max(self._ctx)
        self.kv_unified = kv_unified
        # per-sequence capacity: unified -> whole n_ctx shared; else n_ctx / n_seq (padded to 256)
        self.vocab_size = L.llama_vocab_n_tokens(L.llama_model_get_vocab(self._model))
        self._lengths = [0] * self.n_seq

        # ---- batch: llama_batch_init for token/pos/n_seq_id/logits; numpy views over them -------------
        nb = self.n_batch
        self._k = max_seq_per_token or (self.n_seq if kv_unified else 1)
        self._batch = L.llama_batch_init(nb, 0, self._k)
        b = self._batch
        self._tok = np.ctypeslib.as_array(b.token, shape=(nb,))
        self._pos = np.ctypeslib.as_array(b.pos, shape=(nb,))
        self._nsq = np.ctypeslib.as_array(b.n_seq_id, shape=(nb,))
        self._lg = np.ctypeslib.as_array(b.logits, shape=(nb,))
        # seq_id is int32** (one malloc'd row per token): repoint the rows into ONE numpy matrix so they
        # can be filled with a vectorized assignment; originals restored before llama_batch_free.
        self._seq = np.zeros((nb, self._k), dtype=np.int32)
        ptrtab = ctypes.cast(b.seq_id, ctypes.POINTER(ctypes.c_void_p))
        self._ptrtab = np.ctypeslib.as_array(ctypes.cast(ptrtab, ctypes.POINTER(ctypes.c_uint64)),
                                             shape=(nb,))
        self._orig_ptrs = self._ptrtab.copy()
        self._ptrtab[:] = self._seq.ctypes.data + np.arange(nb, dtype=np.uint64) * np.uint64(4 * self._k)
        self._ar = np.arange(self.n_ctx + self.n_batch, dtype=np.int32)   # position ramp
        self._closed = False

    # ------------------------------------------------------------------------------------------------
    def length(self, row: int) -> int:
        return self._lengths[row]

    def _check_row(self, row: int) -> None:
        if not (0 <= int(row) < self.n_seq):
            raise ValueError(f"row/seq id {row} out of range [0, {self.n_seq})")

    def keep(self, row: int, n: int) -> None:
        """Keep the first n positions of row (KV cache), drop the rest."""
        self._check_row(row)
        if n < 0:
            raise ValueError("n must be >= 0")
        if n < self._lengths[row]:
            if not L.llama_memory_seq_rm(self._mem, row, n, -1):
                raise RuntimeError("llama_memory_seq_rm failed")
            self._lengths[row] = n

    def reset(self, row: int | None = None) -> None:
        if row is None:
            L.llama_memory_clear(self._mem, True)
            self._lengths = [0] * self.n_seq
        else:
            self.keep(row, 0)

    def copy_row(self, src: int, dst: int, n: int | None = None) -> None:
        """dst := first n positions of src (metadata-only with kv_unified; n=None -> all)."""
        self._check_row(src); self._check_row(dst)
        n = self._lengths[src] if n is None else n
        self.keep(dst, 0)
        L.llama_memory_seq_cp(self._mem, src, dst, 0, n)
        self._lengths[dst] = n

    # ------------------------------------------------------------------------------------------------
    def _run(self, n: int, n_out: int) -> np.ndarray:
        self._batch.n_tokens = n
        rc = L.llama_decode(self._ctx, self._batch)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")
        if n_out == 0:
            return np.empty((0, self.vocab_size), np.float32)
        ptr = L.llama_get_logits(self._ctx)
        return np.ctypeslib.as_array(ptr, shape=(n_out, self.vocab_size)).copy()

    def forward(self, tokens: Sequence[Sequence[int]], start_positions: Sequence[int] | None = None,
                rows: Sequence[int] | None = None, split: bool = False, last_only: bool = False):
        """Append tokens[i] to row rows[i] (default rows = 0..B-1) in ONE llama_decode.

        Returns logits float32 [total_new, V] in batch order (row by row), or a list per row if split.
        last_only: only the last token of each row gets logits ([B, V])."""
        B = len(tokens)
        if B == 1 and not split:
            return self._forward1(tokens[0], None if start_positions is None else start_positions[0],
                                  0 if rows is None else rows[0], last_only)
        rows = list(range(B)) if rows is None else [int(r) for r in rows]
        if len(rows) != B or len(set(rows)) != B:
            raise ValueError("rows must be distinct, one per token list")
        lens = np.fromiter((len(t) for t in tokens), dtype=np.int64, count=B)
        n = int(lens.sum())
        if n == 0:
            raise ValueError("no tokens")
        if n > self.n_batch:
            raise ValueError(f"{n} tokens > n_batch={self.n_batch} (llama.cpp would abort)")
        for i, r in enumerate(rows):
            self._check_row(r)
            if start_positions is not None and int(start_positions[i]) != self._lengths[r]:
                raise ValueError(f"row {r}: start position {start_positions[i]} != cached length "
                                 f"{self._lengths[r]} (call keep() first)")
        starts = np.fromiter((self._lengths[r] for r in rows), dtype=np.int64, count=B)
        if np.any(starts + lens > (self.n_ctx if self.kv_unified else self._ctx_seq())):
            raise ValueError("sequence would exceed the context size")
        toks = np.concatenate([np.asarray(t, dtype=np.int32) for t in tokens]) if B > 1 \
            else np.asarray(tokens[0], dtype=np.int32)
        if toks.min() < 0 or toks.max() >= self.vocab_size:
            raise ValueError("token id out of range")
        rep = np.repeat(np.arange(B), lens)
        offs = np.concatenate(([0], np.cumsum(lens)))
        self._tok[:n] = toks
        self._pos[:n] = starts[rep] + (np.arange(n) - offs[rep])
        self._nsq[:n] = 1
        self._seq[:n, 0] = np.asarray(rows, dtype=np.int32)[rep]
        if last_only:
            self._lg[:n] = 0
            self._lg[offs[1:] - 1] = 1
            n_out = B
        else:
            self._lg[:n] = 1
            n_out = n
        out = self._run(n, n_out)
        for r, l in zip(rows, lens):
            self._lengths[r] += int(l)
        if split:
            return [out[i:i + 1] for i in range(B)] if last_only else \
                [out[offs[i]:offs[i + 1]] for i in range(B)]
        return out

    def _forward1(self, toks, start, row, last_only):
        """Single-row fast path (same checks, fewer numpy calls)."""
        row = int(row)
        if not (0 <= row < self.n_seq):
            raise ValueError(f"row/seq id {row} out of range [0, {self.n_seq})")
        n = len(toks)
        L0 = self._lengths[row]
        if n == 0 or n > self.n_batch:
            raise ValueError(f"need 1..n_batch={self.n_batch} tokens, got {n} (llama.cpp would abort)")
        if start is not None and int(start) != L0:
            raise ValueError(f"row {row}: start position {start} != cached length {L0} (call keep() first)")
        if L0 + n > (self.n_ctx if self.kv_unified else self._ctx_seq()):
            raise ValueError("sequence would exceed the context size")
        t = self._tok[:n]
        t[:] = toks
        if t.min() < 0 or t.max() >= self.vocab_size:
            raise ValueError("token id out of range")
        self._pos[:n] = self._ar[L0:L0 + n]
        self._nsq[:n] = 1
        self._seq[:n, 0] = row
        if last_only:
            self._lg[:n] = 0
            self._lg[n - 1] = 1
        else:
            self._lg[:n] = 1
        out = self._run(n, 1 if last_only else n)
        self._lengths[row] = L0 + n
        return out

    def decode(self, tokens: Sequence[int], positions: Sequence[int], seq_ids: Sequence[Sequence[int]],
               logits: Sequence[bool] | None = None) -> np.ndarray:
        """General batch: token i at positions[i] in every sequence of seq_ids[i] (tree attention needs
        kv_unified=True). Caller is responsible for llama.cpp's position rules; row lengths are updated
        to max(pos)+1 of each seq. Returns logits of the flagged tokens (all by default) in batch order."""
        n = len(tokens)
        if n == 0 or n > self.n_batch:
            raise ValueError(f"need 1..n_batch={self.n_batch} tokens, got {n}")
        if len(positions) != n or len(seq_ids) != n:
            raise ValueError("tokens, positions, seq_ids must have equal length")
        self._nsq[:n] = [len(s) for s in seq_ids]
        if self._nsq[:n].min() < 1 or self._nsq[:n].max() > self._k:
            raise ValueError(f"each token needs 1..{self._k} seq ids")
        if not self.kv_unified and self._nsq[:n].max() > 1:
            raise ValueError("several seq ids per token need kv_unified=True")
        for i, s in enumerate(seq_ids):
            for r in s:
                self._check_row(r)
            self._seq[i, :len(s)] = s
        toks = np.asarray(tokens, dtype=np.int32)
        if toks.min() < 0 or toks.max() >= self.vocab_size:
            raise ValueError("token id out of range")
        self._tok[:n] = toks
        self._pos[:n] = np.asarray(positions, dtype=np.int32)
        self._lg[:n] = 1 if logits is None else np.asarray(logits, dtype=np.int8)
        out = self._run(n, int(self._lg[:n].astype(bool).sum()))
        for i, s in enumerate(seq_ids):
            for r in s:
                self._lengths[r] = max(self._lengths[r], int(positions[i]) + 1)
        return out

    def _ctx_seq(self) -> int:
        c = self.n_ctx // self.n_seq
        return c  # llama.cpp pads n_ctx_seq up to a multiple of 256; this is the safe lower bound

    # raw access for overhead measurements -----------------------------------------------------------
    def raw_decode_prefilled(self, n: int) -> int:
        self._batch.n_tokens = n
        return L.llama_decode(self._ctx, self._batch)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._ptrtab[:] = self._orig_ptrs          # give llama_batch_free its own seq_id rows back
        L.llama_batch_free(self._batch)
        L.llama_free(self._ctx)
        L.llama_model_free(self._model)

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
