"""CPU plumbing for the verification rules: rows gathered into per-thread scratch buffers, and a thread
pool over independent rows. Nothing here decides anything; :mod:`exactspec.verification.rules` holds the rules."""
from __future__ import annotations

import threading

import torch

from exactspec.verification.sampling import _one_thread

__all__ = ["_rows", "_scratch", "_parallel_map"]


def _rows(x: torch.Tensor, pos: torch.Tensor, rows: torch.Tensor | None = None, slot: str | None = None):
    """x[rows[j], pos[j]] for x [B, S, V] -> [n, V] (a copy; rows default to 0..B-1), written into the
    per-thread scratch ``slot`` if given. index_select on the flat view is a plain memcpy, several times
    faster than advanced indexing."""
    B, S, V = x.shape
    rows = torch.arange(B, device=x.device) if rows is None else rows
    if not x.is_contiguous():
        return x[rows, pos]
    flat = x.view(B * S, V)
    if slot is None:
        return flat.index_select(0, rows * S + pos)
    return torch.index_select(flat, 0, rows * S + pos, out=_scratch(slot, rows.shape[0], V, x.dtype, x.device))


_POOL = None
_LOCAL = threading.local()
_POOL_LOCK = threading.Lock()


def _scratch(slot: str, B: int, V: int, dtype, device) -> torch.Tensor:
    """A per-thread reusable [B, V] buffer (one per ``slot``): a fresh multi-MB allocation costs more in
    page faults than the arithmetic done in it. Kept only while small (<= 16M elements); never returned
    to callers."""
    bufs = _LOCAL.__dict__.setdefault("bufs", {})
    buf = bufs.get(slot)
    if buf is None or buf.shape[0] < B or buf.shape[1] != V or buf.dtype != dtype or buf.device != device:
        with torch.inference_mode(False):  # an ordinary tensor, so calls outside inference mode may reuse it
            buf = torch.empty(B, V, dtype=dtype, device=device)
        if B * V <= 16 * 2**20:
            bufs[slot] = buf
    return buf[:B]


def _parallel_map(fn, items: list, workers: int | None = None) -> list:
    """Run ``fn`` over ``items`` on ``torch.get_num_threads()`` Python threads, each doing single-threaded
    torch work (ops release the GIL).

    Why not intra-op parallelism: these are many ~1 ms ops, and every parallel op ends in a barrier; when
    another process holds a core that barrier waits a whole scheduler slice (~10 ms, measured on the
    shared 2-core machine). Independent per-item threads never wait for each other until the end.
    """
    global _POOL
    n = workers or torch.get_num_threads()
    on_cpu = all(not isinstance(it, torch.Tensor) or it.device.type == "cpu" for it in items)
    if n > 1 and len(items) > 1 and on_cpu:
        with _POOL_LOCK:  # one pool per thread count; callers may come from several threads
            if _POOL is None or _POOL._max_workers != n:
                from concurrent.futures import ThreadPoolExecutor

                old, _POOL = _POOL, ThreadPoolExecutor(max_workers=n, thread_name_prefix="exactspec")
                if old is not None:
                    old.shutdown(wait=False)
            pool = _POOL

        # Autograd modes are per thread: a worker runs in the caller's, so that it may write into tensors
        # the caller made (in inference mode, the engine loop's tensors refuse in-place writes outside it)
        inference, grad = torch.is_inference_mode_enabled(), torch.is_grad_enabled()

        def run(it):
            torch.set_num_threads(1)  # OpenMP backend: per-thread setting, the caller's is untouched
            with torch.inference_mode(inference), torch.set_grad_enabled(grad):
                return fn(it)

        try:
            return list(pool.map(run, items))
        except RuntimeError as exc:  # pool shut down (interpreter exit, or replaced): work inline instead
            if "shutdown" not in str(exc):
                raise
    with _one_thread():
        return [fn(it) for it in items]
