"""One llama.cpp context on llama-cpp-python's low-level ctypes API (pinned: 0.3.36): token ids in, logits out.

Rows of a batch are sequence ids of one context with a unified KV cache. A batch fills llama.cpp's own
`llama_batch` arrays through numpy views (no per-token Python): token, position, sequence id, logits flag.
One `llama_decode` per call (per `n_batch` tokens); `llama_get_logits` is `[n_outputs, V]` in batch order and
is copied out once, before the next decode overwrites it. Rollback is `llama_memory_seq_rm(seq, n, -1)`. A token
may carry several sequence ids (a tree node: :mod:`exactspec.backends.llamacpptree`), up to `n_seq`.

llama.cpp aborts the whole process (GGML_ASSERT) on more tokens in one decode than `n_batch`, and writes out
of bounds on a bad sequence id: every call is checked here first and raises ValueError instead.
"""
from __future__ import annotations

import ctypes
import os

import numpy as np

__all__ = ["Context", "llama"]

_LOG_CB = None
_READY = False


def llama():
    """The `llama_cpp` module, initialised once (its log sent to stderr only with EXACTSPEC_LLAMACPP_LOG=1)."""
    global _LOG_CB, _READY
    import llama_cpp as L

    if not _READY:
        @L.llama_log_callback
        def _log(level, text, user_data):  # noqa: ARG001
            if os.environ.get("EXACTSPEC_LLAMACPP_LOG"):
                os.write(2, text)
        _LOG_CB = _log  # kept alive: llama.cpp holds the pointer
        L.llama_log_set(_LOG_CB, ctypes.c_void_p(0))
        L.llama_backend_init()
        _READY = True
    return L


class Context:
    """A llama.cpp context of `n_seq` sequences sharing `n_ctx` KV cells, with its batch buffers."""

    def __init__(self, model_ptr, vocab: int, *, n_seq: int, n_ctx: int, threads: int, n_batch: int = 512):
        L = llama()
        cp = L.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = n_ctx, n_batch, n_batch, n_seq
        cp.n_threads = cp.n_threads_batch = threads
        cp.kv_unified = True  # rows share the cells: ragged rows take only what they use
        cp.no_perf = True
        self._ctx = L.llama_init_from_model(model_ptr, cp)
        if not self._ctx:
            raise RuntimeError(f"llama.cpp could not create a context of {n_ctx} cells for {n_seq} rows")
        self._mem = L.llama_get_memory(self._ctx)
        self._L = L
        self.n_seq, self.n_ctx, self.n_batch = n_seq, int(L.llama_n_ctx(self._ctx)), int(L.llama_n_batch(self._ctx))
        self.vocab = vocab
        nb = self.n_batch
        self._k = n_seq  # sequence ids a token may carry
        self._batch = L.llama_batch_init(nb, 0, self._k)
        b = self._batch
        self._tok = np.ctypeslib.as_array(b.token, shape=(nb,))
        self._pos = np.ctypeslib.as_array(b.pos, shape=(nb,))
        self._nsq = np.ctypeslib.as_array(b.n_seq_id, shape=(nb,))
        self._flag = np.ctypeslib.as_array(b.logits, shape=(nb,))
        # seq_id is int32** (one malloc'd row per token): its row pointers are aimed at the rows of one numpy
        # matrix so that a batch's sequence ids are one write; the originals go back before llama_batch_free.
        self._seq = np.zeros((nb, self._k), dtype=np.int32)
        table = np.ctypeslib.as_array(ctypes.cast(b.seq_id, ctypes.POINTER(ctypes.c_uint64)), shape=(nb,))
        self._table, self._orig = table, table.copy()
        table[:] = self._seq.ctypes.data + np.arange(nb, dtype=np.uint64) * np.uint64(4 * self._k)
        self._nsq[:] = 1
        self._sets = False  # a decode of sequence-id sets left n_seq_id > 1 somewhere
        self.threads = threads
        self._closed = False

    def clear(self) -> None:
        """Forget every sequence."""
        llama().llama_memory_clear(self._mem, False)  # the cells only: their data is written before it is read

    def remove(self, seq: int, start: int) -> None:
        """Drop sequence `seq`'s cached positions from `start` on."""
        if not llama().llama_memory_seq_rm(self._mem, int(seq), int(start), -1):
            raise RuntimeError(f"llama.cpp refused to remove positions >= {start} of sequence {seq}")

    def copy(self, src: int, dst: int, end: int) -> None:
        """Sequence `dst` also owns the cells of `src` at positions below `end` (no data moves: one cache)."""
        llama().llama_memory_seq_cp(self._mem, int(src), int(dst), -1, int(end))

    def decode(self, tokens: np.ndarray, pos: np.ndarray, seq: np.ndarray, flags: np.ndarray,
               counts: np.ndarray | None = None) -> np.ndarray:
        """Feed `tokens [N]` int32 at positions `pos [N]` of sequences `seq [N]`; returns the logits of the
        flagged tokens, `[sum(flags), V]` float32 in batch order. Chunks of `n_batch` tokens, each its own
        decode (a sequence's tokens stay in order, so later chunks see the earlier ones).

        With `counts [N]`, `seq [N, K]` gives each token a set of sequence ids, its first `counts[i]` entries
        (the first one is the sequence whose cells the token sees); the batch must fit one decode."""
        n, nb, out = len(tokens), self.n_batch, []
        if n == 0:
            return np.empty((0, self.vocab), np.float32)
        if counts is not None:
            if n > nb or seq.shape[1] > self._k or int(counts.min()) < 1 or int(counts.max()) > seq.shape[1]:
                raise ValueError(f"a batch of sequence-id sets takes at most {nb} tokens with 1..{self._k} ids each")
            used = seq[np.arange(seq.shape[1]) < counts[:, None]]
        else:
            used = seq
        if int(used.min()) < 0 or int(used.max()) >= self.n_seq:
            raise ValueError(f"sequence ids must lie in [0, {self.n_seq})")
        if self._sets:  # the previous batch was of sets
            self._nsq[:] = 1
            self._sets = False
        for a in range(0, n, nb):
            z = min(n, a + nb) - a
            self._tok[:z], self._pos[:z], self._flag[:z] = tokens[a:a + z], pos[a:a + z], flags[a:a + z]
            if counts is None:
                self._seq[:z, 0] = seq[a:a + z]
            else:
                self._seq[:z, :seq.shape[1]] = seq
                self._nsq[:z] = counts
                self._sets = True
            k = int(np.count_nonzero(flags[a:a + z]))
            rows = self._run(z, (k, self.vocab))
            if k:
                out.append(rows)
        if len(out) == 1:
            return out[0]
        return np.concatenate(out) if out else np.empty((0, self.vocab), np.float32)

    def decode_rows(self, tokens: np.ndarray, pos: np.ndarray, seq: np.ndarray, flags: np.ndarray,
                    shape: tuple) -> np.ndarray:
        """:meth:`decode` for a caller that has checked the batch itself (at most `n_batch` tokens, sequence
        ids in range, one id each) and knows what comes out: the flagged rows' logits as `shape` (e.g. `[B,
        keep, V]`). No checks and no counting: on llama.cpp a step is a ~2 ms forward and every numpy call
        right after one costs several times what it costs alone (a session's common call, measured)."""
        z = len(tokens)
        self._tok[:z], self._pos[:z], self._seq[:z, 0], self._flag[:z] = tokens, pos, seq, flags
        if self._sets:
            self._nsq[:] = 1
            self._sets = False
        return self._run(z, shape)

    def _run(self, z: int, shape: tuple) -> np.ndarray:
        """One `llama_decode` of the batch's first `z` tokens; the outputs copied out as `shape` (float32)."""
        L = self._L
        self._batch.n_tokens = z
        rc = L.llama_decode(self._ctx, self._batch)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc} (1: no KV cell left for the batch; "
                               "a larger n_ctx= helps)")
        # one memmove out of llama.cpp's buffer (valid until the next decode)
        rows = np.empty(shape, np.float32)
        if rows.size:
            ctypes.memmove(rows.ctypes.data, L.llama_get_logits(self._ctx), rows.nbytes)
        return rows

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        L = llama()
        self._table[:] = self._orig  # llama_batch_free frees its own seq_id rows
        L.llama_batch_free(self._batch)
        L.llama_free(self._ctx)

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
